#!/usr/bin/env python3
"""GPU suite of the Triton flash-attention template, against the written-out pattern in float64.

Runs the modules tests/gpu/prepare_attention.py wrote (tests/gpu/generated/attn_*/): for each
attention of a group, random inputs (seeded by group and index; bf16/f16 inputs rounded first,
the reference computing on those rounded values), `call()` once, then each output against

    softmax(q k^T * scale [+ mask | where(mask)] [causal: keys j <= i + Tk - Tq]) v

in float64 on the GPU (kv heads repeated for grouped-query; a row with no visible key is NaN,
as torch's softmax of all -inf and coil's reference give; Tk = 0 gives zeros). NaN must be
exactly where the reference has NaN; elsewhere |got - ref| <= atol + rtol |ref| with the
dtype's tolerance (f32 IEEE dots: 2e-5 + 1e-4 |ref|; bf16: P is rounded to bf16 before P V,
as every flash kernel does, and the output once: 2e-2 + 2e-2 |ref|; f16: 4e-3 + 4e-3 |ref|).

The grid groups run with the no-tuning config (COIL_TRITON_AUTOTUNE=0: one compile per kernel);
the masks, edges and decode groups autotune, then run once per config (--every-config, on by
default) so that every block size and mask path is checked (decode: the split path's partial
and combine kernels, src/codegen/triton/triton_attention_decode.h).

The backward group (attention.json kind "backward": training steps of attention, attention_lse
and attention_grad wrt q, k, v) checks y, lse, dq, dk and dv per case against torch autograd of
the written-out attention in float64 (backward_reference: a row that sees no key has lse -inf,
y NaN, dq 0 and adds nothing to dk and dv; compare_backward), autotuned and under every config.

    python3 tests/gpu/test_attention.py [--groups NAME ...] [--report FILE] [--no-every-config]

Exit code 0 when every case passed.
"""

import argparse
import json
import math
import os
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
GENERATED = os.environ.get("COIL_GPU_GENERATED") or os.path.join(ROOT, "tests", "gpu", "generated")

import torch  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
          "bool": torch.bool}
TOLERANCE = {"f32": (1e-4, 2e-5), "bf16": (2e-2, 2e-2), "f16": (4e-3, 4e-3)}  # (rtol, atol)
TUNED_GROUPS = ("masks", "edges", "decode")


def make_inputs(c, seed, device="cuda"):
    g = torch.Generator(device=device).manual_seed(seed)
    dt = DTYPES[c["dtype"]]

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device).to(dt)
    q = randn(c["b"], c["h"], c["tq"], c["d"])
    k = randn(c["b"], c["hkv"], c["tk"], c["d"])
    v = randn(c["b"], c["hkv"], c["tk"], c["dv"])
    args = [q, k, v]
    if c["mask"]:
        mdt, shape, fill = c["mask"]
        if mdt == "bool":
            m = torch.rand(*shape, generator=g, device=device) < 0.8
            if fill == "rows_masked":
                m[..., ::5, :] = False  # every fifth query row sees no key: NaN
        else:
            m = 2 * torch.randn(*shape, generator=g, device=device)
            m = m.masked_fill(torch.rand(*shape, generator=g, device=device) < 0.1, -math.inf)
        args.append(m)
    return args


def reference(c, args):
    q, k, v = (a.double() for a in args[:3])
    group = c["h"] // c["hkv"]
    if group > 1:
        k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scale = c["scale"] if c["scale"] is not None else 1 / math.sqrt(c["d"])
    s = (q @ k.transpose(-1, -2)) * scale
    if c["mask"]:
        m = args[3]
        s = s.masked_fill(~m, -math.inf) if m.dtype == torch.bool else s + m.double()
    if c["causal"]:
        i = torch.arange(c["tq"], device=q.device)[:, None]
        j = torch.arange(c["tk"], device=q.device)[None, :]
        s = s.masked_fill(j > i + (c["tk"] - c["tq"]), -math.inf)
    if c["tk"] == 0:
        return torch.zeros(c["b"], c["h"], c["tq"], c["dv"], dtype=torch.float64, device=q.device)
    return torch.softmax(s, -1) @ v


def compare(got, want, dtype):
    """'' when got matches want, else what differs."""
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    got = got.double()
    nan_got, nan_want = torch.isnan(got), torch.isnan(want)
    if not torch.equal(nan_got, nan_want):
        return (f"NaN at {int(nan_got.sum())} elements, the reference at {int(nan_want.sum())} "
                f"(first difference at {tuple((nan_got != nan_want).nonzero()[0].tolist())})")
    rtol, atol = TOLERANCE[dtype]
    ok = ~nan_want
    err = (got - want).abs()[ok]
    bound = atol + rtol * want.abs()[ok]
    if err.numel() and bool((err > bound).any()):
        worst = int((err - bound).argmax())
        return (f"max abs err {float(err.max()):.3g} (at flat {worst}: {float(got[ok][worst]):.6g} "
                f"vs {float(want[ok][worst]):.6g}; rtol {rtol}, atol {atol})")
    return ""


