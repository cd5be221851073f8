"""Choosing a kernel's launch config: benchmark once per size bucket, cache the winner on disk.

On the first call of a kernel with a new size bucket (each numel rounded up to a power of two)
and more than one config:

1. look for `<cache>/triton_autotune/<name>-<hash>.json`, keyed by the kernel hash, the bucket
   and `torch.cuda.get_device_name()`; a valid entry naming one of the current configs is used
   as is ("cache hit", no benchmarking);
2. otherwise compile every config for the call's arguments, skip those that fail to compile or
   spill registers (n_spills > 0; all of them are timed if every config spills), time the rest
   with `triton.testing.do_bench` (median) on clones of the output arguments (so the real
   outputs are untouched and in-place kernels do not accumulate), pick the fastest, and write
   the entry atomically.

`<cache>` is $COIL_CACHE_DIR, else $XDG_CACHE_HOME/coil, else ~/.cache/coil (as coil's code
cache). `COIL_LOGS=autotune` prints the table of configs and times, and cache hits.
"""

import hashlib
import json
import os
import tempfile
import time

from . import configs as cfgs
from .logs import log, warn

CACHE_VERSION = 1
BENCH_WARMUP_MS = 5
BENCH_REP_MS = 25

_do_bench = None        # triton.testing.do_bench unless replaced (tests)
_device_names = {}      # device index -> name


def set_benchmarker(fn):
    """Replaces do_bench: fn(callable) -> milliseconds. None restores Triton's."""
    global _do_bench
    _do_bench = fn


def _bench(fn):
    if _do_bench is not None:
        return _do_bench(fn)
    from triton.testing import do_bench
    return do_bench(fn, warmup=BENCH_WARMUP_MS, rep=BENCH_REP_MS, return_mode="median")


def size_bucket(numels):
    """{'x': 1000, 'r0_': 3} -> (('x', 1024), ('r0_', 4))."""
    return tuple((p, cfgs.next_power_of_2(n)) for p, n in numels.items())


def bucket_str(bucket):
    return ", ".join(f"{p.rstrip('_')}={n}" for p, n in bucket)


def cache_dir():
    root = os.environ.get("COIL_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "coil") if xdg else os.path.join(
            os.path.expanduser("~"), ".cache", "coil")
    return os.path.join(root, "triton_autotune")


def configs_hash(configs):
    """Identifies the config list: a cached winner is only used for the same list."""
    text = "\n".join(repr(c.key()) for c in configs)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_path(tuner, bucket, device):
    ident = tuner.kernel_hash or tuner.name
    key = f"{ident}|{bucket_str(bucket)}|{device}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    safe = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in tuner.name)[:80]
    return os.path.join(cache_dir(), f"{safe}-{digest}.json")


def device_name(args):
    index = next((a.device.index for a in args if hasattr(a, "device") and
                  getattr(a.device, "type", "") == "cuda"), None)
    if index not in _device_names:
        import torch
        _device_names[index] = torch.cuda.get_device_name(index)
    return _device_names[index]


def read_cache(tuner, bucket, device):
    """The cached best Config for this kernel, bucket and device, or None."""
    path = cache_path(tuner, bucket, device)
    try:
        with open(path) as f:
            entry = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        warn(f"ignoring unreadable autotune cache entry {path}: {e}")
        return None
    try:
        if (entry.get("version") != CACHE_VERSION or entry.get("device") != device or
                entry.get("kernel_hash") != tuner.kernel_hash or
                entry.get("configs_hash") != configs_hash(tuner.configs)):
            return None
        best = cfgs.Config.from_json(entry["best"])
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    for c in tuner.configs:  # only ever one of our own configs
        if c.key() == best.key():
            return c
    return None


def write_cache(tuner, bucket, device, best, rows, seconds):
    entry = {
        "version": CACHE_VERSION,
        "kernel": tuner.name,
        "kernel_hash": tuner.kernel_hash,
        "bucket": {p: n for p, n in bucket},
        "device": device,
        "configs_hash": configs_hash(tuner.configs),
        "best": best.to_json(),
        "timings": [{"config": r["config"].to_json(), "ms": r["ms"], "status": r["status"],
                     "n_regs": r["n_regs"], "n_spills": r["n_spills"]} for r in rows],
        "tuning_seconds": round(seconds, 3),
    }
    path = cache_path(tuner, bucket, device)
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(entry, f, indent=1)
        os.replace(tmp, path)  # atomic: concurrent processes see the old or the new entry
    except OSError as e:
        warn(f"could not write the autotune cache entry {path}: {e}")
        return None
    return path


