#!/usr/bin/env python3
"""coil's attention kernel against torch eager's written-out attention on the CPU.

For each T in --lengths (default 512,2048) and causal off/on: q, k, v f32 [B, H, T, D]
(default B=1, H=8, D=64), timed as the median of --runs calls after --warmup, at --threads:
  torch    softmax((q @ k^T) * scale [+ causal -inf mask]) @ v, eager (torch 1.13 has no
           scaled_dot_product_attention); the causal mask is a precomputed additive tensor
  coil     attention(q, k, v) {causal} compiled by coil (the flash kernel,
           src/kernels/coil_attention.h), run_into preallocated outputs
Prints one row per case with milliseconds and GFLOP/s (4 * B * H * Tq * Tk * D flops, halved
for causal), and the worst difference between the two results.

--backward times a training step's attention instead, forward and backward given a random
dL/dy: torch eager's written-out forward then autograd's backward (dq, dk, dv), against one
coil model of attention, attention_lse and three attention_grad nodes (the CPU's flash
backward). GFLOP/s count 3.5x the forward's flops (the forward's 2 matmuls and the
backward's 5, FlashAttention's convention), the difference is dq's.

With torch 2.x (the GPU machine's host) torch's fused CPU attention is timed too, the anchor
issue 24 names: F.scaled_dot_product_attention (its flash kernel for the CPU), forward or
forward + autograd backward, in an `sdpa` column; torch 1.13 (here) has none ("-").
With --backward, `kv-apart ms` times the same coil step with the gradient of v computed by a
kernel of its own (that attention_grad reads a copy of q, so it does not share dk's key-block
loop, backward_kv), as before the two were paired: the A/B of that change in one run.

The torch side pins OpenBLAS's own pool to --threads as bench/eager_gemm.py does.
--json PATH writes the rows.

  PYTHONPATH=python /usr/bin/python3 bench/attention_bench.py [--threads 2] [--runs 10]
"""

import argparse
import json
import statistics
import sys
import time

import torch

import coil
from eager_gemm import loaded_openblas


