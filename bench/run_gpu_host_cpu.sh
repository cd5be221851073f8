#!/usr/bin/env bash
# The CPU benchmark suite on the lent GPU machine's host CPU (16 cores, torch 2.11 with
# Inductor), in one call: unpacks the bundle made here by scripts/device_bundle.sh, then runs
# bench/run_cpu.sh with the bundled coil_cpu_bench and the host's python3 (eager and
# torch.compile/Inductor's CPU backend in the same process), at 2 and 16 threads.
#
#   (here)   bash scripts/device_bundle.sh
#   (device) bash bench/run_gpu_host_cpu.sh [OUT_DIR] [ROUNDS]    # carry: device-bundle
# Results: OUT_DIR/cpu-gpuhost.json (default $OUT, else bench/results/). ROUNDS (default 4):
# coil and torch alternate that many times, each cell the median round's. The first round
# takes ~150 s, most of it Inductor's ISA probe and compiles; later ones ~100 s (they reuse the
# first round's Inductor kernels, but every process repeats the 40-60 s probe): 4 rounds fit
# the device tool's 600 s per command (454 and 469 s measured).
set -euo pipefail
cd "$(dirname "$0")/.."
out_dir="${1:-${OUT:-bench/results}}"
rounds="${2:-4}"
bundle=/tmp/coil-bundle
rm -rf "$bundle" && mkdir -p "$bundle"
tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$bundle/lib" CPATH="$bundle/include"
export COIL_CACHE_DIR=/tmp/coil-cache
echo "== host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
"$bundle/bin/coil" demo --runs 5 | tail -3 || echo "coil demo failed (see above)"
mkdir -p "$out_dir"
bash bench/run_cpu.sh --threads 2,16 --rounds "$rounds" --coil-bench-bin "$bundle/bin/coil_cpu_bench" \
  --python python3 --out "$out_dir/cpu-gpuhost.json" \
  --source "$(cat "$bundle/REVISION" 2>/dev/null || echo unknown) (the bundle)" \
  --notes "GPU host CPU: $(nproc) cores"