# --- the backward (group `backward`: attention_lse, attention_grad) ---------------------------

BACKWARD_OUTPUTS = ("y", "lse", "dq", "dk", "dv")  # per case, the module's outputs in order
LSE_TOLERANCE = (1e-4, 1e-4)  # f32 whatever the inputs (the scores accumulate in f32)


def make_backward_inputs(c, seed, device="cuda"):
    """q, k, v[, mask] as make_inputs, then dy (the gradient of y) in the inputs' dtype. A bool
    mask filled 'first_key_masked' hides key 0 from batch 0 (causal: its first row sees no
    key)."""
    args = make_inputs(c, seed, device)
    if c["mask"] and c["mask"][2] == "first_key_masked":
        args[3][0, ..., 0] = False
    g = torch.Generator(device=device).manual_seed(seed + 7919)
    dy = torch.randn(c["b"], c["h"], c["tq"], c["dv"], generator=g, device=device)
    return args + [dy.to(DTYPES[c["dtype"]])]


def backward_reference(c, args):
    """(y, lse, dq, dk, dv) in float64: torch autograd of the written-out attention on the
    (rounded) inputs. A row that sees no key has lse -inf, p = 0 (it contributes nothing: dq 0,
    nothing to dk and dv) and y NaN, as the forward gives it; Tk = 0 gives y = 0."""
    q, k, v = (a.double().requires_grad_() for a in args[:3])
    dy = args[-1].double()
    group = c["h"] // c["hkv"]
    kk, vv = (k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)) if group > 1 else (k, v)
    scale = c["scale"] if c["scale"] is not None else 1 / math.sqrt(c["d"])
    s = (q @ kk.transpose(-1, -2)) * scale
    if c["mask"]:
        m = args[3]
        s = s.masked_fill(~m, -math.inf) if m.dtype == torch.bool else s + m.double()
    if c["causal"]:
        i = torch.arange(c["tq"], device=q.device)[:, None]
        j = torch.arange(c["tk"], device=q.device)[None, :]
        s = s.masked_fill(j > i + (c["tk"] - c["tq"]), -math.inf)
    if c["tk"] == 0:
        lse = torch.full(s.shape[:-1], -math.inf, dtype=torch.float64, device=q.device)
    else:
        lse = torch.logsumexp(s.detach(), -1)
    no_key = (lse == -math.inf)[..., None]
    p = torch.softmax(s.masked_fill(no_key, 0.0), -1).masked_fill(no_key, 0.0)
    out = p @ vv
    grads = torch.autograd.grad(out, (q, k, v), dy, allow_unused=True)
    dq, dk, dv = (torch.zeros_like(x) if gx is None else gx for x, gx in zip((q, k, v), grads))
    y = out.detach()
    if c["tk"] > 0:
        y = y.masked_fill(no_key, math.nan)
    return y, lse, dq.detach(), dk.detach(), dv.detach()


def compare_backward(name, got, want, dtype):
    """'' when output `name` (BACKWARD_OUTPUTS) matches, else what differs. y as compare();
    lse: -inf exactly where the reference's, else within LSE_TOLERANCE; gradients: no NaN, and
    |got - ref| <= atol * max(1, max |ref|) + rtol |ref| with the dtype's tolerance (a gradient
    sums over the other length: its error scales with its largest elements)."""
    if name == "y":
        return compare(got, want, dtype)
    if tuple(got.shape) != tuple(want.shape):
        return f"shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    got = got.double()
    if bool(torch.isnan(got).any()):
        return f"NaN at {int(torch.isnan(got).sum())} elements"
    if name == "lse":
        inf_got, inf_want = torch.isinf(got), torch.isinf(want)
        if not torch.equal(inf_got, inf_want) or not torch.equal(got[inf_got], want[inf_want]):
            return (f"-inf at {int(inf_got.sum())} elements, the reference at "
                    f"{int(inf_want.sum())}")
        rtol, atol = LSE_TOLERANCE
        got, want = got[~inf_want], want[~inf_want]
    else:
        rtol, atol = TOLERANCE[dtype]
        if want.numel():
            atol *= max(1.0, float(want.abs().max()))
    err = (got - want).abs()
    bound = atol + rtol * want.abs()
    if err.numel() and bool((err > bound).any()):
        worst = int((err - bound).argmax())
        return (f"max abs err {float(err.max()):.3g} (at flat {worst}: "
                f"{float(got.reshape(-1)[worst]):.6g} vs {float(want.reshape(-1)[worst]):.6g}; "
                f"rtol {rtol}, atol {atol:.3g})")
    return ""


