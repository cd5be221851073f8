#!/usr/bin/env python3
"""A compiled call's fixed cost: an 8-element x * y + 1 through coil.torch.compile against eager,
and against the same compiled function with coil.Model.run_into building its coil_tensor
structs at every call (its per-thread struct cache off), alternating in one process; medians of
--rounds rounds of --calls calls, 1 thread (docs/torch.md, "A call's fixed cost").

  PYTHONPATH=python /usr/bin/python3 bench/torch_call_overhead.py [--calls 20000] [--rounds 5]
"""

import argparse
import statistics
import time

import torch

import coil
import coil.torch as ct


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(1)
    x, y = torch.randn(8), torch.randn(8)
    compiled = ct.compile(lambda x, y: x * y + 1.0)
    torch.testing.assert_close(compiled(x, y), x * y + 1.0)
    cached = coil.Model._cached_structs

    def per_call(fn):
        for _ in range(500):
            fn(x, y)
        t = time.perf_counter()
        for _ in range(a.calls):
            fn(x, y)
        return (time.perf_counter() - t) / a.calls * 1e6

    rows = {"eager": [], "coil": [], "coil, structs per call": []}
    try:
        for _ in range(a.rounds):
            rows["eager"].append(per_call(lambda p, q: p * q + 1.0))
            coil.Model._cached_structs = cached
            rows["coil"].append(per_call(compiled))
            coil.Model._cached_structs = lambda self, arrays, side: None
            rows["coil, structs per call"].append(per_call(compiled))
    finally:
        coil.Model._cached_structs = cached
    for name, v in rows.items():
        print(f"{name:>24}: median {statistics.median(v):6.2f} us a call "
              f"(min {min(v):.2f}, max {max(v):.2f})")


if __name__ == "__main__":
    main()
