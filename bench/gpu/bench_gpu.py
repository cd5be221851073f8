#!/usr/bin/env python3
"""GPU benchmark: coil's generated Triton modules against torch eager and torch.compile.

Workloads (../shared/reference/inductor-measured.md has Inductor's numbers on the same GPU):
  (a) x*0.5+1, 64M f32          (b) gelu(x*w+b) [65536,1024]     (c) softmax [65536,1024]
  (d) layer_norm [65536,1024]   (e1) sum(-1) [65536,1024]        (e0) sum(0) [65536,1024]
  (f) x.t()+y [8192,8192]       (i) softmax [10000,1000]
  (g) relu(x@W+b) bf16, x [8192,4096], W [4096,4096]             (overhead) x+1 on [64,256]
coil's modules come from tests/gpu/generated/bench_<id>/module.py (tests/gpu/prepare.sh).

Each variant runs in this process; GPU times are the median of triton.testing.do_bench (L2
flushed between runs). GB/s counts the fewest bytes (each input read once, each output written
once), against the copy bandwidth measured here (a 1 GiB device-to-device copy, read + write).
Speedups are Inductor's time over coil's (> 1: coil is faster), for torch.compile in this process
and for Inductor's recorded time. The overhead case times N calls with a host timer and one
synchronize at the end (per-call host cost of a one-kernel graph).

    python3 bench/gpu/bench_gpu.py [--only a c ...] [--json FILE] [--budget-s 360]

--size-generic (issue 20) times instead each workload's size-generic module (its leading dim
the symbol n: tests/gpu/generated/bench_<id>_generic/module.py, written by prepare.sh) against
its size-specialized one on the same inputs, alternately, and checks that their outputs agree.
"""

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
GENERATED = os.path.join(ROOT, "tests", "gpu", "generated")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from coil_runtime import configs as cfgs, heuristics, runtime, testing  # noqa: E402

# Inductor on the H200 (inductor-measured.md): (eager ms, Inductor ms).
INDUCTOR_REF = {"a": (0.2605, 0.1307), "b": (0.5200, 0.1326), "c": (0.1363, 0.1314),
                "d": (0.2019, 0.1319), "e1": (0.0798, 0.0712), "e0": (0.1004, 0.0759),
                "f": (0.6510, 0.1919), "i": (0.0262, 0.0248)}
INDUCTOR_REF_G_TFLOPS = 672.0          # (g), default mode (cuBLAS + a bias/ReLU kernel)
INDUCTOR_REF_OVERHEAD_US = (8.9, 57.7)  # x+1 [64,256]: eager, Inductor


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, device="cuda", dtype=dtype)


WORKLOADS = [
    ("a", "x*0.5+1, 64M f32", lambda: [randn(1 << 26)], lambda x: x * 0.5 + 1),
    ("b", "gelu(x*w+b) [65536,1024]", lambda: [randn(65536, 1024), randn(1024), randn(1024)],
     lambda x, w, b: F.gelu(x * w + b)),
    ("c", "softmax(-1) [65536,1024]", lambda: [randn(65536, 1024)],
     lambda x: torch.softmax(x, -1)),
    ("d", "layer_norm [65536,1024]", lambda: [randn(65536, 1024), randn(1024), randn(1024)],
     lambda x, w, b: F.layer_norm(x, (1024,), w, b, 1e-5)),
    ("e1", "sum(-1) [65536,1024]", lambda: [randn(65536, 1024)], lambda x: x.sum(-1)),
    ("e0", "sum(0) [65536,1024]", lambda: [randn(65536, 1024)], lambda x: x.sum(0)),
    ("f", "x.t()+y [8192,8192]", lambda: [randn(8192, 8192), randn(8192, 8192)],
     lambda x, y: x.t() + y),
    ("i", "softmax(-1) [10000,1000]", lambda: [randn(10000, 1000)],
     lambda x: torch.softmax(x, -1)),
    ("g", "relu(x@W+b) bf16 [8192,4096]x[4096,4096]",
     lambda: [randn(8192, 4096, dtype=torch.bfloat16) * 0.1,
              randn(4096, 4096, dtype=torch.bfloat16) * 0.1, randn(4096, dtype=torch.bfloat16)],
     lambda x, w, b: torch.relu(x @ w + b)),
]


def log(msg):
    print(msg, flush=True)


