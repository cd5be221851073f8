#!/usr/bin/env bash
# The GPU run: one device call, from the repository root, after tests/gpu/prepare.sh ran on the
# build machine (see docs/gpu-results.md):
#
#   bash tests/gpu/run.sh
#
# 1. what is there (nvidia-smi, torch, triton, the generated modules' manifest);
# 2. the runtime's unit tests (python/tests, fake triton);
# 3. the correctness suite (tests/gpu/test_ops.py) -> $OUT/gpu_tests.txt and .json (3a: the
#    Triton gather at run-time indices, tests/gpu/check_gather.py), then a second
#    process that must find every autotuned config in the disk cache, and one whose every
#    Triton compile must be a disk cache hit of what the compile process pool compiled;
#    3c. if device-bundle/coil-bundle.tar.xz is there (scripts/device_bundle.sh; carry it), the
#    bundled `coil check|bench --device cuda` on a reduction, a norm and a matmul (PASS/FAIL lines);
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

  step "3a. gathers at run-time indices (tests/gpu/check_gather.py)"
  PYTHONPATH=python timeout 60 python3 tests/gpu/check_gather.py 2>&1 | tail -6

  step "3b. autotune disk cache, second process (COIL_LOGS=autotune)"
  COIL_LOGS=autotune timeout 45 python3 tests/gpu/test_ops.py --cases runtime_sample \
    --no-every-config --expect-cache-hits 2>&1 | grep -E "cache hit|PASS|FAIL|passed|Error" | head -20

  step "3b2. COIL_COMPILE_POOL=process: the main process loads what workers compiled"
  TRITON_CACHE_DIR="$(mktemp -d /tmp/coil-triton-XXXXXX)" COIL_CACHE_DIR="$(mktemp -d)" \
    COIL_COMPILE_POOL=process COIL_COMPILE_THREADS=8 timeout 60 python3 tests/gpu/test_ops.py --no-every-config \
    --cases runtime_sample softmax layer_norm matmul_bias_relu qkv_split --expect-disk-cache-loads \
    2>&1 | grep -E "PASS|FAIL|compiles in|compiled in|Error" | head -20

  step "3c. coil check|bench --device cuda (the bundled coil binary)"
  cli_pass=0 cli_fail=0
  if [ -f device-bundle/coil-bundle.tar.xz ]; then
    bundle=/tmp/coil-bundle-cli
    rm -rf "$bundle" && mkdir -p "$bundle" && tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
    # The binary finds python/ as ./python (COIL_PYTHONPATH would override); python3 has torch.
    cli_log="$OUT/coil_cli.log"
    : > "$cli_log"
    cli_end=$(( $(date +%s) + 60 ))  # the step's budget: what is left after it is skipped
    for m in tests/gpu/cases/softmax.coil tests/gpu/cases/layer_norm.coil \
             tests/gpu/cases/matmul_bias_relu.coil; do
      # The case's own tolerance ("# gpu-tol: rtol=R atol=A"), else coil's per-dtype default.
      tol=$(sed -n 's/^# gpu-tol: rtol=\([^ ]*\) atol=\([^ ]*\).*/--rtol \1 --atol \2/p' "$m")
      for cmd in "check $m --device cuda $tol" "bench $m --device cuda --runs 20 --json"; do
        left=$(( cli_end - $(date +%s) ))
        if [ "$left" -lt 5 ]; then cli_fail=$((cli_fail + 1)); echo "FAIL coil $cmd: out of time"; continue; fi
        echo "\$ coil $cmd" >> "$cli_log"
        if LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
           LIBRARY_PATH="$bundle/lib" CPATH="$bundle/include" \
           timeout "$(( left < 25 ? left : 25 ))" "$bundle/bin/coil" $cmd > "$cli_log.one" 2>&1; then
          cli_pass=$((cli_pass + 1)); echo "PASS coil $cmd: $(tail -n 1 "$cli_log.one")"
        else
          cli_fail=$((cli_fail + 1)); echo "FAIL coil $cmd:"; tail -n 15 "$cli_log.one" | sed 's/^/    /'
        fi
        cat "$cli_log.one" >> "$cli_log"
      done
    done
    rm -f "$cli_log.one"
    echo "coil cli: $cli_pass passed, $cli_fail failed (log: $cli_log)"
  else
    echo "no device-bundle/coil-bundle.tar.xz (bash scripts/device_bundle.sh here, carry device-bundle): skipped"
  fi

  step "4. benchmarks (COIL_LOGS=autotune)"
  COIL_LOGS=autotune timeout 280 python3 bench/gpu/bench_gpu.py --json "$OUT/gpu_bench.json" \
    --budget-s 200
  echo "bench exit code $?"

  step "summary"
  tail -n 1 "$OUT/gpu_tests.txt" 2>/dev/null || echo "no test report"
  echo "coil cli --device cuda: $cli_pass passed, $cli_fail failed"
  grep -E "^(FAIL|SKIP)" "$OUT/gpu_tests.txt" 2>/dev/null | head -40
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["table"])' "$OUT/gpu_bench.json" 2>/dev/null || echo "no benchmark table"
  echo "total $(( $(date +%s) - start )) s; files in $OUT: $(ls "$OUT" | tr '\n' ' ')"
} 2>&1 | tee "$OUT/run.log"
