#!/usr/bin/env bash
# Device runs owed by the thirtieth session (2026-12-07), one call each from the repository
# root, carry device-bundle after `bash scripts/device_bundle.sh` (docs/gpu-results.md,
# thirtieth session, says what each answers):
#   1  issue 24: Llama 125M bf16 on CUDA against Inductor and eager (prompt 512, 64 tokens,
#      --check): the row that the machine's recall cut off; about 4 minutes (Inductor's compile).
#   2  issue 24: Llama 1B bf16 on CUDA, eager and coil, 128 tokens, --check (a rounding flip or
#      a wrong kernel: the first different token and eager's top-2 margin there).
#   3  issues 18 and 24: Llama 125M f32 on the host CPU at 16 threads, eager / Inductor / coil
#      with this session's cheaper calls at new sizes (was coil 10.18, Inductor 9.49, eager
#      11.11 ms a token on bundle c04f57d).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_LIBRARY=$B/lib \
  COIL_TRITON_AUTOTUNE=0 COIL_CACHE_DIR=$(mktemp -d)
date -u; uptime; grep -m1 "model name" /proc/cpuinfo; echo "bundle: $(cat $B/REVISION)"
D="timeout 540 python3 bench/gpu/llama_decode.py --check"
t0=$(date +%s)
case "${STEP:-1}" in
  1) $D --device cuda --config 125m --dtype bfloat16 --prompt 512 --tokens 64 \
       --backends eager,inductor,coil --json "$OUT/llama_cuda_125m_inductor.json" ;;
  2) $D --device cuda --config 1b --dtype bfloat16 --prompt 512 --tokens 128 \
       --backends eager,coil --json "$OUT/llama_cuda_1b.json" ;;
  3) $D --device cpu --config 125m --threads 16 --prompt 128 --tokens 48 \
       --backends eager,inductor,coil --json "$OUT/llama_host.json" ;;
  *) echo "STEP must be 1, 2 or 3"; exit 2 ;;
esac 2>&1 | grep -v "^\[coil"
echo "elapsed $(( $(date +%s) - t0 )) s"; uptime
