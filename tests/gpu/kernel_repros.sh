#!/usr/bin/env bash
# Triton kernel repros (docs/debugging.md, "Kernel repros") on the GPU: each kernels/*/kernel.py
# of the debug directories of the Triton golden graphs runs alone (torch and triton only; PYTHONPATH
# cleared so that no coil package can be imported) and prints its time.
#
#   bash tests/gpu/kernel_repros.sh prepare [DIR]   # here: coil compile --device cuda --debug-dir
#   bash tests/gpu/kernel_repros.sh run [DIR]       # on the GPU machine (carry DIR)
#
# DIR defaults to build/gpu-kernel-repros. `run` prints PASS/FAIL per kernel and a summary, and
# exits 1 when any kernel.py fails.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
mode="${1:-}"
dir="${2:-build/gpu-kernel-repros}"
case "$mode" in
  prepare)
    rm -rf "$dir" && mkdir -p "$dir"
    coil="${COIL:-build/bin/coil}"
    for m in tests/golden/triton/*.coil; do
      name=$(basename "$m" .coil)
      "$coil" compile "$m" --device cuda -o "$dir/out-$name" --debug-dir "$dir/$name" > /dev/null ||
        { echo "prepare: $name failed"; exit 1; }
      rm -rf "$dir/out-$name"
    done
    echo "prepared $(ls -d "$dir"/*/graph-*/kernels/* | wc -l) kernel repros in $dir"
    ;;
  run)
    pass=0 fail=0
    for py in "$dir"/*/graph-*/kernels/*/kernel.py; do
      k=$(basename "$(dirname "$py")")
      m=$(basename "$(dirname "$(dirname "$(dirname "$(dirname "$py")")")")")
      if out=$(cd "$(dirname "$py")" && env -u PYTHONPATH timeout 120 python3 kernel.py --iters 20 2>&1); then
        echo "PASS $m/$out"
        pass=$((pass + 1))
      else
        echo "FAIL $m/$k: $(echo "$out" | tail -3)"
        fail=$((fail + 1))
      fi
    done
    echo "kernel repros: $pass passed, $fail failed"
    [ "$fail" -eq 0 ]
    ;;
  *)
    echo "usage: $0 prepare|run [DIR]" >&2
    exit 2
    ;;
esac
