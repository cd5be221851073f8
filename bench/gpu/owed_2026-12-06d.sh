#!/usr/bin/env bash
# Device runs of the twenty-second session (docs/gpu-results.md), one call each from the
# repository root with `device-bundle` carried (after `bash scripts/device_bundle.sh` here):
#   1  issue 18: the Triton gather on the GPU (tests/gpu/check_gather.py), then the MLP, the
#      GPT block and TransformerEncoderLayer on CUDA against Inductor, cold and warm compiles:
#      the GPT block's embedding gradient is now coil's index_add (torch.index_add in the
#      wrapper) where it ran in eager between modules, a training layer norm is one Triton
#      kernel where it was 8 (the GPT block's step: 49 -> 37 kernels), and a warm process no
#      longer compiles a training step again (489c1c5).
#   2  issue 18: the CUDA rows not yet measured (mobilenet_v2, resnet50, BERT-base, GPT-2
#      small), cold and warm.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
case "${STEP:-1}" in
  1) PYTHONPATH=python timeout 90 python3 tests/gpu/check_gather.py 2>&1 | tail -6
     echo "elapsed $(( $(date +%s) - t0 )) s"
     timeout 480 python3 bench/gpu/torch_backend.py --devices cuda --only gpt_block mlp \
       transformer_encoder_layer --budget-s 460 --child-timeout-s 150 \
       --json "$OUT/torch_backend.json" 2>&1 | tail -14 ;;
  2) timeout 570 python3 bench/gpu/torch_backend.py --devices cuda --only mobilenet_v2 resnet50 \
       bert_base gpt2_small --budget-s 540 --child-timeout-s 150 \
       --json "$OUT/torch_backend.json" 2>&1 | tail -14 ;;
  *) echo "STEP must be 1 or 2"; exit 2 ;;
esac
echo "elapsed $(( $(date +%s) - t0 )) s"
