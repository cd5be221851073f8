#!/usr/bin/env bash
# Why coil's Llama 125M decode step on the GPU machine's host CPU (16 threads) ran 23.6 ms/token
# where Inductor ran 8.6 and eager 16.9 (docs/gpu-results.md, twenty-seventh session): the same
# coil row under OpenMP settings that separate "one thread does the work" from "two OpenMP pools
# (torch's bundled libgomp and the one coil's kernels use) fight over the cores", then a cProfile
# of the Python side. Needs device-bundle (bash scripts/device_bundle.sh). Each row: prompt 512,
# TOKENS tokens (default 32), coil only, fresh compile cache.
set -uo pipefail
export PYTHONUNBUFFERED=1
B=/tmp/cb; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_LIBRARY=$B/lib
OUT="${OUT:-/tmp/coil-host-llama}"; mkdir -p "$OUT"
date -u; uptime; grep -m1 "model name" /proc/cpuinfo; echo "bundle: $(cat $B/REVISION)"
T=${TOKENS:-32}
row() {  # label, then env assignments
  local label=$1; shift
  echo "== $label: $*"
  env COIL_CACHE_DIR=$(mktemp -d) "$@" timeout 120 python3 bench/gpu/llama_decode.py \
    --device cpu --config 125m --tokens $T --backends coil --json "$OUT/llama_$label.json" \
    2>&1 | grep -E "^coil|Error|error" | head -5
}
row default
row passive OMP_WAIT_POLICY=PASSIVE
row threads8 OMP_NUM_THREADS=8
row threads1 OMP_NUM_THREADS=1
echo "== eager, passive"; OMP_WAIT_POLICY=PASSIVE timeout 100 python3 bench/gpu/llama_decode.py --device cpu \
  --config 125m --tokens $T --backends eager 2>/dev/null | grep -E "^eager" || true
echo "== cProfile of the default row (top 25 by own time)"
COIL_CACHE_DIR=$(mktemp -d) timeout 150 python3 -m cProfile -s tottime bench/gpu/llama_decode.py \
  --device cpu --config 125m --tokens $T --backends coil 2>&1 | sed -n '1,40p' | cut -c1-150
