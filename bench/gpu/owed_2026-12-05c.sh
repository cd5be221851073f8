#!/usr/bin/env bash
# The Llama-style decoder of issue 24 (bench/gpu/llama_decode.py) on the GPU machine: its host
# CPU (125M parameters, 16 threads: eager, Inductor, coil) and the H200 (1B, bf16: eager and
# Inductor with reduce-overhead, coil). Prompt 512, then 256 tokens (coil on CUDA: COIL_CUDA_TOKENS,
# default 256 since its Triton modules are size-generic; the compile count shows whether every
# length after the second reuses one module; set 64 if that run does not fit its time).
# STEP=1 (default) runs the host CPU and the GPU's eager and Inductor rows; STEP=2 the GPU's
# coil row alone, with a call of its own (on 2026-12-07 the three did not fit one 560 s call:
# the host row took 169 s, the GPU's Inductor 108 s, and coil's CUDA compile and decode the
# rest, cut off).
set -uo pipefail
export PYTHONUNBUFFERED=1
B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_LIBRARY=$B/lib
export COIL_CACHE_DIR=$(mktemp -d) COIL_TRITON_AUTOTUNE=0
date -u; uptime; grep -m1 "model name" /proc/cpuinfo; nvidia-smi --query-gpu=name --format=csv,noheader
t0=$(date +%s)
if [ "${STEP:-1}" = 1 ]; then
  timeout 280 python3 bench/gpu/llama_decode.py --device cpu --config 125m --threads 16 \
    --backends eager,coil,inductor --check --json $OUT/llama_cpu.json
  echo "elapsed $(( $(date +%s) - t0 )) s"
  timeout 200 python3 bench/gpu/llama_decode.py --device cuda --config 1b --dtype bfloat16 \
    --backends eager,inductor --mode reduce-overhead --check --json $OUT/llama_cuda.json
else
  timeout 540 python3 bench/gpu/llama_decode.py --device cuda \
    --config 1b --dtype bfloat16 --tokens "${COIL_CUDA_TOKENS:-256}" --backends eager,coil \
    --check --json $OUT/llama_cuda_coil.json
fi
echo "elapsed $(( $(date +%s) - t0 )) s"