# Extra alternating rounds of Inductor and coil after the first measurement of each.
ROUNDS = 4


def bench_ms(fn):
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors)


def as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def copy_bandwidth():
    src = torch.empty(1 << 28, device="cuda")  # 1 GiB
    src.uniform_()
    dst = torch.empty_like(src)
    ms = bench_ms(lambda: dst.copy_(src))
    return 2 * nbytes([src]) / ms / 1e6  # the buffers go with this frame


def load_coil(wid, name=None):
    path = os.path.join(GENERATED, f"bench_{wid}", "module.py")
    if not os.path.exists(path):
        return None
    return runtime.load_module(path, name=name or f"coil_bench_{wid}")


def kernel_report(mod):
    out = {}
    for t in heuristics.autotuners_of(mod):
        chosen = list(t.chosen.values())
        info = t.binary_info.get(chosen[0].key(), {}) if chosen else {}
        out[t.name] = {"kind": t.kind, "configs": len(t.configs), "launch": sorted(t.launch_modes),
                       "chosen": [str(c) for c in chosen], "n_regs": info.get("n_regs"),
                       "n_spills": info.get("n_spills")}
    return out


def template_report(mod, flops):
    """(g): the matmul template's autotune table: its best Triton config's time, the extern
    choice's (torch.mm + epilogue kernel), and which one the autotuner kept."""
    out = {}
    for t in heuristics.autotuners_of(mod):
        if not isinstance(t, heuristics.TemplateAutotuner):
            continue
        out["template_kernel"] = t.name
        out["template_choice"] = t.choice()
        for rows in t.timings.values():
            if not isinstance(rows, list):
                out["template_timings"] = rows  # "cache hit": times are in the cache file
                continue
            tri = [x for x in rows if x["ms"] is not None and not cfgs.is_extern(x["config"])]
            ext = [x for x in rows if x["ms"] is not None and cfgs.is_extern(x["config"])]
            if tri:
                best = min(tri, key=lambda x: x["ms"])
                out["template_best_ms"] = best["ms"]
                out["template_best_config"] = str(best["config"])
                out["template_best_tflops"] = flops / best["ms"] / 1e9
            for x in ext:  # extern_<n> (cuBLAS + epilogue kernel), extern_<n>_lt (cuBLASLt)
                key = "template_extern" if cfgs.extern_index(x["config"]) == 0 else "template_lt"
                out[f"{key}_ms"] = x["ms"]
                out[f"{key}_tflops"] = flops / x["ms"] / 1e9
    return out


