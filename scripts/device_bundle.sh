#!/usr/bin/env bash
# Packs what coil's binaries need on a machine without Debian's packages (the lent GPU host:
# Ubuntu 24.04, g++ 13, no network) into device-bundle/coil-bundle.tar.xz (git-ignored; name
# it in the device tool's `carry`). The bundle holds:
#   bin/      coil, coil_cpu_bench, coil_fuzz (built here, glibc 2.36: they run on newer glibc),
#             coil_gemm_bench and coil_unit_tests (bench/amx/run_device.sh: the AMX kernel's
#             tests and GEMM benchmark on the host, which has AMX)
#             (lib/ also holds libcoil_c.so, the C ABI that python/coil loads)
#   lib/      the shared libraries they link that a bare host lacks (fmt, xxhash, oneDNN,
#             OpenBLAS's OpenMP build and its Fortran runtime, SLEEF and coil's own
#             libcoil_vmath and libcoil_extern for generated kernels);
#             never libc/libstdc++/libgomp: the host's own (newer, compatible) ones are used,
#             so that generated kernels compiled there share one OpenMP runtime with coil
#   include/  headers generated kernels include beyond the embedded ones (sleef.h)
#   REVISION  the commit the binaries were built from
#   src/      the test program coil_unit_tests compiles at run time, from the same commit
# On the host: tar xJf coil-bundle.tar.xz -C DIR; export LD_LIBRARY_PATH=DIR/lib
# LIBRARY_PATH=DIR/lib CPATH=DIR/include (bench/run_gpu_host_cpu.sh does this). The build's
# lib/ directory baked into coil does not exist there, so generated kernels find
# libcoil_vmath.so through LIBRARY_PATH / LD_LIBRARY_PATH (runtime/isa.h: vmath_dir()).
#
#   bash scripts/device_bundle.sh        (after scripts/setup.sh has built build/)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${COIL_BUILD_DIR:-build}"
cmake --build "$build" --target coil coil_cpu_bench coil_fuzz coil_vmath coil_extern coil_c \
  coil_runtime coil_gpu_aot_run coil_gemm_bench coil_unit_tests \
  -j"$(nproc)" >/dev/null

stage=$(mktemp -d /tmp/coil-bundle-XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/include"
cp "$build/bin/coil" "$build/bin/coil_cpu_bench" "$build/bin/coil_fuzz" "$stage/bin/"
cp "$build/bin/coil_gemm_bench" "$build/tests/coil_unit_tests" "$stage/bin/"
# The source the binaries were built from, for the results' provenance (the device's copy of
# the tree may carry an older .git).
rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev+uncommitted"
echo "$rev" > "$stage/REVISION"
# The test program coil_unit_tests compiles at run time (GemmRuntime's gemm_program.cpp), from
# the same commit as the binary: bench/amx/run_device.sh points COIL_TEST_SOURCE_DIR here, so
# a tree newer than the bundle cannot pair new test code with old embedded headers (on
# 2026-12-06 that failed every GemmRuntime case on the AMX host).
mkdir -p "$stage/src/tests/unit/kernel_gemm"
cp tests/unit/kernel_gemm/gemm_program.cpp "$stage/src/tests/unit/kernel_gemm/"

# Libraries: every dependency of the binaries except the C/C++/OpenMP runtimes and the loader.
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libstdc\+\+|libgcc_s|libgomp|libpthread|libdl\.so|librt\.so)'
for b in "$stage"/bin/*; do
  ldd "$b" | awk '$3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r name path; do
  if ! echo "$name" | grep -Eq "$skip"; then cp -L "$path" "$stage/lib/$name"; fi
done
# SLEEF: generated kernels link -lsleef and include sleef.h.
sleef=$(readlink -f /usr/lib/x86_64-linux-gnu/libsleef.so)
cp "$sleef" "$stage/lib/"
ln -sf "$(basename "$sleef")" "$stage/lib/libsleef.so"
ln -sf "$(basename "$sleef")" "$stage/lib/libsleef.so.3"
cp /usr/include/x86_64-linux-gnu/sleef.h "$stage/include/"
# libcoil_vmath (Eigen's vector erf, the GEMM loops): AVX-512/AVX2 kernels link -lcoil_vmath.
# libcoil_extern (oneDNN/OpenBLAS calls): modules with extern kernels link -lcoil_extern (the
# loop above copied it already, as a dependency of coil, with the OpenBLAS build it loads).
cp "$build/lib/libcoil_vmath.so" "$build/lib/libcoil_extern.so" "$stage/lib/"
# libcoil_c (the C ABI, include/coil/coil_c.h): what python/coil loads with ctypes there
# (COIL_LIBRARY=DIR/lib). Its own dependencies are coil's, copied above.
cp "$build/lib/libcoil_c.so" "$stage/lib/"
# libcoil_runtime (coil/runtime.h: exported models, the CPU's and the GPU's) and the program that
# runs a GPU export from C++ with it alone (bench/gpu/aot.sh).
cp "$build/lib/libcoil_runtime.so" "$stage/lib/"
cp "$build/bin/coil_gpu_aot_run" "$stage/bin/"

mkdir -p device-bundle
tar cf - -C "$stage" . | xz -T"$(nproc)" -6 > device-bundle/coil-bundle.tar.xz
du -h device-bundle/coil-bundle.tar.xz
