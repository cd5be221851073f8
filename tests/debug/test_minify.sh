#!/bin/bash
# `coil minify` finds a bug injected into generated code (COIL_TESTING_INJECT_BUG): for each kind
# of failure (a wrong result, a compile error, a crash), the 64-node model chain64.coil shrinks
# to a repro of at most 3 nodes that holds the relu, the repro's own `coil check` line fails the
# same way with the bug and passes without it, and a model that does not fail is reported so.
#   test_minify.sh COIL_BINARY WORK_DIR
set -euo pipefail
coil="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work" && mkdir -p "$work"
export COIL_CACHE_DIR="$work/cache"

fail() { echo "test_minify: FAIL: $*" >&2; exit 1; }

for bug in relu relu_compile_error relu_crash; do
  repro="$work/$bug.coil"
  COIL_TESTING_INJECT_BUG=$bug "$coil" minify "$here/chain64.coil" --size s0=7 -o "$repro" \
    > "$work/$bug.log" 2>&1 || { cat "$work/$bug.log"; fail "$bug: coil minify exited $?"; }
  nodes=$(grep -v -E '^(#|input |output |$)' "$repro" | wc -l)
  [ "$nodes" -le 3 ] || { cat "$repro"; fail "$bug: $nodes nodes left (want <= 3)"; }
  grep -q "= relu(" "$repro" || { cat "$repro"; fail "$bug: the repro lost the relu"; }
  # The repro's header names its failure and the line that reproduces it.
  want=$(sed -n 's/^# failure: \([a-z-]*\):.*/\1/p' "$repro")
  case "$bug" in
    relu) [ "$want" = wrong ] ;;
    relu_compile_error) [ "$want" = compile-error ] ;;
    relu_crash) [ "$want" = crash ] ;;
  esac || fail "$bug: the repro's failure is '$want'"
  line=$(sed -n 's/^# reproduce: //p' "$repro")
  cmd=${line/ coil / $coil }
  if env $cmd > "$work/$bug.check.log" 2>&1; then
    cat "$work/$bug.check.log"; fail "$bug: the reproduce line passed: $line"
  fi
  nobug=${cmd#COIL_TESTING_INJECT_BUG=$bug }
  env $nobug > "$work/$bug.nobug.log" 2>&1 || {
    cat "$work/$bug.nobug.log"; fail "$bug: without the bug the repro fails: $nobug"; }
  echo "test_minify: $bug: $(grep '^# coil minify' "$repro" | sed 's/^# //')"
done

# A model that passes: nothing to minify, exit status 1, no repro written.
set +e
"$coil" minify "$here/chain64.coil" --size s0=7 -o "$work/none.coil" > "$work/none.log" 2>&1
rc=$?
set -e
[ $rc = 1 ] || { cat "$work/none.log"; fail "a passing model: exit $rc (want 1)"; }
grep -q "nothing to minify" "$work/none.log" || fail "a passing model: no 'nothing to minify'"
[ ! -e "$work/none.coil" ] || fail "a passing model: a repro was written"
echo "test_minify: passed"
