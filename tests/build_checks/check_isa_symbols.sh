#!/usr/bin/env bash
# libcoil_vmath links kernels compiled for several ISAs (avx512, avx2, ...) into one library. An
# inline function of coil's headers that two of its objects emit out of line is a weak symbol,
# and the linker keeps one copy for both: an avx2 caller of an avx512 copy runs 16-lane code on
# its 8-lane buffers (this happened: coil::transpose_tile overran the avx2 attention kernel's
# scratch) or AVX-512 instructions on a CPU without them. coil's vector and kernel headers put
# their code in namespaces named after the ISA (coil_vec_base.h COIL_VEC_ISA, COIL_GEMM_ABI,
# COIL_ATTENTION_ABI); this check fails when some coil:: weak symbol is still defined by two of
# the library's objects.
#
#   check_isa_symbols.sh OBJECT...      (CTest passes $<TARGET_OBJECTS:coil_vmath>)
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 OBJECT..."; exit 2; }
dups=$(for o in "$@"; do
         # Weak (W, V) and unique (u) definitions, demangled, one line per object and symbol.
         nm -C --defined-only "$o" | awk '$2 ~ /^[WVu]$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }' |
           { grep '^coil::' || true; } | sort -u | sed "s|^|$(basename "$o")\t|"
       done | awk -F'\t' '{ n[$2]++; objs[$2] = objs[$2] " " $1 } END { for (s in n) if (n[s] > 1) print s " :" objs[s] }')
if [ -n "$dups" ]; then
  echo "coil symbols defined by several objects of one multi-ISA library (put them in the ISA's namespace):"
  echo "$dups"
  exit 1
fi
echo "no coil:: weak symbol is shared between the $# objects"
