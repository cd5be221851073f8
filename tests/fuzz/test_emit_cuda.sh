#!/usr/bin/env bash
# ctest fuzz_emit_cuda (tests/fuzz/README.md, "Triton"): `coil_fuzz --emit-cuda` writes batch
# cases (seed 1, graphs 0-23, 6 per module) and single-graph ones (the regression cases of
# seeds/), with no emit-stage failure, then test_run_triton.py --cases checks that every case
# directory is complete, that every module parses (ast) and defines call(), and that the
# references pass run_triton.py's comparison while a wrong answer fails it. No GPU needed.
#
#   tests/fuzz/test_emit_cuda.sh COIL_FUZZ PYTHON OUT_DIR
set -euo pipefail
fuzz="$1" python="$2" out="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$out"
"$fuzz" --emit-cuda "$out" --seed 1 --graphs 24 --batch 6 --jobs 2 -q
"$fuzz" --emit-cuda "$out" --graphs-dir "$here/seeds" --jobs 2 -q
"$python" "$here/test_run_triton.py" --cases "$out"
