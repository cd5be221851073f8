#!/usr/bin/env bash
# The sanitizer lanes (docs/debugging.md, "Sanitizers"): builds coil, its tests and the kernels
# it generates with sanitizers (-DCOIL_SANITIZE, cmake/sanitize.cmake) in a build directory of
# their own, then runs what each lane checks. Packages: those of scripts/setup.sh (gcc's
# libasan, libubsan and libtsan come with g++).
#
#   scripts/sanitize.sh asan    build-asan/, COIL_SANITIZE=address,undefined: the ctest labels
#                               unit, error, golden and concurrency (not slow), then a short
#                               fuzz run (tests/fuzz/run.sh) with the sanitized coil_fuzz
#   scripts/sanitize.sh tsan    build-tsan/, COIL_SANITIZE=thread: threads compiling and running
#                               one model at once (label concurrency) and the unit tests of
#                               concurrent threads and processes (code cache, compile cache,
#                               interner, C ABI), kernels at 1 OpenMP thread; then the
#                               concurrency label again at 2 OpenMP threads
#   scripts/sanitize.sh all     both, asan first
#
# Options: --jobs N (ctest and build parallelism; default nproc), --fuzz-graphs N (default 100),
# --fuzz-seed S (default 1), --no-fuzz. The build type is RelWithDebInfo (-O2 -g: whole stacks
# with lines in reports). Exit status: 0 only when every step of every lane passed.
#
# Not in the lanes: the Python tests of label unit, python_runtime (pytest on python/coil_runtime:
# pure Python, no coil code runs) and torch_frontend (python/coil loads libcoil_c.so with ctypes:
# an unsanitized interpreter cannot load a sanitized library, the runtime must come first, short
# of LD_PRELOAD=libasan.so with the interpreter's own leaks reported); the correctness and
# conformance labels (~1000 more compiles: too slow sanitized on 2 cores, run them by hand with
# ctest --test-dir build-asan -L correctness after building their binaries).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 2
}

lanes=()
jobs=$(nproc)
fuzz_graphs=100
fuzz_seed=1
fuzz=1
while [ $# -gt 0 ]; do
  case "$1" in
    asan | tsan) lanes+=("$1") ;;
    all) lanes+=(asan tsan) ;;
    --jobs) jobs=$2; shift ;;
    --fuzz-graphs) fuzz_graphs=$2; shift ;;
    --fuzz-seed) fuzz_seed=$2; shift ;;
    --no-fuzz) fuzz=0 ;;
    -h | --help) usage ;;
    *) echo "sanitize.sh: unknown argument '$1'" >&2; usage ;;
  esac
  shift
