#!/usr/bin/env python3
"""--precision highest against high on the GPU: speed and error of f32 matmul and convolution.

For each workload bench/gpu/precision/W.coil, tests/gpu/prepare.sh wrote one module per precision
(tests/gpu/generated/precision_W_{highest,high}). Each runs on the same inputs (the module's
get_args()); its output is compared with the same computation in float64 on the GPU, and timed
with triton.testing.do_bench (median ms, L2 flushed; the median of --rounds calls). The matmul
module autotunes (coil's Triton template against cuBLAS) under its own precision, so each mode
times the fastest kernel it allows.

Errors: max |got - ref| / max |ref|, and the fraction of elements outside f32's tolerance of
docs/numerics.md (rtol 1e-4, atol 1e-5) widened by max(1, sqrt(K) / 4) as the matmul tests do
(K: the length of each output's dot product).

    python3 bench/gpu/precision_bench.py [--json FILE] [--rounds 5]
"""

import argparse
import json
import math
import os
import statistics
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
GENERATED = os.path.join(ROOT, "tests", "gpu", "generated")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from coil_runtime import runtime  # noqa: E402


def reference_mm(x, w, b):
    return torch.relu(x.double() @ w.double() + b.double())


def reference_conv(padding):
    def ref(x, w, b):
        return torch.relu(F.conv2d(x.double(), w.double(), b.double(), padding=padding))
    return ref


# workload: (float64 reference, K, FLOPs)
WORKLOADS = {
    "mm": (reference_mm, 4096, 2 * 8192 * 4096 * 4096),
    "conv3x3": (reference_conv(1), 128 * 9, 2 * 32 * 128 * 56 * 56 * 128 * 9),
    "conv1x1": (reference_conv(0), 512, 2 * 32 * 64 * 28 * 28 * 512),
}
PRECISIONS = ("highest", "high")


def errors(got, ref, k):
    err = (got.double() - ref).abs()
    scale = max(1.0, math.sqrt(k) / 4)
    outside = err > (1e-5 * scale + 1e-4 * scale * ref.abs())
    return {"max_abs_error": err.max().item(),
            "max_error_over_max_ref": (err.max() / ref.abs().max()).item(),
            "fraction_outside_f32_tol": outside.double().mean().item()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--json", help="write the results here")
    p.add_argument("--rounds", type=int, default=5, help="do_bench calls per module (median)")
    a = p.parse_args()
    results = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": []}
    for name, (ref_fn, k, flops) in WORKLOADS.items():
        args = None
        ref = None
        for mode in PRECISIONS:
            path = os.path.join(GENERATED, f"precision_{name}_{mode}", "module.py")
            if not os.path.exists(path):
                print(f"{name:<8} {mode:<8} SKIP: no {os.path.relpath(path, ROOT)} "
                      "(bash tests/gpu/prepare.sh)")
                continue
            m = runtime.load_module(path, name=f"coil_precision_{name}_{mode}")
            if args is None:
                args = m.get_args()
                ref = ref_fn(*args)
            got = m.call(list(args))[0]  # the first call autotunes
            torch.cuda.synchronize()
            row = {"workload": name, "precision": mode, **errors(got, ref, k)}
            del got
            times = [do_bench(lambda: m.call(list(args))) for _ in range(a.rounds)]
            row["ms"] = statistics.median(times)
            row["tflops"] = flops / row["ms"] / 1e9
            results["rows"].append(row)
            print(f"{name:<8} {mode:<8} {row['ms']:8.4f} ms {row['tflops']:7.1f} TFLOP/s  "
                  f"max err / max |ref| {row['max_error_over_max_ref']:.2e}  "
                  f"outside f32 tol {100 * row['fraction_outside_f32_tol']:.3f}%")
        del args, ref
        torch.cuda.empty_cache()
    by = {(r["workload"], r["precision"]): r for r in results["rows"]}
    for name in WORKLOADS:
        if (name, "highest") in by and (name, "high") in by:
            hi, lo = by[(name, "highest")], by[(name, "high")]
            print(f"{name:<8} high is {hi['ms'] / lo['ms']:.2f}x faster than highest; error x"
                  f"{lo['max_error_over_max_ref'] / max(hi['max_error_over_max_ref'], 1e-30):.0f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
