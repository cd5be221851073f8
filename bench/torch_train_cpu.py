#!/usr/bin/env python3
"""A training step (forward, loss, backward) through coil.torch.compile (AOTAutograd: works on
torch 1.13, so here) against eager on this machine's CPU: the models of bench/gpu/torch_backend.py
(the GPT block: vocabulary 8192, d 512, 8 heads, context 256, with its embedding and tied
output; the MLP; TransformerEncoderLayer) at a batch that fits 2 cores. Medians of rounds,
eager and coil alternating; the loss and every gradient checked against eager.

    /usr/bin/python3 bench/torch_train_cpu.py [--models gpt_block mlp] [--batch 2] [--threads 1 2]
                                              [--rounds 5] [--json FILE]
"""

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "gpu"))

import torch  # noqa: E402

import coil.torch as ct  # noqa: E402
from torch_backend import _models  # noqa: E402


def _step(model, x):
    model.zero_grad(set_to_none=True)
    out = model(x)
    loss = out.float().square().mean()
    loss.backward()
    return loss


def _median_ms(fn, rounds, min_s=0.2):
    fn()
    t0 = time.perf_counter()
    fn()
    n = max(1, int(min_s / max(time.perf_counter() - t0, 1e-6)))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        times.append((time.perf_counter() - t0) / n * 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=["gpt_block", "mlp", "transformer_encoder_layer"])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--threads", nargs="*", type=int, default=[1, 2])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for name in args.models:
        make, batch = _models()[name]
        torch.manual_seed(0)
        eager = make()
        coil_model = make()
        coil_model.load_state_dict(eager.state_dict())
        x = batch(args.batch)
        compiled = ct.compile(coil_model)
        t0 = time.perf_counter()
        le = _step(eager, x)
        lc = _step(compiled, x)
        first_s = time.perf_counter() - t0
        worst = 0.0
        for (n, p), (_, q) in zip(eager.named_parameters(), coil_model.named_parameters()):
            scale = p.grad.abs().max().item() or 1.0
            worst = max(worst, (p.grad - q.grad).abs().max().item() / scale)
        for threads in args.threads:
            torch.set_num_threads(threads)
            os.environ["OMP_NUM_THREADS"] = str(threads)
            try:
                import coil
                coil.set_num_threads(threads)
            except AttributeError:
                pass
            e_ms, c_ms = [], []
            for _ in range(args.rounds):
                e_ms.append(_median_ms(lambda: _step(eager, x), 1))
                c_ms.append(_median_ms(lambda: _step(compiled, x), 1))
            row = {"model": name, "batch": args.batch, "threads": threads,
                   "eager_ms": statistics.median(e_ms), "coil_ms": statistics.median(c_ms),
                   "loss_rel_err": abs(le.item() - lc.item()) / max(abs(le.item()), 1e-30),
                   "grad_rel_err": worst, "first_call_s": first_s}
            row["eager_over_coil"] = row["eager_ms"] / row["coil_ms"]
            rows.append(row)
            print(f"{name:28s} batch {args.batch} threads {threads}: eager {row['eager_ms']:.2f} ms, "
                  f"coil {row['coil_ms']:.2f} ms, eager/coil {row['eager_over_coil']:.2f}x, "
                  f"loss rel err {row['loss_rel_err']:.1e}, grads {worst:.1e} of their max",
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
