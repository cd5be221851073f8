#!/usr/bin/env bash
# The differential fuzzer's Triton mode on the lent GPU machine, in one device call
# (tests/fuzz/README.md, "Triton"): unpacks the bundle made here by scripts/device_bundle.sh
# (it holds coil_fuzz), emits GRAPHS graphs of seed SEED from index START (default 0) plus the
# regression cases of tests/fuzz/seeds/ on the host's cores (batches of 25 graphs per module),
# then runs them on the GPU with tests/fuzz/run_triton.py, one worker per core, under a time
# limit such that the whole call takes about SECONDS (default 480; at most 540 to stay inside
# the device's 10-minute command limit). RUN_TRITON_ARGS adds options to run_triton.py (e.g.
# "--fusion both" or "--configs first"). Leaves in OUT_DIR (default $OUT):
#   summary.txt         the environment, the emit summary and run_triton's summary
#   emit/               the emit stage's summary.json, failures.tsv and failing .coil cases
#   triton/             run_triton's summary.txt, summary.json and failures.tsv
#   failing-cases.tar.xz  the case directories of the first 20 failing cases (to re-run them:
#                       tar xJf, then run_triton.py DIR --case NAME), with the node values of a
#                       wrong graph's local check (local-KEY/: coil_fuzz --check-values local-KEY)
# Exit status: run_triton.py's (0 only when nothing failed in either stage).
#
#   (here)   bash scripts/device_bundle.sh
#   (device) bash tests/fuzz/run_triton_gpu_host.sh SEED GRAPHS [SECONDS] [START]  # carry: device-bundle
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
seed="${1:?seed}"
graphs="${2:?graphs}"
seconds="${3:-480}"
start_index="${4:-0}"
out_dir="${OUT:-/tmp/fuzz-triton-out}"
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }

bundle=/tmp/coil-bundle
cases=/tmp/coil-fuzz-triton-cases
rm -rf "$bundle" "$cases" && mkdir -p "$bundle" "$out_dir"
tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle" || exit 2
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
summary="$out_dir/summary.txt"
{
  echo "== $(nproc) cores, $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), bundle $(cat "$bundle/REVISION")"
  python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "| torch", torch.__version__, "| triton", triton.__version__)' 2>&1 | tail -1
  echo "== emit: seed $seed, graphs $start_index..$(( start_index + graphs - 1 )) and tests/fuzz/seeds ($(elapsed) s)"
} 2>&1 | tee "$summary"

"$bundle/bin/coil_fuzz" --emit-cuda "$cases" --seed "$seed" --start "$start_index" \
  --graphs "$graphs" --graphs-dir tests/fuzz/seeds --batch 25 --jobs "$(nproc)" -q 2>&1 | tee -a "$summary"
rm -rf "$out_dir/emit" && cp -r "$cases/emit" "$out_dir/emit"

# What is left for the runner: its time limit, plus --grace for the cases running then, plus a
# margin for the reports and the tarball.
grace=40
limit=$(( seconds - $(elapsed) - grace - 20 ))
[ "$limit" -gt 30 ] || limit=30
echo "== run_triton.py: $(du -sh "$cases" | cut -f1) of cases, time limit $limit s ($(elapsed) s)" | tee -a "$summary"
# shellcheck disable=SC2086  # RUN_TRITON_ARGS is a list of options
timeout -k 10 $(( limit + grace + 60 )) python3 tests/fuzz/run_triton.py "$cases" --jobs "$(nproc)" \
  --time-limit "$limit" --grace "$grace" --out "$out_dir/triton" --coil-fuzz "$bundle/bin/coil_fuzz" \
  ${RUN_TRITON_ARGS:-} 2>&1 | tee -a "$summary"
rc=${PIPESTATUS[0]}

if [ -s "$out_dir/triton/failures.tsv" ]; then
  # (failures only: the rows of class rounding are differences the local check explained)
  failing=$(tail -n +2 "$out_dir/triton/failures.tsv" | awk -F'\t' '$2 != "rounding"' | cut -f4 |
    sed "s|^$cases/||; s|/.*||" | sort -u | head -20)
  # shellcheck disable=SC2086  # one case directory name per word
  [ -z "$failing" ] || tar cJf "$out_dir/failing-cases.tar.xz" -C "$cases" $failing
fi
echo "== done in $(elapsed) s, exit $rc; in $out_dir: $(ls "$out_dir" | tr '\n' ' ')" | tee -a "$summary"
exit "$rc"
