#!/usr/bin/env bash
# Prepares the GPU run on THIS machine (where coil builds): builds coil, then writes
# tests/gpu/generated/ (Triton modules from `coil compile --device cuda`, fixed inputs, expected
# outputs from coil's CPU backend, checked against the reference interpreter). The GPU machine
# gets a copy of the working tree, so run this before the device call, after any change to the
# code generator. See docs/gpu-results.md.
#
#   bash tests/gpu/prepare.sh [--only CASE ...]      (COIL_REBUILD=0: use build/bin/coil as is)
set -euo pipefail
cd "$(dirname "$0")/../.."
py="${COIL_PYTHON:-/usr/bin/python3}"
[ -x "$py" ] || py=python3
if [ "${COIL_REBUILD:-1}" = 1 ]; then
  if ! log=$(cmake --build build --target coil 2>&1); then
    echo "$log" | tail -20
    if [ -x build/bin/coil ]; then
      echo "WARNING: building coil failed; using the existing build/bin/coil"
    else
      echo "ERROR: building coil failed and there is no build/bin/coil"; exit 1
    fi
  fi
fi
"$py" tests/gpu/prepare_cases.py --coil build/bin/coil "$@"
# The attention suite and benchmark (tests/gpu/run_attention.sh runs them); after the cases,
# whose full run clears tests/gpu/generated/.
if [ "$#" -eq 0 ]; then
  "$py" tests/gpu/prepare_attention.py --coil build/bin/coil
  # size-generic Triton modules (tests/gpu/run_triton_dynamic.sh runs them)
  "$py" tests/gpu/prepare_triton_dynamic.py --coil build/bin/coil
  "$py" bench/gpu/attention_bench.py --prepare --coil build/bin/coil
fi