def timed(fn, runs, warmup):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lengths", default="512,2048")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--backward", action="store_true", help="time forward + backward")
    p.add_argument("--json", help="write the rows to this file")
    a = p.parse_args()
    sdpa = getattr(torch.nn.functional, "scaled_dot_product_attention", None)
    torch.set_num_threads(a.threads)
    coil.set_num_threads(a.threads)
    # Debian's torch runs its matmuls in OpenBLAS, whose pool ignores torch.set_num_threads
    # (bench/eager_gemm.py): give it the same count.
    torch.ones(2, 2) @ torch.ones(2, 2)
    blas, _ = loaded_openblas()
    if blas is not None:
        blas.openblas_set_num_threads(a.threads)
    B, H, D = a.batch, a.heads, a.dim
    print(f"torch {torch.__version__}, {a.threads} threads, B={B} H={H} D={D}"
          + (", forward + backward" if a.backward else ""))
    print(f"{'T':>6} {'causal':>6} {'torch ms':>9} {'sdpa ms':>9} {'coil ms':>9} "
          + (f"{'kv-apart ms':>11} " if a.backward else "") +
          f"{'torch GF/s':>10} {'sdpa GF/s':>9} {'coil GF/s':>9} {'vs torch':>8} {'vs sdpa':>7} "
          f"{'max diff':>9}")
    rows = []
    for T in [int(t) for t in a.lengths.split(",")]:
        g = torch.Generator().manual_seed(T)
        q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
        scale = D ** -0.5
        for causal in (False, True):
            mask = torch.full((T, T), float("-inf")).triu(1) if causal else None

            def eager():
                s = torch.matmul(q, k.transpose(-2, -1)) * scale
                if mask is not None:
                    s = s + mask
                return torch.matmul(torch.softmax(s, dim=-1), v)

            c = "true" if causal else "false"
            text = (f"input q: f32[{B}, {H}, {T}, {D}]\ninput k: f32[{B}, {H}, {T}, {D}]\n"
                    f"input v: f32[{B}, {H}, {T}, {D}]\ny = attention(q, k, v) {{causal={c}}}\n")
            if a.backward:
                text += (f"input dy: f32[{B}, {H}, {T}, {D}]\n"
                         f"l = attention_lse(q, k) {{causal={c}}}\n" +
                         "".join(f"d{w} = attention_grad(q, k, v, y, dy, l) "
                                 f"{{wrt=\"{w}\", causal={c}}}\n" for w in "qkv") +
                         "output dq\noutput dk\noutput dv\n")
            model = coil.compile(coil.Graph.parse(text + "output y\n"))
            two_pass = None
            if a.backward:
                # The same step with dv over another buffer (a copy of q): its own kernel, a
                # second pass over the scores for dk and dv.
                text2 = text.replace('dv = attention_grad(q, k', 'dv = attention_grad(q2, k')
                text2 = f"input q2: f32[{B}, {H}, {T}, {D}]\n" + text2
                two_pass = coil.compile(coil.Graph.parse(text2 + "output y\n"))
            if a.backward:
                dy = torch.randn(B, H, T, D, generator=g)
                leaves = [t.clone().requires_grad_() for t in (q, k, v)]

                def step():
                    for t in leaves:
                        t.grad = None
                    qq, kk, vv = leaves
                    s = torch.matmul(qq, kk.transpose(-2, -1)) * scale
                    if mask is not None:
                        s = s + mask
                    torch.matmul(torch.softmax(s, dim=-1), vv).backward(dy)

                def sdpa_step():
                    for t in leaves:
                        t.grad = None
                    sdpa(*leaves, is_causal=causal).backward(dy)

                outs = [torch.empty(B, H, T, D) for _ in range(4)]
                t_sdpa = timed(sdpa_step, a.runs, a.warmup) if sdpa else None
                t_torch = timed(step, a.runs, a.warmup)
                t_coil = timed(lambda: model.run_into([q, k, v, dy], outs), a.runs, a.warmup)
                q2 = q.clone()
                t_two = timed(lambda: two_pass.run_into([q2, q, k, v, dy], outs), a.runs,
                              a.warmup)
                step()
                diff = (leaves[0].grad - outs[0]).abs().max().item()
            else:
                out = torch.empty(B, H, T, D)
                with torch.no_grad():
                    t_sdpa = (timed(lambda: sdpa(q, k, v, is_causal=causal), a.runs, a.warmup)
                              if sdpa else None)
                    t_torch = timed(eager, a.runs, a.warmup)
                    t_coil = timed(lambda: model.run_into([q, k, v], [out]), a.runs, a.warmup)
                    diff = (eager() - out).abs().max().item()
                t_two = None
            flops = 4 * B * H * T * T * D / (2 if causal else 1) * (3.5 if a.backward else 1)
            sd_ms = f"{t_sdpa * 1e3:>9.2f}" if t_sdpa else f"{'-':>9}"
            sd_gf = f"{flops / t_sdpa / 1e9:>9.1f}" if t_sdpa else f"{'-':>9}"
            sd_x = f"{t_sdpa / t_coil:>6.2f}x" if t_sdpa else f"{'-':>7}"
            two = f"{t_two * 1e3:>11.2f} " if t_two else ""
            print(f"{T:>6} {str(causal):>6} {t_torch * 1e3:>9.2f} {sd_ms} {t_coil * 1e3:>9.2f} "
                  f"{two}"
                  f"{flops / t_torch / 1e9:>10.1f} {sd_gf} {flops / t_coil / 1e9:>9.1f} "
                  f"{t_torch / t_coil:>7.2f}x {sd_x} {diff:>9.2e}")
            rows.append({"T": T, "causal": causal, "torch_ms": t_torch * 1e3,
                         "sdpa_ms": t_sdpa * 1e3 if t_sdpa else None, "coil_ms": t_coil * 1e3,
                         "coil_kv_apart_ms": t_two * 1e3 if t_two else None,
                         "gflop": flops / 1e9, "max_diff": diff})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"torch": torch.__version__, "threads": a.threads, "batch": B, "heads": H,
                       "dim": D, "backward": a.backward, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
