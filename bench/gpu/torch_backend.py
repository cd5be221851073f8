#!/usr/bin/env python3
"""torch.compile(backend="coil") against backend="inductor" and eager (issue 18, "On the GPU
machine"): on CUDA and on the host CPU (16 threads), for the issue's models, at an inference
batch and a training step (forward, loss, backward).

    (here)    bash scripts/device_bundle.sh
    (device)  python3 bench/gpu/torch_backend.py [--quick] [--budget-s 480] [--json FILE]
                                                 [--only MODEL ...] [--devices cuda cpu]
              (carry device-bundle; JSON to $OUT/torch_backend.json by default)

The script unpacks device-bundle/coil-bundle.tar.xz (unless COIL_LIBRARY is set) and runs every
measurement in a new process of itself, with cache directories of its own per backend
(COIL_CACHE_DIR, TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR):
  cold   empty caches: the first call (trace, compile, autotune, run) is the compile time;
  warm   a new process on the caches the cold one left: its first call again.
  ab     (--ab, CUDA configurations by default) one more process on both backends' warm caches,
         timing eager, coil and Inductor in turn, 7 rounds each: steady-state ratios free of the
         drift between processes (on the H100 host one configuration's time moved by up to 1.9x
         from one process to the next, eager's own included).
Each process also times eager and the compiled model's steady state (median of 5 rounds of a
few calls, the device synchronized), and compares with eager: the largest absolute difference
of the output, and for training of every parameter's gradient relative to that gradient's
largest magnitude. Everything is IEEE fp32 (no TF32: coil's default precision), eager and
Inductor too. coil's fallback ops (COIL_LOGS=fallback's lines) are recorded per model.

Models (plain torch; random weights, seeded): the test models (an MLP with LayerNorm and GELU,
torchvision resnet18 and mobilenet_v2, nn.TransformerEncoderLayer, a GPT block with tied
embedding), torchvision resnet50, a BERT-base-like encoder (12 layers, d 768, 12 heads, post-
norm) and a GPT-2-small-like decoder (12 layers, d 768, vocab 50257, pre-norm, tied output).
--quick: a subset that fits one device call with room for the tests. Measurements past
--budget-s are not started (the JSON says which were skipped).
"""

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# (model, device, mode, batch): the full list, in the order they run; QUICK the subset.
CONFIGS = [
    ("mlp", "cuda", "infer", 256), ("mlp", "cuda", "train", 256),
    ("gpt_block", "cuda", "infer", 8), ("gpt_block", "cuda", "train", 8),
    ("transformer_encoder_layer", "cuda", "infer", 16),
    ("transformer_encoder_layer", "cuda", "train", 16),
    ("resnet18", "cuda", "infer", 32), ("resnet18", "cuda", "train", 32),
    ("mobilenet_v2", "cuda", "infer", 32),
    ("resnet50", "cuda", "infer", 32), ("bert_base", "cuda", "infer", 8),
    ("gpt2_small", "cuda", "infer", 4), ("gpt2_small", "cuda", "train", 4),
    ("mlp", "cpu", "infer", 256), ("mlp", "cpu", "train", 256),
    ("gpt_block", "cpu", "infer", 8), ("gpt_block", "cpu", "train", 8),
    ("transformer_encoder_layer", "cpu", "infer", 16), ("resnet18", "cpu", "infer", 8),
    ("mobilenet_v2", "cpu", "infer", 8), ("resnet50", "cpu", "infer", 8),
    ("bert_base", "cpu", "infer", 2), ("gpt2_small", "cpu", "infer", 1),
]
QUICK = [("mlp", "cuda", "infer", 256), ("gpt_block", "cuda", "train", 8),
         ("resnet18", "cuda", "infer", 32), ("transformer_encoder_layer", "cuda", "train", 16),
         ("mlp", "cpu", "infer", 256), ("gpt_block", "cpu", "train", 8)]
BACKENDS = ("coil", "inductor")


# ---- the models ----------------------------------------------------------------------------

