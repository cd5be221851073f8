#!/usr/bin/env bash
# tests/torch on the GPU machine's host (torch 2.x, Python 3.12): the same tests as CI's
# torch 1.13 run, plus those that need torch.compile (backend="coil"). One device call from the
# repository root after `bash scripts/device_bundle.sh` here (carry device-bundle):
#
#   bash tests/torch/run_torch2.sh            (output also in $OUT/torch2.log)
#   bash tests/torch/run_torch2.sh tests/torch/test_cuda.py    (those files only)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-/tmp/coil-torch2-out}"
mkdir -p "$OUT"
bundle=/tmp/coil-bundle-torch2
rm -rf "$bundle" && mkdir -p "$bundle" && tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  LIBRARY_PATH="$bundle/lib" CPATH="$bundle/include" COIL_LIBRARY="$bundle/lib"
{
  python3 -c 'import sys, torch; print("python", sys.version.split()[0], "| torch", torch.__version__)'
  echo "bundle: $(cat "$bundle/REVISION")"
  timeout "${TORCH2_TIMEOUT:-400}" python3 -m pytest -q -p no:cacheprovider -rs "${@:-tests/torch}"
  echo "pytest exit code $?"
} 2>&1 | tee "$OUT/torch2.log"
