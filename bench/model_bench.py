#!/usr/bin/env python3
"""Model benchmark (docs/benchmarks.md, "Models"): coil against PyTorch eager on the real models
of tests/models/export_models.py (MLP, LayerNorm + GELU block, TransformerEncoderLayer,
resnet18, mobilenet_v2), at each thread count.

For each model: export it to ONNX (opset 17, random weights, fixed seeds), check coil's output
against torch's once (`coil check`, rtol 1e-3, atol 1e-4), then time

  coil   `coil bench MODEL.onnx --input x=... --threads N --runs R --warmup W --json`: the
         CompiledModel's run into preallocated outputs, median of R runs; compile time is
         reported apart: the model's first compile (a code-cache miss, with matmul autotuning)
         in a fresh cache directory whose one-off costs (ISA probe, precompiled header) a tiny
         graph pays first;
  eager  the torch module in eval mode under torch.no_grad() (what inference in eager runs;
         for the transformer layer that is PyTorch's fused fast path), torch.set_num_threads(N)
         and the OpenBLAS torch loaded pinned to N threads, W untimed calls, then R calls each
         timed, median.

  ort    (--ort) ONNX Runtime on the same .onnx file: `node bench/ort/ort_time.js MODEL.onnx
         --threads N --runs R --warmup W`, InferenceSession.run with all graph optimizations,
         sequential, N intra-op threads, no spinning (onnxruntime-node from npm, installed by
         `bash scripts/setup_ort.sh`; docs/benchmarks.md, "Against ONNX Runtime").

With --rounds K, coil, ONNX Runtime and eager are timed alternately K times per thread count and
each reports the median of its K medians (the machines are shared: a neighbour's burst then
hits all of them alike).

Prints the table (medians, and the fastest runs, which other processes on a shared machine
disturb less) and writes the JSON (default bench/results/models-<date>.json).

  /usr/bin/python3 bench/model_bench.py [--threads 1,2] [--runs 20] [--warmup 3]
      [--models mlp,...] [--coil build/bin/coil] [--json FILE] [--notes TEXT]
      [--ort] [--rounds K]
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
import export_models  # noqa: E402  (tests/models/export_models.py)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--runs", type=int, default=20, help="timed runs per measurement (>= 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    p.add_argument("--models", default="", help="comma-separated names (default: all)")
    p.add_argument("--coil", default=os.path.join(ROOT, "build", "bin", "coil"),
                   help="the coil CLI (default build/bin/coil)")
    p.add_argument("--json", default="", help="results file (default "
                   "bench/results/models-<date>.json)")
    p.add_argument("--notes", default="", help="free text stored in the results")
    p.add_argument("--ort", action="store_true",
                   help="also time ONNX Runtime (bench/ort, scripts/setup_ort.sh)")
    p.add_argument("--rounds", type=int, default=1,
                   help="alternate the timings this many times; report medians of medians")
    a = p.parse_args()
    a.threads = [int(t) for t in a.threads.split(",") if t]
    a.models = [m for m in a.models.split(",") if m] or export_models.MODELS
    if not a.threads or min(a.threads) < 1:
        p.error("--threads needs positive counts")
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    if a.runs < 10:
        p.error("--runs must be at least 10 (medians of fewer runs are noise on this machine)")
    for m in a.models:
        if m not in export_models.ALL:
            p.error(f"unknown model {m} (known: {', '.join(export_models.ALL)})")
    return a


def coil_cmd(args, env, *cmd):
    r = subprocess.run([args.coil, *cmd], env=env, capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise SystemExit(f"coil {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def coil_bench(args, env, model, inp, threads):
    r = coil_cmd(args, env, "bench", model, "--input", f"x={inp}", "--threads", str(threads),
                 "--runs", str(args.runs), "--warmup", str(args.warmup), "--json")
    return json.loads(r.stdout[r.stdout.index("{"):])


ORT_TIME = os.path.join(ROOT, "bench", "ort", "ort_time.js")


def ort_bench(args, model, threads):
    if not os.path.isdir(os.path.join(ROOT, "bench", "ort", "node_modules", "onnxruntime-node")):
        raise SystemExit("--ort: onnxruntime-node is not installed; run bash scripts/setup_ort.sh")
    r = subprocess.run(["node", ORT_TIME, model, "--threads", str(threads), "--runs",
                        str(args.runs), "--warmup", str(args.warmup)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ort_time.js {model} failed ({r.returncode}):\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def median_of_rounds(samples):
    """One result from several rounds' results: the median of their medians and the fastest
    run of all; every round's median is kept."""
    out = dict(samples[0])
    out["median_ms"] = statistics.median(s["median_ms"] for s in samples)
    out["min_ms"] = min(s["min_ms"] for s in samples)
    out["round_medians_ms"] = [s["median_ms"] for s in samples]
    return out


def loaded_openblas():
    """The OpenBLAS torch loaded (a ctypes handle) and its path, or (None, None). Debian's torch
    1.13 sends f32 GEMMs to the pthread OpenBLAS, whose threads ignore torch.set_num_threads
    (docs/dependencies.md): it is pinned to the same count, as bench/eager_gemm.py does."""
    import ctypes
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "openblas" in line and "/" in line}
    for path in sorted((p for p in paths if ".so" in p), key=lambda p: "libopenblas" not in p):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_set_num_threads  # noqa: B018 (raises AttributeError when missing)
            return lib, path
        except (OSError, AttributeError):
            continue
    return None, None