def run_workload(wid, title, make, eager_fn, copy_gbps):
    r = {"id": wid, "workload": title}
    inputs = make()
    ref = as_tuple(eager_fn(*inputs))
    torch.cuda.synchronize()
    r["bytes"] = nbytes(inputs) + nbytes(ref)
    r["eager_ms"] = bench_ms(lambda: eager_fn(*inputs))

    # A fresh dynamo state and static shapes: workloads that share an eager function ((c) and
    # (i) are both softmax) would otherwise make the second compile a dynamic-shape one, whose
    # kernels are slower (run 3 timed Inductor's (i) at 0.091 ms instead of 0.025).
    if hasattr(torch, "_dynamo"):
        torch._dynamo.reset()
    compiled = torch.compile(eager_fn, dynamic=False)
    t0 = time.perf_counter()
    compiled(*inputs)
    torch.cuda.synchronize()
    r["inductor_compile_s"] = round(time.perf_counter() - t0, 3)
    r["inductor_ms"] = bench_ms(lambda: compiled(*inputs))

    mod = load_coil(wid)
    if mod is None:
        r["coil"] = "no module (run tests/gpu/prepare.sh with a coil that has --device cuda)"
    else:
        t0 = time.perf_counter()
        outs = as_tuple(mod.call(list(inputs)))
        torch.cuda.synchronize()
        r["coil_first_call_s"] = round(time.perf_counter() - t0, 3)  # Triton compile + autotune
        rel = max(testing.relative_error(o, e) for o, e in zip(outs, ref))
        limit = 2e-2 if ref[0].dtype == torch.bfloat16 else 1e-4
        r["coil_rel_err_vs_eager"] = rel
        r["coil_correct"] = bool(rel <= limit and len(outs) == len(ref))
        r["coil_ms"] = bench_ms(lambda: mod.call(list(inputs)))
        r["kernels"] = kernel_report(mod)
        # The GPU's clocks drift between measurements (+-8% on (g) between processes): time
        # Inductor and coil alternately, ROUNDS more times each, and keep each one's median.
        ind, coil = [r["inductor_ms"]], [r["coil_ms"]]
        for _ in range(ROUNDS):
            ind.append(bench_ms(lambda: compiled(*inputs)))
            coil.append(bench_ms(lambda: mod.call(list(inputs))))
        r["inductor_rounds_ms"], r["coil_rounds_ms"] = ind, coil
        r["inductor_ms"], r["coil_ms"] = statistics.median(ind), statistics.median(coil)

    for k in ("eager", "inductor", "coil"):
        if f"{k}_ms" in r:
            r[f"{k}_gbps"] = r["bytes"] / r[f"{k}_ms"] / 1e6
            r[f"{k}_copy_frac"] = r[f"{k}_gbps"] / copy_gbps
    if "coil_ms" in r:
        r["speedup_vs_inductor"] = r["inductor_ms"] / r["coil_ms"]
        if wid in INDUCTOR_REF:
            r["inductor_ref_ms"] = INDUCTOR_REF[wid][1]
            r["speedup_vs_inductor_ref"] = INDUCTOR_REF[wid][1] / r["coil_ms"]
    if wid == "g":
        m, k = inputs[0].shape
        n = inputs[1].shape[1]
        flops = 2 * m * n * k
        r["cublas_mm_ms"] = bench_ms(lambda: inputs[0] @ inputs[1])
        for key in ("eager", "inductor", "coil", "cublas_mm"):
            if f"{key}_ms" in r:
                r[f"{key}_tflops"] = flops / r[f"{key}_ms"] / 1e9
        r["inductor_ref_tflops"] = INDUCTOR_REF_G_TFLOPS
        if mod is not None:
            r.update(template_report(mod, flops))
    return r  # the inputs and outputs go with this frame (main empties the cache)


def run_size_generic(wid, title, make, eager_fn):
    """(--size-generic) The workload's size-generic module against its specialized one: the
    same inputs, each one's outputs checked against eager as run_one checks coil's (relative
    error; the two may sum a long row in different orders, so they are not compared with each
    other element by element), then ROUNDS + 1 alternating do_bench medians of each."""
    r = {"id": wid, "workload": title}
    spec, gen = load_coil(wid), load_coil(wid + "_generic")
    if spec is None or gen is None:
        r["error"] = "no module (run tests/gpu/prepare.sh with a coil that has --device cuda)"
        return r
    inputs = make()
    ref = as_tuple(eager_fn(*inputs))
    limit = 2e-2 if ref[0].dtype == torch.bfloat16 else 1e-4
    for key, mod in (("specialized", spec), ("generic", gen)):
        outs = as_tuple(mod.call(list(inputs)))
        rel = max(testing.relative_error(o, e) for o, e in zip(outs, ref))
        r[f"{key}_rel_err_vs_eager"] = rel
        r[f"{key}_correct"] = bool(rel <= limit and len(outs) == len(ref))
    r["match"] = r["specialized_correct"] and r["generic_correct"]
    spec_ms, gen_ms = [], []
    for _ in range(ROUNDS + 1):
        spec_ms.append(bench_ms(lambda: spec.call(list(inputs))))
        gen_ms.append(bench_ms(lambda: gen.call(list(inputs))))
    r["specialized_rounds_ms"], r["generic_rounds_ms"] = spec_ms, gen_ms
    r["specialized_ms"], r["generic_ms"] = statistics.median(spec_ms), statistics.median(gen_ms)
    r["generic_vs_specialized"] = r["generic_ms"] / r["specialized_ms"] - 1
    return r


def size_generic_table(results):
    lines = [f"{'wl':<4} {'workload':<44} {'specialized ms':>14} {'generic ms':>11} "
             f"{'diff':>7}  outputs"]
    for r in results:
        if "error" in r:
            lines.append(f"({r['id']})  ERROR {r['error']}")
            continue
        lines.append(f"({r['id']})".ljust(5) + f"{r['workload'][:44]:<44} "
                     f"{r['specialized_ms']:>14.4f} {r['generic_ms']:>11.4f} "
                     f"{100 * r['generic_vs_specialized']:>+6.1f}%  "
                     f"{'match' if r['match'] else 'DIFFER'}")
    return "\n".join(lines)


