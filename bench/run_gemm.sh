#!/usr/bin/env bash
# The matmul benchmark (docs/benchmarks.md, "Matmul"): builds coil_gemm_bench, runs
# bench/eager_gemm.py (PyTorch eager) and then coil_gemm_bench (peaks, oneDNN, OpenBLAS, coil),
# which prints one table with both and writes bench/results/gemm-<date>.json.
#
#   bash bench/run_gemm.sh [options]
#     --threads LIST     thread counts (default: $OMP_NUM_THREADS, else 1,2)
#     --runs N           timed runs per measurement, median reported (default 10, >= 10)
#     --warmup N         untimed runs first (default 2)
#     --sizes LIST       square GEMM sizes (default 256,512,1024,2048)
#     --python PATH      Python with torch (default: /usr/bin/python3 if it has torch, else python3)
#     --build-dir DIR    CMake build directory (default $COIL_BUILD_DIR or build)
#     --no-build         use DIR/bin/coil_gemm_bench as it is
#     --skip-torch       no PyTorch rows
#     --skip-coil        no coil rows (libraries and peaks only)
#     --out FILE         results (default bench/results/gemm-<date>.json)
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/.."

threads="${OMP_NUM_THREADS:-1,2}" runs=10 warmup=2 sizes=256,512,1024,2048 python=""
build_dir="${COIL_BUILD_DIR:-build}" build=1 torch=1 coil_flag=() out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --sizes) sizes="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --build-dir) build_dir="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --skip-torch) torch=0; shift ;;
    --skip-coil) coil_flag=(--skip-coil); shift ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$self"; exit 0 ;;
    *) echo "run_gemm.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "$python" ]; then
  for p in /usr/bin/python3 python3; do
    if "$p" -c 'import torch' 2>/dev/null; then python="$p"; break; fi
  done
fi
[ -n "$out" ] || out="bench/results/gemm-$(date +%Y-%m-%dT%H%M%S).json"
mkdir -p "$(dirname "$out")"
tmp=$(mktemp -d /tmp/coil-run-gemm-XXXXXX)
trap 'rm -rf "$tmp"' EXIT

if [ "$build" = 1 ]; then
  if [ ! -f "$build_dir/CMakeCache.txt" ]; then
    gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S . -B "$build_dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  cmake --build "$build_dir" --target coil_gemm_bench -j"$(nproc)"
fi
torch_flag=()
if [ "$torch" = 1 ]; then
  if [ -z "$python" ]; then
    echo "run_gemm.sh: no python3 with torch found; pass --python or --skip-torch" >&2
    exit 2
  fi
  echo "== torch ($python)"
  "$python" bench/eager_gemm.py --threads "$threads" --runs "$runs" --warmup "$warmup" \
    --sizes "$sizes" --json "$tmp/torch.json"
  torch_flag=(--torch "$tmp/torch.json")
fi
echo "== coil_gemm_bench"
"$build_dir/bin/coil_gemm_bench" --threads "$threads" --runs "$runs" --warmup "$warmup" \
  --sizes "$sizes" "${coil_flag[@]}" "${torch_flag[@]}" --json "$out"