done
[ ${#lanes[@]} -gt 0 ] || usage

# Sanitizer run-time options. Ours first: a value the caller already set in the environment
# comes later and wins.
#   detect_leaks=1            LeakSanitizer at exit (the default on x86-64 Linux; explicit)
#   abort_on_error=1          a report ends in abort() (SIGABRT), which every runner sees as a crash
#   allocator_may_return_null=1
#                             a failed allocation returns null (malloc, nothrow new) instead of
#                             ending the process: coil reports one as a coil::Error (Tensor::empty;
#                             UserErrors.OutOfMemoryIsAUserError asks for terabytes)
#   check_initialization_order=1, strict_init_order=1
#                             static initializers reading globals of not yet initialized files
#   print_stacktrace=1        UBSan: the stack of each report (off by default)
#   halt_on_error=1           stop at the first report (UBSan and TSan; the build's
#                             -fno-sanitize-recover=undefined makes UBSan's fatal anyway)
#   second_deadlock_stack=1   TSan: both stacks of a lock-order inversion
#   intercept_tls_get_addr=0  ASan does not track dynamic-TLS blocks through __tls_get_addr. Works
#                             around a crash of LeakSanitizer at exit ("Tracer caught signal 11"
#                             after "DTLS ... at 0x000100000bbf-0x001100001cc1" with verbosity=1)
#                             in tests that load modules with thread_local variables (the matmul
#                             scratch slot of coil_gemm_driver.h): gcc 12's runtime takes a block
#                             whose address is 16 bytes past a 4 KiB boundary for one with a
#                             glibc < 2.25 header and reads a bogus range from before it (LLVM's
#                             runtime did so up to LLVM 16). LSan still scans each thread's stack
#                             and static TLS; a block referenced only from a dlopen()ed module's
#                             thread_local could be reported as leaked (none is)
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allocator_may_return_null=1:check_initialization_order=1:strict_init_order=1:intercept_tls_get_addr=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export LSAN_OPTIONS="suppressions=$ROOT/tests/sanitize/lsan.supp:print_suppressions=0${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
# TSan's suppression file differs between the tsan lane's passes (run_tsan).
TSAN_BASE="halt_on_error=1:second_deadlock_stack=1:print_suppressions=0"
TSAN_CALLER="${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
# Idle OpenMP threads sleep instead of spinning: the tests share 2 cores, and sanitized code is
# slow enough without spinners.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}"

summary=()
failed=0
last_rc=0
step() {  # step NAME COMMAND...: runs it, times it, records the result
  local name=$1 start=$SECONDS rc=0
  shift
  echo "==> $name: $*"
  "$@" || rc=$?
  local line
  line=$(printf '%-44s %s (%d s)' "$name" "$([ $rc = 0 ] && echo passed || echo "FAILED (exit $rc)")" \
         $((SECONDS - start)))
  echo "==> $line"
  summary+=("$line")
  last_rc=$rc
  [ $rc = 0 ] || failed=1
}

configure_and_build() {  # DIR SANITIZERS TARGETS...
  local dir=$1 sanitize=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOIL_SANITIZE="$sanitize" \
    >/dev/null
  cmake --build "$dir" -j"$jobs" --target "$@"
}

ctest_lane() {  # DIR CTEST-ARGS...
  local dir=$1
  shift
  ctest --test-dir "$dir" --output-on-failure -j "$jobs" --timeout 1800 -LE slow "$@"
}

tsan_ctest() {  # OMP-THREADS SUPPRESSIONS DIR CTEST-ARGS...
  local threads=$1 supp=$2
  shift 2
  OMP_NUM_THREADS=$threads TSAN_OPTIONS="$TSAN_BASE:suppressions=$ROOT/$supp$TSAN_CALLER" \
    ctest_lane "$@"
}

run_asan() {
  local dir=build-asan start=$SECONDS
  step "asan: build" configure_and_build "$dir" address,undefined \
    coil coil_fuzz coil_unit_tests coil_error_tests coil_golden_tests coil_concurrency_tests \
    coil_capi_c_compile
  [ $last_rc = 0 ] || return 0
  step "asan: ctest unit|error|golden|concurrency" \
    ctest_lane "$dir" -L '^(unit|error|golden|concurrency)$' -E '^(python_runtime|torch_frontend)$'
  if [ $fuzz = 1 ]; then
    # The regression cases of tests/fuzz/seeds/ and N generated graphs, batched (one compile per
    # 25 graphs); sanitized compiles are slower, hence the long per-batch timeout.
    step "asan: fuzz ($fuzz_graphs graphs, seed $fuzz_seed)" \
      env COIL_BUILD_DIR="$dir" tests/fuzz/run.sh --graphs "$fuzz_graphs" --seed "$fuzz_seed" \
      --jobs "$jobs" --batch 25 --no-shrink --timeout 900 --graphs-dir tests/fuzz/seeds \
      --out "$dir/fuzz-out"
  fi
  summary+=("$(printf '%-44s %d s' "asan: lane wall time" $((SECONDS - start)))")
}

run_tsan() {
  local dir=build-tsan start=$SECONDS
  step "tsan: build" configure_and_build "$dir" thread coil coil_unit_tests coil_concurrency_tests
  [ $last_rc = 0 ] || return 0
  # First pass, kernels at one OpenMP thread: a parallel region then runs on the calling thread
  # alone, so TSan sees every access of coil's threads, kernels included, with nothing of
  # libgomp's (uninstrumented) synchronization to miss.
  step "tsan: ctest concurrency (1 OpenMP thread)" \
    tsan_ctest 1 tests/sanitize/tsan.supp "$dir" -L '^concurrency$'
  step "tsan: ctest unit threads/processes (1 OpenMP thread)" \
    tsan_ctest 1 tests/sanitize/tsan.supp "$dir" -L '^unit$' -R 'Concurrent|ThreadSafe|PerThread'
  # Second pass, 2 OpenMP threads: kernels on libgomp's pool under several application threads
  # at once; reports with a libgomp frame are suppressed (tests/sanitize/tsan-openmp.supp: its
  # synchronization is invisible to TSan), everything else is still checked.
  cat tests/sanitize/tsan.supp tests/sanitize/tsan-openmp.supp >"$dir/tsan-openmp.supp"
  step "tsan: ctest concurrency (2 OpenMP threads)" \
    tsan_ctest 2 "$dir/tsan-openmp.supp" "$dir" -L '^concurrency$'
  summary+=("$(printf '%-44s %d s' "tsan: lane wall time" $((SECONDS - start)))")
}

for lane in "${lanes[@]}"; do
  "run_$lane"
done
echo
echo "sanitize.sh summary:"
printf '  %s\n' "${summary[@]}"
exit $failed
