#!/usr/bin/env bash
# Fails when a C++ (or C) source under include/ src/ tools/ tests/ bench/ is not clang-formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
CF=$(command -v clang-format-14 || command -v clang-format)
files=$(git ls-files -co --exclude-standard -- 'include/*.h' 'src/*.h' 'src/*.cpp' 'tools/*.cpp' \
        'tests/*.h' 'tests/*.cpp' 'tests/*.c' 'bench/*.cpp' 'bench/*.h' | grep -v -e '^tests/golden/data/' -e '^tests/golden/dynamic/' || true)
bad=0
for f in $files; do
  [ -f "$f" ] || continue
  if ! "$CF" --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f  (run: $CF -i $f)"
    bad=1
  fi
done
exit $bad
