#!/usr/bin/env bash
# coil as an installed package (docs/deploy.md, "Installing coil"; ctest `install_package`):
#   1. `cmake --install` of the build tree into a fresh prefix;
#   2. a project outside the tree (tests/install/consumer) configures with find_package(coil
#      CONFIG) against that prefix alone, builds a C++ program on coil::coil and a C program on
#      coil::c, and both run (the C++ one compiles a graph and checks its values);
#   3. the C++ program again in a new process with no compiler on PATH: the whole-graph cache
#      serves it (cache_hit=1);
#   3b. a deployment: the C++ program exports a model with weights (`coil export`'s format), and
#      a program linked with coil::runtime alone (no libcoil.so) loads and runs it with no
#      compiler on PATH and no cache directory; `coil run DIR` runs it too;
#   4. the same C++ source built with pkg-config's flags (coil.pc) instead of CMake;
#   5. the installed bin/coil runs `coil demo` from the prefix.
#   tests/install/test_install.sh BUILD_DIR WORK_DIR
set -euo pipefail
build=$(realpath "$1")
work="$2"
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work"
work=$(realpath "$work")
prefix="$work/prefix"
export COIL_CACHE_DIR="$work/cache"
unset COIL_LIBRARY COIL_VMATH_DIR

step() { echo "== $*"; }
step "install into $prefix"
cmake --install "$build" --prefix "$prefix" >"$work/install.log"
for f in bin/coil lib/libcoil.so lib/libcoil_c.so lib/libcoil_runtime.so lib/libcoil_extern.so \
         lib/libcoil_vmath.so include/coil/coil.h include/coil/coil_c.h include/coil/runtime.h \
         lib/cmake/coil/coilConfig.cmake lib/pkgconfig/coil.pc lib/pkgconfig/coil_c.pc \
         lib/pkgconfig/coil_runtime.pc; do
  [ -e "$prefix/$f" ] || { echo "FAIL: $f not installed"; exit 1; }
done
# The public headers include only the standard library and each other.
if grep -h '#include "' "$prefix"/include/coil/*.h | grep -v '"coil/'; then
  echo "FAIL: a public header includes a file outside include/coil"; exit 1
fi

step "find_package(coil) from an outside project"
cmake -S "$here/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCOIL_C_SOURCE="$here/../unit/capi_c_compile.c" -DCMAKE_BUILD_TYPE=Release >"$work/configure.log"
cmake --build "$work/consumer" >"$work/build.log"
# It links the installed libraries, not the build tree's. (ldd's output is kept before grep reads
# it: with pipefail, `ldd | grep -q` fails when grep exits before ldd has written everything.)
libs=$(ldd "$work/consumer/consumer")
grep -q "$prefix/lib/libcoil.so" <<<"$libs" || {
  echo "FAIL: consumer does not load $prefix/lib/libcoil.so"; ldd "$work/consumer/consumer"; exit 1; }
out=$("$work/consumer/consumer" "$work/export")
echo "$out"
[ "$out" = "ok cache_hit=0" ] || { echo "FAIL: first run: $out"; exit 1; }
"$work/consumer/consumer_c"

step "a new process with no compiler on PATH"
mkdir -p "$work/empty-bin"
out=$(env PATH="$work/empty-bin" CXX= "$work/consumer/consumer")
echo "$out"
[ "$out" = "ok cache_hit=1" ] || { echo "FAIL: no-compiler run: $out"; exit 1; }

step "a deployment: coil::runtime alone runs the export, no compiler, no cache"
libs=$(ldd "$work/consumer/consumer_runtime")
grep -q "$prefix/lib/libcoil_runtime.so" <<<"$libs" || {
  echo "FAIL: consumer_runtime does not load the installed libcoil_runtime.so"; exit 1; }
if grep -qE "libcoil(_c)?\.so" <<<"$libs"; then
  echo "FAIL: consumer_runtime loads the compiler library"; ldd "$work/consumer/consumer_runtime"
  exit 1
fi
ls -l "$work/export"
out=$(env PATH="$work/empty-bin" CXX= COIL_CACHE_DIR="$work/no-cache" \
      "$work/consumer/consumer_runtime" "$work/export")
echo "$out"
case "$out" in ok\ kernels=*) ;; *) echo "FAIL: runtime run: $out"; exit 1 ;; esac
[ ! -e "$work/no-cache" ] || { echo "FAIL: the runtime wrote a cache directory"; exit 1; }
env PATH="$work/empty-bin" CXX= "$prefix/bin/coil" run "$work/export" --output-dir "$work/run-out"
[ -s "$work/run-out/y.npy" ] || { echo "FAIL: coil run DIR wrote no y.npy"; exit 1; }

step "pkg-config"
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs coil)
echo "coil.pc: $flags"
# shellcheck disable=SC2086
g++ -O1 "$here/consumer/consumer.cpp" $flags -o "$work/consumer_pc"
out=$("$work/consumer_pc")
[ "$out" = "ok cache_hit=1" ] || { echo "FAIL: pkg-config build: $out"; exit 1; }
echo "$out"
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs coil_runtime)
echo "coil_runtime.pc: $flags"
# shellcheck disable=SC2086
g++ -O1 -I"$here/consumer" "$here/consumer/consumer_runtime.cpp" $flags -o "$work/runtime_pc"
out=$("$work/runtime_pc" "$work/export")
case "$out" in ok\ kernels=*) echo "$out" ;; *) echo "FAIL: pkg-config runtime build: $out"; exit 1 ;; esac

step "the installed coil binary"
libs=$(ldd "$prefix/bin/coil")
grep -q "not found" <<<"$libs" && { echo "FAIL: bin/coil misses a library"; exit 1; }
"$prefix/bin/coil" demo --runs 1 >"$work/demo.log" 2>&1 || { cat "$work/demo.log"; exit 1; }
tail -n 3 "$work/demo.log"
echo "install_package: ok"
