#!/usr/bin/env bash
# The size-generic Triton run (issue 20's GPU part, issue 24's decoding): one device call from
# the repository root, after `python3 tests/gpu/prepare_triton_dynamic.py` (or
# tests/gpu/prepare.sh) ran on the build machine and wrote tests/gpu/generated/dynamic/:
#
#   bash tests/gpu/run_triton_dynamic.sh
#
# Each case (tests/gpu/triton_dynamic_cases.py: pointwise, a sum and a softmax over a symbolic
# axis, softmax over symbolic rows, layer_norm, matmul + epilogue, attention with symbolic Tq
# and Tk, a decode step over a KV cache of symbolic length) was compiled once with its sizes
# unbound, plus a variant per size of 1; tests/gpu/test_triton_dynamic.py runs it at sizes 1,
# 2, 3, 7, 16, 17, 1000, 1023, 4097 against torch (float64) and prints per case the coil
# modules used and Triton's compiles -> $OUT/triton_dynamic.json (first configs, no
# autotuning), $OUT/triton_dynamic_autotune.json (the default autotuning), and
# $OUT/triton_dynamic.log. Exits non-zero when a size fails or a pass runs out of time (280 s in
# all; each JSON is written after every case, "finished" says whether the pass completed).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-/tmp/coil-gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
COIL_CACHE_DIR="$(mktemp -d /tmp/coil-cache-XXXXXX)"
export COIL_CACHE_DIR
if [ ! -f tests/gpu/generated/dynamic/manifest.json ]; then
  echo "error: tests/gpu/generated/dynamic/manifest.json is missing: run" \
    "python3 tests/gpu/prepare_triton_dynamic.py on the build machine (and carry" \
    "tests/gpu/generated to the device)" | tee "$OUT/triton_dynamic.log"
  exit 2
fi
start=$(date +%s)
{
  python3 -c 'import torch, triton; print("torch", torch.__version__, "| triton", triton.__version__, "|", torch.cuda.get_device_name())'
  # 1. every case with the first config of each kernel (no autotuning): correctness, and the
  #    module and compile counts without autotuning's compiles
  COIL_TRITON_AUTOTUNE=0 timeout 160 python3 tests/gpu/test_triton_dynamic.py \
    --json "$OUT/triton_dynamic.json"
  rc1=$?
  echo "pass 1 (no autotuning): exit code $rc1 ($(( $(date +%s) - start )) s)"
  # 2. again with the default autotuning (every config of each size bucket timed and run)
  timeout $(( 280 - ($(date +%s) - start) )) python3 tests/gpu/test_triton_dynamic.py \
    --json "$OUT/triton_dynamic_autotune.json"
  rc2=$?
  echo "pass 2 (autotuned): exit code $rc2 ($(( $(date +%s) - start )) s)"
  [ "$rc1" -eq 0 ] && [ "$rc2" -eq 0 ]
} 2>&1 | tee "$OUT/triton_dynamic.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && echo "triton_dynamic: ok" || echo "triton_dynamic: FAILED (exit $rc)"
exit "$rc"
