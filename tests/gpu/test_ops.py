#!/usr/bin/env python3
"""GPU correctness suite: runs the generated Triton modules and compares with coil's CPU results.

Each case in tests/gpu/generated/NAME/ (written by tests/gpu/prepare.sh) holds module.py, fixed
inputs, expected outputs and case.json. For each case this loads the module, runs `call()` on
the inputs (output buffers poisoned with NaN first, so unwritten elements fail), compares every
output (docs/numerics.md's tolerances, or the case's own), then runs it again with each kernel
forced to each of its configs (every block size / mask path the autotuner could pick), and runs
the case's extra checks (`noncontig x`: a non-contiguous, wrongly typed or CPU input must be a
ValueError naming x). Case `runtime_sample` runs python/tests/sample_module.py, a hand-written
module, against torch: a check of the runtime independent of the code generator.

    python3 tests/gpu/test_ops.py [--cases NAME ...] [--report FILE] [--no-every-config]
                                  [--expect-cache-hits] [--cli-smoke]

A CUDA error is sticky in a process: after one, the remaining cases run in a fresh process.
Exit code 0 when nothing failed (skipped cases are listed, not failures).
"""

import argparse
import json
import os
import subprocess
import sys
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
GENERATED = os.environ.get("COIL_GPU_GENERATED") or os.path.join(ROOT, "tests", "gpu", "generated")
SAMPLE = os.path.join(ROOT, "python", "tests", "sample_module.py")

import torch  # noqa: E402

from coil_runtime import heuristics, runtime, testing  # noqa: E402

STICKY = ("CUDA error", "illegal memory access", "unspecified launch failure",
          "device-side assert", "misaligned address", "an illegal instruction")


def log(msg):
    print(msg, flush=True)


def compare_outputs(outs, expected, names, tol):
    """Returns (ok, worst relative error, problem lines)."""
    problems, worst = [], 0.0
    if len(outs) != len(expected):
        return False, 0.0, [f"{len(outs)} outputs, expected {len(expected)}"]
    for name, got, want in zip(names, outs, expected):
        res = testing.compare(got, want, rtol=tol.get("rtol"), atol=tol.get("atol"))
        worst = max(worst, res["max_rel"] if res["max_abs"] > 0 else 0.0)
        if not res["ok"]:
            problems.append(f"output {name}: {res['message']} (max abs err {res['max_abs']:.3g})")
    return not problems, worst, problems


def run_rounds(mod, inputs, expected, names, tol, every_config):
    """Autotuned run, then one run per config index. Returns (ok, rounds, worst, problems)."""
    tuners = heuristics.autotuners_of(mod)
    n_rounds = max((len(t.configs) for t in tuners), default=1) if every_config else 0
    problems, worst, rounds = [], 0.0, 0
    for r in [None] + list(range(n_rounds)):
        for t in tuners:
            t.select(r)
        outs = mod.call(list(inputs))
        if not isinstance(outs, (tuple, list)):
            outs = (outs,)
        torch.cuda.synchronize()
        ok, w, probs = compare_outputs(outs, expected, names, tol)
        rounds += 1
        worst = max(worst, w)
        label = "autotuned" if r is None else f"config #{r}: " + "; ".join(
            f"{t.name}={t.forced}" for t in tuners if len(t.configs) > 1)
        problems += [f"[{label}] {p}" for p in probs]
    for t in tuners:
        t.select(None)
    return not problems, rounds, worst, problems


def check_rejections(mod, inputs, info, check):
    """`noncontig NAME`: bad variants of input NAME must raise ValueError naming it."""
    kind, _, name = check.partition(" ")
    if kind != "noncontig":
        return [f"unknown check {check!r}"]
    idx = [i["name"] for i in info["inputs"]].index(name)
    x = inputs[idx]
    wide = torch.empty(*x.shape[:-1], 2 * x.shape[-1], dtype=x.dtype, device=x.device)
    strided = wide[..., ::2]
    strided.copy_(x)
    bad = {"non-contiguous": strided,
           "wrong dtype": x.double() if x.dtype != torch.float64 else x.float()}
    if x.is_cuda:
        bad["cpu"] = x.cpu()
    problems = []
    for what, value in bad.items():
        args = list(inputs)
        args[idx] = value
        try:
            mod.call(args)
            problems.append(f"a {what} '{name}' was accepted")
        except ValueError as e:
            if f"'{name}'" not in str(e):
                problems.append(f"the error for a {what} '{name}' does not name it: {e}")
    return problems


def case_sample(every_config):
    mod = runtime.load_module(SAMPLE, name="coil_runtime_sample")
    inputs = mod.get_args()
    expected = mod.reference(*inputs)
    ok, rounds, worst, problems = run_rounds(mod, inputs, expected, mod.OUTPUT_NAMES,
                                             {"rtol": 1e-4, "atol": 1e-3}, every_config)
    return mod, ok, rounds, worst, problems


