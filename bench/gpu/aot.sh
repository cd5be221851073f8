#!/usr/bin/env bash
# GPU ahead of time (issue 22; docs/deploy.md, "GPU ahead of time"), one device call from the
# repository root (carry device-bundle, made here by `bash scripts/device_bundle.sh`):
#
#   bash bench/gpu/aot.sh [MODEL ...]     (default: a few tests/gpu/cases, bench/gpu/aot_models,
#                                          the GPT block and resnet18; carry build/aot-models too,
#                                          made here by
#                                          `python3 bench/gpu/gpt_block_onnx.py build/aot-models/gpt_block_small.onnx`
#                                          `python3 bench/gpu/resnet18_onnx.py build/aot-models/resnet18.onnx`)
#
# For each model: `coil export MODEL --device cuda -o /tmp/coil-aot-exports/NAME` (the bundled coil; the
# exporter runs the module in Python once to autotune and record it), then the bundled
# coil_gpu_aot_run (C++, libcoil_runtime alone, no Python) loads it, checks its outputs against
# the Python path's on the export's sample inputs (bit for bit; models with cuDNN convolutions
# or bf16 products within the tolerance below, the JSON says whether they were bit for bit too),
# and times its per-call host cost (N launches, one synchronize); then loads it again with
# GpuLoadOptions::cuda_graph, checks the graph's outputs equal the launches' bit for bit, and
# times one cuGraphLaunch per call the same way; then the Python path's per-call cost, timed
# the same way (module.call in a loop, one synchronize). Prints one line per model, a table at
# the end, and $OUT/aot.json.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT="${OUT:-/tmp/coil-aot-out}"
mkdir -p "$OUT/aot"
# The exports themselves (resnet18's weights.bin is 46 MB) stay off $OUT, which the device tool
# brings back: only logs and JSON go there.
exports="${AOT_EXPORTS:-/tmp/coil-aot-exports}"
rm -rf "$exports" && mkdir -p "$exports"
bundle=/tmp/coil-bundle-aot
rm -rf "$bundle" && mkdir -p "$bundle" && tar xJf device-bundle/coil-bundle.tar.xz -C "$bundle"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LIBRARY_PATH="$bundle/lib" \
  CPATH="$bundle/include" PYTHONPATH="$PWD/python" COIL_PYTHON=python3
export COIL_CACHE_DIR="$(mktemp -d /tmp/coil-aot-cache-XXXXXX)"
# cuBLAS and cuDNN for products and convolutions: torch's pip-installed copies
# (src/runtime/cuda_driver.h, COIL_CUBLAS, COIL_CUDNN); NVRTC, which cuDNN 9's runtime-compiled
# engines dlopen.
for pkg in cublas cudnn cuda_nvrtc; do
  d=$(python3 -c "import nvidia.$pkg as c, os; print(os.path.join(list(c.__path__)[0], 'lib'))" 2>/dev/null)
  [ -n "$d" ] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done
models=("$@")
[ ${#models[@]} -gt 0 ] || models=(tests/gpu/cases/softmax.coil tests/gpu/cases/layer_norm.coil
  tests/gpu/cases/matmul_bias_relu.coil tests/gpu/cases/ew_chain.coil
  tests/gpu/cases/reduce_axes.coil tests/gpu/cases/constants.coil bench/gpu/workloads/overhead.coil
  tests/gpu/cases/conv_relu.coil bench/gpu/aot_models/convnet.coil bench/gpu/aot_models/mm_bf16.coil
  build/aot-models/gpt_block_small.onnx build/aot-models/resnet18.onnx)
# The tolerance of models whose library calls may differ from torch's: cuDNN's heuristics may
# pick another algorithm than torch (f32, FMA math: coil's precision 'highest'); bf16 products
# are cublasGemmEx as torch calls it, but cuBLAS's workspace differs from torch's.
tolerance() {
  case "$1" in
    conv_relu|convnet) echo "--atol 1e-4 --rtol 1e-4" ;;
    resnet18) echo "--atol 1e-3 --rtol 1e-3" ;;
    mm_bf16) echo "--atol 1e-2 --rtol 1e-2" ;;
    *) echo "" ;;
  esac
}
echo "[" > "$OUT/aot.json"
first=1
for m in "${models[@]}"; do
  name=$(basename "$m"); name=${name%.*}
  dir="$exports/$name"
  echo "== $name"
  if ! timeout 180 "$bundle/bin/coil" export "$m" --device cuda -o "$dir" > "$OUT/aot/$name.export.log" 2>&1; then
    echo "export failed:"; tail -n 5 "$OUT/aot/$name.export.log"; continue
  fi
  tail -n 1 "$OUT/aot/$name.export.log"
  # shellcheck disable=SC2046
  calls=2000
  [ "$name" = resnet18 ] && calls=200  # about 1 ms a call: the same seconds as the others
  cpp=$(timeout 120 "$bundle/bin/coil_gpu_aot_run" "$dir" --calls $calls $(tolerance "$name")) ||
    echo "C++ run failed (exit $?): $cpp"
  echo "C++:    $cpp"
  py=$(timeout 60 python3 - "$dir/module.py" "$calls" <<'PY'
import json, statistics, sys, time
import torch
from coil_runtime import runtime
mod = runtime.load_module(sys.argv[1])
calls = int(sys.argv[2])
args = mod.get_args()
mod.call(list(args)); torch.cuda.synchronize()
rounds = []
for _ in range(5):
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(calls):
        mod.call(list(args))
    torch.cuda.synchronize(); rounds.append((time.perf_counter() - t) / calls * 1e6)
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
python3 - "$OUT/aot.json" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))
print("| model | C++ us | C++ CUDA graph us | Python us | eager us | equal to Python | graph equal |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    c, p, e = r["cpp"] or {}, r["python"] or {}, r["eager"] or {}
    g = c.get("cuda_graph") or {}
    eq = ("bit for bit" if c.get("outputs_equal_python") else
          f"max diff {c.get('max_abs_diff')} (atol {c.get('atol')}, rtol {c.get('rtol')}: "
          f"{'within' if c.get('within_tolerance') else 'OUTSIDE'})") if c else "no run"
    geq = "-" if not g else g.get("error") or (
        "bit for bit" if g.get("outputs_equal_launches") and g.get("repeat_equal") else "DIFFERS")
    def f(v):
        return f"{v:.1f}" if isinstance(v, (int, float)) else "-"
    print(f"| {r['model']} | {f(c.get('per_call_us'))} | {f(g.get('per_call_us'))} | "
          f"{f(p.get('python_per_call_us'))} | {f(e.get('eager_per_call_us'))} | {eq} | {geq} |")
PY
