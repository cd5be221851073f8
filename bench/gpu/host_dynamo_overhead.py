#!/usr/bin/env python3
"""Where torch.compile(backend="coil") loses time against coil.torch.compile on the CPU (issue
18): on the GPU machine's host at 16 threads BERT-base (batch 2) ran 47.4 ms through
torch.compile and 37.7 ms through coil.torch.compile / `coil bench` (docs/gpu-results.md,
twenty-ninth session). Times eager, coil.torch.compile (AOTAutograd, no Dynamo) and
torch.compile(backend="coil") alternating in one process (medians of --rounds rounds), then
cProfiles --calls calls of the torch.compile one and prints the functions by own time.

    PYTHONPATH=python python3 bench/gpu/host_dynamo_overhead.py [--model bert_base] [--batch 2]
        [--threads 16] [--rounds 5] [--calls 20] [--backends eager,coil.torch.compile]

On torch 1.13 (no Dynamo) only the first two are timed.
"""
import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="bert_base")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--backends", default="eager,coil.torch.compile,torch.compile(coil)",
                    help="comma-separated subset to time (alternating in this order)")
    a = ap.parse_args()
    import torch
    import coil.torch as ct
    from torch_backend import _models
    torch.set_num_threads(a.threads)
    make, batch = _models()[a.model]
    torch.manual_seed(0)
    model = make().eval()
    x = batch(a.batch)
    fns = {"eager": model, "coil.torch.compile": ct.compile(model)}
    if hasattr(torch, "compile"):
        fns["torch.compile(coil)"] = torch.compile(model, backend="coil")
    wanted = a.backends.split(",")
    fns = {name: fn for name, fn in fns.items() if name in wanted}
    times = {name: [] for name in fns}
    with torch.no_grad():
        ref = model(x)
        for name, fn in fns.items():
            err = (fn(x) - ref).abs().max().item()
            print(f"{name}: first calls done, max abs error {err:.2e}", flush=True)
        for _ in range(a.rounds):
            for name, fn in fns.items():
                fn(x)
                ts = []
                for _ in range(5):
                    t0 = time.perf_counter()
                    fn(x)
                    ts.append(time.perf_counter() - t0)
                times[name].append(statistics.median(ts))
    print(f"{a.model} batch {a.batch}, {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}, load {os.getloadavg()[0]:.2f}")
    # Two OpenMP runtimes in one process (torch's bundled libgomp and the system one coil's
    # kernels link) each keep their own spinning thread team.
    with open("/proc/self/maps") as maps:
        omp = sorted({line.split()[-1] for line in maps if "gomp" in line or "libomp" in line})
    print("OpenMP runtimes loaded:", ", ".join(omp) or "none",
          "| OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY", "unset"))
    for name, ts in times.items():
        print(f"  {name:22s} {statistics.median(ts) * 1e3:8.2f} ms (rounds: "
              f"{', '.join(f'{t * 1e3:.2f}' for t in ts)})")
    if not a.calls:
        return 0
    name = "torch.compile(coil)" if "torch.compile(coil)" in fns else "coil.torch.compile"
    prof = cProfile.Profile()
    with torch.no_grad():
        prof.enable()
        for _ in range(a.calls):
            fns[name](x)
        prof.disable()
    print(f"cProfile of {a.calls} calls of {name}, by own time:")
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    return 0


if __name__ == "__main__":
    sys.exit(main())
