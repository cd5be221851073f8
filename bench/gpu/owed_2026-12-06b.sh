#!/usr/bin/env bash
# Issue 20's device runs after explicit guards (CPU) and symbolic 2-D tiles and split
# reductions (Triton), as device calls from the repository root (twentieth session,
# docs/gpu-results.md). Pick one with STEP=n:
#   1  GPU: the size-generic Triton cases at sizes 1..4097 against torch
#      (tests/gpu/run_triton_dynamic.sh), then the GPU suite size-generic against specialized
#      (bench_gpu.py --size-generic). Carry tests/gpu/generated (after `bash tests/gpu/prepare.sh`
#      here).
#   2  host CPU (16 cores): coil's serving trace through the ONNX encoder with explicit guards,
#      then the CPU suite (a-k) size-generic against specialized at 1 and 16 threads. Carry
#      device-bundle (`bash scripts/device_bundle.sh` here) and build/dyn-models (with a fresh
#      copy of build/bin/coil_dynamic_trace).
#   3  host CPU (16 cores): the CPU suite size-generic against specialized again, 9 rounds (the
#      3 of step 2 moved both ways at 1 thread). Carry device-bundle.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
case "${STEP:-1}" in
  1) OUT=$OUT timeout 330 bash tests/gpu/run_triton_dynamic.sh 2>&1 | tail -30
     echo "elapsed $(( $(date +%s) - t0 )) s"
     timeout 200 python3 bench/gpu/bench_gpu.py --size-generic --budget-s 180 \
       --json "$OUT/gpu_suite_size_generic.json" 2>&1 | tail -14 ;;
  2) B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
     echo "bundle $(cat $B/REVISION)"
     export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_CACHE_DIR=$(mktemp -d)
     ( cd build/dyn-models && timeout 200 ./coil_dynamic_trace --model encoder_dynamic.onnx \
         --compare 4 --runs 7 --json $OUT/coil_trace_host.json 2>&1 | tail -8 )
     echo "elapsed $(( $(date +%s) - t0 )) s"
     left=$(( 570 - ($(date +%s) - t0) ))
     timeout $left $B/bin/coil_cpu_bench --size-generic --threads 1,16 --runs 10 --warmup 3 \
       --rounds 3 --json $OUT/cpu_suite_size_generic.json 2>&1 | tail -26 ;;
  3) B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
     echo "bundle $(cat $B/REVISION)"
     export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_CACHE_DIR=$(mktemp -d)
     timeout 400 $B/bin/coil_cpu_bench --size-generic --threads 1,16 --runs 10 --warmup 3 \
       --rounds 9 --json $OUT/cpu_suite_size_generic_r9.json 2>&1 | tail -26 ;;
  *) echo "STEP must be 1, 2 or 3"; exit 2 ;;
esac
echo "elapsed $(( $(date +%s) - t0 )) s"