def _models():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class LnGeluMlp(nn.Module):
        def __init__(self, d=1024, hidden=4096, out=1000):
            super().__init__()
            self.ln, self.fc1 = nn.LayerNorm(d), nn.Linear(d, hidden)
            self.fc2 = nn.Linear(hidden, out)

        def forward(self, x):
            return self.fc2(F.gelu(self.fc1(self.ln(x))))

    class Attention(nn.Module):
        def __init__(self, d, heads, causal_ctx=0):
            super().__init__()
            self.heads, self.qkv, self.proj = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)
            if causal_ctx:
                self.register_buffer("causal", torch.tril(torch.ones(causal_ctx, causal_ctx,
                                                                     dtype=torch.bool)))
            else:
                self.causal = None

        def forward(self, x):
            b, t, d = x.shape
            h = self.heads
            q, k, v = (z.view(b, t, h, d // h).transpose(1, 2)
                       for z in self.qkv(x).split(d, dim=2))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
            if self.causal is not None:
                att = att.masked_fill(~self.causal[:t, :t], float("-inf"))
            y = F.softmax(att, dim=-1) @ v
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

    class Block(nn.Module):
        """pre-norm (GPT) or post-norm (BERT) attention + GELU MLP."""

        def __init__(self, d, heads, ctx=0, pre_norm=True):
            super().__init__()
            self.pre = pre_norm
            self.attn = Attention(d, heads, ctx)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            if self.pre:
                x = x + self.attn(self.ln1(x))
                return x + self.out(F.gelu(self.fc(self.ln2(x))))
            x = self.ln1(x + self.attn(x))
            return self.ln2(x + self.out(F.gelu(self.fc(x))))

    class Decoder(nn.Module):
        def __init__(self, vocab, d, heads, ctx, layers):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(ctx, d) * 0.02)
            self.blocks = nn.ModuleList(Block(d, heads, ctx) for _ in range(layers))
            self.ln = nn.LayerNorm(d)

        def forward(self, idx):
            x = self.tok(idx) + self.pos[:idx.shape[1]]
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x) @ self.tok.weight.t()

    class Encoder(nn.Module):
        def __init__(self, vocab=30522, d=768, heads=12, ctx=512, layers=12):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Parameter(torch.randn(ctx, d) * 0.02)
            self.ln = nn.LayerNorm(d)
            self.blocks = nn.ModuleList(Block(d, heads, 0, pre_norm=False)
                                        for _ in range(layers))

        def forward(self, idx):
            x = self.ln(self.tok(idx) + self.pos[:idx.shape[1]])
            for blk in self.blocks:
                x = blk(x)
            return x

    def tv(name, **kw):
        import torchvision
        return getattr(torchvision.models, name)(**kw)

    tokens = lambda vocab, t: (lambda b: torch.randint(0, vocab, (b, t)))  # noqa: E731
    image = lambda size: (lambda b: torch.randn(b, 3, size, size))  # noqa: E731
    return {  # name: (make the model, make an input batch of size b)
        "mlp": (LnGeluMlp, lambda b: torch.randn(b, 1024)),
        "gpt_block": (lambda: Decoder(8192, 512, 8, 256, 1), tokens(8192, 256)),
        "transformer_encoder_layer": (lambda: nn.TransformerEncoderLayer(
            512, 8, 2048, dropout=0.0, batch_first=True), lambda b: torch.randn(b, 128, 512)),
        "resnet18": (lambda: tv("resnet18", num_classes=1000), image(224)),
        "mobilenet_v2": (lambda: tv("mobilenet_v2", num_classes=1000), image(224)),
        "resnet50": (lambda: tv("resnet50", num_classes=1000), image(224)),
        "bert_base": (Encoder, tokens(30522, 128)),
        "gpt2_small": (lambda: Decoder(50257, 768, 12, 1024, 12), tokens(50257, 256)),
    }


# ---- one measurement (a child process) ------------------------------------------------------

def _time(fn, sync, rounds=5, min_s=0.05):
    """Median seconds per call over `rounds` rounds of n calls (n: at least min_s a round)."""
    fn()
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    one = max(time.perf_counter() - t0, 1e-6)
    n = max(1, min(200, int(min_s / one)))
    times = []
    for _ in range(rounds):
        sync()
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        times.append((time.perf_counter() - t0) / n)
    return statistics.median(times)


