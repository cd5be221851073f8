#!/usr/bin/env python3
"""A roofline of coil's CPU kernels (docs/benchmarks.md, "Roofline"): every kernel of the given
models as a point, arithmetic intensity (operations per byte moved at least once) against
achieved Gop/s, under the memory roof (the copy bandwidth `coil bench --profile` measures in the
same run) and, when given, a compute roof.

For each model: `coil bench MODEL --profile --json --runs R` (each kernel timed alone, medians
of R runs; `CompiledModel::profile`). Operations are KernelTraffic::ops (sched/scheduler.h):
per element each arithmetic op counts one (exp as one, like add), matmuls 2*M*N*K.

  /usr/bin/python3 bench/roofline.py [MODEL ...] [--size s0=N] [--runs 20] [--threads N]
      [--peak-gops P] [--coil build/bin/coil] [--png FILE] [--svg FILE] [--json FILE]

Without models: the golden graphs of tests/golden/data (pointwise, reductions, softmax,
layer_norm, matmul, conv; small, mostly in cache). --suite adds the CPU suite's workloads
(`coil_cpu_bench --write-graphs`: 64-134 MB each, out of cache) and a 1024^3 matmul with a bias
and ReLU. Needs matplotlib (python3-matplotlib, installed by scripts/setup.sh).
"""

import argparse
import datetime
import json
import os
import pathlib
import platform
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def profile(coil, model, args):
    cmd = [coil, "bench", str(model), "--profile", "--json", "--runs", str(args.runs),
           "--trace", os.devnull]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    for s in args.size:
        cmd += ["--size", s]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("models", nargs="*")
    p.add_argument("--size", action="append", default=[])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--peak-gops", type=float, default=0,
                   help="a compute roof in Gop/s (e.g. from bench/run_gemm.sh); none by default")
    p.add_argument("--coil", default=str(ROOT / "build" / "bin" / "coil"))
    p.add_argument("--suite", action="store_true",
                   help="also the CPU suite's workloads and a 1024^3 matmul")
    stamp = datetime.datetime.now().strftime("%Y-%m-%d")
    p.add_argument("--png", default=str(ROOT / "docs" / "images" / f"roofline-cpu-{stamp}.png"))
    p.add_argument("--svg", default="")
    p.add_argument("--json", default=str(ROOT / "bench" / "results" / f"roofline-{stamp}.json"))
    args = p.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("roofline.py needs matplotlib: apt-get install python3-matplotlib "
                 "(scripts/setup.sh installs it)")

    models = [pathlib.Path(m) for m in args.models] or sorted(
        (ROOT / "tests" / "golden" / "data").glob("*.coil"))
    if args.suite:
        import tempfile
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="coil-roofline-"))
        bench = pathlib.Path(args.coil).parent / "coil_cpu_bench"
        subprocess.run([str(bench), "--write-graphs", str(tmp)], check=True)
        (tmp / "matmul1024.coil").write_text(
            "# relu(x @ w + b), 1024^3\ninput x: f32[1024, 1024]\ninput w: f32[1024, 1024]\n"
            "input b: f32[1024]\nm = matmul(x, w)\ns = add(m, b)\ny = relu(s)\noutput y\n")
        models += sorted(tmp.glob("*.coil"))
    points, ceilings, loads = [], [], []
    for m in models:
        r = profile(args.coil, m, args)
        ceilings.append(r["ceiling_gb_per_s"])
        loads.append(r["load_average"])
        for k in r["kernels"]:
            if k["ops"] <= 0 or k["bytes"] <= 0:
                continue
            points.append({"model": m.stem, "kernel": k["name"], "ops": k["ops"],
                           "bytes": k["bytes"], "median_us": k["median_us"],
                           "intensity": k["ops"] / k["bytes"], "gops_per_s": k["gops_per_s"],
                           "gb_per_s": k["gb_per_s"]})
        print(f"{m.stem}: {len(r['kernels'])} kernel(s), model median {r['median_ms']:.3f} ms"
              f"{' (noisy)' if r['noisy'] else ''}", file=sys.stderr)
    # The best of the per-model measurements (each already the best of 5 passes): on a shared
    # machine the least disturbed one is the closest to the hardware's.
    ceiling = max(ceilings)
    meta = {"date": stamp, "cpu": cpu_model(), "threads": args.threads or os.cpu_count(),
            "load_average": max(loads), "ceiling_gb_per_s": ceiling,
            "peak_gops": args.peak_gops or None, "runs": args.runs}

    fig, ax = plt.subplots(figsize=(10, 5.5))
    xs = [q["intensity"] for q in points]
    lo, hi = min(xs + [0.05]) / 2, max(xs + [10]) * 2
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    roof = [ceiling * x if not args.peak_gops else min(ceiling * x, args.peak_gops) for x in grid]
    ax.plot(grid, roof, color="black", linewidth=1.5,
            label=f"memory roof: {ceiling:.1f} GB/s\n(copy, ordinary stores, best measured)")
    if args.peak_gops:
        ax.axhline(args.peak_gops, color="gray", linestyle="--", linewidth=1,
                   label=f"compute roof: {args.peak_gops:.0f} Gop/s\n(fp32 FMA peak, measured)")
    markers = "osD^vP*Xh<>"
    for i, name in enumerate(sorted({q["model"] for q in points})):
        mine = [q for q in points if q["model"] == name]
        ax.scatter([q["intensity"] for q in mine], [q["gops_per_s"] for q in mine], s=34,
                   marker=markers[i % len(markers)], label=name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (operations per byte moved at least once)")
    ax.set_ylabel("achieved Gop/s (each kernel timed alone, median)")
    ax.set_title(f"coil CPU kernels: {meta['cpu']}, {meta['threads']} threads, "
                 f"load average {meta['load_average']:.1f}, {meta['date']}", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    for path in filter(None, [args.png, args.svg]):
        pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=130)
        print(f"wrote {path}", file=sys.stderr)
    pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(args.json).write_text(json.dumps({"meta": meta, "kernels": points}, indent=1))
    print(f"wrote {args.json}", file=sys.stderr)
    for q in sorted(points, key=lambda q: q["gb_per_s"] / ceiling):
        print(f"{q['model']:>20} {q['kernel']:<34} {q['intensity']:8.3f} op/B "
              f"{q['gops_per_s']:9.2f} Gop/s {q['gb_per_s']:8.1f} GB/s "
              f"({100 * q['gb_per_s'] / ceiling:5.1f}% of the roof)")


if __name__ == "__main__":
    main()