def describe(c):
    m = ""
    if c["mask"]:
        m = f" {c['mask'][0]} mask {c['mask'][1]}" + (" rows masked" if c["mask"][2] ==
                                                      "rows_masked" else "")
    return (f"{c['dtype']} B{c['b']} H{c['h']}/{c['hkv']} Tq{c['tq']} Tk{c['tk']} D{c['d']}"
            f"{'' if c['dv'] == c['d'] else ' Dv' + str(c['dv'])}{' causal' if c['causal'] else ''}"
            f"{m}")


def run_group(name, every_config, results):
    from coil_runtime import heuristics, runtime
    d = os.path.join(GENERATED, "attn_" + name)
    info = json.load(open(os.path.join(d, "attention.json")))
    if info["status"] != "ok":
        results.append({"name": name, "status": "SKIP", "detail": [info["status"]]})
        return
    backward = info.get("kind") == "backward"
    tuned = name in TUNED_GROUPS or backward
    os.environ["COIL_TRITON_AUTOTUNE"] = "1" if tuned else "0"
    start = time.time()
    mod = runtime.load_module(os.path.join(d, "module.py"), name=f"coil_attn_{name}")
    cases = info["cases"]
    inputs, refs = [], []
    for i, c in enumerate(cases):
        if backward:
            args = make_backward_inputs(c, seed=1000 * len(name) + i)
            refs.append(backward_reference(c, args))
        else:
            args = make_inputs(c, seed=1000 * len(name) + i)
            refs.append(reference(c, args))
        inputs += args
    tuners = heuristics.autotuners_of(mod)
    rounds = [None] + (list(range(max(len(t.configs) for t in tuners))) if every_config and tuned
                       and tuners else [])
    problems = {i: [] for i in range(len(cases))}
    for r in rounds:
        for t in tuners:
            t.select(r)
        outs = mod.call(list(inputs))
        torch.cuda.synchronize()
        label = "autotuned" if r is None else f"config #{r}"
        for i, (c, want) in enumerate(zip(cases, refs)):
            if backward:
                for n, got, w in zip(BACKWARD_OUTPUTS, outs[5 * i:5 * i + 5], want):
                    why = compare_backward(n, got, w, c["dtype"])
                    if why:
                        problems[i].append(f"[{label}] {n}: {why}")
                continue
            why = compare(outs[i], want, c["dtype"])
            if why:
                problems[i].append(f"[{label}] {why}")
    for t in tuners:
        t.select(None)
    seconds = time.time() - start
    for i, c in enumerate(cases):
        results.append({"name": f"{name}/{i} {describe(c)}",
                        "status": "FAIL" if problems[i] else "PASS", "detail": problems[i][:3],
                        "seconds": round(seconds, 1)})
    chosen = {t.name: str(next(iter(t.chosen.values()), t.forced)) for t in tuners}
    print(f"  {name}: {sum(not p for p in problems.values())}/{len(cases)} passed, "
          f"{len(rounds)} run(s), {len(tuners)} kernels, {seconds:.1f} s", flush=True)
    if tuned:
        for k, v in chosen.items():
            print(f"    {k}: {v}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", nargs="*")
    p.add_argument("--report")
    p.add_argument("--no-every-config", action="store_true")
    a = p.parse_args(argv)
    # Cases are the directories with an attention.json; attn_bench_* are the benchmark's modules
    # (bench/gpu/attention_bench.py), which have none.
    names = sorted(n[5:] for n in os.listdir(GENERATED)
                   if n.startswith("attn_")
                   and os.path.exists(os.path.join(GENERATED, n, "attention.json")))
    if a.groups:
        names = [n for n in names if n in a.groups]
    if not names:
        print("no tests/gpu/generated/attn_*: run python3 tests/gpu/prepare_attention.py first")
        return 1
    print(f"attention on {torch.cuda.get_device_name()}: groups {' '.join(names)}", flush=True)
    results = []
    for n in names:
        try:
            run_group(n, not a.no_every_config, results)
        except Exception as e:  # noqa: BLE001 (a group that cannot run fails, the rest go on)
            import traceback
            results.append({"name": n, "status": "FAIL",
                            "detail": [f"{type(e).__name__}: {e}"[:600]]})
            traceback.print_exc()
    lines = []
    for r in results:
        lines.append(f"{r['status']} attention {r['name']}")
        lines += [f"     {d}" for d in r["detail"]]
    counts = {s: sum(r["status"] == s for r in results) for s in ("PASS", "FAIL", "SKIP")}
    lines.append(f"attention: {counts['PASS']} passed, {counts['FAIL']} failed, "
                 f"{counts['SKIP']} skipped of {len(results)}")
    text = "\n".join(lines)
    print("\n".join(line for line in lines if not line.startswith("PASS")))
    if a.report:
        with open(a.report, "w") as f:
            f.write(text + "\n")
    return 0 if counts["FAIL"] == 0 and counts["SKIP"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