def case_generated(name, every_config):
    d = os.path.join(GENERATED, name)
    info = json.load(open(os.path.join(d, "case.json")))
    mod = runtime.load_module(os.path.join(d, "module.py"), name=f"coil_case_{name}")
    inputs = [runtime.read_npy(os.path.join(d, i["file"])).cuda() for i in info["inputs"]]
    expected = [runtime.read_npy(os.path.join(d, o["file"])) for o in info["outputs"]]
    names = [o["name"] for o in info["outputs"]]
    ok, rounds, worst, problems = run_rounds(mod, inputs, expected, names, info["tolerance"],
                                             every_config)
    for check in info.get("checks", []):
        problems += check_rejections(mod, inputs, info, check)
    return mod, not problems, rounds, worst, problems


def cli_smoke(name):
    """Runs `python -m coil_runtime.run` on a case and compares the files it writes."""
    d = os.path.join(GENERATED, name)
    info = json.load(open(os.path.join(d, "case.json")))
    out_dir = f"/tmp/coil_cli_smoke_{os.getpid()}"
    cmd = [sys.executable, "-m", "coil_runtime.run", os.path.join(d, "module.py"), "--inputs",
           *[os.path.join(d, i["file"]) for i in info["inputs"]], "--outputs-dir", out_dir]
    env = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "python")}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if p.returncode != 0:
        return [f"coil_runtime.run exited {p.returncode}: {p.stderr[-800:]}"]
    # It prints "NAME: dtype[shape] -> PATH" per output, in order.
    paths = [line.rsplit(" -> ", 1)[1] for line in p.stdout.splitlines() if " -> " in line]
    if len(paths) != len(info["outputs"]):
        return [f"coil_runtime.run wrote {len(paths)} outputs, expected {len(info['outputs'])}"]
    problems = []
    for k, (o, path) in enumerate(zip(info["outputs"], paths)):
        res = testing.compare(runtime.read_npy(path), runtime.read_npy(os.path.join(d, o["file"])),
                              info["tolerance"].get("rtol"), info["tolerance"].get("atol"))
        if not res["ok"]:
            problems.append(f"coil_runtime.run output {k}: {res['message']}")
    return problems


