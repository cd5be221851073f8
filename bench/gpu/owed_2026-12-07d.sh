#!/usr/bin/env bash
# Device runs owed by the twenty-ninth session (2026-12-07), one call each from the repository
# root, carry device-bundle after `bash scripts/device_bundle.sh`:
#   1  issues 18 and 24: why coil through torch.compile costs more than its compiled graph on
#      the host CPU at 16 threads (BERT-base 47.4 ms against 37.7 under coil.torch.compile and
#      coil bench; the Llama 125M step 17.6 ms a token against 3.9 ms under coil bench):
#      host_dynamo_overhead.py (eager / coil.torch.compile / torch.compile(coil) alternating,
#      then cProfile) and host_llama_cprofile.sh (cProfile of the decode, the guards log).
#   2  issue 24: the Llama decoder on CUDA again (1B and 125M bf16, 128 tokens) with
#      llama_decode.py --check's new fields: the prompt's logits difference, the first
#      different token and eager's top-2 margin there (a rounding flip or a wrong kernel).
#   3  issue 24: the decoder's coil row on the host CPU against eager and Inductor
#      (owed_2026-12-07c.sh STEP 2: the step kernel by kernel, then 125M f32 at 16 threads).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-/tmp/coil-owed-out}"; mkdir -p "$OUT"
B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_LIBRARY=$B/lib \
  COIL_TRITON_AUTOTUNE=0
date -u; uptime; grep -m1 "model name" /proc/cpuinfo; echo "bundle: $(cat $B/REVISION)"
t0=$(date +%s)
case "${STEP:-1}" in
  1) COIL_CACHE_DIR=$(mktemp -d) timeout 300 python3 bench/gpu/host_dynamo_overhead.py \
       --threads 16 2>&1 | grep -v "^ *$" | cut -c1-170 | head -40
     OUT=$OUT TOKENS=24 timeout 240 bash bench/gpu/host_llama_cprofile.sh 2>&1 |
       grep -v "^ *$" | cut -c1-170 | head -70 ;;
  2) STEP=1 OUT=$OUT bash bench/gpu/owed_2026-12-07c.sh ;;
  3) STEP=2 OUT=$OUT bash bench/gpu/owed_2026-12-07c.sh ;;
  *) echo "STEP must be 1, 2 or 3"; exit 2 ;;
esac
echo "elapsed $(( $(date +%s) - t0 )) s"
