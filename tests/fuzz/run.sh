#!/usr/bin/env bash
# Runs the differential fuzzer (tests/fuzz/README.md) and prints its summary.
#   tests/fuzz/run.sh --graphs N --seed S [--jobs J] [--out DIR] [other coil_fuzz options]
# Builds build/bin/coil_fuzz if it is missing (nothing else). Each run gets its own code cache
# under /tmp, deleted afterwards (coil_fuzz makes it), so the user's cache is never touched.
# Exit status: 0 only when no graph failed.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR="${COIL_BUILD_DIR:-build}"
FUZZ="$BUILD_DIR/bin/coil_fuzz"
if [ ! -x "$FUZZ" ]; then
  [ -f "$BUILD_DIR/build.ninja" ] || cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD_DIR" --target coil_fuzz -j2
fi
# Kernels of parallel children share the cores: idle OpenMP threads sleep instead of spinning.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"
args=("$@")
has_out=0
for a in "${args[@]}"; do [ "$a" = "--out" ] && has_out=1; done
[ $has_out = 1 ] || args+=(--out "$BUILD_DIR/fuzz-out")
exec "$FUZZ" "${args[@]}"
