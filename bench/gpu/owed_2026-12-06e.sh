#!/usr/bin/env bash
# Device runs owed after the twenty-third session (docs/gpu-results.md), one call each from the
# repository root with `device-bundle` carried (after `bash scripts/device_bundle.sh` here):
#   1  issue 18: kernels of the same code defined once (share_identical_kernels: BERT-base's
#      module 73 Triton definitions -> 6, GPT-2 small's likewise), so Triton compiles, autotunes
#      and loads each once: BERT-base and GPT-2 small on CUDA, cold and warm compiles against
#      Inductor (the twenty-third session: cold 24.5 / 11.9 s and 22.4 / 10.1 s, warm 3.15 / 2.59
#      s and 3.46 / 1.67 s, coil / Inductor).
#   2  issue 18: why BERT-base and the ResNets trail Inductor on the host CPU at 16 threads
#      (bench/gpu/host_cpu_profile.sh).
#   3  issue 18: where GPT-2 small's inference step (0.92x of Inductor) and the GPT block's
#      training step (0.88-0.96x) lose on CUDA: torch.profiler over both backends' steps, the
#      kernels side by side (bench/gpu/experiments/profile_torch_cuda.py).
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
t0=$(date +%s)
case "${STEP:-1}" in
  1) timeout 570 python3 bench/gpu/torch_backend.py --devices cuda --only bert_base gpt2_small \
       --budget-s 540 --child-timeout-s 150 --json "$OUT/torch_backend.json" 2>&1 | tail -14 ;;
  2) OUT="$OUT" timeout 570 bash bench/gpu/host_cpu_profile.sh 2>&1 | tail -60 ;;
  3) for m in "gpt2_small infer 4" "gpt_block train 8"; do set -- $m
       timeout 280 python3 bench/gpu/experiments/profile_torch_cuda.py --model $1 --mode $2 \
         --batch $3 2>&1 | tail -45
     done ;;
  *) echo "STEP must be 1, 2 or 3"; exit 2 ;;
esac
echo "elapsed $(( $(date +%s) - t0 )) s"
