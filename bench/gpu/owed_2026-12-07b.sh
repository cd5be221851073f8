#!/usr/bin/env bash
# Device runs of the twenty-sixth session (2026-12-07), one call each from the repository root:
#   1  issue 24: the gradients of k and v from one key-block loop (the grad_kv kernel). The
#      suite's `backward` group (against torch in float64), then bf16 speed against torch
#      SDPA's flash backward, with the three-kernel backward (fusion off) in the same run.
#      Made here first: `python3 tests/gpu/prepare_attention.py --only backward` and
#      `python3 bench/gpu/attention_backward_bench.py --prepare`; carry tests/gpu/generated.
#   2  issue 24: tests/torch/test_sdpa_torch2.py and test_sdpa_rows.py on torch 2.11, verbose
#      (each case's verdict in $OUT/sdpa.log, so that a run cut short still names its
#      failures); carry device-bundle after `bash scripts/device_bundle.sh`.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "| triton", triton.__version__)'
t0=$(date +%s)
case "${STEP:-1}" in
  1) timeout 110 python3 tests/gpu/test_attention.py --groups backward --no-every-config \
       --report "$OUT/attention_backward_tests.txt" 2>&1 | tail -6
     timeout "${BENCH_TIMEOUT:-400}" python3 bench/gpu/attention_backward_bench.py \
       --json "$OUT/attention_backward_kv.json" ${ONLY:+--only $ONLY} 2>&1 | tail -14 ;;
  2) bundle=/tmp/coil-bundle-sdpa && rm -rf "$bundle" && mkdir -p "$bundle" &&
       tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
     export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
       LIBRARY_PATH="$bundle/lib" CPATH="$bundle/include" COIL_LIBRARY="$bundle/lib" \
       COIL_TRITON_AUTOTUNE=0
     echo "bundle: $(cat "$bundle/REVISION")"
     timeout "${TORCH2_TIMEOUT:-540}" python3 -m pytest -v -p no:cacheprovider -rf --tb=short \
       tests/torch/test_sdpa_torch2.py tests/torch/test_sdpa_rows.py > "$OUT/sdpa.log" 2>&1
     echo "pytest exit $?; passed $(grep -c PASSED "$OUT/sdpa.log")"
     grep -E "FAILED|ERROR" "$OUT/sdpa.log" | head -40; tail -4 "$OUT/sdpa.log" ;;
  *) echo "STEP must be 1 or 2"; exit 2 ;;
esac
echo "elapsed $(( $(date +%s) - t0 )) s"