def write_report(state, path):
    """Writes the report (and a .json beside it) from the results so far; returns the counts.
    Called after every case, so that a run stopped by its time limit still leaves one."""
    counts = {s: sum(r["status"] == s for r in state["results"]) for s in ("PASS", "FAIL", "SKIP")}
    counts["summary"] = (f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} "
                         f"skipped of {len(state['results'])}")
    if not path:
        return counts
    with open(path, "w") as f:
        f.write(state["header"] + "\n")
        for r in state["results"]:
            f.write(f"{r['status']} {r['name']}  {r.get('seconds', '')} s  runs {r.get('rounds', 0)}"
                    f"  max rel err {r.get('worst_rel', 0):.2e}\n")
            for line in r["detail"]:
                f.write(f"     {line}\n")
            for k, v in r.get("kernels", {}).items():
                f.write(f"     kernel {k}: {v['configs']} configs, launch {v['launch']}, "
                        f"chosen {v['chosen']}\n")
        f.write(counts["summary"] + "\n")
    with open(os.path.splitext(path)[0] + ".json", "w") as f:
        json.dump(state, f, indent=1)
    return counts


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="*", help="only these cases (runtime_sample included)")
    p.add_argument("--report", help="write the report here too")
    p.add_argument("--no-every-config", action="store_true")
    p.add_argument("--expect-cache-hits", action="store_true",
                   help="fail if a multi-config kernel was benchmarked (a warm cache is expected)")
    p.add_argument("--expect-disk-cache-loads", action="store_true",
                   help="fail unless every Triton compile in this process was a disk cache hit "
                        "(the compile process pool compiled it first; run with a fresh "
                        "TRITON_CACHE_DIR and COIL_COMPILE_THREADS > 1)")
    p.add_argument("--cli-smoke", action="store_true", help="also test python -m coil_runtime.run")
    p.add_argument("--state", help=argparse.SUPPRESS)  # results so far (after a CUDA error)
    a = p.parse_args(argv)

    runtime.set_poison(True)
    compiles = []  # (kernel name, cache_hit) of each Triton compile in this process
    if a.expect_disk_cache_loads:
        from triton import knobs
        knobs.compilation.listener = lambda **kw: compiles.append(
            (getattr(kw["src"], "name", "?"), kw["cache_hit"]))
    manifest = {}
    if os.path.exists(os.path.join(GENERATED, "MANIFEST.json")):
        manifest = json.load(open(os.path.join(GENERATED, "MANIFEST.json")))
    names = ["runtime_sample"] + sorted(
        d for d in os.listdir(GENERATED) if os.path.exists(os.path.join(GENERATED, d, "case.json")))
    if a.cases:
        names = [n for n in names if n in a.cases]
    state = json.load(open(a.state)) if a.state else {"results": [], "header": None}
    if state["header"] is None:
        state["header"] = (f"GPU {torch.cuda.get_device_name()} | torch {torch.__version__} | "
                           f"triton {__import__('triton').__version__} | modules from coil "
                           f"{manifest.get('coil', '?')} ({manifest.get('generated_at', '?')})")
        log(state["header"])
    done = {r["name"] for r in state["results"]}
    for i, name in enumerate(names):
        if name in done:
            continue
        t0 = time.time()
        res = {"name": name, "status": "PASS", "detail": [], "rounds": 0, "worst_rel": 0.0}
        if name != "runtime_sample":
            info = json.load(open(os.path.join(GENERATED, name, "case.json")))
            if info["status"] != "ok":
                last = (info.get("compile_log") or "").strip().splitlines()[-1:]
                res["status"] = "SKIP"
                res["detail"] = [f"{info['status']}: {last[0] if last else ''}"]
        if res["status"] != "SKIP":
            try:
                fn = case_sample if name == "runtime_sample" else (
                    lambda every, n=name: case_generated(n, every))
                mod, ok, res["rounds"], res["worst_rel"], problems = fn(not a.no_every_config)
                res["status"] = "PASS" if ok else "FAIL"
                res["detail"] = problems
                tuners = heuristics.autotuners_of(mod)
                res["kernels"] = {t.name: {"configs": len(t.configs), "launch": sorted(
                    t.launch_modes), "chosen": [str(c) for c in t.chosen.values()]}
                    for t in tuners}
                if a.expect_disk_cache_loads:
                    misses = sorted({n for n, hit in compiles if not hit})
                    hits = sum(hit for _, hit in compiles)
                    res["detail"].append(f"{len(compiles)} compiles in the main process, "
                                         f"{hits} of them disk cache hits")
                    if misses or not compiles:
                        res["status"] = "FAIL"
                        res["detail"].append(f"compiled in the main process, not by a worker: "
                                             f"{misses}" if misses else "nothing compiled")
                    compiles.clear()
                if a.expect_cache_hits:
                    tuned = [t.name for t in tuners if len(t.configs) > 1 and any(
                        v != "cache hit" for v in t.timings.values())]
                    if tuned:
                        res["status"] = "FAIL"
                        res["detail"].append(f"benchmarked despite a warm cache: {tuned}")
            except Exception as e:
                res["status"] = "FAIL"
                res["detail"] = [f"{type(e).__name__}: {e}"] + traceback.format_exc().splitlines()[-6:]
                if any(s in str(e) for s in STICKY):  # the CUDA context is unusable now
                    res["detail"].insert(0, "CUDA error: the remaining cases run in a new process")
                    state["results"].append(res)
                    log(f"FAIL {name}: {res['detail'][1]}")
                    path = f"/tmp/coil_test_ops_state_{os.getpid()}.json"
                    json.dump(state, open(path, "w"))
                    argv = [sys.executable, __file__, "--state", path, "--cases", *names[i + 1:]]
                    for flag in ("no_every_config", "expect_cache_hits", "cli_smoke"):
                        if getattr(a, flag):
                            argv.append("--" + flag.replace("_", "-"))
                    if a.report:
                        argv += ["--report", a.report]
                    sys.exit(subprocess.call(argv))
        res["seconds"] = round(time.time() - t0, 2)
        state["results"].append(res)
        extra = f"{res['rounds']} runs, max rel err {res['worst_rel']:.2e}" if res["rounds"] else ""
        log(f"{res['status']} {name:<22} {res['seconds']:6.2f} s  {extra}")
        for line in res["detail"][:8]:
            log(f"     {line}")
        write_report(state, a.report)

    if a.cli_smoke:
        ok_cases = [r["name"] for r in state["results"]
                    if r["status"] == "PASS" and r["name"] != "runtime_sample"]
        res = {"name": "cli_smoke", "status": "SKIP", "detail": ["no passing generated case"]}
        if ok_cases:
            problems = cli_smoke(ok_cases[0])
            res = {"name": f"cli_smoke ({ok_cases[0]})", "status": "FAIL" if problems else "PASS",
                   "detail": problems}
        state["results"].append(res)
        log(f"{res['status']} {res['name']}")
        for line in res["detail"]:
            log(f"     {line}")

    counts = write_report(state, a.report)
    log(counts["summary"])
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
