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
# modules used and Triton's compiles -> $OUT/triton_dynamic.json, $OUT/triton_dynamic.log.
# Exits non-zero when a size fails or the run did not finish in its 280 s.
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
{
  python3 -c 'import torch, triton; print("torch", torch.__version__, "| triton", triton.__version__, "|", torch.cuda.get_device_name())'
  timeout 280 python3 tests/gpu/test_triton_dynamic.py --json "$OUT/triton_dynamic.json"
  rc=$?
  echo "test_triton_dynamic exit code $rc"
  exit $rc
} 2>&1 | tee "$OUT/triton_dynamic.log"
exit "${PIPESTATUS[0]}"
