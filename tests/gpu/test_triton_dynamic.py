"""The size-generic Triton run (issue 20's GPU part), on the GPU machine: each case of
tests/gpu/triton_dynamic_cases.py was compiled ONCE with its sizes unbound
(tests/gpu/prepare_triton_dynamic.py wrote tests/gpu/generated/dynamic/); this runs it at every
size of the case through coil_runtime.dynamic.SizeGenericModule (the generic module, or the
prepared variant where its guards refuse a size of 1) against torch in float64, and reports
per case the coil modules used (the target: 1, plus the 0/1 variants) and Triton's compiles
(its own specializations and autotuned configs; not coil's).

    python3 tests/gpu/test_triton_dynamic.py --json $OUT/triton_dynamic.json
    python3 tests/gpu/test_triton_dynamic.py --emulate        # no GPU: fake triton, CPU
                                                              # emulation, sizes <= 100

Exit 1 when a size fails (a wrong value, an error, a missing variant), 2 when nothing was
prepared."""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
GENERATED = os.path.join(ROOT, "tests", "gpu", "generated", "dynamic")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import triton_dynamic_cases as cases  # noqa: E402

TOLERANCE = 1e-3  # |got - want| <= TOLERANCE * (1 + |want|): f32 with IEEE dots


def _emulation():
    """No GPU: the fake triton of python/tests, CPU tensors, every pointwise, reduction and
    attention kernel executed by tl_emulator.py (templates are not: cases using one fail)."""
    sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
    import torch

    import fake_triton
    import tl_emulator
    fake_triton.install()
    from coil_runtime import autotune, heuristics, runtime
    heuristics._raw_stream_getter = lambda: (lambda device: 0)
    heuristics._device_index = lambda args: 0
    heuristics._launch_mode = "direct"
    autotune.device_name = lambda args: "Fake GPU"
    runtime._alloc = lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype)
    runtime.allow_cpu_for_tests(True)

    def emulate(mod, path):
        source = open(path).read()
        for t in heuristics.autotuners_of(mod):
            if t.kind == "template":
                continue
            fn = tl_emulator.kernel_function(source, t.name)

            def run(*args, fn=fn):
                _, grid, _, _, consts, _ = fake_triton.LAUNCHES[-1]
                tl_emulator.launch(fn, grid, args, consts)
            fake_triton.EMULATORS[t.fn] = run  # by function: variants share kernel names
            t.select(0)
    return emulate


def compare(got, want):
    """'' when `got` matches `want` (float64), else what differs."""
    import torch
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    got = got.double()
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    if not torch.equal(nan_got, nan_want):
        return f"NaN at {int(nan_got.sum())} elements, the reference at {int(nan_want.sum())}"
    ok = ~nan_want
    if not ok.any():
        return ""
    err = (got - want).abs()[ok]
    bound = TOLERANCE * (1 + want.abs()[ok])
    if (err > bound).any():
        return f"max abs err {err.max().item():.3e} (tolerance {TOLERANCE} * (1 + |want|))"
    return ""