def eager_bench(torch, module, x, threads, args):
    torch.set_num_threads(threads)
    blas, _ = loaded_openblas()
    if blas is not None:
        blas.openblas_set_num_threads(threads)
    times = []
    with torch.no_grad():
        for _ in range(args.warmup):
            module(x)
        for _ in range(args.runs):
            t = time.perf_counter()
            module(x)
            times.append((time.perf_counter() - t) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
            "runs": args.runs, "threads": threads}


def print_table(rows):
    ort = any("ort" in r for r in rows)
    head = ["model", "input", "thr", "coil ms", "eager ms", "coil/eager", "coil min ms",
            "eager min ms", "coil/eager (min)"]
    if ort:
        head += ["ORT ms", "ORT/coil (coil's speedup)", "ORT min ms"]
    head += ["coil cold compile s", "check"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        c, e = r["coil"], r["eager"]
        cells = [r["model"], "x".join(map(str, r["input_shape"])), str(r["threads"]),
                 f"{c['median_ms']:.2f}", f"{e['median_ms']:.2f}",
                 f"{e['median_ms'] / c['median_ms']:.2f}x", f"{c['min_ms']:.2f}",
                 f"{e['min_ms']:.2f}", f"{e['min_ms'] / c['min_ms']:.2f}x"]
        if ort:
            o = r.get("ort")
            cells += ([f"{o['median_ms']:.2f}", f"{o['median_ms'] / c['median_ms']:.2f}x",
                       f"{o['min_ms']:.2f}"] if o else ["-", "-", "-"])
        cells += ["-" if r["coil_cold_compile_s"] is None else f"{r['coil_cold_compile_s']:.2f}",
                  "ok" if r["check_ok"] else "FAILED"]
        lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines))


def main():
    args = parse_args()
    import torch

    tmp = tempfile.mkdtemp(prefix="coil-model-bench-")
    env = dict(os.environ, COIL_CACHE_DIR=os.path.join(tmp, "cache"))
    env.pop("COIL_NUM_THREADS", None)
    out = {
        "settings": {"threads": args.threads, "runs": args.runs, "warmup": args.warmup,
                     "models": args.models, "coil": args.coil, "ort": args.ort,
                     "rounds": args.rounds},
        "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                 "python_version": platform.python_version(), "torch": torch.__version__,
                 "torch_openblas": loaded_openblas()[1]},
        "notes": args.notes,
        "load_average_start": open("/proc/loadavg").read().strip(),
        "rows": [],
    }
    try:
        # The one-off costs of a fresh cache directory (ISA probe, precompiled header).
        tiny = os.path.join(tmp, "tiny.coil")
        with open(tiny, "w") as f:
            f.write("input x: f32[8]\ny = relu(x)\noutput y\n")
        t = time.perf_counter()
        coil_cmd(args, env, "bench", tiny, "--runs", "1", "--json")
        out["coil_first_compile_s"] = time.perf_counter() - t
        for name in args.models:
            print(f"== {name}", file=sys.stderr, flush=True)
            module, x = export_models.export(name, tmp)
            shape = list(x.shape)
            model, inp = os.path.join(tmp, f"{name}.onnx"), os.path.join(tmp, f"{name}_in.npy")
            # coil first: its first compile of the model is the cold one (a cache miss).
            coil = [coil_bench(args, env, model, inp, threads) for threads in args.threads]
            cold = [c["compile_s"] for c in coil if not c.get("cache_hit", True)]
            chk = coil_cmd(args, env, "check", model, "--input", f"x={inp}", "--expect",
                           f"y={os.path.join(tmp, name + '_out.npy')}", "--rtol", "1e-3",
                           "--atol", "1e-4")
            for threads, c in zip(args.threads, coil):
                coils, eagers, orts = [c], [], []
                for k in range(args.rounds):
                    if k > 0:
                        coils.append(coil_bench(args, env, model, inp, threads))
                    if args.ort:
                        orts.append(ort_bench(args, model, threads))
                    eagers.append(eager_bench(torch, module, x, threads, args))
                c, e = median_of_rounds(coils), median_of_rounds(eagers)
                row = {"model": name, "input_shape": shape, "threads": threads, "coil": c,
                       "coil_cold_compile_s": cold[0] if cold else None, "eager": e,
                       "eager_over_coil": e["median_ms"] / c["median_ms"],
                       "check_ok": chk.returncode == 0, "check_output": chk.stdout.strip()}
                if orts:
                    row["ort"] = median_of_rounds(orts)
                    row["ort_over_coil"] = row["ort"]["median_ms"] / c["median_ms"]
                out["rows"].append(row)
                print(f"   {threads} threads: coil {c['median_ms']:.2f} ms, eager "
                      f"{e['median_ms']:.2f} ms", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["load_average_end"] = open("/proc/loadavg").read().strip()
    path = args.json or os.path.join(
        ROOT, "bench", "results",
        f"models-{datetime.datetime.now().strftime('%Y-%m-%dT%H%M%S')}.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print_table(out["rows"])
    print(f"\nload average: {out['load_average_start']} -> {out['load_average_end']}; "
          f"first coil compile (one-off) {out['coil_first_compile_s']:.2f} s; wrote {path}")
    return 0 if all(r["check_ok"] for r in out["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