def host_overhead(calls=20000):
    """Per-call host time of x+1 on [64,256]: N calls, one synchronize."""
    x = randn(64, 256)
    r = {"id": "overhead", "workload": "x+1 [64,256], per-call host time", "calls": calls,
         "inductor_ref_us": INDUCTOR_REF_OVERHEAD_US[1], "eager_ref_us": INDUCTOR_REF_OVERHEAD_US[0]}

    def per_call_us(fn):
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / calls * 1e6

    r["eager_us"] = per_call_us(lambda: x + 1)
    compiled = torch.compile(lambda t: t + 1)
    compiled(x)
    r["inductor_us"] = per_call_us(lambda: compiled(x))
    mod = load_coil("overhead", "coil_overhead_direct")
    if mod is None:
        r["coil"] = "no module"
        return r
    mod.call([x])
    r["coil_us"] = per_call_us(lambda: mod.call([x]))
    tuners = heuristics.autotuners_of(mod)
    r["coil_launch"] = sorted(set().union(*(t.launch_modes for t in tuners)))
    if len(tuners) == 1:  # the launch alone: kernel.run with the arguments call() passes
        t = tuners[0]
        captured = []
        t.run = lambda *args, **kw: (captured.append(args), type(t).run(t, *args, **kw))
        mod.call([x])
        del t.run  # back to the class's method
        args = captured[0]
        r["coil_kernel_run_us"] = per_call_us(lambda: t.run(*args))
    heuristics.set_launch_mode("jit")  # the fallback launcher, for comparison
    try:
        jit_mod = load_coil("overhead", "coil_overhead_jit")
        jit_mod.call([x])
        r["coil_jit_launcher_us"] = per_call_us(lambda: jit_mod.call([x]))
    finally:
        heuristics.set_launch_mode("direct")
    r["coil_gpu_ms"] = bench_ms(lambda: mod.call([x]))
    r["eager_gpu_ms"] = bench_ms(lambda: x + 1)
    return r


