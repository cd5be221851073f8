#!/usr/bin/env bash
# A long coil_fuzz run on the lent GPU machine's host CPU (16 cores), in one device call:
# unpacks the bundle made here by scripts/device_bundle.sh (it holds coil_fuzz), then runs
# SECONDS seconds of seed SEED with a job per core, in batches of 25 graphs. Shrunk failures,
# failures.tsv and the summary land in OUT_DIR (default $OUT).
#
#   (here)   bash scripts/device_bundle.sh
#   (device) bash tests/fuzz/run_gpu_host.sh SEED [SECONDS] [OUT_DIR]     # carry: device-bundle
set -euo pipefail
cd "$(dirname "$0")/../.."
seed="${1:?seed}"
seconds="${2:-480}"
out_dir="${3:-${OUT:-/tmp/fuzz-gpu-host}}"
bundle=/tmp/coil-bundle
rm -rf "$bundle" && mkdir -p "$bundle"
tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$bundle/lib" CPATH="$bundle/include"
mkdir -p "$out_dir"
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(g++ --version | head -1), bundle $(cat "$bundle/REVISION")"
"$bundle/bin/coil_fuzz" --seed "$seed" --graphs 1000000 --jobs "$(nproc)" --batch 25 \
  --time-limit "$seconds" --out "$out_dir" -q 2>&1 | tee "$out_dir/summary.txt"
