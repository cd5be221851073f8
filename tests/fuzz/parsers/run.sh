#!/usr/bin/env bash
# Runs one libFuzzer target of the parsers for SECONDS with JOBS worker processes (libFuzzer's
# -fork mode, which goes on past a finding so that one long run collects all of them), then
# exits 1 when the run wrote any crash, timeout (hang: one input over 10 s), oom (over 2 GiB) or
# leak artifact, else 0. See tests/fuzz/README.md, "libFuzzer: the parsers".
#
#   tests/fuzz/parsers/run.sh text 300            # build-libfuzzer/ (tests/fuzz/parsers/build.sh)
#   tests/fuzz/parsers/run.sh onnx 3600 16        # on a 16-core host, from the bundle (below)
#
# TARGET: text | onnx (or text_parser_fuzzer | onnx_parser_fuzzer). The binaries, their lib/,
# the seed corpora (seeds/text, seeds/onnx) and the dictionaries (text.dict, onnx.dict) are
# taken from $COIL_FUZZ_DIR, else from this script's directory when it holds them (an unpacked
# bundle of build.sh --bundle), else from the repository's build-libfuzzer/. The run writes
# under $COIL_FUZZ_OUT (default DIR/out/TARGET): corpus/ (the inputs that found new coverage,
# kept between runs: a second run starts where the first stopped), artifacts/ (the findings:
# crash-*, timeout-*, oom-*, leak-*) and log.txt (with the report of each finding). Extra arguments after JOBS go to
# libFuzzer as they are (e.g. -max_len=4096). To reproduce a finding:
#   DIR/TARGET_parser_fuzzer ARTIFACT          (one run of that input, with its report)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="${1:?usage: run.sh text|onnx SECONDS [JOBS] [libFuzzer args...]}"
seconds="${2:?usage: run.sh text|onnx SECONDS [JOBS] [libFuzzer args...]}"
jobs="${3:-1}"
shift $(($# < 3 ? $# : 3))
case "$target" in
  text | text_parser_fuzzer) target=text max_len=32768 ;;
  onnx | onnx_parser_fuzzer) target=onnx max_len=65536 ;;
  *) echo "run.sh: unknown target '$target' (text or onnx)" >&2; exit 2 ;;
esac
if [ -n "${COIL_FUZZ_DIR:-}" ]; then
  dir="$COIL_FUZZ_DIR"
elif [ -x "$here/${target}_parser_fuzzer" ]; then
  dir="$here"
else
  dir="$here/../../../build-libfuzzer"
fi
dir="$(cd "$dir" && pwd)"
bin="$dir/${target}_parser_fuzzer"
[ -x "$bin" ] || { echo "run.sh: no $bin (run tests/fuzz/parsers/build.sh)" >&2; exit 2; }
out="${COIL_FUZZ_OUT:-$dir/out/$target}"
mkdir -p "$out/corpus" "$out/artifacts"
seeds=()
[ -d "$dir/seeds/$target" ] && seeds=("$dir/seeds/$target")
dict=()
[ -f "$dir/$target.dict" ] && dict=("-dict=$dir/$target.dict")

# Sanitizer reports come with a stack trace (UBSan's are fatal: -fno-sanitize-recover). Leak
# checking stays on: a leak is a finding too. Without llvm-symbolizer (a host without clang)
# frames are symbolized by binutils' addr2line.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allow_addr2line=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:allow_addr2line=1}"
# Where the binary's own lib/ is missing (a copy without it), the host's libraries are used.
export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

marker="$out/.started"
touch "$marker"
echo "== $target: ${seconds}s, $jobs jobs, $(nproc) cores, binary $bin, out $out"
status=0
(
  cd "$out"
  "$bin" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 -print_funcs=0 \
    "${dict[@]}" "$@" "$out/corpus" "${seeds[@]}"
) > "$out/log.txt" 2>&1 || status=$?
grep -E '^#[0-9]+: cov' "$out/log.txt" | tail -1 || true
grep -oE 'INFO: fuzzed for [0-9]+ seconds|^stat::.*|Done [0-9]+ runs in [0-9]+ second' \
  "$out/log.txt" | tail -8 || true
findings=$(find "$out/artifacts" -type f -newer "$marker" \
  \( -name 'crash-*' -o -name 'timeout-*' -o -name 'oom-*' -o -name 'leak-*' \) | sort)
if [ -n "$findings" ]; then
  echo "FINDINGS ($(echo "$findings" | wc -l)):"
  echo "$findings"
  echo "(log: $out/log.txt; reproduce: $bin ARTIFACT)"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "run.sh: libFuzzer exited with $status and no artifact; see $out/log.txt" >&2
  tail -20 "$out/log.txt" >&2
  exit 1
fi
echo "no crash, timeout, oom or leak"
