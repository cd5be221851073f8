#!/usr/bin/env bash
# The attention GPU run (issue 24): one device call from the repository root, after
# tests/gpu/prepare.sh (or just `python3 tests/gpu/prepare_attention.py` and
# `python3 bench/gpu/attention_bench.py --prepare`) ran on the build machine:
#
#   bash tests/gpu/run_attention.sh
#
# 1. the flash template's correctness suite (tests/gpu/test_attention.py, float64 reference)
#    -> $OUT/attention_tests.txt;
# 2. the forward benchmark against torch SDPA (flash) and Inductor
#    (bench/gpu/attention_bench.py) -> $OUT/attention_bench.json.
# Everything printed also goes to $OUT/attention_run.log. Each step has a time limit so that
# the run stays inside the device's 10-minute command limit.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-/tmp/coil-gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
COIL_CACHE_DIR="$(mktemp -d /tmp/coil-cache-XXXXXX)"
export COIL_CACHE_DIR
start=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - start )) s)"; }
{
  step "0. environment"
  python3 -c 'import torch, triton; print("torch", torch.__version__, "| triton", triton.__version__, "|", torch.cuda.get_device_name())'
  step "1. attention correctness (tests/gpu/test_attention.py)"
  timeout 260 python3 tests/gpu/test_attention.py --report "$OUT/attention_tests.txt"
  echo "test_attention exit code $?"
  step "2. attention benchmark (bench/gpu/attention_bench.py)"
  timeout 280 python3 bench/gpu/attention_bench.py --json "$OUT/attention_bench.json"
  echo "attention_bench exit code $?"
  step "summary"
  tail -n 1 "$OUT/attention_tests.txt" 2>/dev/null || echo "no test report"
  echo "total $(( $(date +%s) - start )) s"
} 2>&1 | tee "$OUT/attention_run.log"
