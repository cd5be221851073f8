#!/usr/bin/env bash
# Exported models' size and load time, and the runtime library's size and dependencies
# (issue 22's figures; docs/deploy.md, "Figures"). For each ONNX model given: `coil export`,
# then RUNS fresh processes of coil_export_load_bench (linked with libcoil_runtime alone), and
# the medians of their load and first/second run times. Prints a markdown table.
#   bench/export_bench.sh [--runs 7] MODEL.onnx...      (build/ must be built)
set -euo pipefail
runs=7
if [ "${1:-}" = "--runs" ]; then runs=$2; shift 2; fi
[ $# -gt 0 ] || { echo "usage: bench/export_bench.sh [--runs N] MODEL.onnx..."; exit 2; }
build=${COIL_BUILD_DIR:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
     "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
lib="$build/lib/libcoil_runtime.so"
echo "libcoil_runtime.so: $(stat -c %s "$lib") bytes; needs: $(ldd "$lib" | awk '{print $1}' | \
     grep -v -e linux-vdso -e ld-linux | tr '\n' ' ')"
echo "and, for the modules it loads, libcoil_vmath.so ($(stat -c %s "$build/lib/libcoil_vmath.so")" \
     "bytes) and libcoil_extern.so ($(stat -c %s "$build/lib/libcoil_extern.so") bytes, with oneDNN)"
echo
echo "| model | module.so | weights.bin | kernels | load ms (median of $runs) | first run ms | later runs ms (median) |"
echo "|---|---|---|---|---|---|---|"
for model in "$@"; do
  name=$(basename "$model" .onnx)
  "$build/bin/coil" export "$model" -o "$work/$name" --quiet >/dev/null
  for _ in $(seq "$runs"); do "$build/bin/coil_export_load_bench" "$work/$name"; done \
    >"$work/$name.jsonl"
  /usr/bin/python3 - "$name" "$work/$name.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[2])]
med = lambda k: statistics.median(r[k] for r in rows)
r = rows[0]
print(f"| {sys.argv[1]} | {r['module_bytes'] / 1e6:.2f} MB | {r['weights_bytes'] / 1e6:.2f} MB | "
      f"{r['kernels']} | {med('load_ms'):.1f} (min {min(x['load_ms'] for x in rows):.1f}) | "
      f"{med('first_run_ms'):.2f} | {med('later_run_ms'):.2f} |")
PY
done