def run_case(name, entry, device, emulate, max_size, log):
    import torch
    from coil_runtime import dynamic, heuristics, runtime
    c = cases.CASES[name]
    d = os.path.join(GENERATED, name)
    loaded = {}

    def load(rel, tag):
        path = os.path.join(d, rel)
        mod = runtime.load_module(path, name=f"coil_dyn_{name}_{tag}")
        if emulate:
            emulate(mod, path)
        loaded[tag] = mod
        return mod

    def make_variant(bound):
        sub = cases.variant_dir(tuple(sorted(bound.items())))
        if sub not in entry["variants"]:
            raise RuntimeError(f"no variant prepared for {bound} (prepare_triton_dynamic.py "
                               f"writes {sorted(entry['variants'])})")
        return load(entry["variants"][sub]["module"], sub)

    m = dynamic.SizeGenericModule(load(entry["generic"], "generic"), make_variant)
    gen = torch.Generator(device=device).manual_seed(0)
    rows = []
    for sizes in c["sizes"]:
        if max(sizes) > max_size:
            continue
        env = dict(zip(c["symbols"], sizes))
        row = {"sizes": env}
        try:
            inputs = [torch.randn([env.get(x, x) if isinstance(x, str) else x for x in shape],
                                  generator=gen, device=device) for _, shape in spec(c)]
            before = dict(m.calls)
            t0 = time.perf_counter()
            outs = m(inputs)
            if device == "cuda":
                torch.cuda.synchronize()
            row["first_call_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            if not emulate:
                t0 = time.perf_counter()
                m(inputs)
                torch.cuda.synchronize()
                row["second_call_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            row["module"] = next(k for k, v in m.calls.items() if v != before.get(k, 0))
            want = c["reference"](env, *[t.double() for t in inputs])
            wants = want if isinstance(want, tuple) else (want,)  # one per output
            row["error"] = next((e for e in (compare(o, w) for o, w in zip(outs, wants)) if e), "")
        except Exception as e:  # reported per size; the run goes on
            row["error"] = f"{type(e).__name__}: {e}"
        row["ok"] = not row["error"]
        rows.append(row)
        log(f"  {name} {env}: {'ok' if row['ok'] else 'FAIL ' + row['error']}"
            f" [{row.get('module', '-')}, first call {row.get('first_call_ms', '-')} ms]")
    compiles = sum(len(getattr(t, "_compiles", {})) for mod in loaded.values()
                   for t in heuristics.autotuners_of(mod))
    stats = m.stats()
    return {"case": name, "modules": stats["modules"], "calls": stats["calls"],
            "variants": sorted(k for k in loaded if k != "generic"),
            "triton_compiles": compiles, "sizes_run": len(rows),
            "failed": sum(not r["ok"] for r in rows), "rows": rows,
            "generate_ms": entry.get("generate_ms", {})}


def spec(c):
    return c["inputs"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--emulate", action="store_true", help="no GPU: fake triton on the CPU")
    ap.add_argument("--max-size", type=int, default=None,
                    help="skip sizes above this (default: all; 100 with --emulate)")
    a = ap.parse_args()
    manifest_path = os.path.join(GENERATED, "manifest.json")
    if not os.path.exists(manifest_path):
        print(f"error: {manifest_path} is missing: run tests/gpu/prepare_triton_dynamic.py on "
              "the build machine first", file=sys.stderr)
        return 2
    manifest = json.load(open(manifest_path))
    emulate = _emulation() if a.emulate else None
    import torch
    device = "cpu" if a.emulate else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device (use --emulate without one)", file=sys.stderr)
        return 2
    max_size = a.max_size or (100 if a.emulate else 1 << 30)
    names = a.only or sorted(manifest)
    results = []
    t0 = time.perf_counter()

    def write(done):
        # after each case too: a run cut short by its time limit still reports what it ran
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"device": device_name, "torch": torch.__version__,
                           "autotune": os.environ.get("COIL_TRITON_AUTOTUNE", "default"),
                           "seconds": round(time.perf_counter() - t0, 1), "finished": done,
                           "failed": sum(r["failed"] for r in results), "cases": results},
                          f, indent=1)

    device_name = torch.cuda.get_device_name() if device == "cuda" else "emulated (CPU)"
    for name in names:
        print(f"== {name}", flush=True)
        results.append(run_case(name, manifest[name], device, emulate, max_size,
                                lambda s: print(s, flush=True)))
        write(False)
    print("\ncase                       sizes  failed  coil modules  Triton compiles")
    for r in results:
        print(f"{r['case']:<26} {r['sizes_run']:>5}  {r['failed']:>6}  {r['modules']:>12}"
              f"  {r['triton_compiles']:>15}   ({', '.join(['generic'] + r['variants'])})")
    failed = sum(r["failed"] for r in results)
    write(True)
    print(f"{'FAILED' if failed else 'ok'}: {failed} size(s) failed of "
          f"{sum(r['sizes_run'] for r in results)}; {time.perf_counter() - t0:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
