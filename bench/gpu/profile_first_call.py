#!/usr/bin/env python3
"""Where a coil module's cold first call spends its time (issue 25), on the GPU machine.

    python3 bench/gpu/profile_first_call.py --dir build/compile-latency --model shufflenet \
        [--variant default] [--out DIR] [--no-cprofile]

Sets fresh COIL_CACHE_DIR, TRITON_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR (a new temp dir) unless
they are set, builds the model and its inputs as bench/gpu/compile_latency.py's child does, then
times load_module + the first call under cProfile (the main thread; --no-cprofile: without it)
and with wrappers that add up, per thread kind (main / pool), the time and count of: Triton's
compile (triton.compiler.compile), CompiledKernel._init_handles (loading the binary and building
the C launcher), the subprocess calls (gcc for launchers), coil's config timing (autotune._bench)
and the waits for compile futures. Writes DIR/pstats_cumulative.txt, DIR/pstats_tottime.txt,
DIR/summary.json (DIR: --out, default the current directory) and prints the summary.
"""

import argparse
import cProfile
import functools
import io
import json
import os
import pstats
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

_stats = {}
_lock = threading.Lock()
_done = []  # perf_counter() of each finished process-pool compile


def _record(name, seconds):
    kind = "main" if threading.current_thread() is threading.main_thread() else "pool"
    with _lock:
        entry = _stats.setdefault(f"{name} [{kind}]", [0, 0.0])
        entry[0] += 1
        entry[1] += seconds


def _wrap(owner, attr, name):
    fn = getattr(owner, attr, None)
    if fn is None or getattr(fn, "_coil_profiled", False):
        return False

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _record(name, time.perf_counter() - t0)
    wrapper._coil_profiled = True
    setattr(owner, attr, wrapper)
    return True


def instrument():
    import subprocess

    import triton.compiler.compiler as tcc

    from coil_runtime import autotune, heuristics, precompile
    wrapped = []
    submit = precompile.submit_compile

    def timed_submit(*args, **kwargs):  # when each worker compile finishes (s after start)
        future = submit(*args, **kwargs)
        future.add_done_callback(lambda f: _done.append(time.perf_counter()))
        return future
    precompile.submit_compile = timed_submit
    for owner, attr, name in (
            (tcc, "compile", "triton.compile"),
            (tcc.CompiledKernel, "_init_handles", "CompiledKernel._init_handles"),
            (subprocess, "check_call", "subprocess.check_call"),
            (subprocess, "run", "subprocess.run"),
            (subprocess, "check_output", "subprocess.check_output"),
            (autotune, "_bench", "autotune._bench (timing one config)"),
            (autotune, "benchmark", "autotune.benchmark (one kernel)"),
            (heuristics.CoilAutotuner, "_compile_now", "CoilAutotuner._compile_now"),
            (heuristics.CoilAutotuner, "compile", "CoilAutotuner.compile (incl. waits)"),
            (heuristics.CoilAutotuner, "make_launcher", "CoilAutotuner.make_launcher"),
            (precompile, "specialization_of", "precompile.specialization_of"),
            (precompile, "_in_disk_cache", "precompile._in_disk_cache"),
            (precompile, "discover", "precompile.discover (the compile pass)"),
    ):
        if _wrap(owner, attr, name):
            wrapped.append(name)
    try:  # Triton's launcher build (names differ between versions)
        import triton.backends.nvidia.driver as drv
        import triton.runtime.build as build
        for owner, attr in ((build, "_build"), (build, "compile_module_from_src"),
                            (drv, "compile_module_from_src")):
            if _wrap(owner, attr, f"{owner.__name__}.{attr}"):
                wrapped.append(f"{owner.__name__}.{attr}")
    except ImportError:
        pass
    triton_compile = tcc.compile
    import triton.runtime.jit as jit
    if getattr(jit, "compile", None) is not None and not getattr(jit.compile, "_coil_profiled",
                                                                 False):
        jit.compile = triton_compile  # the JIT's own reference
    return wrapped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--variant", default="default")
    ap.add_argument("--out", default=".")
    ap.add_argument("--no-cprofile", action="store_true")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="coil-prof-")
    for var in ("COIL_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        os.environ.setdefault(var, os.path.join(root, var.lower()))
    import torch
    import triton  # noqa: F401

    import compile_latency as cl
    from coil_runtime import runtime
    wrapped = instrument()
    folder = os.path.join(a.dir, a.model)
    summary = {"model": a.model, "variant": a.variant, "wrapped": wrapped,
               "triton_cache": os.environ["TRITON_CACHE_DIR"]}
    prof = None if a.no_cprofile else cProfile.Profile()
    with runtime.fp32_precision("highest"), torch.no_grad():
        model, x, args, ref = cl.setup(a.model, folder)
        path = os.path.join(folder, cl.VARIANTS[a.variant], "module.py")
        t0 = time.perf_counter()
        if prof:
            prof.enable()
        mod = runtime.load_module(path)
        summary["load_s"] = round(time.perf_counter() - t0, 3)
        (out,) = mod.call(list(args))
        torch.cuda.synchronize()
        if prof:
            prof.disable()
        summary["first_call_s"] = round(time.perf_counter() - t0, 3)
        t1 = time.perf_counter()
        mod.call(list(args))
        torch.cuda.synchronize()
        summary["second_call_ms"] = round((time.perf_counter() - t1) * 1e3, 2)
        summary["rel_err"] = cl.rel_err(out.float(), ref.float())
        summary.update(cl.tuner_summary(mod))
    if _done:
        summary["worker_compiles_done_s"] = [round(min(_done) - t0, 2),
                                             round(max(_done) - t0, 2), len(_done)]
    summary["counters"] = {k: {"calls": v[0], "seconds": round(v[1], 3)}
                           for k, v in sorted(_stats.items())}
    files = {}
    for dirpath, _, names in os.walk(os.environ["TRITON_CACHE_DIR"]):
        for n in names:
            ext = os.path.splitext(n)[1] or n
            files[ext] = files.get(ext, 0) + 1
    summary["triton_cache_files"] = files
    os.makedirs(a.out, exist_ok=True)
    if prof:
        for key in ("cumulative", "tottime"):
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats(key).print_stats(80)
            with open(os.path.join(a.out, f"pstats_{key}.txt"), "w") as f:
                f.write(s.getvalue())
        prof.dump_stats(os.path.join(a.out, "first_call.prof"))
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps(summary, indent=1), flush=True)


if __name__ == "__main__":
    main()
