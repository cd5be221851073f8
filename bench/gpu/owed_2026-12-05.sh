#!/usr/bin/env bash
# Kept for the record: the device call owed from 2026-12-05 (docs/gpu-results.md, "thirteenth
# session"). Its inputs live in build/dyn-models (made as that entry says).
# One device call for the most owed runs (2026-12-05, thirteenth session).
set -uo pipefail
export PYTHONUNBUFFERED=1
B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
echo "bundle $(cat $B/REVISION)"; date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
if [ "${OWED_FROM:-1}" -le 1 ]; then  # (OWED_FROM=2: step 1 ran in owed_2026-12-05b.sh)
echo "=== 1. torch2 attention + cuda tests (issue 24)"
TORCH2_TIMEOUT=200 COIL_TRITON_AUTOTUNE=0 bash tests/torch/run_torch2.sh tests/torch/test_sdpa_torch2.py \
  tests/torch/test_sdpa_rows.py tests/torch/test_attention_training.py tests/torch/test_cuda.py | tail -30
echo "elapsed $(( $(date +%s) - t0 )) s"
fi
echo "=== 2. ONNX encoder, dynamic batch and sequence, through Triton (issue 27)"
( export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include PYTHONPATH=$PWD/python COIL_PYTHON=python3
  export COIL_CACHE_DIR=$(mktemp -d); cd build/dyn-models
  for s in "" _1x1 _13x5 _9x31; do echo "--- size$s"
    timeout 50 $B/bin/coil check encoder_dynamic.onnx --device cuda --input x=encoder_dynamic_in$s.npy \
      --expect y=encoder_dynamic_out$s.npy --rtol 1e-3 --atol 1e-4 2>&1 | tail -3; done ) 2>&1 | tee $OUT/encoder_cuda.log
echo "elapsed $(( $(date +%s) - t0 )) s"
echo "=== 3. the trace through torch.compile (issue 20)"
timeout 170 python3 bench/gpu/dynamic_trace_torch.py --pairs build/dyn-models/encoder_trace.json \
  --json $OUT/dynamic_trace_torch.json --settings None True --budget-s 160 --child-timeout-s 75
echo "elapsed $(( $(date +%s) - t0 )) s"
echo "=== 4. coil's trace and the CPU suite, size-generic vs specialized, on the host (issue 20)"
( export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_CACHE_DIR=$(mktemp -d)
  left=$(( 575 - ($(date +%s) - t0) ))
  cd build/dyn-models && timeout $(( left / 2 )) ./coil_dynamic_trace --model encoder_dynamic.onnx --compare 4 --runs 7 \
    --json $OUT/coil_trace_host.json 2>&1 | tail -6
  left=$(( 575 - ($(date +%s) - t0) ))
  timeout $left $B/bin/coil_cpu_bench --size-generic --threads 1,16 --runs 10 --warmup 3 --rounds 3 \
    --json $OUT/cpu_suite_size_generic.json 2>&1 | tail -24 )
echo "elapsed $(( $(date +%s) - t0 )) s"
