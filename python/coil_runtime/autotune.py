"""Choosing a kernel's launch config: by policy, cached measurements, or benchmarks.

On the first call of a kernel with a new size bucket (each numel rounded up to a power of two)
and more than one config, `candidates` narrows the configs without timing anything:

1. `<cache>/triton_autotune/<name>-<hash>.json`, keyed by the kernel hash, the bucket and
   `torch.cuda.get_device_name()`: a valid entry naming one of the current configs is used as
   is ("cache hit"). An entry records the mode that measured it: a max-autotune run uses only
   entries of a full search; default mode uses either.
2. Default mode, matmul templates: the mm-bucket cache (`mm-<digest>.json`, keyed by the
   product's shape bucket, dtype and device; written by max-autotune searches of any kernel of
   that bucket) when it shows a Triton config faster than cuBLAS and that config is one of this
   kernel's; otherwise the extern choices only (cuBLAS): none of the Triton configs is compiled.
3. Otherwise every config of the list (default mode: Inductor's default lists, a few configs).

With one candidate left, that is the choice. With several, they are compiled in parallel
(`CoilAutotuner.compile_async`), those that fail to compile or spill registers (n_spills > 0;
all of them are timed if every config spills) are skipped, the rest are timed with
`triton.testing.do_bench` (median; briefly in default mode: BENCH_QUICK) on clones of the
output arguments (so the real outputs are untouched and in-place kernels do not accumulate),
the fastest is kept and the entry written atomically.

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
# Default mode's timing of its few candidates (warmup, rep in ms): the configs of a default
# list are close, so a short median is enough to order them and costs a few ms per config.
BENCH_QUICK = (1, 5)
# The mode whose entries a mode may use: a full search's winner is good for either mode.
USABLE_ENTRIES = {"default": ("default", "max-autotune"), "max-autotune": ("max-autotune",),
                  "none": ("default", "max-autotune")}

_do_bench = None        # triton.testing.do_bench unless replaced (tests)
_device_names = {}      # device index -> name


def set_benchmarker(fn):
    """Replaces do_bench: fn(callable) -> milliseconds. None restores Triton's."""
    global _do_bench
    _do_bench = fn


def _bench(fn, quick=False):
    if _do_bench is not None:
        return _do_bench(fn)
    from triton.testing import do_bench
    warmup, rep = BENCH_QUICK if quick else (BENCH_WARMUP_MS, BENCH_REP_MS)
    return do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def size_bucket(numels):
    """{'x': 1000, 'r0_': 3} -> (('x', 1024), ('r0_', 4))."""
    return tuple((p, cfgs.next_power_of_2(n)) for p, n in numels.items())


def bucket_str(bucket):
    return ", ".join(f"{p.rstrip('_')}={n}" for p, n in bucket)


def cache_root():
    """coil's cache directory, as the C++ side finds it: COIL_CACHE_DIR, else
    $XDG_CACHE_HOME/coil, else ~/.cache/coil."""
    root = os.environ.get("COIL_CACHE_DIR")
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = os.path.join(xdg, "coil") if xdg else os.path.join(
            os.path.expanduser("~"), ".cache", "coil")
    return root


def cache_dir():
    return os.path.join(cache_root(), "triton_autotune")


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


def _mode(tuner):
    return getattr(tuner, "mode", "default")


def read_cache(tuner, bucket, device):
    """The cached best Config for this kernel, bucket and device, or None (also when the entry
    was measured by a narrower search than this tuner's mode asks for)."""
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
                entry.get("configs_hash") != configs_hash(tuner.configs) or
                # entries before the modes were full searches
                entry.get("mode", "max-autotune") not in USABLE_ENTRIES[_mode(tuner)]):
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
        "mode": _mode(tuner),
        "best": best.to_json(),
        "timings": [{"config": r["config"].to_json(), "ms": r["ms"], "status": r["status"],
                     "n_regs": r["n_regs"], "n_spills": r["n_spills"]} for r in rows],
        "tuning_seconds": round(seconds, 3),
    }
    return _write_json(cache_path(tuner, bucket, device), entry)


def _write_json(path, entry):
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


# ---------------------------------------------------------------------------------------------
# The mm-bucket cache: what max-autotune measured for a matmul shape bucket, whatever the kernel


def mm_bucket(tuner):
    """The template's product rounded up to powers of two: (('m', M), ('n', N), ...)."""
    return size_bucket({k: tuner.mm[k] for k in ("m", "n", "k", "batch")})


def mm_cache_path(tuner, device):
    key = f"mm|{bucket_str(mm_bucket(tuner))}|{tuner.dtype}|{device}"
    return os.path.join(cache_dir(), f"mm-{hashlib.sha256(key.encode()).hexdigest()[:24]}.json")


def write_mm_cache(tuner, device, rows):
    """After a full template search: the fastest Triton config and the fastest extern time."""
    triton = [r for r in rows if r["ms"] is not None and not cfgs.is_extern(r["config"])]
    extern = [r for r in rows if r["ms"] is not None and cfgs.is_extern(r["config"])]
    if not triton or not extern:
        return None
    best = min(triton, key=lambda r: r["ms"])
    entry = {"version": CACHE_VERSION, "bucket": dict(mm_bucket(tuner)), "dtype": tuner.dtype,
             "device": device, "kernel": tuner.name, "mm": dict(tuner.mm),
             "best": best["config"].to_json(), "template_ms": best["ms"],
             "extern_ms": min(r["ms"] for r in extern)}
    return _write_json(mm_cache_path(tuner, device), entry)


