#!/usr/bin/env bash
# Builds orientation.cpp against coil's template headers and runs it at THREADS (default
# "1 2"), ROUNDS times each (default 3). From the repository root:
#   bash bench/experiments/conv1x1_orientation/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
inc="${INC:-$here/../../../src/kernels}"
isa=$(grep -q avx512f /proc/cpuinfo && echo -DCOIL_CPU_AVX512 || echo -DCOIL_CPU_AVX2)
g++ -O3 -march=native -fopenmp $isa -I"$inc" "$here/orientation.cpp" -o /tmp/coil_conv1x1_orientation
uptime; grep -m1 "model name" /proc/cpuinfo
for t in ${THREADS:-1 2}; do
  for r in $(seq "${ROUNDS:-3}"); do
    echo "== $t thread(s), round $r"; OMP_NUM_THREADS=$t /tmp/coil_conv1x1_orientation
  done
done
