#!/usr/bin/env bash
# Device runs of the twenty-fifth session (2026-12-07), one call each from the repository root:
#   1  issue 24, attention on the GPU: the suite's `backward` and `decode` groups (the Triton
#      flash backward, the forward that stores its logsumexp, the split-K decoding kernels;
#      against torch in float64), then bf16 speed: the backward against torch SDPA's flash
#      backward, the decoding rows against SDPA and Inductor. Made here first: `python3
#      tests/gpu/prepare_attention.py --only backward decode` (or without --only for STEP 2),
#      `python3 bench/gpu/attention_backward_bench.py --prepare` and `python3
#      bench/gpu/attention_bench.py --prepare`; carry tests/gpu/generated (no bundle).
#   2  issue 24, every group of the attention suite, and the forward rows of
#      bench/gpu/attention_bench.py (coil against SDPA's flash backend and Inductor).
#   3  issue 24 on the host CPU (16 threads, torch 2.11): bench/attention_bench.py against
#      torch's fused CPU attention (F.scaled_dot_product_attention), forward and forward +
#      backward (carry device-bundle after `bash scripts/device_bundle.sh`).
#   4  issue 24: the decoding kernels with a GQA group's heads packed into one tile (the
#      suite's `decode` group and the decode rows of bench/gpu/attention_bench.py; prepare both
#      here as for STEP 1), then tests/torch/test_sdpa_torch2.py and test_sdpa_rows.py on torch
#      2.11 (carry tests/gpu/generated and device-bundle).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "| triton", triton.__version__)'
t0=$(date +%s)
case "${STEP:-1}" in
  1) timeout 150 python3 tests/gpu/test_attention.py --groups backward decode --no-every-config \
       --report "$OUT/attention_backward_tests.txt" 2>&1 | tail -25
     echo "tests exit $?"
     timeout 190 python3 bench/gpu/attention_backward_bench.py --json "$OUT/attention_backward.json" \
       2>&1 | tail -16
     timeout 170 python3 bench/gpu/attention_bench.py --json "$OUT/attention_decode.json" \
       --only decode_B1_T4096 decode_B1_T16384 decode_B1_T65536 decode_B8_T16384 2>&1 | tail -10 ;;
  2) timeout 250 python3 tests/gpu/test_attention.py --no-every-config \
       --report "$OUT/attention_tests.txt" 2>&1 | tail -25
     echo "tests exit $?"
     timeout 300 python3 bench/gpu/attention_bench.py --json "$OUT/attention_forward.json" \
       --only T512_d64 T2048_d64 T2048_d128 T2048_d128_causal T8192_d64 T8192_d128_causal \
       2>&1 | tail -12 ;;
  3) bundle=/tmp/coil-bundle-cpu && rm -rf "$bundle" && mkdir -p "$bundle" &&
       tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
     export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
       LIBRARY_PATH="$bundle/lib" CPATH="$bundle/include" COIL_LIBRARY="$bundle/lib"
     echo "bundle: $(cat "$bundle/REVISION")"
     for bw in "" --backward; do
       timeout 270 python3 bench/attention_bench.py --threads 16 --lengths 512,2048,4096 $bw \
         --runs 10 --json "$OUT/attention_cpu16${bw}.json" 2>&1 | tail -10
     done ;;
  4) timeout 80 python3 tests/gpu/test_attention.py --groups decode --no-every-config \
       --report "$OUT/decode_tests.txt" 2>&1 | tail -3
     timeout 110 python3 bench/gpu/attention_bench.py --json "$OUT/attention_decode_packed.json" \
       --only decode_B1_T4096 decode_B1_T16384 decode_B1_T65536 decode_B8_T4096 \
       decode_B8_T16384 decode_B8_T65536 2>&1 | tail -9
     TORCH2_TIMEOUT=370 COIL_TRITON_AUTOTUNE=0 bash tests/torch/run_torch2.sh \
       tests/torch/test_sdpa_torch2.py tests/torch/test_sdpa_rows.py 2>&1 | tail -25 ;;
  *) echo "STEP must be 1 to 4"; exit 2 ;;
esac
echo "elapsed $(( $(date +%s) - t0 )) s"
