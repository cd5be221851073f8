#!/usr/bin/env bash
# The long libFuzzer run of both parsers on another host's CPUs (the lent GPU machine's 16
# cores: Ubuntu 24.04, no clang), in one call: unpacks the bundle that build.sh --bundle made
# here, runs both targets at once, each with half of the cores, for SECONDS (default 450: 8
# workers x 450 s = one CPU-hour per target), and leaves in OUT_DIR (default $OUT) three files:
# summary.txt (each target's last status line and findings) and text.tar.xz, onnx.tar.xz (its
# log.txt, artifacts/ and the grown corpus/, to bring the findings and the corpus back here).
# Exits 1 when either target wrote a crash, timeout, oom or leak artifact.
#
#   (here)   tests/fuzz/parsers/build.sh --bundle
#   (there)  bash tests/fuzz/parsers/run_gpu_host.sh [SECONDS] [OUT_DIR]
#            (the device tool: carry build-libfuzzer/parser-fuzz-bundle.tar.xz)
#   (here)   tar xJf onnx.tar.xz -C /tmp/onnx-run; build-libfuzzer/onnx_parser_fuzzer ARTIFACT
set -euo pipefail
cd "$(dirname "$0")/../../.."
seconds="${1:-450}"
out_dir="${2:-${OUT:-/tmp/parser-fuzz-out}}"
bundle="${COIL_FUZZ_BUNDLE:-build-libfuzzer/parser-fuzz-bundle.tar.xz}"
work=/tmp/parser-fuzz-run
rm -rf "$work" && mkdir -p "$work" "$out_dir"
tar xJf "$bundle" -C "$work"
jobs=$(($(nproc) / 2))
[ "$jobs" -ge 1 ] || jobs=1
echo "== $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), bundle $(cat "$work/parser-fuzz/REVISION"), $seconds s, $jobs workers per target" \
  > "$out_dir/summary.txt"
status=0
pids=()
for t in text onnx; do
  COIL_FUZZ_OUT="$work/out/$t" "$work/parser-fuzz/run.sh" "$t" "$seconds" "$jobs" \
    > "$work/$t.summary" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
for t in text onnx; do
  cat "$work/$t.summary" >> "$out_dir/summary.txt"
  tar cf - -C "$work/out" "$t" | xz -T0 -6 > "$out_dir/$t.tar.xz"
done
cat "$out_dir/summary.txt"
exit "$status"
