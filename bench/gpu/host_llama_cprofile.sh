#!/usr/bin/env bash
# Where coil.torch's Llama 125M decode step spends its time on the GPU machine's host CPU (16
# threads): the bare step graph runs 3.9 ms under `coil bench` there (host_llama_profile.sh), the
# step through torch.compile(backend="coil") 17.6 ms a token. cProfile over a short decode
# (prompt 128, 24 tokens, coil only), the guards log, sorted by own time. One device call with
# device-bundle carried, about 120 s. Output under $OUT.
set -uo pipefail
OUT="${OUT:-/tmp/coil-llama-cprofile}"; mkdir -p "$OUT"
B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_LIBRARY=$B/lib \
  PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 COIL_CACHE_DIR=$(mktemp -d)
echo "bundle $(cat $B/REVISION)"; date -u; uptime
COIL_LOGS=guards timeout 200 python3 -m cProfile -o "$OUT/decode.prof" bench/gpu/llama_decode.py \
  --device cpu --config 125m --threads ${THREADS:-16} --prompt 128 --tokens ${TOKENS:-24} \
  --backends coil 2> "$OUT/guards.txt"
grep -c "compiling" "$OUT/guards.txt"; cut -c1-160 "$OUT/guards.txt" | sort | uniq -c | sort -rn | head -6
python3 - "$OUT/decode.prof" <<'PY'
import pstats, sys
s = pstats.Stats(sys.argv[1])
s.sort_stats("tottime").print_stats(25)
s.sort_stats("cumulative").print_stats(30)
PY
