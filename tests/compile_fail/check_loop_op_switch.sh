#!/usr/bin/env bash
# Usage: check_loop_op_switch.sh <c++ compiler> <source dir> <compile options...>
# A LoopOp switch missing an op fails to compile under coil's options; a complete one compiles.
set -u
cxx=$1
src=$2
shift 2
file="$src/tests/compile_fail/loop_op_switch.cpp"
if ! "$cxx" -std=c++20 -fsyntax-only "$@" -I"$src/src" -DCOIL_ALL_OPS "$file"; then
  echo "FAIL: a switch naming every LoopOp does not compile"
  exit 1
fi
if out=$("$cxx" -std=c++20 -fsyntax-only "$@" -I"$src/src" "$file" 2>&1); then
  echo "FAIL: a switch missing LoopOp::reduction and LoopOp::store compiled"
  exit 1
fi
if ! grep -q "not handled in switch" <<<"$out"; then
  echo "FAIL: expected a -Wswitch error, got:"
  echo "$out"
  exit 1
fi
echo "ok: a missing LoopOp case is a compile error"
