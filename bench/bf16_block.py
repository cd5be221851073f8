"""A GPT-2-small decoder block in bf16 on the CPU: coil (coil.torch.compile) against torch's own
bf16 (eager, oneDNN's bf16 kernels) and coil's f32, at each thread count, medians of alternating
rounds (issue 28: "a bf16 GPT block end to end against torch's bf16 on the CPU").

    PYTHONPATH=python python3 bench/bf16_block.py --threads 1,2 --json out.json

Also reports each bf16 result's largest difference from the f32 block (the same weights).
"""

import argparse
import json
import math
import os
import platform
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-norm GPT block: causal self-attention written out (as torch 1.13 code has it) and a
    GELU MLP."""

    def __init__(self, d, heads, ctx):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.register_buffer("causal", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(~self.causal[:t, :t], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


def median_ms(fn, runs):
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json")
    a = ap.parse_args()
    import coil
    import coil.torch as ct
    torch.manual_seed(0)
    f32 = Block(a.d, a.heads, a.seq).eval()
    b16 = Block(a.d, a.heads, a.seq).eval()
    b16.load_state_dict(f32.state_dict())
    b16 = b16.to(torch.bfloat16)
    x = torch.randn(a.batch, a.seq, a.d)
    x16 = x.to(torch.bfloat16)
    rows = []
    with torch.no_grad():
        want = f32(x)
        coil16, coil32 = ct.compile(b16), ct.compile(f32)
        errors = {"torch_bf16": (b16(x16).float() - want).abs().max().item(),
                  "coil_bf16": (coil16(x16).float() - want).abs().max().item()}
        for threads in [int(t) for t in a.threads.split(",")]:
            torch.set_num_threads(threads)
            coil.set_num_threads(threads)
            cases = {"torch_bf16": lambda: b16(x16), "coil_bf16": lambda: coil16(x16),
                     "coil_f32": lambda: coil32(x), "torch_f32": lambda: f32(x)}
            times = {k: [] for k in cases}
            for _ in range(a.rounds):  # alternating rounds: the machine is shared
                for k, fn in cases.items():
                    times[k].append(median_ms(fn, a.runs))
            row = {"threads": threads, **{k + "_ms": statistics.median(v) for k, v in times.items()}}
            row["torch_bf16_over_coil_bf16"] = row["torch_bf16_ms"] / row["coil_bf16_ms"]
            row["coil_f32_over_coil_bf16"] = row["coil_f32_ms"] / row["coil_bf16_ms"]
            rows.append(row)
            print(f"{threads} thread(s): coil bf16 {row['coil_bf16_ms']:.2f} ms, torch bf16 "
                  f"{row['torch_bf16_ms']:.2f} ms ({row['torch_bf16_over_coil_bf16']:.2f}x), "
                  f"coil f32 {row['coil_f32_ms']:.2f} ms, torch f32 {row['torch_f32_ms']:.2f} ms")
    print("largest difference from the f32 block: "
          + ", ".join(f"{k} {v:.3g}" for k, v in errors.items()))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"host": platform.processor() or platform.machine(),
                       "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                                    if l.startswith("model name")), "?"),
                       "loadavg": os.getloadavg(), "torch": torch.__version__,
                       "shape": [a.batch, a.seq, a.d], "heads": a.heads,
                       "errors_vs_f32": errors, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
