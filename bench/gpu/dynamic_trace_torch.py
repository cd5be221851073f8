#!/usr/bin/env python3
"""Inductor's compiles over coil's serving trace (issue 20; docs/dynamic-shapes.md, "Figures").

coil's `coil_dynamic_trace --model encoder_dynamic.onnx` sends 100 requests with a random
(batch, sequence) through one size-generic model and counts its compiles. This script replays
the same pairs (read from that run's --json, key "trace") through `torch.compile` of the same
model in plain torch (tests/models/export_models.py's encoder_dynamic: a 2-layer
nn.TransformerEncoder, d_model 64, 4 heads, feed-forward 128, input [seq, batch, 64]; eval
mode, no grad, torch's fused fast path off so that Dynamo traces the same primitive ops coil
compiles), once per setting of `dynamic`:

  False  one graph per size until the recompile limit (8), then eager for new sizes
  None   torch's default: static first, a dynamic graph at the first recompile ("automatic
         dynamic"), 0/1 sizes specialized
  True   dynamic from the first call

Each setting runs in a new process with empty Inductor/Triton caches (`--one` is that child).
It reports, per device and setting: the compiles (graphs Inductor's backend was handed), the
whole trace's time (each request run once, as coil's trace does), the slowest request, and
how many requests ran in eager after the recompile limit. On the GPU machine:

    (here)    build/bin/coil_dynamic_trace --model encoder_dynamic.onnx --compare 0 --json T.json
    (device)  python3 bench/gpu/dynamic_trace_torch.py --pairs T.json [--devices cuda cpu]
              [--json $OUT/dynamic_trace_torch.json] [--budget-s 400]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def model():
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()


def one(device, dynamic, pairs):
    """The child: one setting of `dynamic` on one device, the whole trace."""
    import torch
    import torch._dynamo
    from torch._inductor.compile_fx import compile_fx
    if hasattr(torch.backends, "mha"):
        torch.backends.mha.set_fastpath_enabled(False)
    compiles = []

    def counting_inductor(gm, example_inputs):
        compiles.append([tuple(getattr(t, "shape", ())) for t in example_inputs
                         if isinstance(t, torch.Tensor)][:1])
        return compile_fx(gm, example_inputs)

    m = model().to(device)
    fn = torch.compile(m, backend=counting_inductor, dynamic=dynamic)
    per_request = []
    start = time.perf_counter()
    with torch.no_grad():
        for r, (b, t) in enumerate(pairs):
            g = torch.Generator().manual_seed(r)
            x = (torch.rand(t, b, 64, generator=g) * 2 - 1).to(device)
            t0 = time.perf_counter()
            fn(x)
            if device == "cuda":
                torch.cuda.synchronize()
            per_request.append(time.perf_counter() - t0)
    total = time.perf_counter() - start
    # The last request's answer against eager, so a wrong dynamic graph would show.
    with torch.no_grad():
        b, t = pairs[-1]
        x = (torch.rand(t, b, 64, generator=torch.Generator().manual_seed(7)) * 2 - 1).to(device)
        err = (fn(x) - m(x)).abs().max().item()
    return {"device": device, "dynamic": dynamic, "requests": len(pairs),
            "distinct_sizes": len(set(map(tuple, pairs))), "compiles": len(compiles),
            "trace_seconds": total, "slowest_request_s": max(per_request),
            "requests_over_1s": sum(1 for s in per_request if s > 1.0),
            "last_request_max_abs_err_vs_eager": err,
            "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", required=True, help="coil_dynamic_trace's --json output")
    ap.add_argument("--devices", nargs="+", default=["cuda", "cpu"])
    ap.add_argument("--settings", nargs="+", default=["False", "None", "True"])
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."),
                                                   "dynamic_trace_torch.json"))
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--child-timeout-s", type=float, default=240)
    ap.add_argument("--one", nargs=2, metavar=("DEVICE", "DYNAMIC"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    with open(a.pairs) as f:
        pairs = json.load(f)["trace"]
    if a.one:
        dyn = {"False": False, "None": None, "True": True}[a.one[1]]
        print(json.dumps(one(a.one[0], dyn, pairs)))
        return
    rows, start = [], time.perf_counter()
    for device in a.devices:
        for setting in a.settings:
            left = a.budget_s - (time.perf_counter() - start)
            if left < 20:
                rows.append({"device": device, "dynamic": setting, "skipped": "budget"})
                continue
            env = dict(os.environ)
            tmp = tempfile.mkdtemp(prefix="dyntrace-")
            env.update(TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                       TRITON_CACHE_DIR=os.path.join(tmp, "triton"), OMP_NUM_THREADS=env.get(
                           "OMP_NUM_THREADS", str(os.cpu_count())))
            try:
                p = subprocess.run([sys.executable, __file__, "--pairs", a.pairs, "--one", device,
                                    setting], env=env, capture_output=True, text=True,
                                   timeout=min(a.child_timeout_s, left))
                line = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
                row = json.loads(line) if p.returncode == 0 and line.startswith("{") else {
                    "device": device, "dynamic": setting, "error": p.stderr[-1500:]}
            except subprocess.TimeoutExpired:
                row = {"device": device, "dynamic": setting, "timeout_s": min(a.child_timeout_s,
                                                                                left)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    with open(a.json, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d"), "pairs_from": a.pairs, "rows": rows}, f,
                  indent=2)


if __name__ == "__main__":
    main()
