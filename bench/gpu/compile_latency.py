#!/usr/bin/env python3
"""GPU compile latency (issue 25): coil's first call against torch.compile's, on the same models
with the same weights, then their steady-state run times.

Two halves:

  prepare (here, where coil builds; torch 1.13 is enough):
      python3 bench/gpu/compile_latency.py prepare [--coil build/bin/coil]
          [--dir build/compile-latency] [--only MODEL ...]
    exports each model of compile_latency_models.py to DIR/MODEL/model.onnx without weights
    (every parameter and buffer a graph input, named as in the state_dict), records the graph
    inputs in DIR/MODEL/inputs.json, and writes coil's Triton modules with
    `coil compile model.onnx --device cuda -o DIR/MODEL/default` and `... --mode max-autotune
    -o DIR/MODEL/max` (each coil compile's wall time goes into DIR/MODEL/compile.json).

  run (the GPU machine; carry DIR):
      python3 bench/gpu/compile_latency.py run [--dir build/compile-latency] [--json FILE]
          [--only MODEL ...] [--budget-s 540] [--serial MODEL ...] [--variants V ...]
    for each model, each in a new process (so that no in-memory cache of Triton's or torch's
    helps), with fresh cache directories (COIL_CACHE_DIR, TRITON_CACHE_DIR,
    TORCHINDUCTOR_CACHE_DIR):
      torch       torch.compile(model) (default mode): its first call
      default     coil's default-mode module: load_module + first call
      max         coil's max-autotune module: the same
      warm        the default module again, in a new process on the default run's caches
      serial      (--serial MODEL) the default module cold with COIL_COMPILE_THREADS=1
      nopre       (--variants nopre) the default module cold with COIL_PRECOMPILE=0 (each
                  kernel's configs compile in the pool when it is first called, not all first)
    each first call timed from just before the compile/load to the synchronize after it (torch,
    triton, CUDA and the weights are initialized before), then the steady-state time of that
    variant (triton.testing.do_bench, median), and coil's outputs against eager's (relative
    error of the norm). Finally one process per model times torch.compile, coil default and coil
    max alternately on warm caches (3 rounds, the median of each), so that their run times are
    compared under the same clocks. Everything runs under IEEE fp32 (no TF32: coil's default
    precision), eager and torch.compile too. Prints a table; --json writes every record.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

import compile_latency_models as models  # noqa: E402

DEFAULT_DIR = os.path.join(ROOT, "build", "compile-latency")
VARIANTS = {"default": "default", "max": "max", "warm": "default", "serial": "default",
            "nopre": "default"}


def log(msg):
    print(msg, flush=True)


# ---------------------------------------------------------------------------------------------
# prepare (here)


def export(name, folder):
    """model.onnx without weights, and inputs.json: the graph inputs in order."""
    import onnx
    import torch
    model, x = models.build(name)
    path = os.path.join(folder, "model.onnx")
    state = model.state_dict()
    # PRESERVE, not EVAL: EVAL folds batch norms into new convolution weights (graph inputs
    # torch's model does not have); the model is in eval mode, so its batch norms export as
    # inference ones.
    with torch.no_grad():
        torch.onnx.export(model, (x,), path, opset_version=17, input_names=["x"],
                          output_names=["y"], export_params=False, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.PRESERVE)
    graph = onnx.load(path).graph
    inputs = []
    for i in graph.input:
        dims = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name != "x":
            if i.name not in state:
                raise RuntimeError(f"{name}: graph input {i.name!r} is not in the state_dict")
            if list(state[i.name].shape) != dims:
                raise RuntimeError(f"{name}: {i.name} is {list(state[i.name].shape)} in torch, "
                                   f"{dims} in the graph")
        inputs.append({"name": i.name, "shape": dims})
    with open(os.path.join(folder, "inputs.json"), "w") as f:
        json.dump({"model": name, "x_shape": list(x.shape), "x_dtype": str(x.dtype),
                   "inputs": inputs}, f, indent=1)
    return len(inputs)


def prepare(a):
    coil = os.path.abspath(a.coil)
    for name in a.only or models.MODELS:
        folder = os.path.join(a.dir, name)
        os.makedirs(folder, exist_ok=True)
        t0 = time.perf_counter()
        n = export(name, folder)
        log(f"{name}: exported ({n} graph inputs) in {time.perf_counter() - t0:.1f} s")
        times = {}
        for variant, extra in (("default", []), ("max", ["--mode", "max-autotune"])):
            out = os.path.join(folder, variant)
            shutil.rmtree(out, ignore_errors=True)
            cmd = [coil, "compile", os.path.join(folder, "model.onnx"), "--device", "cuda",
                   "-o", out] + extra
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True)
            times[variant] = round(time.perf_counter() - t0, 2)
            if p.returncode != 0:
                log(f"{name}: FAILED {' '.join(cmd)}:\n{p.stdout}{p.stderr}")
                times[variant] = None
                continue
            size = os.path.getsize(os.path.join(out, "module.py"))
            log(f"{name} {variant}: coil compile {times[variant]} s, module.py {size >> 10} KiB")
        with open(os.path.join(folder, "compile.json"), "w") as f:
            json.dump({"coil_compile_s": times}, f)


# ---------------------------------------------------------------------------------------------
# One measurement (a child process on the GPU machine)


def bench_ms(fn):
    from triton.testing import do_bench
    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def rel_err(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(float(b.norm()), 1e-30))


def setup(name, folder):
    """(model on the GPU, x, coil's argument list in graph order, eager's output)."""
    import torch
    model, x = models.build(name)
    model = model.cuda()
    x = x.cuda()
    spec = json.load(open(os.path.join(folder, "inputs.json")))
    state = model.state_dict()
    args = []
    for i in spec["inputs"]:
        t = x if i["name"] == "x" else state[i["name"]]
        if list(t.shape) != i["shape"]:
            raise RuntimeError(f"{i['name']}: {list(t.shape)} here, {i['shape']} in the graph")
        args.append(t.detach().contiguous())
    with torch.no_grad():
        ref = model(x)
    torch.cuda.synchronize()
    return model, x, args, ref


def tuner_summary(mod):
    from coil_runtime import configs as cfgs, heuristics
    out = {"kernels": 0, "templates": 0, "templates_extern": 0, "configs_timed": 0,
           "cache_hits": 0}
    for t in heuristics.autotuners_of(mod):
        out["kernels"] += 1
        if t.kind == "template":
            out["templates"] += 1
            out["templates_extern"] += any(cfgs.is_extern(c) for c in t.chosen.values())
        for rows in t.timings.values():
            if rows == "cache hit":
                out["cache_hits"] += 1
            else:
                out["configs_timed"] += len(rows)
    return out


def child(a):
    import torch
    import triton  # noqa: F401 (imported before the clock starts, on both sides)
    from coil_runtime import runtime
    folder = os.path.join(a.dir, a.model)
    rec = {"model": a.model, "variant": a.variant}
    with runtime.fp32_precision("highest"), torch.no_grad():
        model, x, args, ref = setup(a.model, folder)
        if a.variant == "torch":
            t0 = time.perf_counter()
            compiled = torch.compile(model)
            out = compiled(x)
            torch.cuda.synchronize()
            rec["first_call_s"] = round(time.perf_counter() - t0, 3)
            rec["ms"] = bench_ms(lambda: compiled(x))
        else:
            path = os.path.join(folder, VARIANTS[a.variant], "module.py")
            t0 = time.perf_counter()
            mod = runtime.load_module(path)
            rec["load_s"] = round(time.perf_counter() - t0, 3)
            (out,) = mod.call(list(args))
            torch.cuda.synchronize()
            rec["first_call_s"] = round(time.perf_counter() - t0, 3)
            rec["ms"] = bench_ms(lambda: mod.call(list(args)))
            rec.update(tuner_summary(mod))
        rec["rel_err"] = rel_err(out.float(), ref.float())
    print("RESULT " + json.dumps(rec), flush=True)


def steady(a):
    """torch.compile, coil default and coil max on warm caches, timed alternately."""
    import torch
    from coil_runtime import runtime
    folder = os.path.join(a.dir, a.model)
    caches = json.loads(a.caches)
    rec = {"model": a.model, "variant": "steady"}
    with runtime.fp32_precision("highest"), torch.no_grad():
        model, x, args, ref = setup(a.model, folder)
        compiled = torch.compile(model)
        compiled(x)
        fns = {"torch": lambda: compiled(x)}
        for variant in ("default", "max"):
            os.environ["COIL_CACHE_DIR"] = caches[variant]  # read at each first call
            mod = runtime.load_module(os.path.join(folder, variant, "module.py"),
                                      name=f"steady_{variant}")
            mod.call(list(args))
            fns[variant] = (lambda m: lambda: m.call(list(args)))(mod)
        torch.cuda.synchronize()
        times = {k: [] for k in fns}
        for _ in range(3):
            for k, fn in fns.items():
                times[k].append(bench_ms(fn))
        rec.update({f"{k}_ms": statistics.median(v) for k, v in times.items()})
        rec["rounds"] = times
    print("RESULT " + json.dumps(rec), flush=True)


# ---------------------------------------------------------------------------------------------
# run (the GPU machine): the children, with fresh caches


def spawn(args, env, timeout):
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    wall = round(time.perf_counter() - t0, 2)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            rec = json.loads(line[len("RESULT "):])
            rec["process_s"] = wall
            return rec
    tail = (p.stdout + p.stderr).strip().splitlines()[-12:]
    return {"error": f"exit {p.returncode}: " + "\n".join(tail)}


def fresh_env(root, tag, **extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    for var in ("COIL_CACHE_DIR", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR"):
        env[var] = os.path.join(root, tag, var.lower())
    for var in ("COIL_TRITON_AUTOTUNE", "COIL_LOGS", "COIL_COMPILE_THREADS", "COIL_PRECOMPILE"):
        env.pop(var, None)
    env.update(extra)
    return env


def run(a):
    root = tempfile.mkdtemp(prefix="coil-latency-")
    deadline = time.time() + a.budget_s
    records = []
    for name in a.only or models.MODELS:
        variants = ["torch", "default", "max", "warm"] + (
            ["serial"] if name in (a.serial or []) else [])
        if a.variants:  # a subset (no steady: it needs the torch, default and max runs)
            variants = [v for v in a.variants if v != "steady"]
        folder = os.path.join(a.dir, name)
        if not os.path.exists(os.path.join(folder, "inputs.json")):
            records.append({"model": name, "error": "not prepared"})
            continue
        envs = {}
        for variant in variants + ([] if a.variants else ["steady"]):
            left = deadline - time.time()
            if left < 20:
                records.append({"model": name, "variant": variant, "error": "out of time"})
                continue
            if variant == "warm":
                env = envs["default"]  # the default run's caches, a new process
            elif variant == "steady":
                env = fresh_env(root, f"{name}-steady")
                env["TORCHINDUCTOR_CACHE_DIR"] = envs["torch"]["TORCHINDUCTOR_CACHE_DIR"]
                env["TRITON_CACHE_DIR"] = envs["max"]["TRITON_CACHE_DIR"]
            else:
                extra = {"serial": {"COIL_COMPILE_THREADS": "1"},
                         "nopre": {"COIL_PRECOMPILE": "0"}}.get(variant, {})
                env = fresh_env(root, f"{name}-{variant}", **extra)
            envs[variant] = env
            if variant == "steady":
                caches = {v: envs[v]["COIL_CACHE_DIR"] for v in ("default", "max")}
                rec = spawn(["steady", "--dir", a.dir, "--model", name, "--caches",
                             json.dumps(caches)], env, min(left, 240))
            else:
                rec = spawn(["child", "--dir", a.dir, "--model", name, "--variant", variant],
                            env, min(left, 300))
            rec.setdefault("model", name)
            rec.setdefault("variant", variant)
            records.append(rec)
            log(json.dumps(rec))
    shutil.rmtree(root, ignore_errors=True)
    table = make_table(records, a.dir)
    log(table)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"records": records, "table": table}, f, indent=1)


def make_table(records, folder):
    by = {(r["model"], r.get("variant")): r for r in records}
    lines = ["| model | coil compile (C++, build machine) | coil first call: default / max-autotune "
             "/ warm (/ serial) | torch.compile first call | default <= half of torch.compile | steady ms "
             "(alternating): torch.compile / coil default / coil max | coil vs eager (rel. err.: "
             "default, max) |", "|---|---|---|---|---|---|---|"]
    names = sorted({r["model"] for r in records}, key=lambda n: models.MODELS.index(n)
                   if n in models.MODELS else 99)
    for name in names:
        def first(v):
            r = by.get((name, v), {})
            return f"{r['first_call_s']:.1f} s" if "first_call_s" in r else (
                "error" if r else "-")
        try:
            cc = json.load(open(os.path.join(folder, name, "compile.json")))["coil_compile_s"]
            cc = f"{cc.get('default')} / {cc.get('max')} s"
        except (OSError, ValueError, KeyError):
            cc = "-"
        d, t = by.get((name, "default"), {}), by.get((name, "torch"), {})
        half = ("yes" if d["first_call_s"] <= t["first_call_s"] / 2 else "no") if (
            "first_call_s" in d and "first_call_s" in t) else "-"
        s = by.get((name, "steady"), {})
        steady_ms = " / ".join(f"{s[k]:.3f}" for k in ("torch_ms", "default_ms", "max_ms")) if (
            "max_ms" in s) else "-"
        errs = ", ".join(f"{by[(name, v)]['rel_err']:.1e}" if "rel_err" in by.get((name, v), {})
                         else "-" for v in ("default", "max"))
        serial = f" / {first('serial')}" if (name, "serial") in by else ""
        lines.append(f"| {name} | {cc} | {first('default')} / {first('max')} / {first('warm')}"
                     f"{serial} "
                     f"| {first('torch')} | {half} | {steady_ms} | {errs} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--coil", default=os.path.join(ROOT, "build", "bin", "coil"))
    p.add_argument("--dir", default=DEFAULT_DIR)
    p.add_argument("--only", nargs="*")
    r = sub.add_parser("run")
    r.add_argument("--dir", default=DEFAULT_DIR)
    r.add_argument("--json")
    r.add_argument("--only", nargs="*")
    r.add_argument("--budget-s", type=float, default=540)
    r.add_argument("--serial", nargs="*", help="models also run with COIL_COMPILE_THREADS=1")
    r.add_argument("--variants", nargs="*", choices=["torch"] + list(VARIANTS),
                   help="only these variants (warm needs default)")
    c = sub.add_parser("child")
    c.add_argument("--dir", required=True)
    c.add_argument("--model", required=True)
    c.add_argument("--variant", required=True, choices=["torch"] + list(VARIANTS))
    s = sub.add_parser("steady")
    s.add_argument("--dir", required=True)
    s.add_argument("--model", required=True)
    s.add_argument("--caches", required=True)
    a = ap.parse_args()
    {"prepare": prepare, "run": run, "child": child, "steady": steady}[a.cmd](a)


if __name__ == "__main__":
    main()
