#!/usr/bin/env bash
# Builds gemv.cpp (oneDNN from the system, or from LIB, e.g. the device bundle's lib) and runs it
# at THREADS (default "1 2"), ROUNDS times each (default 2). From the repository root:
#   bash bench/experiments/gemv/run.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=${LIB:+-L$LIB -Wl,-rpath,$LIB}
g++ -O3 -march=native -fopenmp "$here/gemv.cpp" -o /tmp/coil_gemv $lib -l:libdnnl.so.2
uptime; grep -m1 "model name" /proc/cpuinfo
for t in ${THREADS:-1 2}; do
  for r in $(seq "${ROUNDS:-2}"); do
    echo "== $t thread(s), round $r"; OMP_NUM_THREADS=$t OMP_PROC_BIND=${BIND:-false} /tmp/coil_gemv
  done
done
