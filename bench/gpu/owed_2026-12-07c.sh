#!/usr/bin/env bash
# Device runs owed by the twenty-eighth session (2026-12-07), one call each from the repository
# root, carry device-bundle after `bash scripts/device_bundle.sh`:
#   1  issue 24: the Llama decoder's coil row on CUDA now that its step is one size-generic
#      Triton module (the per-node probe and the fusion rule that read a hint were fixed after
#      the H100 measured 1.2 s a token, every length compiled): 1B bf16 and 125M bf16, eager
#      and coil, 128 tokens after a 512 prompt, the guards log (no "compiling the graph for
#      the sizes" line after the second step expected). Inductor's rows: owed_2026-12-05c.sh.
#   2  issue 24: the host CPU. The 125M step kernel by kernel at 16 and 8 threads
#      (host_llama_profile.sh), then the decoder's coil row at 16 threads against eager and
#      Inductor (coil: 17.6 ms a token at 179f4d2, Inductor 8.6).
#   3  issue 18: the host CPU suite against Inductor at 2 and 16 threads
#      (bench/run_gpu_host_cpu.sh, 4 rounds, about 470 s) with the template's B now packed by
#      the threads that read it (mobilenet_v2 1.12x, efficientnet_b0 1.10x here at 2 threads).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_LIBRARY=$B/lib \
  COIL_TRITON_AUTOTUNE=0
date -u; uptime; grep -m1 "model name" /proc/cpuinfo; echo "bundle: $(cat $B/REVISION)"
nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
case "${STEP:-1}" in
  1) for cfg in 1b 125m; do
       COIL_CACHE_DIR=$(mktemp -d) COIL_LOGS=guards timeout 250 python3 bench/gpu/llama_decode.py \
         --device cuda --config $cfg --dtype bfloat16 --tokens 128 --backends eager,coil --check \
         --json "$OUT/llama_cuda_$cfg.json" 2> "$OUT/guards_$cfg.txt"
       grep -v "^ *$" "$OUT/guards_$cfg.txt" | grep -v assuming | cut -c1-200 | sort | uniq -c |
         sort -rn | head -5
     done ;;
  2) OUT=$OUT TOP=14 bash bench/gpu/host_llama_profile.sh 2>&1 | tail -40
     COIL_CACHE_DIR=$(mktemp -d) timeout 300 python3 bench/gpu/llama_decode.py --device cpu \
       --config 125m --threads 16 --backends eager,coil,inductor --check \
       --json "$OUT/llama_cpu.json" ;;
  3) bash bench/run_gpu_host_cpu.sh "$OUT" 4 2>&1 | tail -40 ;;
  *) echo "STEP must be 1, 2 or 3"; exit 2 ;;
esac
echo "elapsed $(( $(date +%s) - t0 )) s"
