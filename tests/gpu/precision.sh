#!/usr/bin/env bash
# The precision contract on the GPU machine (issue 19, docs/numerics.md "fp32 precision"), one
# device call from the repository root, after these ran on the build machine:
#
#   bash tests/gpu/prepare.sh                      # precision_<W>_{highest,high} modules
#   bash scripts/device_bundle.sh                  # the coil binary for `coil check --device cuda`
#   /usr/bin/python3 tests/models/export_models.py build-gpu-models [NAME ...]
#
# then, on the device (carry tests/gpu/generated, device-bundle, build-gpu-models):
#
#   bash tests/gpu/precision.sh
#
# 1. each model in build-gpu-models/: `coil check --device cuda` against torch's CPU output at
#    the CPU's tolerance (rtol 1e-3, atol 1e-4, as tests/conformance/onnx_models_test.cpp), once
#    with --precision highest (must pass) and once with high (TF32: reported, may fail);
# 2. the host CPU: the same check of squeezenet1_1 with ONEDNN_DEFAULT_FPMATH_MODE=BF16 in the
#    environment (an AMX host would then run oneDNN convolutions in bf16, but coil asks for
#    strict fp32 explicitly);
# 3. bench/gpu/precision_bench.py: speed and error of highest against high on f32 matmul and
#    convolution workloads -> $OUT/precision.json.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-/tmp/coil-gpu-out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
COIL_CACHE_DIR="$(mktemp -d /tmp/coil-cache-XXXXXX)"
export COIL_CACHE_DIR
start=$(date +%s)
step() { echo; echo "== $* ($(( $(date +%s) - start )) s)"; }
{
  if [ ! -f device-bundle/coil-bundle.tar.xz ]; then
    echo "no device-bundle/coil-bundle.tar.xz: run bash scripts/device_bundle.sh and carry device-bundle"
    exit 2
  fi
  bundle=/tmp/coil-bundle-precision
  rm -rf "$bundle" && mkdir -p "$bundle" && tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
  export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    LIBRARY_PATH="$bundle/lib" CPATH="$bundle/include"
  coil="$bundle/bin/coil"
  "$coil" --version | head -3

  step "1. models: coil check --device cuda at the CPU's tolerance"
  pass=0 fail=0
  for m in build-gpu-models/*.onnx; do
    [ -e "$m" ] || { echo "no models in build-gpu-models/"; break; }
    name=$(basename "$m" .onnx)
    for precision in highest high; do
      log="$OUT/check_${name}_${precision}.log"
      if timeout 120 "$coil" check "$m" --device cuda --precision "$precision" \
          --input x="build-gpu-models/${name}_in.npy" --expect y="build-gpu-models/${name}_out.npy" \
          --rtol 1e-3 --atol 1e-4 > "$log" 2>&1; then
        verdict=PASS; [ "$precision" = highest ] && pass=$((pass + 1))
      else
        verdict=FAIL; [ "$precision" = highest ] && fail=$((fail + 1))
      fi
      echo "$verdict $name --precision $precision: $(grep -E 'max abs error' "$log" | head -1 | sed 's/^ *//')"
      [ "$verdict" = FAIL ] && grep -E 'differ|error:' "$log" | head -3 | sed 's/^/    /'
    done
  done
  echo "models at --precision highest: $pass passed, $fail failed"

  step "2. host CPU: squeezenet1_1 with ONEDNN_DEFAULT_FPMATH_MODE=BF16"
  if [ -f build-gpu-models/squeezenet1_1.onnx ]; then
    for env in "" "ONEDNN_DEFAULT_FPMATH_MODE=BF16"; do
      echo "${env:-default environment}: $(env $env COIL_MATMUL=dnnl timeout 120 "$coil" check \
        build-gpu-models/squeezenet1_1.onnx --input x=build-gpu-models/squeezenet1_1_in.npy \
        --expect y=build-gpu-models/squeezenet1_1_out.npy --rtol 1e-3 --atol 1e-4 2>&1 \
        | grep -E 'max abs error|check' | tr '\n' ' ')"
    done
  fi

  step "3. bench/gpu/precision_bench.py"
  timeout 240 python3 bench/gpu/precision_bench.py --json "$OUT/precision.json"
  echo "precision_bench exit code $?"
  step "done"
} 2>&1 | tee "$OUT/precision.log"