def fmt(v, spec):
    """format(v, spec), or '-' padded to the spec's width for a missing value."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return format(v, spec)
    width = spec.split(".")[0]
    return "-".rjust(int(width) if width.isdigit() else 0)


def table(results, copy_gbps):
    lines = [f"copy bandwidth {copy_gbps:.0f} GB/s (read + write)", "",
             f"{'case':<6}{'workload':<40}{'eager ms':>9}{'ind ms':>9}{'coil ms':>9}"
             f"{'coil GB/s':>10}{'%copy':>7}{'x ind':>7}{'x ref':>7}  ok   config"]
    for r in results:
        if r["id"] == "overhead" or "error" in r:
            continue
        cfg = "; ".join(f"{v['chosen'][0] if v['chosen'] else '?'}"
                        for v in r.get("kernels", {}).values())
        ok = {True: "yes", False: "NO"}.get(r.get("coil_correct"), "-")
        lines.append(
            f"{'(' + r['id'] + ')':<6}{r['workload'][:39]:<40}{fmt(r.get('eager_ms'), '9.4f')}"
            f"{fmt(r.get('inductor_ms'), '9.4f')}{fmt(r.get('coil_ms'), '9.4f')}"
            f"{fmt(r.get('coil_gbps'), '10.0f')}{fmt(100 * r['coil_copy_frac'] if 'coil_copy_frac' in r else None, '6.0f')}%"
            f"{fmt(r.get('speedup_vs_inductor'), '7.2f')}{fmt(r.get('speedup_vs_inductor_ref'), '7.2f')}"
            f"  {ok:<4} {cfg[:60]}")
        if r["id"] == "g":
            lines.append(f"     TFLOP/s: eager {fmt(r.get('eager_tflops'), '.0f')}, inductor "
                         f"{fmt(r.get('inductor_tflops'), '.0f')}, coil {fmt(r.get('coil_tflops'), '.0f')}, "
                         f"cuBLAS mm alone {fmt(r.get('cublas_mm_tflops'), '.0f')} (Inductor ref "
                         f"{INDUCTOR_REF_G_TFLOPS:.0f})")
            if "template_kernel" in r:
                lines.append(
                    f"     template {r['template_kernel']}: best Triton config "
                    f"{fmt(r.get('template_best_tflops'), '.0f')} TFLOP/s "
                    f"({r.get('template_best_config', r.get('template_timings', '?'))}), extern "
                    f"(cuBLAS + epilogue) {fmt(r.get('template_extern_tflops'), '.0f')} TFLOP/s, "
                    f"cuBLASLt with the epilogue fused {fmt(r.get('template_lt_tflops'), '.0f')} "
                    f"TFLOP/s; "
                    f"autotuner chose {r.get('template_choice')}")
    for r in results:
        if "error" in r:
            lines.append(f"{'(' + r['id'] + ')':<6}ERROR {r['error']}")
        if r["id"] == "overhead" and "error" not in r:
            lines.append("")
            lines.append(f"host overhead, x+1 [64,256], us/call: eager {fmt(r.get('eager_us'), '.1f')}, "
                         f"torch.compile {fmt(r.get('inductor_us'), '.1f')}, coil {fmt(r.get('coil_us'), '.1f')} "
                         f"(launch {r.get('coil_launch', '-')}), coil kernel.run alone "
                         f"{fmt(r.get('coil_kernel_run_us'), '.1f')}, coil JIT launcher "
                         f"{fmt(r.get('coil_jit_launcher_us'), '.1f')}; Inductor ref "
                         f"{INDUCTOR_REF_OVERHEAD_US[1]} (eager {INDUCTOR_REF_OVERHEAD_US[0]})")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", help="workload ids (a b c d e1 e0 f i g overhead)")
    p.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "gpu_bench.json"))
    p.add_argument("--budget-s", type=float, default=360, help="skip what starts after this")
    p.add_argument("--size-generic", action="store_true",
                   help="size-generic modules against size-specialized ones (issue 20)")
    a = p.parse_args(argv)
    start = time.time()
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__,
           "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    log(f"{env}")
    copy_gbps = copy_bandwidth()
    torch.cuda.empty_cache()
    log(f"copy bandwidth {copy_gbps:.0f} GB/s")
    results = []
    doc = {"env": env, "copy_gbps": copy_gbps, "results": results}

    def save():  # after every workload: a run stopped by its time limit keeps what it measured
        doc["seconds"] = round(time.time() - start, 1)
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1, default=str)

    todo = [w for w in WORKLOADS if not a.only or w[0] in a.only]
    if a.size_generic:
        doc["mode"] = "size-generic"
        for wid, title, make, fn in todo:
            if time.time() - start > a.budget_s:
                results.append({"id": wid, "workload": title, "error": "skipped: time budget"})
                continue
            try:
                r = run_size_generic(wid, title, make, fn)
            except Exception as e:  # one broken workload must not hide the others
                r = {"id": wid, "workload": title, "error": f"{type(e).__name__}: {e}"[:500]}
            torch.cuda.empty_cache()
            results.append(r)
            save()
        doc["table"] = size_generic_table(results)
        log("\n" + doc["table"])
        save()
        log(f"wrote {a.json}")
        return 0 if all(r.get("match", False) for r in results) else 1
    for wid, title, make, fn in todo:
        if time.time() - start > a.budget_s:
            results.append({"id": wid, "workload": title, "error": "skipped: time budget"})
            continue
        t0 = time.time()
        try:
            r = run_workload(wid, title, make, fn, copy_gbps)
        except Exception as e:  # one broken workload must not hide the others
            r = {"id": wid, "workload": title, "error": f"{type(e).__name__}: {e}"[:500]}
        torch.cuda.empty_cache()
        r["wall_s"] = round(time.time() - t0, 1)
        results.append(r)
        save()
        log(f"({wid}) done in {r['wall_s']} s: " + json.dumps(
            {k: v for k, v in r.items() if k.endswith(("_ms", "_correct", "error", "_s"))}))
    if not a.only or "overhead" in a.only:
        try:
            results.append(host_overhead())
        except Exception as e:
            results.append({"id": "overhead", "error": f"{type(e).__name__}: {e}"[:500]})
    try:
        doc["table"] = table(results, copy_gbps)
    except Exception as e:  # never lose the measurements to a formatting bug
        doc["table"] = f"(table failed: {type(e).__name__}: {e})"
    log("\n" + doc["table"])
    save()
    log(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
