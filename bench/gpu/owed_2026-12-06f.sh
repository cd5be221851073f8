#!/usr/bin/env bash
# Device runs owed after the twenty-fourth session (2026-12-06; no device could be started),
# one call each from the repository root:
#   1  issue 24: the Triton flash backward (attention_lse, attention_grad): the GPU suite's
#      `backward` group against torch autograd in float64, then bf16 speed against torch
#      SDPA's flash backward. Made here first: `python3 tests/gpu/prepare_attention.py --only
#      backward` and `python3 bench/gpu/attention_backward_bench.py --prepare`; carry
#      tests/gpu/generated/attn_backward and tests/gpu/generated/attn_bw_bench (no bundle).
#   2  issue 24: the torch 2.x attention rows with attention_grad on both devices
#      (tests/torch/test_sdpa_torch2.py and friends; carry device-bundle after
#      `bash scripts/device_bundle.sh`).
#   3, 4, 5  STEP 1, 2, 3 of bench/gpu/owed_2026-12-06e.sh (BERT-base / GPT-2 compile times
#      after kernel sharing; the host CPU profile; torch.profiler of GPT-2 and the GPT block).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "| triton", triton.__version__)'
t0=$(date +%s)
case "${STEP:-1}" in
  1) timeout 240 python3 tests/gpu/test_attention.py --groups backward --no-every-config \
       --report "$OUT/attention_backward_tests.txt" 2>&1 | tail -25
     echo "tests exit $?"
     timeout 300 python3 bench/gpu/attention_backward_bench.py --json "$OUT/attention_backward.json" \
       2>&1 | tail -14 ;;
  2) TORCH2_TIMEOUT=400 COIL_TRITON_AUTOTUNE=0 bash tests/torch/run_torch2.sh \
       tests/torch/test_sdpa_torch2.py tests/torch/test_sdpa_rows.py 2>&1 | tail -30 ;;
  3|4|5) STEP=$(( STEP - 2 )) bash bench/gpu/owed_2026-12-06e.sh ;;
  *) echo "STEP must be 1 to 5"; exit 2 ;;
esac
echo "elapsed $(( $(date +%s) - t0 )) s"
