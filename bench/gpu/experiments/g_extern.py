"""Experiment: which cuBLAS-based extern is fastest for relu(x@W+b) in bf16 (workload g)?
torch.mm + a separate bias/ReLU pass (Inductor's default), addmm + relu_, and
torch._addmm_activation (cuBLASLt's fused bias+ReLU epilogue), next to torch.compile.

    python3 bench/gpu/experiments/g_extern.py        (on a CUDA machine)
"""
import sys

import torch
from triton.testing import do_bench


def main():
    M, K, N = 8192, 4096, 4096
    torch.manual_seed(0)
    x = torch.randn(M, K, device='cuda', dtype=torch.bfloat16)
    w = torch.randn(K, N, device='cuda', dtype=torch.bfloat16) / 64
    b = torch.randn(N, device='cuda', dtype=torch.bfloat16)
    ref = torch.relu(x.float() @ w.float() + b.float())
    out = torch.empty(M, N, device='cuda', dtype=torch.bfloat16)
    flops = 2 * M * N * K
    compiled = torch.compile(lambda x, w, b: torch.relu(x @ w + b))
    variants = {
        "mm alone": lambda: torch.mm(x, w, out=out),
        "mm + relu(add) (eager)": lambda: torch.relu(torch.mm(x, w) + b),
        "addmm + relu_": lambda: torch.addmm(b, x, w, out=out).relu_(),
        "_addmm_activation": lambda: torch._addmm_activation(b, x, w, out=out),
        "torch.compile": lambda: compiled(x, w, b),
    }
    for rnd in range(2):
        for name, fn in variants.items():
            r = fn()
            torch.cuda.synchronize()
            if name != "mm alone":
                err = ((r.float() - ref).norm() / ref.norm()).item()
                ok = "ok" if err < 2e-2 else f"WRONG {err:.3g}"
            else:
                ok = ""
            ms = do_bench(fn, warmup=25, rep=300)
            print(f"round {rnd} {name:28s} {ms * 1e3:8.1f} us {flops / ms / 1e9:7.0f} TFLOP/s {ok}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
