#!/usr/bin/env bash
# coil's AMX bf16 GEMM on the lent GPU machine's host CPU (an Intel Xeon with AMX), in one call
# (under 8 minutes): the unit tests of the AMX kernel on the real tiles, then bf16 GEMMs at
# 1024/2048/4096 x 1 and 16 threads: coil on AMX, coil on AVX512-BF16 (COIL_CPU_ISA=avx512, the
# same build), coil fp32, oneDNN's bf16 matmul and PyTorch eager's bf16 torch.mm (oneDNN) in
# the same run, each the median of --runs timed calls. Fails loudly (exit 1, "FAILED: ...")
# when the CPU lacks AMX, the bundle lacks the binaries, a test fails or is skipped, a coil row
# is missing or its result disagrees with oneDNN.
#
#   (here)   bash scripts/device_bundle.sh          # builds and packs coil_unit_tests too
#   (device) bash bench/amx/run_device.sh [OUT_DIR]  # carry: device-bundle
# Results in OUT_DIR (default $OUT, else bench/results/): amx-unit-tests.{log,json},
# amx-gemm.json (coil_gemm_bench: AMX, fp32, oneDNN, torch rows), amx-gemm-avx512bf16.json
# (coil's AVX512-BF16 rows), amx-summary.json (the table below, with the issue's targets).
set -euo pipefail
cd "$(dirname "$0")/../.."
out_dir="${1:-${OUT:-bench/results}}"
threads="${AMX_THREADS:-1,16}"
sizes="${AMX_SIZES:-1024,2048,4096}"
runs="${AMX_RUNS:-10}"
die() {
  echo "run_device.sh: FAILED: $*" >&2
  exit 1
}
start=$(date +%s)
grep -qw amx_bf16 /proc/cpuinfo || die "this CPU has no AMX (no amx_bf16 in /proc/cpuinfo)"
[ -f device-bundle/coil-bundle.tar.xz ] ||
  die "no device-bundle/coil-bundle.tar.xz: run scripts/device_bundle.sh and carry device-bundle"
bundle=/tmp/coil-amx-bundle
rm -rf "$bundle" && mkdir -p "$bundle"
tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
for b in coil_unit_tests coil_gemm_bench; do
  [ -x "$bundle/bin/$b" ] || die "the bundle lacks bin/$b (made by an older scripts/device_bundle.sh)"
done
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LIBRARY_PATH="$bundle/lib" CPATH="$bundle/include" COIL_VMATH_DIR="$bundle/lib"
export COIL_CACHE_DIR=/tmp/coil-amx-cache
mkdir -p "$out_dir"
echo "== host: $(nproc) cores,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); bundle $(cat "$bundle/REVISION" 2>/dev/null || echo '?')"

# (a) The AMX kernel's tests: the gemm runtime suite on real tiles and on the emulation, the
# real-vs-emulated comparison, the emulation's own tests and the ISA table's AMX checks.
filter='GemmRuntime/*avx512_amx*:GemmAmxModule.*:AmxEmulation.*:IsaTest.TableFollowsInductorsWidths'
filter+=':IsaTest.DetectsTheBestIsaThisMachineRuns:IsaTest.AmxOnlyWhereTheCpuAndKernelAllowIt'
filter+=':IsaTest.OverrideChoosesTheIsa'
set +e
# The test program from the bundle's own commit (scripts/device_bundle.sh), else the tree's.
test_src="$PWD"
[ -f "$bundle/src/tests/unit/kernel_gemm/gemm_program.cpp" ] && test_src="$bundle/src"
COIL_TEST_SOURCE_DIR="$test_src" "$bundle/bin/coil_unit_tests" --gtest_filter="$filter" \
  --gtest_output="json:$out_dir/amx-unit-tests.json" >"$out_dir/amx-unit-tests.log" 2>&1
rc=$?
set -e
grep -E '^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|AMX|host ISA' "$out_dir/amx-unit-tests.log" | sort -u | tail -40
[ "$rc" -eq 0 ] || die "the AMX unit tests failed (exit $rc; $out_dir/amx-unit-tests.log)"
if grep -E '^\[  SKIPPED \] GemmRuntime/GemmRuntimeTest\.[A-Za-z0-9]+/avx512_amx$' \
  "$out_dir/amx-unit-tests.log" | grep -v RealAmxAgainstTheEmulation/avx512_amx_emulated; then
  die "the real AMX tests were skipped: coil does not see AMX here (cpu_has_feature amx_tile)"
fi
grep -q 'host ISA: avx512_amx' "$out_dir/amx-unit-tests.log" ||
  die "coil did not pick avx512_amx as the host ISA"
echo "== unit tests passed ($(($(date +%s) - start)) s)"

# (b) The benchmark: torch first (its own process), then coil_gemm_bench with torch's rows
# merged (AMX: the default ISA here), then coil's AVX512-BF16 kernel alone.
python3 bench/eager_gemm.py --threads "$threads" --runs "$runs" --bf16-sizes "$sizes" \
  --bf16-only --json "$out_dir/amx-torch.json" ||
  die "bench/eager_gemm.py failed (is torch installed for python3?)"
"$bundle/bin/coil_gemm_bench" --threads "$threads" --runs "$runs" --sizes "$sizes" \
  --bf16-sizes "$sizes" --torch "$out_dir/amx-torch.json" --json "$out_dir/amx-gemm.json" ||
  die "coil_gemm_bench (AMX) failed"
COIL_CPU_ISA=avx512 "$bundle/bin/coil_gemm_bench" --threads "$threads" --runs "$runs" \
  --bf16-sizes "$sizes" --bf16-only --json "$out_dir/amx-gemm-avx512bf16.json" ||
  die "coil_gemm_bench (COIL_CPU_ISA=avx512) failed"
python3 bench/amx/summarize.py "$out_dir/amx-gemm.json" "$out_dir/amx-gemm-avx512bf16.json" \
  --threads "$threads" --sizes "$sizes" --json "$out_dir/amx-summary.json" ||
  die "the summary found missing or failed rows (above)"
echo "== done in $(($(date +%s) - start)) s; results in $out_dir"
