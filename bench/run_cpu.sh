#!/usr/bin/env bash
# The CPU benchmark suite (docs/benchmarks.md): builds coil_cpu_bench, runs it (copy ceilings,
# coil), then bench/eager_bench.py (PyTorch eager, and torch.compile/Inductor where torch >= 2),
# one after the other, merges both into bench/results/cpu-<date>.json and prints the table.
#
#   bash bench/run_cpu.sh [options]
#     --threads LIST        thread counts (default 1,2; the GPU host: 2,16)
#     --runs N              timed runs per measurement, median reported (default 20, >= 10)
#     --rounds N            run coil and torch alternately N times; each cell is the median
#                           round's (default 1; 3 on a shared, noisy machine). The rounds share
#                           one Inductor code cache: Inductor's g++ runs in the first round only,
#                           and its compile times are that (cold) round's
#     --warmup N            untimed runs first (default 3)
#     --workloads LIST      subset of a,b,c,d,e1,e0,f,i,j,k (default: all)
#     --scale S             multiplies each workload's leading dimension (default 1)
#     --backends LIST       torch backends: auto (default) or eager,inductor_alloc,inductor
#     --python PATH         Python with torch (default: /usr/bin/python3 if it has torch,
#                           else python3 on PATH)
#     --coil-bench-bin PATH a built coil_cpu_bench (skips the build)
#     --build-dir DIR       CMake build directory (default $COIL_BUILD_DIR or build)
#     --no-build            use DIR/bin/coil_cpu_bench as it is
#     --skip-coil | --skip-torch   run only one half
#     --out FILE            merged results (default bench/results/cpu-<date>.json)
#     --notes TEXT          free text stored in the results (machine state, ...)
#     --source REV          the revision the binaries were built from (default: this tree's
#                           git HEAD; the GPU host's bundle passes its own)
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."

threads=1,2 runs=20 rounds=1 warmup=3 workloads="" scale=1 backends=auto
python="" bin="" build_dir="${COIL_BUILD_DIR:-build}" build=1 coil=1 torch=1 out="" notes=""
source_rev=""
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --workloads) workloads="$2"; shift 2 ;;
    --scale) scale="$2"; shift 2 ;;
    --backends) backends="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --coil-bench-bin) bin="$2"; build=0; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --skip-coil) coil=0; shift ;;
    --skip-torch) torch=0; shift ;;
    --out) out="$2"; shift 2 ;;
    --notes) notes="$2"; shift 2 ;;
    --source) source_rev="$2"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$self"; exit 0 ;;
    *) echo "run_cpu.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$python" ]; then
  # Debian's interpreter (torch 1.13) where it has torch, else the python3 on PATH (a venv).
  for p in /usr/bin/python3 python3; do
    if "$p" -c 'import torch' 2>/dev/null; then python="$p"; break; fi
  done
  if [ -z "$python" ]; then
    echo "run_cpu.sh: no python3 with torch found; pass --python" >&2
    python=python3
  fi
fi
[ -n "$bin" ] || bin="$build_dir/bin/coil_cpu_bench"
stamp=$(date +%Y-%m-%dT%H%M%S)
[ -n "$out" ] || out="bench/results/cpu-$stamp.json"
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d /tmp/coil-run-cpu-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

common=(--threads "$threads" --runs "$runs" --warmup "$warmup" --scale "$scale")
[ -z "$workloads" ] || common+=(--workloads "$workloads")

merge=()
torch_common=()
# Later rounds reuse the first round's compiled Inductor kernels (the same C++ source, thread
# count included, hashes to the same entry; eager_bench.py keeps the FX graph cache off), which
# saves most of a round's time on the GPU host; report.py takes Inductor's compile times from
# the first round, whose cache was empty.
[ "$rounds" = 1 ] || torch_common=(--inductor-cache-dir "$tmp/inductor-cache")
if [ "$coil" = 1 ] && [ "$build" = 1 ]; then
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S . -B "$build_dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$build_dir" --target coil_cpu_bench -j"$(nproc)"
fi
if [ -n "$source_rev" ]; then
  rev="$source_rev"
else
  rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    rev="$rev+uncommitted changes"
  fi
fi
notes="source $rev${notes:+; $notes}"
for round in $(seq 1 "$rounds"); do
  [ "$rounds" = 1 ] || echo "== round $round of $rounds"
  if [ "$coil" = 1 ]; then
    echo "== coil ($bin)"
    # Exit status 1 means a result check failed: keep going, the table shows it.
    "$bin" "${common[@]}" --json "$tmp/coil.$round.json" || [ $? -eq 1 ]
    merge+=(--coil "$tmp/coil.$round.json")
  fi
  if [ "$torch" = 1 ]; then
    echo "== torch ($python)"
    "$python" bench/eager_bench.py "${common[@]}" "${torch_common[@]}" --backends "$backends" \
      --json "$tmp/torch.$round.json"
    merge+=(--torch "$tmp/torch.$round.json")
  fi
  if [ "$round" != "$rounds" ]; then
    # The rounds so far, in case the run is cut short (the device tool's time limit).
    "$python" bench/report.py "${merge[@]}" --out "$out" \
      --notes "$notes; partial: $round of $rounds rounds" >/dev/null
  fi
done
echo
"$python" bench/report.py "${merge[@]}" --out "$out" --notes "$notes"
