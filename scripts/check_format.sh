#!/usr/bin/env bash
# Fails when a C++ (or C) source under include/ src/ tools/ tests/ bench/ is not clang-formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
CF=$(command -v clang-format-14 || command -v clang-format)
files=$(git ls-files -co --exclude-standard -- 'include/*.h' 'src/*.h' 'src/*.cpp' 'tools/*.cpp' \
        'tests/*.h' 'tests/*.cpp' 'tests/*.c' 'bench/*.cpp' 'bench/*.h' | grep -v -e '^tests/golden/data/' -e '^tests/golden/dynamic/' || true)
# One clang-format per batch of files, two batches at a time (one process per file took a
# minute of the test run); only when a batch fails is each of its files checked alone, to
# name it.
check_one() {
  if ! "$CF" --dry-run --Werror "$1" >/dev/null 2>&1; then
    echo "not formatted: $1  (run: $CF -i $1)"
    return 1
  fi
}
check_batch() {
  "$CF" --dry-run --Werror "$@" >/dev/null 2>&1 && return 0
  local bad=0
  for f in "$@"; do check_one "$f" || bad=1; done
  return $bad
}
export CF
export -f check_one check_batch
existing=$(for f in $files; do [ -f "$f" ] && echo "$f"; done)
[ -z "$existing" ] && exit 0
echo "$existing" | xargs -n 40 -P 2 bash -c 'check_batch "$@"' _