def _build_model(make, device, mode):
    """The model with seeded weights, on `device`; batch-norm statistics away from 0/1, and in
    training its batch norms in eval mode (their running statistics are the eval ones, issue
    18)."""
    import torch
    import torch.nn as nn
    torch.manual_seed(0)
    m = make()
    for sub in m.modules():
        if isinstance(sub, nn.BatchNorm2d):
            sub.running_mean.uniform_(-0.2, 0.2)
            sub.running_var.uniform_(0.5, 1.5)
    m = m.to(device).train(mode == "train")
    if mode == "train":
        for sub in m.modules():
            if isinstance(sub, nn.BatchNorm2d):
                sub.eval()
    return m


def _step(model, x, mode):
    """One inference call, or one training step (forward, a loss, backward); returns the output."""
    import torch
    if mode == "infer":
        with torch.no_grad():
            return model(x)
    for p in model.parameters():
        p.grad = None
    y = model(x)
    y.float().square().mean().backward()
    return y


def measure(model_name, device, mode, batch, backend):
    import torch
    if device == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "16")))
    from coil_runtime import runtime
    runtime.fp32_precision("highest").__enter__()  # IEEE fp32 for the whole process
    fallbacks = []
    if backend == "coil":
        import coil.torch  # noqa: F401  (registers the backend)
        from coil.torch import cuda as coil_cuda, fx_compile
        real = fx_compile._log_fallback

        def record(what, reason):
            if f"{what}: {reason}" not in fallbacks:
                fallbacks.append(f"{what}: {reason}")
            real(what, reason)
        fx_compile._log_fallback = record
    make, make_input = _models()[model_name]
    eager = _build_model(make, device, mode)
    x = make_input(batch).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step(model):
        return _step(model, x, mode)

    y_eager = step(eager).detach()
    grads_eager = [p.grad.detach().clone() for p in eager.parameters()] if mode == "train" else []
    eager_s = _time(lambda: step(eager), sync)
    if hasattr(torch, "compile"):
        compiled = torch.compile(eager, backend=backend)
    elif backend == "coil":  # torch 1.13 (here, to try the script): AOTAutograd, no Dynamo
        compiled = coil.torch.compile(eager)
    else:
        raise RuntimeError(f"backend {backend} needs torch.compile (torch 2.x)")
    sync()
    t0 = time.perf_counter()
    y = step(compiled).detach()
    sync()
    first_call_s = time.perf_counter() - t0
    rec = {"first_call_s": first_call_s, "eager_ms": eager_s * 1e3,
           "max_abs_err": (y.float() - y_eager.float()).abs().max().item(),
           "out_max_abs": y_eager.abs().max().item()}
    if mode == "train":
        rec["grad_max_rel_err"] = max(
            ((p.grad - g).abs().max() / g.abs().max().clamp_min(1e-30)).item()
            for p, g in zip(eager.parameters(), grads_eager))
    rec["ms"] = _time(lambda: step(compiled), sync) * 1e3
    if backend == "coil":
        rec["fallbacks"] = fallbacks
        rec["coil_cuda_modules"] = dict(coil_cuda.stats)
    return rec


