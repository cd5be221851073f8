#!/usr/bin/env bash
# Sets everything up (Debian packages, build) and runs every test (CTest: GoogleTest suites,
# golden files, clang-format). Tests labeled `slow` run only with COIL_SLOW_TESTS=1.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Freed memory stays in each test process instead of going back to the kernel and
# page-faulting in again (tests/support/test_main.cpp says why; about 40% of a cold run's time
# was system time). The GoogleTest binaries set this themselves; this reaches Python and the CLI.
export GLIBC_TUNABLES="glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824${GLIBC_TUNABLES:+:$GLIBC_TUNABLES}"
args=(--test-dir build --output-on-failure -j "$(nproc)" --timeout 600)
if [ "${COIL_SLOW_TESTS:-0}" != "1" ]; then args+=(-LE slow); fi
ctest "${args[@]}"
