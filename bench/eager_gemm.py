#!/usr/bin/env python3
"""The PyTorch eager half of coil's matmul benchmark (docs/benchmarks.md, "Matmul").

Times, at each thread count (torch.set_num_threads), as the median of timed calls after
warm-up (each call timed on its own, back to back), writing into preallocated outputs where
torch has out=:
  sq<n>          torch.mm(a, b, out=c), f32 [n, n] for n in --sizes (default 256,512,1024,2048)
  xw             torch.mm(x, W, out=y), x [512, 1024], W [1024, 1024]
  xw_bias_relu   torch.addmm(b, x, W, out=y); y.relu_()   (eager: two passes)
  mlp3           3 x (nn.Linear(256, 256) + nn.ReLU()) on x [64, 256], inference mode (torch's
                 Linear is x @ W^T + b; allocates its outputs); at least 100 timed calls
  bf16_sq<n>     torch.mm(a, b, out=c), bf16 [n, n] (bf16 result) for n in --bf16-sizes
                 (default 2048; oneDNN, on AMX where the CPU has it)
--bf16-only keeps just the bf16 rows (bench/amx/run_device.sh).
and writes JSON rows in coil_gemm_bench's schema (--json FILE, or stdout), which
`coil_gemm_bench --torch FILE` adds to its table.

Debian's torch 1.13 does its f32 GEMMs in OpenBLAS's pthread build (BLAS_INFO=generic, through
libblas.so.3), whose own thread pool ignores torch.set_num_threads and uses every core: a
"1 thread" measurement would then run on all of them. So the thread count is also given to
OpenBLAS (openblas_set_num_threads, through ctypes on the library torch loaded);
--no-pin-blas-threads measures torch as it behaves by default. Each row records the count
OpenBLAS reported.

  /usr/bin/python3 bench/eager_gemm.py [--threads 1,2] [--runs 10] [--warmup 2]
      [--sizes 256,512,1024,2048] [--bf16-sizes 2048] [--bf16-only] [--json FILE]

Only the standard library and torch (Debian's python3-torch 1.13, or a venv's torch).
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    p.add_argument("--runs", type=int, default=10, help="timed calls per measurement (>= 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before timing")
    p.add_argument("--sizes", default="256,512,1024,2048", help="square GEMM sizes")
    p.add_argument("--bf16-sizes", default="2048", help="square bf16 GEMM sizes")
    p.add_argument("--bf16-only", action="store_true", help="only the bf16 rows")
    p.add_argument("--json", default="", help="write the results here (default: stdout)")
    p.add_argument("--no-pin-blas-threads", action="store_true",
                   help="leave OpenBLAS's own thread count alone (default: set it to each count)")
    a = p.parse_args()
    a.threads = [int(t) for t in a.threads.split(",") if t]
    a.sizes = [int(s) for s in a.sizes.split(",") if s]
    a.bf16_sizes = [int(s) for s in a.bf16_sizes.split(",") if s]
    if not a.threads or min(a.threads) < 1:
        p.error("--threads needs positive counts")
    if a.runs < 1 or a.warmup < 0 or not a.sizes or min(a.sizes) < 1:
        p.error("--runs and --sizes must be positive and --warmup >= 0")
    return a


def loaded_openblas():
    """The OpenBLAS that torch loaded (a ctypes handle), or None."""
    import ctypes
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "openblas" in line and "/" in line}
    # The library itself first (libopenblas*.so), then wrappers that depend on it (libblas.so.3).
    for path in sorted((p for p in paths if ".so" in p), key=lambda p: "libopenblas" not in p):
        try:
            lib = ctypes.CDLL(path)
            lib.openblas_get_num_threads  # noqa: B018 (raises AttributeError when missing)
            return lib, path
        except (OSError, AttributeError):
            continue
    return None, None


def time_it(fn, warmup, runs):
    for _ in range(warmup):
        fn()
    t = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        t.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t), "runs": runs}


def workloads(torch, sizes, bf16_sizes, bf16_only):
    """(id, desc, flops, dtype, runs_at_least, note, make) where make() returns the callable."""
    nn = torch.nn

    def rand(*shape, dtype=torch.float32, seed=0):
        g = torch.Generator().manual_seed(seed)
        return (torch.rand(shape, generator=g) * 2 - 1).to(dtype)

    out = []
    for n in sizes:
        def square(n=n):
            a, b, c = rand(n, n, seed=1), rand(n, n, seed=2), torch.empty(n, n)
            return lambda: torch.mm(a, b, out=c)
        out.append((f"sq{n}", f"A@B, f32[{n},{n}]", 2.0 * n ** 3, "f32", 0, "", square))

    def xw():
        x, w, y = rand(512, 1024, seed=3), rand(1024, 1024, seed=4), torch.empty(512, 1024)
        return lambda: torch.mm(x, w, out=y)

    def xw_bias_relu():
        x, w, b = rand(512, 1024, seed=3), rand(1024, 1024, seed=4), rand(1024, seed=5)
        y = torch.empty(512, 1024)

        def run():
            torch.addmm(b, x, w, out=y)
            y.relu_()
        return run

    def mlp3():
        torch.manual_seed(6)
        layers = []
        for _ in range(3):
            layers += [nn.Linear(256, 256), nn.ReLU()]
        model = nn.Sequential(*layers).eval()
        x = rand(64, 256, seed=7)

        def run():
            with torch.inference_mode():
                model(x)
        return run

    bf16_rows = []
    for n in bf16_sizes:
        def bf16(n=n):
            a = rand(n, n, dtype=torch.bfloat16, seed=8)
            b = rand(n, n, dtype=torch.bfloat16, seed=9)
            c = torch.empty(n, n, dtype=torch.bfloat16)
            return lambda: torch.mm(a, b, out=c)
        bf16_rows.append((f"bf16_sq{n}", f"A@B, bf16[{n},{n}]", 2.0 * n ** 3, "bf16", 0,
                          "bf16 result", bf16))
    if bf16_only:
        return bf16_rows

    xw_flops = 2.0 * 512 * 1024 * 1024
    out += [
        ("xw", "x@W, x[512,1024] W[1024,1024]", xw_flops, "f32", 0, "", xw),
        ("xw_bias_relu", "relu(x@W+b), as xw", xw_flops, "f32", 0, "addmm(out=) + relu_",
         xw_bias_relu),
        ("mlp3", "3x relu(linear), x[64,256], W[256,256]", 3 * 2.0 * 64 * 256 * 256, "f32", 100,
         "nn.Sequential, allocates outputs", mlp3),
    ]
    return out + bf16_rows


def main():
    args = parse_args()
    if args.runs < 10:
        print(f"warning: --runs {args.runs} is below the suite's minimum of 10", file=sys.stderr)
    import torch

    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    config = torch.__config__.show()
    blas = [line.strip() for line in config.splitlines() if "BLAS_INFO" in line or "MKLDNN" in line
            or "oneDNN" in line or "LAPACK" in line]
    result = {
        "tool": "eager_gemm",
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": {"machine": platform.machine(), "logical_cpus": os.cpu_count(),
                 "python": sys.executable, "python_version": platform.python_version()},
        "torch_version": torch.__version__,
        "torch_config": blas,
        "torch_parallel_info": torch.__config__.parallel_info(),
        "config": {"threads": args.threads, "runs": args.runs, "warmup": args.warmup,
                   "sizes": args.sizes, "bf16_sizes": args.bf16_sizes,
                   "bf16_only": args.bf16_only},
        "load_average_start": open("/proc/loadavg").read().strip(),
    }
    torch.mm(torch.ones(4, 4), torch.ones(4, 4))  # loads the BLAS
    blas, blas_path = loaded_openblas()
    if blas is not None:
        flavour = {0: "sequential", 1: "pthread", 2: "OpenMP"}.get(blas.openblas_get_parallel(), "?")
        result["openblas"] = {"path": blas_path, "parallel": flavour,
                              "pinned_to_torch_threads": not args.no_pin_blas_threads}
    log(f"torch {torch.__version__}, threads {args.threads}, {args.warmup} warm-up + "
        f"{args.runs} timed calls (median); OpenBLAS: {result.get('openblas')}")
    rows = []
    for t in args.threads:
        torch.set_num_threads(t)
        if blas is not None and not args.no_pin_blas_threads:
            blas.openblas_set_num_threads(t)
        blas_threads = blas.openblas_get_num_threads() if blas is not None else None
        rows_of = workloads(torch, args.sizes, args.bf16_sizes, args.bf16_only)
        for wid, desc, flops, dtype, min_runs, note, make in rows_of:
            fn = make()
            tm = time_it(fn, max(args.warmup, 10 if min_runs else 0), max(args.runs, min_runs))
            row = {"id": wid, "desc": desc, "backend": "torch_eager", "threads": t,
                   "torch_threads": torch.get_num_threads(), "openblas_threads": blas_threads,
                   "flops": flops, **tm,
                   "gflops": flops / (tm["median_ms"] * 1e-3) / 1e9, "dtype": dtype,
                   "note": note}
            rows.append(row)
            log(f"{wid:<14} {t:>3} thr {tm['median_ms'] * 1e3:11.1f} us "
                f"{row['gflops']:8.1f} GFLOP/s  {note}")
            del fn
    result["rows"] = rows
    result["load_average_end"] = open("/proc/loadavg").read().strip()
    text = json.dumps(result, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
        log(f"wrote {args.json}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
