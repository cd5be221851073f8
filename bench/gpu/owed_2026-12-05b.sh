#!/usr/bin/env bash
# The first of two device calls owed on 2026-12-05 (fourteenth session, docs/gpu-results.md):
# torch 2.x tests on the host and the GPU (torch.compile with dynamic shapes through coil, issue
# 18/20; the attention rows and CUDA tests of issue 24). The second call is
# bench/gpu/owed_2026-12-05.sh from its step 2 (OWED_FROM=2).
set -uo pipefail
export PYTHONUNBUFFERED=1
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
echo "=== torch.compile with dynamic shapes (issue 18/20), then issue 24's tests"
TORCH2_TIMEOUT=${TORCH2_TIMEOUT:-540} COIL_TRITON_AUTOTUNE=0 bash tests/torch/run_torch2.sh \
  tests/torch/test_symbolic.py tests/torch/test_ddp.py tests/torch/test_backend.py tests/torch/test_sdpa_torch2.py \
  tests/torch/test_sdpa_rows.py tests/torch/test_attention_training.py tests/torch/test_cuda.py \
  | tail -40
echo "elapsed $(( $(date +%s) - t0 )) s"