def _bench_args(tuner, args):
    """The arguments to benchmark with: outputs (out_ptr*, in_out_ptr*) cloned."""
    out = list(args)
    for i in tuner.mutated_pos:
        if hasattr(out[i], "clone"):
            out[i] = out[i].clone()
    return tuple(out)


def benchmark(tuner, args):
    """Compiles and times every config; returns rows {config, ms, status, n_regs, n_spills}."""
    bench_args = _bench_args(tuner, args)
    rows = []
    for c in tuner.configs:
        row = {"config": c, "ms": None, "status": "", "n_regs": None, "n_spills": None}
        rows.append(row)
        try:
            tuner.compile(c, bench_args)
            info = tuner.binary_info.get(c.key(), {})
            row["n_regs"], row["n_spills"] = info.get("n_regs"), info.get("n_spills")
            row["launcher"] = tuner.make_launcher(c, bench_args)
            row["status"] = "ok"
        except Exception as e:  # CompilationError, OutOfResources, PTXASError, ...
            row["status"] = f"compile failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    compiled = [r for r in rows if r["status"] == "ok"]
    if not compiled:
        raise RuntimeError(f"{tuner.name}: no config compiled:\n" +
                           "\n".join(f"  {r['config']}: {r['status']}" for r in rows))
    no_spill = [r for r in compiled if not r["n_spills"]]
    for r in compiled:
        if no_spill and r["n_spills"]:
            r["status"] = f"skipped: {r['n_spills']} spills"
    for r in (no_spill or compiled):
        launcher = r["launcher"]
        try:
            r["ms"] = float(_bench(lambda: launcher(bench_args, None)))
        except Exception as e:
            r["status"] = f"launch failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    for r in rows:
        r.pop("launcher", None)
    return rows


def choose_config(tuner, args, numels, bucket):
    """The config for this bucket: the only one, a disk-cache hit, or the benchmark winner."""
    if len(tuner.configs) == 1:
        return tuner.configs[0]
    device = device_name(args)
    cached = read_cache(tuner, bucket, device)
    if cached is not None:
        log("autotune", f"{tuner.name} ({bucket_str(bucket)}) on {device}: cache hit, {cached}")
        tuner.timings[bucket] = "cache hit"
        return cached
    start = time.perf_counter()
    rows = benchmark(tuner, args)
    timed = [r for r in rows if r["ms"] is not None]
    if not timed:
        raise RuntimeError(f"{tuner.name}: every config failed:\n" +
                           "\n".join(f"  {r['config']}: {r['status']}" for r in rows))
    best = min(timed, key=lambda r: r["ms"])["config"]
    seconds = time.perf_counter() - start
    path = write_cache(tuner, bucket, device, best, rows, seconds)
    tuner.timings[bucket] = rows
    lines = [f"{tuner.name} ({tuner.kind}, {bucket_str(bucket)}) on {device}: "
             f"{len(rows)} configs"]
    flops = getattr(tuner, "flops", None)
    for r in rows:
        ms = f"{r['ms']:.4f} ms" if r["ms"] is not None else "-"
        regs = "" if r["n_regs"] is None else f"  regs {r['n_regs']}  spills {r['n_spills']}"
        if flops and r["ms"]:
            regs = f"  {flops / r['ms'] / 1e9:7.1f} TFLOP/s" + regs
        note = "  <- best" if r["config"] is best else (
            "" if r["status"] == "ok" else f"  ({r['status']})")
        label = tuner.extern_label(r["config"]) if cfgs.is_extern(r["config"]) else str(
            r["config"])
        lines.append(f"  {label:<48} {ms:>12}{regs}{note}")
    lines.append(f"  tuned in {seconds:.2f} s; cached in {path}")
    log("autotune", "\n".join(lines))
    return best
