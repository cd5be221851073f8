#!/usr/bin/env python3
"""Flash-attention forward on the GPU: coil's Triton template against torch's SDPA (flash
backend) and torch.compile (Inductor), bf16, in the same process (issue 24's closing table).

Shapes (the FlashAttention papers' setup: 16k tokens, hidden 2048): T in {512, 2048, 8192},
B = 16384 / T, D in {64, 128}, H = 2048 / D, Tq = Tk = T, causal and not. TFLOP/s counts the
two products, 4 B H T^2 D, halved when causal. Times are medians of triton.testing.do_bench
(L2 flushed between runs).

  coil      tests/gpu/generated/attn_bench_T<T>_d<D>[_causal]/module.py: `coil compile --device
            cuda` of `attention(q, k, v) {causal}` (written by --prepare on the build machine);
            autotuned in the first call (its configs timed), not counted
  sdpa      F.scaled_dot_product_attention under sdpa_kernel(FLASH_ATTENTION)
  inductor  torch.compile of the written-out pattern softmax(q k^T * scale [causal mask]) v
            (Inductor's attention pattern matcher makes it SDPA where it can), compiled before
            timing

Decoding rows (`decode_*`: the split-K path, src/codegen/triton/triton_attention_decode.h): one
query row per head against a KV cache, B in {1, 8}, H = 32 on Hkv = 8 (GQA), Tk in {4096, 16384,
65536}, D = 128, bf16, not causal (a last query row sees every key). They are bound by reading K
and V: GB/s counts those bytes, 2 B Hkv Tk D * 2. SDPA there is torch's own choice of backend
with enable_gqa (the flash backend takes no GQA in every torch version), Inductor compiles the
written-out attention with the query heads of a kv head as rows of one product (no copy of K or
V).

Each coil result is also checked against SDPA's (max abs difference, printed).

    python3 bench/gpu/attention_bench.py --prepare [--coil build/bin/coil]   (build machine)
    python3 bench/gpu/attention_bench.py [--json FILE] [--only T2048_d128 ...]   (GPU)
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
GENERATED = os.path.join(ROOT, "tests", "gpu", "generated")
TOKENS, HIDDEN = 16384, 2048


def shapes():
    for t in (512, 2048, 8192):
        for d in (64, 128):
            for causal in (False, True):
                name = f"T{t}_d{d}{'_causal' if causal else ''}"
                yield name, {"b": TOKENS // t, "h": HIDDEN // d, "hkv": HIDDEN // d, "tq": t,
                             "t": t, "d": d, "causal": causal}
    for b in (1, 8):
        for t in (4096, 16384, 65536):
            yield f"decode_B{b}_T{t}", {"b": b, "h": 32, "hkv": 8, "tq": 1, "t": t, "d": 128,
                                        "causal": False}


def is_decode(s):
    return s["tq"] != s["t"]


def prepare(coil):
    failed = 0
    for name, s in shapes():
        out = os.path.join(GENERATED, "attn_bench_" + name)
        os.makedirs(out, exist_ok=True)
        src = os.path.join(out, "graph_in.coil")
        q_dims = f"{s['b']}, {s['h']}, {s['tq']}, {s['d']}"
        kv_dims = f"{s['b']}, {s['hkv']}, {s['t']}, {s['d']}"
        with open(src, "w") as f:
            f.write(f"input q: bf16[{q_dims}]\ninput k: bf16[{kv_dims}]\n"
                    f"input v: bf16[{kv_dims}]\n"
                    f"y = attention(q, k, v) {{causal={'true' if s['causal'] else 'false'}}}\n"
                    f"output y\n")
        r = subprocess.run([coil, "compile", src, "--device", "cuda", "-o", out],
                           capture_output=True, text=True)
        ok = r.returncode == 0 and "triton_tem_fused_attention" in r.stdout
        failed += not ok
        split = ""
        if ok and is_decode(s):  # B = 1: the split path (B = 8 has 256 programs already)
            with open(os.path.join(out, "module.py")) as f:
                split = (" (split-K: partial + combine)" if "kernel='decode_partial'" in f.read()
                         else " (one kernel)")
        print(f"  attn_bench_{name:<16} {'ok' if ok else 'FAILED'}{split}")
        if not ok:
            print("    " + (r.stdout + r.stderr)[-1500:].replace("\n", "\n    "))
    return 1 if failed else 0


def bench_ms(fn):
    from triton.testing import do_bench
    return float(do_bench(fn, warmup=25, rep=200, return_mode="median"))


def written_out(q, k, v, causal):
    import torch
    s = (q @ k.transpose(-1, -2)).float() * (1.0 / math.sqrt(q.shape[-1]))
    if causal:
        t = q.shape[-2]
        keep = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return (torch.softmax(s, -1).to(q.dtype) @ v)


def written_out_gqa(q, k, v):
    """Grouped-query decoding written out: the query heads of each kv head are rows of one
    product with that head's K and V (no repeated K or V)."""
    import torch
    b, h, tq, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(b, hkv, (h // hkv) * tq, d)
    s = (qg @ k.transpose(-1, -2)).float() * (1.0 / math.sqrt(d))
    return (torch.softmax(s, -1).to(q.dtype) @ v).reshape(b, h, tq, d)


def sdpa_gqa(q, k, v):
    """torch's SDPA with its own backend choice and grouped-query heads (enable_gqa: torch
    >= 2.5)."""
    import torch.nn.functional as F
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


def run(only, json_path):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from coil_runtime import heuristics, runtime

    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"attention forward, bf16, on {torch.cuda.get_device_name()} | torch "
          f"{torch.__version__}", flush=True)
    rows = []
    for name, s in shapes():
        if only and name not in only:
            continue
        path = os.path.join(GENERATED, "attn_bench_" + name, "module.py")
        if not os.path.exists(path):
            print(f"{name}: no {os.path.relpath(path, ROOT)} (run with --prepare first)")
            continue
        torch.manual_seed(0)
        q = torch.randn(s["b"], s["h"], s["tq"], s["d"], device="cuda", dtype=torch.bfloat16)
        k, v = (torch.randn(s["b"], s["hkv"], s["t"], s["d"], device="cuda",
                            dtype=torch.bfloat16) for _ in range(2))
        decode = is_decode(s)
        flops = 4 * s["b"] * s["h"] * s["tq"] * s["t"] * s["d"] / (2 if s["causal"] else 1)
        kv_bytes = 2 * k.numel() * k.element_size()
        row = {"name": name, **s}
        start = time.time()
        mod = runtime.load_module(path, name=f"attn_bench_{name}")
        (y,) = mod.call([q, k, v])  # autotunes and compiles
        torch.cuda.synchronize()
        row["coil_first_call_s"] = round(time.time() - start, 2)
        tuners = heuristics.autotuners_of(mod)
        row["coil_config"] = "; ".join(str(next(iter(t.chosen.values()), None)) for t in tuners)
        row["coil_split"] = any(t.attention_kernel == "decode_partial" for t in tuners)
        if decode:
            ref = sdpa_gqa(q, k, v)
            row["sdpa_ms"] = bench_ms(lambda: sdpa_gqa(q, k, v))
        else:
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                ref = F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"])
                row["sdpa_ms"] = bench_ms(
                    lambda: F.scaled_dot_product_attention(q, k, v, is_causal=s["causal"]))
        row["max_abs_diff_vs_sdpa"] = float((y.float() - ref.float()).abs().max())
        row["coil_ms"] = bench_ms(lambda: mod.call([q, k, v]))
        try:
            # A fresh compile per shape: past torch._dynamo's recompile limit (8) a function
            # would silently run eager.
            torch._dynamo.reset()
            if decode:
                compiled = torch.compile(written_out_gqa, dynamic=False)
                run_inductor = lambda: compiled(q, k, v)  # noqa: E731
            else:
                compiled = torch.compile(written_out, dynamic=False)
                run_inductor = lambda: compiled(q, k, v, s["causal"])  # noqa: E731
            start = time.time()
            run_inductor()
            torch.cuda.synchronize()
            row["inductor_compile_s"] = round(time.time() - start, 1)
            row["inductor_ms"] = bench_ms(run_inductor)
        except Exception as e:  # noqa: BLE001 (out of memory at T = 8192 without the matcher)
            row["inductor_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            torch.cuda.empty_cache()
        for who in ("coil", "sdpa", "inductor"):
            if f"{who}_ms" in row:
                row[f"{who}_tflops"] = flops / row[f"{who}_ms"] / 1e9
                row[f"{who}_kv_gbs"] = kv_bytes / row[f"{who}_ms"] / 1e6
        rows.append(row)
        unit, key = ("GB/s", "kv_gbs") if decode else ("TFLOP/s", "tflops")
        print(f"{name:<16} coil {row['coil_ms']:.3f} ms {row[f'coil_{key}']:7.1f} {unit} | "
              f"sdpa {row['sdpa_ms']:.3f} ms {row[f'sdpa_{key}']:7.1f} | inductor "
              f"{row.get('inductor_ms', float('nan')):.3f} ms "
              f"{row.get(f'inductor_{key}', float('nan')):7.1f} | coil/sdpa "
              f"{row['sdpa_ms'] / row['coil_ms']:.2f}x | max |coil - sdpa| "
              f"{row['max_abs_diff_vs_sdpa']:.3g} | {row['coil_config']}", flush=True)
    lines = ["| shape | B x H | coil TFLOP/s | SDPA flash TFLOP/s | Inductor TFLOP/s | "
             "coil vs SDPA |", "|---|---|---|---|---|---|"]
    for r in rows:
        if is_decode(r):
            continue
        lines.append(f"| {r['name']} | {r['b']} x {r['h']} | {r['coil_tflops']:.1f} | "
                     f"{r['sdpa_tflops']:.1f} | {r.get('inductor_tflops', float('nan')):.1f} | "
                     f"{r['sdpa_ms'] / r['coil_ms']:.2f}x |")
    lines += ["", "| decoding shape | B x H / Hkv | coil split | coil ms | coil K/V GB/s | "
              "SDPA GB/s | Inductor GB/s | coil vs SDPA |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if not is_decode(r):
            continue
        lines.append(f"| {r['name']} | {r['b']} x {r['h']} / {r['hkv']} | "
                     f"{'yes' if r['coil_split'] else 'no'} | {r['coil_ms']:.4f} | "
                     f"{r['coil_kv_gbs']:.0f} | {r['sdpa_kv_gbs']:.0f} | "
                     f"{r.get('inductor_kv_gbs', float('nan')):.0f} | "
                     f"{r['sdpa_ms'] / r['coil_ms']:.2f}x |")
    table = "\n".join(lines)
    print(table)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows, "table": table}, f, indent=1)
    return 0 if rows else 1


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prepare", action="store_true", help="write the modules (build machine)")
    p.add_argument("--coil", default=os.path.join(ROOT, "build", "bin", "coil"))
    p.add_argument("--only", nargs="*")
    p.add_argument("--json")
    a = p.parse_args()
    if a.prepare:
        return prepare(os.path.abspath(a.coil))
    return run(a.only, a.json)


if __name__ == "__main__":
    sys.exit(main())