def read_mm_cache(tuner, device):
    """The Triton config measured faster than cuBLAS for this template's mm bucket, dtype and
    device (by any kernel's max-autotune search), if it is one of this kernel's; else None."""
    path = mm_cache_path(tuner, device)
    try:
        with open(path) as f:
            entry = json.load(f)
        if (entry.get("version") != CACHE_VERSION or entry.get("device") != device or
                entry.get("dtype") != tuner.dtype or
                not float(entry["template_ms"]) < float(entry["extern_ms"])):
            return None
        best = cfgs.Config.from_json(entry["best"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        warn(f"ignoring unreadable mm autotune cache entry {path}: {e}")
        return None
    return next((c for c in tuner.configs if c.key() == best.key()), None)


def _bench_args(tuner, args):
    """The arguments to benchmark with: outputs (out_ptr*, in_out_ptr*) cloned."""
    out = list(args)
    for i in tuner.mutated_pos:
        if hasattr(out[i], "clone"):
            out[i] = out[i].clone()
    return tuple(out)


def benchmark(tuner, args, configs=None, quick=False):
    """Compiles (in parallel) and times the configs (default: all of the tuner's); returns rows
    {config, ms, status, n_regs, n_spills}."""
    configs = list(tuner.configs if configs is None else configs)
    bench_args = _bench_args(tuner, args)
    for c in configs:  # every compile starts before the first is waited for
        try:
            tuner.compile_async(c, bench_args)
        except Exception:  # noqa: BLE001 (compile() below reports it)
            pass
    rows = []
    for c in configs:
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
            r["ms"] = float(_bench(lambda: launcher(bench_args, None), quick=quick))
        except Exception as e:
            r["status"] = f"launch failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
    for r in rows:
        r.pop("launcher", None)
    return rows


def candidates(tuner, args):
    """(configs, reason): what the choice for these arguments is among, without timing anything
    (the module doc's steps 1-3; also a forced or already chosen config)."""
    if getattr(tuner, "forced", None) is not None:
        return [tuner.forced], "forced"
    bucket = size_bucket(tuner.numels_of(args))
    chosen = tuner.chosen.get(bucket)
    if chosen is not None:
        return [chosen], "chosen"
    return _candidates(tuner, args, bucket)


def _candidates(tuner, args, bucket):
    if len(tuner.configs) == 1:
        return list(tuner.configs), "the only config"
    device = device_name(args)
    cached = read_cache(tuner, bucket, device)
    if cached is not None:
        return [cached], "cache hit"
    if tuner.kind == "template" and _mode(tuner) != "max-autotune":
        measured = read_mm_cache(tuner, device)
        if measured is not None:
            return [measured], "measured faster than cuBLAS for this mm bucket (mm cache)"
        externs = [c for c in tuner.configs if cfgs.is_extern(c)]
        if externs:
            return externs, "cuBLAS (default mode; --mode max-autotune times the templates)"
    return list(tuner.configs), "autotune"


def choose_config(tuner, args, numels, bucket):
    """The config for this bucket: the only candidate, a cache hit, or the benchmark winner."""
    configs, reason = _candidates(tuner, args, bucket)
    tuner.reasons[bucket] = reason
    if len(configs) == 1:
        if reason == "cache hit":
            tuner.timings[bucket] = "cache hit"
        if len(tuner.configs) > 1:
            log("autotune", f"{tuner.name} ({bucket_str(bucket)}) on {device_name(args)}: "
                            f"{reason}, {_label(tuner, configs[0])}")
        return configs[0]
    device = device_name(args)
    mode = _mode(tuner)
    start = time.perf_counter()
    rows = benchmark(tuner, args, configs, quick=mode != "max-autotune")
    timed = [r for r in rows if r["ms"] is not None]
    if not timed:
        raise RuntimeError(f"{tuner.name}: every config failed:\n" +
                           "\n".join(f"  {r['config']}: {r['status']}" for r in rows))
    best = min(timed, key=lambda r: r["ms"])["config"]
    seconds = time.perf_counter() - start
    path = write_cache(tuner, bucket, device, best, rows, seconds)
    if tuner.kind == "template" and mode == "max-autotune":
        write_mm_cache(tuner, device, rows)
    tuner.timings[bucket] = rows
    lines = [f"{tuner.name} ({tuner.kind}, {bucket_str(bucket)}) on {device}: "
             f"{len(rows)} configs ({mode} mode)"]
    flops = getattr(tuner, "flops", None)
    for r in rows:
        ms = f"{r['ms']:.4f} ms" if r["ms"] is not None else "-"
        regs = "" if r["n_regs"] is None else f"  regs {r['n_regs']}  spills {r['n_spills']}"
        if flops and r["ms"]:
            regs = f"  {flops / r['ms'] / 1e9:7.1f} TFLOP/s" + regs
        note = "  <- best" if r["config"] is best else (
            "" if r["status"] == "ok" else f"  ({r['status']})")
        label = _label(tuner, r["config"])
        lines.append(f"  {label:<48} {ms:>12}{regs}{note}")
    lines.append(f"  tuned in {seconds:.2f} s; cached in {path}")
    log("autotune", "\n".join(lines))
    return best


def _label(tuner, config):
    return tuner.extern_label(config) if cfgs.is_extern(config) else str(config)
