#!/usr/bin/env bash
# f's kernel, size-specialized against size-generic variants, on this machine's g++ (the GPU
# host: g++ 13), 1 and 16 threads. INC: the directory holding coil_vec.h (the bundle's include).
set -u
VARIANTS="${VARIANTS:-spec generic_before generic generic_rows_opaque}"
cd "$(dirname "$0")"
INC="${INC:?set INC to the kernel headers}"
FL="-O3 -DNDEBUG -shared -fPIC -std=c++17 -march=native -fopenmp -ffp-contract=off -fno-math-errno -fno-trapping-math -Wno-unused-variable -Wno-unknown-pragmas -fno-tree-sink -mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma -mprefer-vector-width=512 -mavx512bf16 -DCOIL_CPU_AVX512 -I$INC"
g++ --version | head -1
g++ -O2 -o /tmp/time_f time_f.cpp -ldl
for v in $VARIANTS; do
  g++ $FL -o /tmp/f_$v.so $v.cpp || exit 1
  echo "$v: rsp refs $(g++ ${FL/-shared/} -S -o - $v.cpp | awk '/_omp_fn.0:/{f=1} f&&/\.size/{f=0} f' | grep -c rsp)"
done
for t in ${THREADS:-1 16}; do
  for round in $(seq ${ROUNDS:-3}); do
    for v in $VARIANTS; do
      g=1; [ $v = spec ] && g=0
      OMP_NUM_THREADS=$t /tmp/time_f /tmp/f_$v.so $g 30 | sed "s/^/threads $t huge ${HUGE:-0}: /"
    done
  done
done
