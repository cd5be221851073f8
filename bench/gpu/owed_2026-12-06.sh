#!/usr/bin/env bash
# The GPU-machine runs still owed after the nineteenth session (docs/gpu-results.md), as
# device calls from the repository root with `device-bundle` carried (after
# `bash scripts/device_bundle.sh` here at HEAD). Each step fits one call's 600 s; pick it with
# STEP=n (default 1):
#   1  issue 18: torch_backend.py's CUDA rows not yet measured (mobilenet_v2, resnet50,
#      BERT-base, GPT-2 small), cold and warm
#   2  issue 18: the host-CPU rows not yet measured (GPT block and TransformerEncoderLayer
#      training, resnet18, mobilenet_v2, resnet50, BERT-base, GPT-2 small)
#   3  issue 20: Inductor's compiles over the serving trace on the host CPU (carry
#      build/dyn-models too, made as docs/gpu-results.md's thirteenth session says)
#   4  issue 24: the Llama decoder (bench/gpu/owed_2026-12-05c.sh)
#   5  issue 28: the AMX GEMM tests and GFLOP/s at the HEAD bundle
#   6  issue 20: the GPU suite size-generic against specialized (after `bash tests/gpu/prepare.sh`
#      here; carry tests/gpu/generated too)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
case "${STEP:-1}" in
  1) python3 bench/gpu/torch_backend.py --devices cuda --only mobilenet_v2 resnet50 bert_base \
       gpt2_small --budget-s 540 --child-timeout-s 150 2>&1 | tail -12 ;;
  2) python3 bench/gpu/torch_backend.py --devices cpu --only gpt_block transformer_encoder_layer \
       resnet18 mobilenet_v2 resnet50 bert_base gpt2_small --no-warm --budget-s 540 \
       --child-timeout-s 200 2>&1 | tail -14 ;;
  3) timeout 580 python3 bench/gpu/dynamic_trace_torch.py --pairs build/dyn-models/encoder_trace.json \
       --devices cpu --json "$OUT/dynamic_trace_torch_cpu.json" --settings None True \
       --budget-s 560 --child-timeout-s 270 ;;
  4) bash bench/gpu/owed_2026-12-05c.sh ;;
  5) bash bench/amx/run_device.sh "$OUT" ;;
  6) timeout 580 python3 bench/gpu/bench_gpu.py --size-generic --budget-s 520 \
       --json "$OUT/gpu_suite_size_generic.json" 2>&1 | tail -14 ;;
  *) echo "STEP must be 1-6"; exit 2 ;;
esac
