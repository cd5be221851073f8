#!/usr/bin/env bash
# The GPU run: one device call, from the repository root, after tests/gpu/prepare.sh ran on the
# build machine (see docs/gpu-results.md):
#
#   bash tests/gpu/run.sh
#
# 1. what is there (nvidia-smi, torch, triton, the generated modules' manifest);
# 2. the runtime's unit tests (python/tests, fake triton);
# 3. the correctness suite (tests/gpu/test_ops.py) -> $OUT/gpu_tests.txt and .json, then a second
#    process that must find every autotuned config in the disk cache;
# 4. the benchmarks (bench/gpu/bench_gpu.py) -> $OUT/gpu_bench.json.
# Everything printed also goes to $OUT/run.log. Each step has a time limit so that the whole run
# stays inside the device's 10-minute command limit; a failing step does not stop the next one.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-/tmp/coil-gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
# A fresh autotune cache: the first process benchmarks, the second must hit.
COIL_CACHE_DIR="$(mktemp -d /tmp/coil-cache-XXXXXX)"
export COIL_CACHE_DIR
start=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - start )) s)"; }

{
  step "1. environment"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv || true
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "| torch", torch.__version__, "| triton", triton.__version__, "| cuda", torch.version.cuda, "|", torch.cuda.get_device_name() if torch.cuda.is_available() else "NO CUDA DEVICE")'
  if [ -f tests/gpu/generated/MANIFEST.json ]; then
    python3 -c 'import json; m = json.load(open("tests/gpu/generated/MANIFEST.json")); print("modules from coil", m.get("coil"), "at", m.get("generated_at"), "| cuda codegen:", m.get("cuda_codegen")); bad = {k: v for k, v in m["cases"].items() if v["status"] != "ok"}; print("cases not compiled:", bad or "none"); print("bench modules:", m["bench"])'
  else
    echo "no tests/gpu/generated/MANIFEST.json: run bash tests/gpu/prepare.sh on the build machine first"
  fi

  step "2. runtime unit tests"
  timeout 120 python3 -m pytest -q python/tests
  echo "pytest exit code $?"

  step "3. correctness suite"
  timeout 220 python3 tests/gpu/test_ops.py --report "$OUT/gpu_tests.txt" --cli-smoke
  echo "test_ops exit code $?"

  step "3b. autotune disk cache, second process (COIL_LOGS=autotune)"
  COIL_LOGS=autotune timeout 45 python3 tests/gpu/test_ops.py --cases runtime_sample \
    --no-every-config --expect-cache-hits 2>&1 | grep -E "cache hit|PASS|FAIL|passed|Error" | head -20

  step "4. benchmarks (COIL_LOGS=autotune)"
  COIL_LOGS=autotune timeout 280 python3 bench/gpu/bench_gpu.py --json "$OUT/gpu_bench.json" \
    --budget-s 200
  echo "bench exit code $?"

  step "summary"
  tail -n 1 "$OUT/gpu_tests.txt" 2>/dev/null || echo "no test report"
  grep -E "^(FAIL|SKIP)" "$OUT/gpu_tests.txt" 2>/dev/null | head -40
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["table"])' "$OUT/gpu_bench.json" 2>/dev/null || echo "no benchmark table"
  echo "total $(( $(date +%s) - start )) s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
} 2>&1 | tee "$OUT/run.log"
