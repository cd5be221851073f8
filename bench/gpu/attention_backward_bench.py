#!/usr/bin/env python3
"""Flash-attention backward on the GPU: coil's Triton templates (attention_grad wrt q, k and v,
from the saved output and logsumexp) against torch SDPA's flash backward, bf16 (issue 24).

Shapes as bench/gpu/attention_bench.py's (16k tokens, hidden 2048): T in {512, 2048, 8192},
B = 16384 / T, D in {64, 128}, H = 2048 / D, causal and not. TFLOP/s count the backward's five
products, 2.5x the forward's 4 B H T^2 D (FlashAttention's convention; coil's two kernels, dq and
grad_kv, do seven), halved when causal. Times are medians of triton.testing.do_bench.

  coil    tests/gpu/generated/attn_bw_bench/bw_T<T>_d<D>[_causal].py: the module of one graph
          with inputs q, k, v, out, dout, lse and the three attention_grad nodes (written by
          --prepare on the build machine), autotuned in its first call (not counted): a dq
          kernel and a grad_kv kernel (dk and dv from one key-block loop)
  3-kern  the same graph compiled with fusion off (bw_..._apart.py): dq, dk and dv kernels
          apart (eight products), the A/B of grad_kv in the same run; any other variant found
          beside (bw_..._<name>.py, e.g. a module of an earlier build kept by hand) is timed too
  torch   torch.autograd.grad of F.scaled_dot_product_attention under
          sdpa_kernel(FLASH_ATTENTION) (its _scaled_dot_product_flash_attention_backward)

Each coil gradient is checked against torch's (max abs difference, printed).

    python3 bench/gpu/attention_backward_bench.py --prepare      (build machine)
    python3 bench/gpu/attention_backward_bench.py [--json FILE] [--only T2048_d128 ...]   (GPU)
"""

import argparse
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
OUT_DIR = os.path.join(ROOT, "tests", "gpu", "generated", "attn_bw_bench")
TOKENS, HIDDEN = 16384, 2048


def shapes():
    for t in (512, 2048, 8192):
        for d in (64, 128):
            for causal in (False, True):
                yield t, d, causal


def name(t, d, causal):
    return f"T{t}_d{d}{'_causal' if causal else ''}"


def prepare():
    import coil
    os.makedirs(OUT_DIR, exist_ok=True)
    for t, d, causal in shapes():
        b, h = TOKENS // t, HIDDEN // d
        a = f"causal={'true' if causal else 'false'}"
        dims = f"[{b}, {h}, {t}, {d}]"
        text = "".join(f"input {n}: bf16{dims}\n" for n in ("q", "k", "v", "y", "dy"))
        text += f"input l: f32[{b}, {h}, {t}]\n"
        text += "".join(f'd{w} = attention_grad(q, k, v, y, dy, l) {{wrt="{w}", {a}}}\n'
                        for w in "qkv")
        text += "output dq\noutput dk\noutput dv\n"
        for suffix, options in (("", {}), ("_apart", {"fusion": False})):
            src, _ = coil.Graph.parse(text).generate_gpu_module(**options)
            with open(os.path.join(OUT_DIR, f"bw_{name(t, d, causal)}{suffix}.py"), "w") as f:
                f.write(src)
    print(f"wrote {OUT_DIR}")


def run(only, json_path):
    import torch
    import torch.nn.functional as F
    from triton.testing import do_bench
    from coil_runtime import heuristics, runtime
    rows = []
    for t, d, causal in shapes():
        if only and name(t, d, causal) not in only:
            continue
        b, h = TOKENS // t, HIDDEN // d
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, t, d, device="cuda", dtype=torch.bfloat16,
                               requires_grad=True) for _ in range(3))
        # sdpa_kernel is a generator-based context manager: a new one for each `with`.
        def flash():
            return torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.FLASH_ATTENTION)

        with flash():
            out, lse = torch.ops.aten._scaled_dot_product_flash_attention(
                q.detach(), k.detach(), v.detach(), 0.0, causal)[:2]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        dy = torch.randn_like(y)
        path = os.path.join(OUT_DIR, f"bw_{name(t, d, causal)}.py")
        mod = runtime.load_module(path, name=os.path.basename(path)[:-3])
        args = [q.detach(), k.detach(), v.detach(), out, dy, lse.float().contiguous()]
        dq, dk, dv = mod.call(list(args))
        with flash():
            want = torch.autograd.grad(y, (q, k, v), dy, retain_graph=True)
        err = [float((a.float() - w.float()).abs().max()) for a, w in zip((dq, dk, dv), want)]
        ms_coil = do_bench(lambda: mod.call(list(args)))
        variants = {}
        for other in sorted(os.listdir(OUT_DIR)):
            stem = f"bw_{name(t, d, causal)}_"
            if not other.startswith(stem) or not other.endswith(".py") or \
                    other[len(stem):-3].startswith("causal"):
                continue
            mod2 = runtime.load_module(os.path.join(OUT_DIR, other), name=other[:-3])
            mod2.call(list(args))  # autotunes
            variants[other[len(stem):-3]] = round(do_bench(lambda: mod2.call(list(args))), 3)
        with flash():
            ms_torch = do_bench(lambda: torch.autograd.grad(y, (q, k, v), dy, retain_graph=True))
        flops = 4 * b * h * t * t * d * 2.5 * (0.5 if causal else 1)
        configs = {tu.attention_kernel: str(next(iter(tu.chosen.values()), None))
                   for tu in heuristics.autotuners_of(mod)}
        row = {"T": t, "D": d, "causal": causal, "coil_ms": round(ms_coil, 3),
               "torch_flash_ms": round(ms_torch, 3),
               "coil_TFLOPs": round(flops / ms_coil / 1e9, 1),
               "torch_TFLOPs": round(flops / ms_torch / 1e9, 1),
               "ratio": round(ms_torch / ms_coil, 3), "coil_variants_ms": variants,
               "max_abs_diff": err, "configs": configs}
        print(json.dumps(row), flush=True)
        rows.append(row)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(rows, f, indent=1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prepare", action="store_true")
    p.add_argument("--only", nargs="*")
    p.add_argument("--json")
    a = p.parse_args()
    if a.prepare:
        prepare()
    else:
        run(a.only, a.json)


if __name__ == "__main__":
    main()
