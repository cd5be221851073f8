#!/usr/bin/env bash
# Sets everything up (Debian packages, build) and runs every test (CTest: GoogleTest suites,
# golden files, clang-format). Tests labeled `slow` run only with COIL_SLOW_TESTS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
args=(--test-dir build --output-on-failure -j "$(nproc)" --timeout 600)
if [ "${COIL_SLOW_TESTS:-0}" != "1" ]; then args+=(-LE slow); fi
ctest "${args[@]}"
