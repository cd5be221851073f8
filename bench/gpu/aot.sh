#!/usr/bin/env bash
# GPU ahead of time (issue 22; docs/deploy.md, "GPU ahead of time"), one device call from the
# repository root (carry device-bundle, made here by `bash scripts/device_bundle.sh`):
#
#   bash bench/gpu/aot.sh [MODEL ...]     (default: a few tests/gpu/cases and the GPT block;
#                                          carry build/aot-models too, made here by
#                                          `python3 bench/gpu/gpt_block_onnx.py build/aot-models/gpt_block_small.onnx`)
#
# For each model: `coil export MODEL --device cuda -o $OUT/aot/NAME` (the bundled coil; the
# exporter runs the module in Python once to autotune and record it), then the bundled
# coil_gpu_aot_run (C++, libcoil_runtime alone, no Python) loads it, checks its outputs bit for
# bit against the Python path's on the export's sample inputs, and times its per-call host cost
# (N launches, one synchronize); then the Python path's per-call cost, timed the same way
# (module.call in a loop, one synchronize). Prints one line per model, and $OUT/aot.json.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-/tmp/coil-aot-out}"
mkdir -p "$OUT/aot"
bundle=/tmp/coil-bundle-aot
rm -rf "$bundle" && mkdir -p "$bundle" && tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LIBRARY_PATH="$bundle/lib" \
  CPATH="$bundle/include" PYTHONPATH="$PWD/python" COIL_PYTHON=python3
export COIL_CACHE_DIR="$(mktemp -d /tmp/coil-aot-cache-XXXXXX)"
# cuBLAS for plain products: torch's pip-installed copy (src/runtime/cuda_driver.h, COIL_CUBLAS).
cublas_dir=$(python3 -c 'import nvidia.cublas as c, os; print(os.path.join(list(c.__path__)[0], "lib"))' 2>/dev/null)
[ -n "$cublas_dir" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$cublas_dir"
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(tests/gpu/cases/softmax.coil tests/gpu/cases/layer_norm.coil
  tests/gpu/cases/matmul_bias_relu.coil tests/gpu/cases/ew_chain.coil
  tests/gpu/cases/reduce_axes.coil tests/gpu/cases/constants.coil bench/gpu/workloads/overhead.coil
  build/aot-models/gpt_block_small.onnx)
echo "[" > "$OUT/aot.json"
first=1
for m in "${models[@]}"; do
  name=$(basename "$m"); name=${name%.*}
  dir="$OUT/aot/$name"
  echo "== $name"
  if ! timeout 120 "$bundle/bin/coil" export "$m" --device cuda -o "$dir" > "$OUT/aot/$name.export.log" 2>&1; then
    echo "export failed:"; tail -n 5 "$OUT/aot/$name.export.log"; continue
  fi
  tail -n 1 "$OUT/aot/$name.export.log"
  cpp=$(timeout 60 "$bundle/bin/coil_gpu_aot_run" "$dir" --calls 2000) || { echo "C++ run failed: $cpp"; }
  echo "C++:    $cpp"
  py=$(timeout 60 python3 - "$dir/module.py" <<'PY'
import json, statistics, sys, time
import torch
from coil_runtime import runtime
mod = runtime.load_module(sys.argv[1])
args = mod.get_args()
mod.call(list(args)); torch.cuda.synchronize()
rounds = []
for _ in range(5):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(2000):
        mod.call(list(args))
    torch.cuda.synchronize(); rounds.append((time.perf_counter() - t) / 2000 * 1e6)
print(json.dumps({"python_per_call_us": statistics.median(rounds)}))
PY
)
  echo "Python: $py"
  eager=null
  if [ "$name" = gpt_block_small ]; then  # the same block in eager torch (bench/gpu/cuda_graphs.py)
    eager=$(timeout 60 python3 - <<'PY'
import json, statistics, sys, time
sys.path.insert(0, "bench/gpu")
import torch, torch.nn as nn, torch.nn.functional as F
from cuda_graphs import make_block
torch.manual_seed(0)
model = make_block(torch, nn, F)().cuda().eval()
x = torch.randn(2, 37, 192, device="cuda")
rounds = []
with torch.no_grad():
    model(x); torch.cuda.synchronize()
    for _ in range(5):
        torch.cuda.synchronize(); t = time.perf_counter()
        for _ in range(2000):
            model(x)
        torch.cuda.synchronize(); rounds.append((time.perf_counter() - t) / 2000 * 1e6)
print(json.dumps({"eager_per_call_us": statistics.median(rounds)}))
PY
)
    echo "eager:  $eager"
  fi
  [ $first -eq 1 ] || echo "," >> "$OUT/aot.json"
  first=0
  echo "{\"model\": \"$name\", \"cpp\": ${cpp:-null}, \"python\": ${py:-null}, \"eager\": ${eager:-null}}" >> "$OUT/aot.json"
done
echo "]" >> "$OUT/aot.json"
