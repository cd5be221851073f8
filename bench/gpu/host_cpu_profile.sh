#!/usr/bin/env bash
# Why coil.torch on the GPU host's CPU trails Inductor on BERT-base and the ResNets at 16 threads
# (docs/gpu-results.md, twenty-third session: 0.68x, 0.61x, 0.70x) while the same graphs are
# 1.7-1.8x faster than eager here at 2 threads. One device call (carry device-bundle, after
# `bash scripts/device_bundle.sh` here), about 300 s:
#   - the host's topology (threads per core: are 16 "cores" 8 with two threads each?);
#   - the four BERT products ([256, K] x [K, N] + bias) in coil (`coil bench` of a one-node
#     graph) against torch.nn.functional.linear (MKL) at 1, 8 and 16 threads;
#   - BERT and resnet18 as coil.torch hands them to coil (bench/gpu/graphs/*.coil, the
#     COIL_DEBUG_DIR input of bench/gpu/torch_backend.py's models) under `coil bench --profile`
#     at 8 and 16 threads, no torch in the process;
#   - which OpenMP runtimes a coil.torch process holds (pip's torch bundles its own libgomp).
# Results under $OUT (default /tmp/coil-host-profile).
set -uo pipefail
OUT="${OUT:-/tmp/coil-host-profile}"; mkdir -p "$OUT"
cd "$(dirname "$0")/../.."
B=/tmp/cb; rm -rf $B; mkdir -p $B && tar xJf device-bundle/coil-bundle.tar.xz -C $B
export LD_LIBRARY_PATH=$B/lib LIBRARY_PATH=$B/lib CPATH=$B/include COIL_CACHE_DIR=/tmp/coil-hp-cache
echo "bundle $(cat $B/REVISION)"; date -u; uptime
lscpu | grep -E "^(Model name|CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L1d|L2|L3)" 
G=bench/gpu/graphs
${PYTHON:-python3} -c "import numpy as np; np.save('$OUT/ids.npy', np.random.randint(0, 30522, (2, 128)))"
echo "== products: coil (coil bench, ms) vs F.linear (torch, ms)"
for t in ${THREADS:-1 8 16}; do
  for f in $G/linear_*.coil; do
    c=$(timeout 60 $B/bin/coil bench $f --threads $t --runs 30 --warmup 5 --quiet 2>&1 |
        sed -n 's/.*median \([0-9.]*\) ms.*/\1/p')
    s=$(basename $f .coil); IFS=x read -r m k n <<< "${s#linear_}"
    e=$(${PYTHON:-python3} - "$m" "$k" "$n" "$t" <<'PY'
import sys, time, torch, statistics
m, k, n, t = map(int, sys.argv[1:]); torch.set_num_threads(t)
x, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
ts = []
for i in range(35):
    t0 = time.perf_counter(); torch.nn.functional.linear(x, w, b); ts.append(time.perf_counter() - t0)
print(f"{statistics.median(ts[5:]) * 1e3:.3f}")
PY
)
    echo "threads $t $s: coil $c ms, torch $e ms"
  done
done
for t in ${PROFILE_THREADS:-16 8}; do
  timeout 120 $B/bin/coil bench $G/bert_base_b2_t128.coil --input in53=$OUT/ids.npy --threads $t \
    --runs 10 --profile --trace $OUT/bert_$t.json --quiet > $OUT/bert_profile_$t.txt 2>&1
  head -1 $OUT/bert_profile_$t.txt
  timeout 120 $B/bin/coil bench $G/resnet18_b8.coil --threads $t --runs 10 --profile \
    --trace $OUT/resnet18_$t.json --quiet > $OUT/resnet18_profile_$t.txt 2>&1
  head -1 $OUT/resnet18_profile_$t.txt
done
echo "== BERT through coil.torch at 16 threads: OpenMP runtimes held; default wait policy, passive"
for p in "" passive; do
  env ${p:+OMP_WAIT_POLICY=$p} COIL_LIBRARY=$B/lib PYTHONPATH=python timeout 150 ${PYTHON:-python3} - <<'PY'
import os, statistics, sys, time
sys.path.insert(0, "bench/gpu")
import torch
import coil.torch as ct
from torch_backend import _models
torch.set_num_threads(int(os.environ.get("BERT_THREADS", "16")))
make, batch = _models()["bert_base"]
torch.manual_seed(0)
m = make().eval(); x = batch(2); c = ct.compile(m)
def med(fn):
    fn(); ts = []
    for _ in range(9):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3
with torch.no_grad():
    c(x)
    e = [med(lambda: m(x)) for _ in range(3)]; k = [med(lambda: c(x)) for _ in range(3)]
print(f"wait policy {os.environ.get('OMP_WAIT_POLICY') or 'default'}: eager {statistics.median(e):.2f} ms, "
      f"coil {statistics.median(k):.2f} ms")
print("OpenMP runtimes:", sorted({l.split()[-1] for l in open("/proc/self/maps") if "gomp" in l or "iomp" in l}))
PY
done
