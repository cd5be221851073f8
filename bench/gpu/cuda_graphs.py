#!/usr/bin/env python3
"""CUDA graphs for launch-bound models (issue 22, "CUDA graphs"; issue 28, "fewer launches"):
the per-call time of a small GPT block (batch 2, 37 tokens, d 192, 6 heads, causal; pre-norm
attention and a 4x GELU MLP; inference, fp32) on CUDA, in one process:

  eager                      torch's own kernels
  inductor                   torch.compile(mode="default")
  inductor reduce-overhead   torch.compile(mode="reduce-overhead"): Inductor's CUDA graphs
  coil                       torch.compile(backend="coil")
  coil reduce-overhead       torch.compile(backend="coil", mode="reduce-overhead"): each call
                             of coil's module replays one CUDA graph (python/coil/torch/cuda.py)

Per-call time: N calls with a new input each (copied into a reused buffer, as a server does),
one synchronize at the end, the median of 5 rounds (host-bound calls show as their host time).
Every variant's output is compared with eager's.

    (here)    bash scripts/device_bundle.sh
    (device)  python3 bench/gpu/cuda_graphs.py [--calls 2000] [--json FILE]   (carry device-bundle)
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def _reexec_with_bundle():
    if os.environ.get("COIL_LIBRARY"):
        return
    sys.path.insert(0, HERE)
    import torch_backend
    env = torch_backend._bundle_env()
    os.execve(sys.executable, [sys.executable] + sys.argv, env)


def make_block(torch, nn, F):
    class GptBlock(nn.Module):
        def __init__(self, d=192, heads=6):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            h = self.heads
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
            s = (q @ k.transpose(-2, -1)) * (d // h) ** -0.5
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            a = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
    return GptBlock


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--json", default=os.path.join(os.environ.get("OUT", "."), "cuda_graphs.json"))
    args = p.parse_args()
    _reexec_with_bundle()
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import coil.torch  # noqa: F401  registers backend="coil"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    model = make_block(torch, nn, F)().cuda().eval()
    x = torch.randn(2, 37, 192, device="cuda")
    fresh = [torch.randn(2, 37, 192, device="cuda") for _ in range(16)]
    with torch.no_grad():
        variants = {
            "eager": model,
            "inductor": torch.compile(model),
            "inductor reduce-overhead": torch.compile(model, mode="reduce-overhead"),
            "coil": torch.compile(model, backend="coil"),
            "coil reduce-overhead": torch.compile(model, backend="coil", mode="reduce-overhead"),
        }
        results = {"workload": "GPT block 2x37x192, 6 heads, causal, fp32 inference",
                   "device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "calls": args.calls, "variants": {}}
        for name, fn in variants.items():
            t0 = time.perf_counter()
            for _ in range(3):  # compile, autotune, capture
                fn(x)
            torch.cuda.synchronize()
            first_s = time.perf_counter() - t0
            x.copy_(fresh[0])
            y, want = fn(x), model(x)
            err = (y - want).abs().max().item()

            def one_round():
                torch.cuda.synchronize()
                t = time.perf_counter()
                for i in range(args.calls):
                    x.copy_(fresh[i % len(fresh)])
                    fn(x)
                torch.cuda.synchronize()
                return (time.perf_counter() - t) / args.calls * 1e3
            per_call = statistics.median(one_round() for _ in range(5))
            results["variants"][name] = {"per_call_ms": per_call, "max_abs_error": err,
                                         "first_three_calls_s": first_s}
            print(f"{name:<26} {per_call:.4f} ms/call   max |y - eager| {err:.2e}   "
                  f"(first 3 calls {first_s:.1f} s)", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
