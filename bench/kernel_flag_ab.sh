#!/usr/bin/env bash
# What one compile flag of generated kernels costs: coil_cpu_bench run alternately with the
# kernel flags as coil sets them (A) and with FLAG dropped (B), ROUNDS times each, every workload
# compiled fresh in each round (its own cache directory). Prints both JSON paths and a per
# workload table of median ms, B/A. FLAG must be one coil passes (runtime/toolchain.cpp); a
# g++ wrapper on PATH as $CXX removes it for B.
#
#   bash bench/kernel_flag_ab.sh -fno-tree-sink [ROUNDS] [THREADS] [BENCH_BIN] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
flag="$1"
rounds="${2:-3}"
threads="${3:-1,2}"
bin="${4:-build/bin/coil_cpu_bench}"
out="${5:-bench/results}"
cxx="${CXX:-g++}"
work=$(mktemp -d /tmp/coil-flag-ab-XXXXXX)
trap 'rm -rf "$work"' EXIT
cat > "$work/cxx-without" <<W
#!/usr/bin/env bash
args=()
for a in "\$@"; do [ "\$a" = "$flag" ] || args+=("\$a"); done
exec "$(command -v "$cxx")" "\${args[@]}"
W
chmod +x "$work/cxx-without"
mkdir -p "$out"
stamp=$(date -u +%Y-%m-%dT%H%M%S)
echo "== $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; load: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$rounds"); do
  for side in A B; do
    c="$cxx"; [ "$side" = B ] && c="$work/cxx-without"
    CXX="$c" COIL_CACHE_DIR="$work/cache-$side-$r" "$bin" --threads "$threads" --compile-samples 1 \
      --json "$work/$side-$r.json" > "$work/$side-$r.log" 2>&1 || { cat "$work/$side-$r.log"; exit 1; }
  done
  echo "round $r done; load: $(cut -d' ' -f1-3 /proc/loadavg)"
done
python3 - "$work" "$rounds" "$flag" "$out/flag-ab-$stamp.json" <<'P'
import json, statistics, sys
work, rounds, flag, dest = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
def rows(side):
    per = {}
    for r in range(1, rounds + 1):
        data = json.load(open(f"{work}/{side}-{r}.json"))
        for w in data["workloads"]:
            for t in w["threads"]:
                per.setdefault((w["id"], t["threads"]), []).append(t["coil"]["median_ms"])
    return {k: statistics.median(v) for k, v in per.items()}
a, b = rows("A"), rows("B")
print(f"{'workload':10} {'threads':>7} {'with ' + flag + ' ms':>22} {'without ms':>12} {'without/with':>13}")
table = []
for k in sorted(a):
    if k not in b: continue
    print(f"{k[0]:10} {k[1]:>7} {a[k]:22.3f} {b[k]:12.3f} {b[k] / a[k]:13.3f}")
    table.append({"workload": k[0], "threads": k[1], "with_ms": a[k], "without_ms": b[k]})
json.dump({"flag": flag, "rounds": rounds, "rows": table}, open(dest, "w"), indent=1)
print("wrote", dest)
P
