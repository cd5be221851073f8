#!/usr/bin/env bash
# Device runs of the twenty-first session (docs/gpu-results.md), one call from the repository
# root with `device-bundle` carried (after `bash scripts/device_bundle.sh` here):
#   1  issue 20: f's kernels alone (bench/experiments/f_tile, 2 MiB pages; generic is what coil
#      prints, generic_before the kernel before 2a414b1) and f through
#      coil_cpu_bench --size-generic at 1 and 16 threads, three runs of 9 rounds;
#      issue 18: the Triton gather on the GPU (tests/golden/triton/embedding_gather.py against
#      torch, an index out of range), the GPT block on CUDA against Inductor
#      (torch_backend.py --only gpt_block), then tests/torch/test_cuda.py on torch 2.x in what
#      is left of LIMIT_S (default 580).
#   2  issue 18: cold and warm compiles on CUDA after the canonical input/output order of
#      CoilGraphCallable (489c1c5: a warm process had compiled a training step again on the
#      CPU; the nineteenth session's warm figures, coil 1.5-3.1 s against Inductor's
#      0.95-1.17 s, are from before it): the MLP, the GPT block and TransformerEncoderLayer.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
echo "bundle $(cat $B/REVISION)"
t0=$(date +%s)
case "${STEP:-1}" in
  1) V="spec generic_before generic"
     CPATH=$B/include HUGE=1 ROUNDS=5 THREADS="1 16" VARIANTS="$V" INC=$PWD/src/kernels \
       bash bench/experiments/f_tile/run.sh > $OUT/f_tile.txt 2>&1
     for t in 1 16; do for v in $V; do
       echo "f_tile threads $t $v: $(grep "threads $t huge" $OUT/f_tile.txt | grep "f_$v.so" |
         sed 's/.*median \([0-9.]*\).*/\1/' | tr '\n' ' ')"; done; done
     ( export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_CACHE_DIR=$(mktemp -d)
       for i in 1 2 3; do timeout 100 $B/bin/coil_cpu_bench --size-generic --workloads f \
         --threads 1,16 --runs 10 --warmup 3 --rounds 9 --json $OUT/f_suite_$i.json 2>&1 | tail -3
       done; grep AnonHuge /proc/meminfo )
     echo "elapsed $(( $(date +%s) - t0 )) s"
     PYTHONPATH=python timeout 120 python3 tests/gpu/check_gather.py 2>&1 | tail -8
     echo "elapsed $(( $(date +%s) - t0 )) s"
     timeout 240 python3 bench/gpu/torch_backend.py --devices cuda --only gpt_block --no-warm \
       --budget-s 220 --child-timeout-s 150 2>&1 | tail -8
     echo "elapsed $(( $(date +%s) - t0 )) s"
     left=$(( ${LIMIT_S:-580} - ($(date +%s) - t0) ))
     TORCH2_TIMEOUT=$(( left - 10 )) bash tests/torch/run_torch2.sh tests/torch/test_cuda.py \
       2>&1 | tail -8 ;;
  2) timeout 580 python3 bench/gpu/torch_backend.py --devices cuda --only mlp gpt_block \
       transformer_encoder_layer --budget-s 560 --child-timeout-s 150 2>&1 | tail -12 ;;
  *) echo "STEP must be 1 or 2"; exit 2 ;;
esac
echo "elapsed $(( $(date +%s) - t0 )) s"