def measure_ab(model_name, device, mode, batch):
    """Eager, coil and Inductor in one process (caches warm), timed in turn: 7 rounds of each,
    alternated, and each one's median. Same weights and input for the three."""
    import torch
    if device == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "16")))
    if not hasattr(torch, "compile"):
        raise RuntimeError("the A/B run needs torch.compile (torch 2.x) for Inductor")
    from coil_runtime import runtime
    runtime.fp32_precision("highest").__enter__()
    import coil.torch  # noqa: F401  (registers the backend)
    make, make_input = _models()[model_name]

    models = {k: _build_model(make, device, mode) for k in ("eager", "coil", "inductor")}
    models["coil"] = torch.compile(models["coil"], backend="coil")
    models["inductor"] = torch.compile(models["inductor"], backend="inductor")
    x = make_input(batch).to(device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step(model):
        return _step(model, x, mode)
    for m in models.values():  # compile (warm caches), then two steady calls
        for _ in range(3):
            step(m)
    sync()
    times = {k: [] for k in models}
    for _ in range(7):
        for k, m in models.items():
            times[k].append(_time(lambda: step(m), sync, rounds=1) * 1e3)
    rec = {f"ab_{k}_ms": statistics.median(v) for k, v in times.items()}
    rec.update({f"ab_{k}_rounds_ms": v for k, v in times.items()})
    return rec


# ---- the driver -------------------------------------------------------------------------------

def _bundle_env():
    """Environment of the child processes: the device bundle's libraries (unpacked once)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python"), HERE] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                else []))
    if env.get("COIL_LIBRARY"):
        return env
    tar = os.path.join(ROOT, "device-bundle", "coil-bundle.tar.xz")
    if not os.path.exists(tar):
        sys.exit(f"error: {tar} is missing (bash scripts/device_bundle.sh) and COIL_LIBRARY "
                 "is not set")
    bundle = tempfile.mkdtemp(prefix="coil-bundle-")
    with tarfile.open(tar) as t:
        t.extractall(bundle)
    lib = os.path.join(bundle, "lib")
    env.update(COIL_LIBRARY=lib, LIBRARY_PATH=lib, CPATH=os.path.join(bundle, "include"),
               LD_LIBRARY_PATH=lib + (os.pathsep + env["LD_LIBRARY_PATH"]
                                      if env.get("LD_LIBRARY_PATH") else ""))
    with open(os.path.join(bundle, "REVISION")) as f:
        env["COIL_BUNDLE_REVISION"] = f.read().strip()
    return env


def _child(env, caches, args, timeout):
    env = dict(env, COIL_CACHE_DIR=os.path.join(caches, "coil"),
               TRITON_CACHE_DIR=os.path.join(caches, "triton"), OMP_NUM_THREADS="16",
               TORCHINDUCTOR_CACHE_DIR=env.get("TORCHINDUCTOR_CACHE_DIR_AB") or
               os.path.join(caches, "inductor"))
    t0 = time.perf_counter()
    try:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                              json.dumps(args)], env=env, capture_output=True, text=True,
                             timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    if out.returncode or not lines:
        tail = (out.stderr or out.stdout).strip().splitlines()[-2:]
        return {"error": f"exit {out.returncode}: " + " | ".join(tail)}
    rec = json.loads(lines[-1][len("RESULT "):])
    rec["process_s"] = time.perf_counter() - t0
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", help="models to run")
    ap.add_argument("--devices", nargs="*", default=["cuda", "cpu"])
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--child-timeout-s", type=float, default=240)
    ap.add_argument("--no-warm", action="store_true", help="cold compiles only")
    ap.add_argument("--ab", choices=["cuda", "all", "none"], default="cuda",
                    help="which configurations also get the one-process A/B timing")
    ap.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."),
                                                   "torch_backend.json"))
    ap.add_argument("--child", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        args = json.loads(a.child)
        rec = measure_ab(*args[:4]) if args[4] == "ab" else measure(*args)
        print("RESULT " + json.dumps(rec), flush=True)
        return
    import torch
    configs = [c for c in (QUICK if a.quick else CONFIGS)
               if c[1] in a.devices and (not a.only or c[0] in a.only)
               and (c[1] != "cuda" or torch.cuda.is_available())]
    env = _bundle_env()
    root = tempfile.mkdtemp(prefix="coil-torch-backend-")
    start = time.perf_counter()
    results, skipped = [], []
    meta = {"date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                         if ln.startswith("model name")), "?"),
            "cpu_threads": 16, "bundle": env.get("COIL_BUNDLE_REVISION", "COIL_LIBRARY"),
            "python": sys.version.split()[0]}
    print(json.dumps(meta), flush=True)
    for model, device, mode, batch in configs:
        for backend in BACKENDS:
            for phase in ("cold", "warm"):
                if phase == "warm" and a.no_warm:
                    continue
                if time.perf_counter() - start > a.budget_s:
                    skipped.append([model, device, mode, batch, backend, phase])
                    continue
                caches = os.path.join(root, f"{model}-{device}-{mode}-{backend}")
                if phase == "cold":
                    shutil.rmtree(caches, ignore_errors=True)
                rec = _child(env, caches, [model, device, mode, batch, backend],
                             a.child_timeout_s)
                rec.update(model=model, device=device, mode=mode, batch=batch,
                           backend=backend, phase=phase)
                results.append(rec)
                print(json.dumps(rec), flush=True)
                _write(a.json, meta, results, skipped)  # after each: a killed run keeps them
        if a.ab == "none" or (a.ab == "cuda" and device != "cuda") or a.no_warm:
            continue
        if time.perf_counter() - start > a.budget_s:
            skipped.append([model, device, mode, batch, "ab", "ab"])
            continue
        # Both backends' warm caches (Triton's is coil's: Inductor compiles its kernels again
        # there, before anything is timed).
        rec = _child(dict(env, TORCHINDUCTOR_CACHE_DIR_AB=os.path.join(
                         root, f"{model}-{device}-{mode}-inductor", "inductor")),
                     os.path.join(root, f"{model}-{device}-{mode}-coil"),
                     [model, device, mode, batch, "ab"], a.child_timeout_s)
        rec.update(model=model, device=device, mode=mode, batch=batch, backend="ab",
                   phase="ab")
        results.append(rec)
        print(json.dumps(rec), flush=True)
        _write(a.json, meta, results, skipped)
    summary = _write(a.json, meta, results, skipped)
    _print_table(summary)
    print(f"wrote {a.json} ({time.perf_counter() - start:.0f} s)")


def _write(path, meta, results, skipped):
    summary = _summary(results)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"meta": meta, "results": results, "summary": summary, "skipped": skipped},
                  f, indent=1)
    return summary


def _summary(results):
    """One row per (model, device, mode): eager, coil and Inductor times, coil's speedup over
    Inductor (Inductor's time / coil's), compile times, errors, fallbacks."""
    rows = {}
    for r in results:
        key = (r["model"], r["device"], r["mode"], r["batch"])
        row = rows.setdefault(key, {"model": key[0], "device": key[1], "mode": key[2],
                                    "batch": key[3]})
        b, p = r["backend"], r["phase"]
        if b == "ab":
            if "error" in r:
                row["ab_error"] = r["error"]
            else:
                for k in ("eager", "coil", "inductor"):
                    row[f"ab_{k}_ms"] = round(r[f"ab_{k}_ms"], 3)
                row["ab_coil_speedup_vs_inductor"] = round(
                    r["ab_inductor_ms"] / r["ab_coil_ms"], 3)
            continue
        if "error" in r:
            row[f"{b}_{p}_error"] = r["error"]
            continue
        row[f"{b}_{p}_compile_s"] = round(r["first_call_s"], 2)
        if p == "cold":
            row["eager_ms"] = round(r["eager_ms"], 3)
            row[f"{b}_ms"] = round(r["ms"], 3)
            row[f"{b}_max_abs_err"] = r["max_abs_err"]
            if "grad_max_rel_err" in r:
                row[f"{b}_grad_max_rel_err"] = r["grad_max_rel_err"]
            if b == "coil":
                row["coil_fallbacks"] = r.get("fallbacks", [])
    for row in rows.values():
        if row.get("coil_ms") and row.get("inductor_ms"):
            row["coil_speedup_vs_inductor"] = round(row["inductor_ms"] / row["coil_ms"], 3)
    return list(rows.values())


def _print_table(summary):
    cols = ["model", "device", "mode", "batch", "eager_ms", "coil_ms", "inductor_ms",
            "coil_speedup_vs_inductor", "coil_cold_compile_s", "inductor_cold_compile_s",
            "coil_warm_compile_s", "inductor_warm_compile_s", "coil_max_abs_err",
            "inductor_max_abs_err", "coil_grad_max_rel_err", "ab_eager_ms", "ab_coil_ms",
            "ab_inductor_ms", "ab_coil_speedup_vs_inductor"]
    print(" | ".join(cols))
    for row in summary:
        print(" | ".join(str(row.get(c, "-")) for c in cols))
        for key in [k for k in row if k.endswith("_error")]:
            print(f"    {key}: {row[key]}")
        if row.get("coil_fallbacks"):
            print(f"    coil fallbacks: {row['coil_fallbacks']}")


if __name__ == "__main__":
    main()
