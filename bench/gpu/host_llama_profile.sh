#!/usr/bin/env bash
# The Llama 125M decode step (bench/gpu/graphs/llama125m_decode_step.coil, f32, weights as
# inputs as coil.torch passes them) timed kernel by kernel on this machine's CPU at a cache length
# of LEN (default 512), at 16 and 8 threads (THREADS): where coil's 17.6 ms a token on the GPU
# machine's host goes (Inductor: 8.6 ms). Needs the bundle (bash scripts/device_bundle.sh) on
# the GPU machine, or build/bin/coil here (COIL=...). Writes $OUT/profile_T.json and traces.
set -uo pipefail
OUT="${OUT:-/tmp/coil-llama-profile}"; mkdir -p "$OUT"
if [ -z "${COIL:-}" ]; then
  B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
  export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_LIBRARY=$B/lib
  COIL=$B/bin/coil
fi
G=bench/gpu/graphs/llama125m_decode_step.coil
SIZES=$(grep -o ", s[0-9]*," $G | tr -d ', ' | sort -u | sed "s/.*/--size &=${LEN:-512}/")
date -u; uptime; grep -m1 "model name" /proc/cpuinfo
export COIL_CACHE_DIR=$(mktemp -d)
for t in ${THREADS:-16 8}; do
  echo "== $t threads"
  "$COIL" bench $G $SIZES --threads $t --runs ${RUNS:-30} --warmup 5 --profile \
    --trace "$OUT/trace_$t.json" --json > "$OUT/profile_$t.json" 2> "$OUT/profile_$t.txt"
  head -3 "$OUT/profile_$t.txt"; sort -t' ' -k2 -rn "$OUT/profile_$t.txt" | head -0
  grep -E "^cpp_" "$OUT/profile_$t.txt" | sort -k2 -rn | head -${TOP:-14}
  grep -E "kernels|sum" "$OUT/profile_$t.txt" | head -3
done
