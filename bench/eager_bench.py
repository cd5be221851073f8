#!/usr/bin/env python3
"""The PyTorch half of coil's CPU benchmark suite (docs/benchmarks.md).

Times the suite's workloads with PyTorch eager and, where torch >= 2 provides it, with
torch.compile's Inductor CPU backend, at each thread count (torch.set_num_threads), as the
median of timed runs after warm-up, and prints JSON (to --json FILE, or stdout).

Outputs are reused: eager writes into preallocated outputs (out= or in-place ops) where torch
has them; where it has not (layer_norm; Inductor's compiled functions always return fresh
tensors), the process runs with glibc's mmap threshold raised (MALLOC_MMAP_THRESHOLD_, set by
re-executing itself) so that a freed 64 MiB output goes back to the heap and the next call
reuses it instead of page-faulting fresh memory. --no-heap-reuse turns that off.

  /usr/bin/python3 bench/eager_bench.py [--threads 1,2] [--runs 20] [--warmup 3]
      [--workloads a,b,...] [--scale 1.0] [--backends auto|eager,inductor_alloc,inductor]
      [--json FILE]

Only the standard library and torch are needed (no numpy), so it runs on any host with torch.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time

BACKENDS = ("eager", "inductor", "inductor_alloc")
HEAP_ENV = {
    # Allocations below 4 GiB come from the heap, and the heap is not trimmed: a freed output
    # is reused by the next call's allocation of the same size.
    "MALLOC_MMAP_THRESHOLD_": str(4 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(16 << 30),
}
REEXEC_MARK = "COIL_EAGER_BENCH_REEXEC"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--runs", type=int, default=20, help="timed runs per measurement (>= 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed runs before timing")
    p.add_argument("--workloads", default="", help="comma-separated ids (default: all)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiplies the leading dimension of every workload (default 1)")
    p.add_argument("--backends", default="auto",
                   help="'auto' (eager, plus inductor and inductor_alloc when "
                        "torch.compile exists) or a list of\n"
                        "eager, inductor (outputs stored into preallocated tensors),\n"
                        "inductor_alloc (the compiled function returns fresh outputs)")
    p.add_argument("--json", default="", help="write the results here (default: stdout)")
    p.add_argument("--no-heap-reuse", action="store_true",
                   help="do not raise glibc's mmap threshold (fresh outputs page-fault)")
    p.add_argument("--inductor-cache-dir", default="",
                   help="TORCHINDUCTOR_CACHE_DIR (default: a fresh temporary directory, so "
                        "compile times are cold)")
    p.add_argument("--no-check", action="store_true",
                   help="do not compare Inductor's results with eager's")
    p.add_argument("--list", action="store_true", help="list the workloads and exit")
    a = p.parse_args()
    a.threads = [int(t) for t in a.threads.split(",") if t]
    if not a.threads or min(a.threads) < 1:
        p.error("--threads needs positive counts")
    if a.runs < 1 or a.warmup < 0:
        p.error("--runs must be positive and --warmup >= 0")
    if a.scale <= 0:
        p.error("--scale must be positive")
    return a


def maybe_reexec(args):
    """Re-runs this script with the heap-reuse malloc settings (they must be set before the
    process starts) and, for Inductor, a private cache directory."""
    if os.environ.get(REEXEC_MARK):
        return
    env = dict(os.environ)
    env[REEXEC_MARK] = "1"
    if not args.no_heap_reuse:
        env.update(HEAP_ENV)
    if args.inductor_cache_dir:
        env["TORCHINDUCTOR_CACHE_DIR"] = args.inductor_cache_dir
    elif "TORCHINDUCTOR_CACHE_DIR" not in env:
        env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="coil-bench-inductor-")
        env["COIL_EAGER_BENCH_OWN_CACHE"] = env["TORCHINDUCTOR_CACHE_DIR"]
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


# ------------------------------------------------------------------ workloads


def scaled(n, s):
    return max(1, int(round(n * s)))


def make_workloads(torch, s):
    """Each workload: id, desc, make_inputs() -> list of tensors, eager(inputs) -> a callable
    that writes preallocated outputs (and the outputs), natural(*inputs) -> outputs (what
    torch.compile compiles), and notes."""
    F = torch.nn.functional
    n16m, rows = scaled(16 << 20, s), scaled(16384, s)
    frows, irows = scaled(4096, s), scaled(10000, s)

    def rand(shape, dtype, seed):
        g = torch.Generator().manual_seed(seed)
        return (torch.rand(shape, generator=g) * 4 - 2).to(dtype)

    def has_out(fn, *a):
        try:
            fn(*a)
            return True
        except (TypeError, RuntimeError):
            return False

    # (a), (k): x*0.5+1 as two in-place passes over the output.
    def scale_shift_eager(inp):
        (x,) = inp
        o = torch.empty_like(x)

        def run():
            torch.mul(x, 0.5, out=o)
            o.add_(1.0)

        return run, [o], ""

    # (b), (j): gelu(x*w+b) as three passes over the output.
    def gelu_eager(inp):
        x, w, b = inp
        o = torch.empty_like(x)
        gelu_out = has_out(lambda: torch._C._nn.gelu(o[:1], out=o[:1]))

        def run():
            torch.mul(x, w, out=o)
            o.add_(b)
            if gelu_out:
                torch._C._nn.gelu(o, out=o)
            else:
                o.copy_(F.gelu(o))

        return run, [o], "" if gelu_out else "gelu has no out=: a fresh temporary per call"

    def softmax_eager(inp):
        (x,) = inp
        o = torch.empty_like(x)
        ok = has_out(lambda: torch.softmax(x[:1], -1, out=o[:1]))
        if ok:
            return (lambda: torch.softmax(x, -1, out=o)), [o], ""
        return (lambda: torch.softmax(x, -1)), [o], "softmax has no out=: allocates its output"

    def layer_norm_eager(inp):
        x, w, b = inp
        shape = (x.shape[-1],)
        return ((lambda: F.layer_norm(x, shape, w, b, 1e-5)), [torch.empty_like(x)],
                "layer_norm has no out=: allocates its output (and mean/rstd) each call")

    def sum_eager(dim):
        def make(inp):
            (x,) = inp
            o = torch.sum(x, dim)
            return (lambda: torch.sum(x, dim, out=o)), [o], ""
        return make

    def tadd_eager(inp):
        x, y = inp
        o = torch.empty_like(y)
        return (lambda: torch.add(x.t(), y, out=o)), [o], ""

    def gelu_inputs(dtype):
        return lambda: [rand((rows, 1024), dtype, 1), rand((1024,), dtype, 2),
                        rand((1024,), dtype, 3)]

    f32, bf16 = torch.float32, torch.bfloat16
    return [
        dict(id="a", desc=f"x*0.5+1, f32[{n16m}]", inputs=lambda: [rand((n16m,), f32, 1)],
             eager=scale_shift_eager, natural=lambda x: x * 0.5 + 1),
        dict(id="b", desc=f"gelu(x*w+b), f32[{rows}, 1024]", inputs=gelu_inputs(f32),
             eager=gelu_eager, natural=lambda x, w, b: F.gelu(x * w + b)),
        dict(id="c", desc=f"softmax(-1), f32[{rows}, 1024]",
             inputs=lambda: [rand((rows, 1024), f32, 1)], eager=softmax_eager,
             natural=lambda x: torch.softmax(x, -1)),
        dict(id="d", desc=f"layer_norm(w, b), f32[{rows}, 1024]", inputs=gelu_inputs(f32),
             eager=layer_norm_eager,
             natural=lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)),
        dict(id="e1", desc=f"sum(-1), f32[{rows}, 1024]",
             inputs=lambda: [rand((rows, 1024), f32, 1)], eager=sum_eager(-1),
             natural=lambda x: x.sum(-1)),
        dict(id="e0", desc=f"sum(0), f32[{rows}, 1024]",
             inputs=lambda: [rand((rows, 1024), f32, 1)], eager=sum_eager(0),
             natural=lambda x: x.sum(0)),
        dict(id="f", desc=f"x.t()+y, x f32[{frows}, 4096]",
             inputs=lambda: [rand((frows, 4096), f32, 1), rand((4096, frows), f32, 2)],
             eager=tadd_eager, natural=lambda x, y: x.t() + y),
        dict(id="i", desc=f"softmax(-1), f32[{irows}, 1000]",
             inputs=lambda: [rand((irows, 1000), f32, 1)], eager=softmax_eager,
             natural=lambda x: torch.softmax(x, -1)),
        dict(id="j", desc=f"gelu(x*w+b), bf16[{rows}, 1024]", inputs=gelu_inputs(bf16),
             eager=gelu_eager, natural=lambda x, w, b: F.gelu(x * w + b)),
        dict(id="k", desc=f"x*0.5+1, f32[{n16m + 3}] (tail)",
             inputs=lambda: [rand((n16m + 3,), f32, 1)], eager=scale_shift_eager,
             natural=lambda x: x * 0.5 + 1),
    ]


# ------------------------------------------------------------------ timing


def time_it(fn, warmup, runs):
    """Median of `runs` timed calls after `warmup` untimed ones, and the minor page faults per
    timed call (about 16384 for a 64 MiB output that is page-faulted afresh; 0 when reused)."""
    for _ in range(warmup):
        fn()
    t = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        t.append((time.perf_counter() - start) * 1e3)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    return {"median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t), "runs": runs,
            "minor_faults_per_run": faults / runs}


def nbytes(t):
    return t.numel() * t.element_size()


def time_inductor(torch, w, inputs, min_bytes, variant, args, log):
    """torch.compile (Inductor) of the workload, compiled afresh for each thread count (the
    count is a literal in Inductor's C++). "inductor" compiles `out.copy_(f(*inputs))`, which
    Inductor turns into kernels storing straight into the preallocated `out` (outputs reused);
    "inductor_alloc" compiles `f(*inputs)`, which returns a fresh tensor per call."""
    natural = w["natural"]
    want = natural(*inputs)
    if variant == "inductor":
        out = torch.empty_like(want)

        def fn(*a):
            a[-1].copy_(natural(*a[:-1]))

        args_ = list(inputs) + [out]
    else:
        fn, args_ = natural, list(inputs)
    rows = []
    for t in args.threads:
        torch.set_num_threads(t)
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="inductor")
        t0 = time.perf_counter()
        got = compiled(*args_)
        compile_ms = (time.perf_counter() - t0) * 1e3
        if variant == "inductor":
            got = out
        check = None
        if not args.no_check:
            # A sanity check, not a numerics test: the tolerance scales with the largest
            # |value| (sums over 16384 elements differ by summation order).
            tol = 2e-2 if want.dtype == torch.bfloat16 else 1e-4
            scale = max(1.0, want.float().abs().max().item())
            diff = (got.float() - want.float()).abs().max().item()
            check = {"ok": diff <= tol * scale, "max_abs_diff": diff, "tolerance": tol * scale}
        del got
        tm = time_it(lambda: compiled(*args_), args.warmup, args.runs)
        tm.update({"threads": t, "torch_threads": torch.get_num_threads(),
                   "gbps": min_bytes / (tm["median_ms"] * 1e-3) / 1e9,
                   "compile_ms": compile_ms, "check_vs_eager": check})
        rows.append(tm)
        log(f"{w['id']:<4} {variant:<14} {t:>3} thr {tm['median_ms']:9.3f} ms "
            f"{tm['gbps']:6.1f} GB/s  {tm['minor_faults_per_run']:7.0f} faults/run  "
            f"(compile {compile_ms:.0f} ms"
            f"{'' if check is None else ', check ' + ('ok' if check['ok'] else 'FAIL')})")
    torch._dynamo.reset()
    notes = ("out.copy_(f(x)) compiled: stores into a preallocated output" if variant == "inductor"
             else "f(x) compiled: a fresh output per call (the raised mmap threshold lets the "
                  "heap reuse the freed one)")
    return {"notes": notes, "threads": rows}


def main():
    args = parse_args()
    if args.list:
        import torch
        for w in make_workloads(torch, args.scale):
            print(f"{w['id']:<4} {w['desc']}")
        return 0
    maybe_reexec(args)
    own_cache = os.environ.get("COIL_EAGER_BENCH_OWN_CACHE")
    if own_cache:  # the private Inductor cache made by maybe_reexec goes away on any exit
        import atexit
        import shutil
        atexit.register(shutil.rmtree, own_cache, True)
    if args.runs < 10:
        print(f"warning: --runs {args.runs} is below the suite's minimum of 10", file=sys.stderr)

    import torch

    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2]
                    if p.isdigit())
    has_compile = hasattr(torch, "compile") and version >= (2, 0)
    if args.backends == "auto":
        backends = ["eager"] + (["inductor", "inductor_alloc"] if has_compile else [])
    else:
        backends = [b for b in args.backends.split(",") if b]
        for b in backends:
            if b not in BACKENDS:
                sys.exit(f"eager_bench: unknown backend '{b}' (known: {', '.join(BACKENDS)})")
        if any(b.startswith("inductor") for b in backends) and not has_compile:
            sys.exit(f"eager_bench: torch {torch.__version__} has no torch.compile")

    workloads = make_workloads(torch, args.scale)
    if args.workloads:
        ids = [w for w in args.workloads.split(",") if w]
        by_id = {w["id"]: w for w in workloads}
        for i in ids:
            if i not in by_id:
                sys.exit(f"eager_bench: unknown workload '{i}'")
        workloads = [by_id[i] for i in ids]

    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    out = {
        "tool": "eager_bench",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {"machine": platform.machine(), "processor": platform.processor(),
                 "logical_cpus": os.cpu_count(), "python": sys.executable,
                 "python_version": platform.python_version()},
        "torch_version": torch.__version__,
        "torch_parallel_info": torch.__config__.parallel_info(),
        "config": {"threads": args.threads, "runs": args.runs, "warmup": args.warmup,
                   "scale": args.scale, "backends": backends,
                   "heap_reuse_env": {k: os.environ.get(k) for k in HEAP_ENV},
                   "inductor_cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR")},
        "load_average_start": open("/proc/loadavg").read().strip(),
    }
    log(f"torch {torch.__version__}, backends {backends}, threads {args.threads}")

    if any(b.startswith("inductor") for b in backends):
        import torch._dynamo
        import torch._inductor.config as iconfig
        # Every compile is cold: no FX graph cache (which would also hand a graph compiled for
        # one thread count to another: the count is a literal in Inductor's C++).
        if hasattr(iconfig, "fx_graph_cache"):
            iconfig.fx_graph_cache = False
        torch._dynamo.reset()
        x = torch.ones(64)
        t0 = time.perf_counter()
        torch.compile(lambda a: a + 1, backend="inductor")(x)
        out["inductor_first_compile_ms"] = (time.perf_counter() - t0) * 1e3
        log(f"inductor: first compile in the process (x+1 on 64 floats, includes the ISA "
            f"probe): {out['inductor_first_compile_ms']:.0f} ms")

    results = []
    for w in workloads:
        inputs = w["inputs"]()
        run, outs, note = w["eager"](inputs)
        min_bytes = sum(nbytes(t) for t in inputs) + sum(nbytes(t) for t in outs)
        r = {"id": w["id"], "desc": w["desc"], "min_bytes": min_bytes,
             "inputs": [{"dtype": str(t.dtype), "shape": list(t.shape)} for t in inputs],
             "backends": {}}
        if "eager" in backends:
            rows = []
            for t in args.threads:
                torch.set_num_threads(t)
                tm = time_it(run, args.warmup, args.runs)
                tm["threads"] = t
                tm["torch_threads"] = torch.get_num_threads()
                tm["gbps"] = min_bytes / (tm["median_ms"] * 1e-3) / 1e9
                rows.append(tm)
                log(f"{w['id']:<4} {'eager':<14} {t:>3} thr {tm['median_ms']:9.3f} ms "
                    f"{tm['gbps']:6.1f} GB/s  {tm['minor_faults_per_run']:7.0f} faults/run")
            r["backends"]["eager"] = {"notes": note, "threads": rows}
        for variant in backends:  # in the order given
            if variant.startswith("inductor"):
                r["backends"][variant] = time_inductor(torch, w, inputs, min_bytes, variant,
                                                       args, log)
        results.append(r)
        del inputs, outs, run
    out["workloads"] = results
    out["load_average_end"] = open("/proc/loadavg").read().strip()

    text = json.dumps(out, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
        log(f"wrote {args.json}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
