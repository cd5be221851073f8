"""Two processes of torch.distributed DDP (gloo, CPU) train an MLP whose forward and backward
graphs coil compiles (issue 18): each process trains on its half of every batch, DDP averages the
gradients between them, and the loss curve and final weights match the same DDP training in
eager. torch 1.13 compiles through coil.torch.compile (AOTAutograd), torch 2.x through
torch.compile(backend="coil")."""

import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))

STEPS, BATCH, D = 8, 16, 48


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln, self.fc1, self.fc2 = nn.LayerNorm(D), nn.Linear(D, 96), nn.Linear(96, 10)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(self.ln(x))))


def _train(rank, world, init_file, use_coil, out_dir):
    """One DDP process: STEPS SGD steps on its half of each batch; writes its losses and final
    weights for the parent to compare."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = Mlp()  # the same initial weights in both processes (and in both runs)
    if use_coil:
        import coil.torch as ct
        options = {"autotune": False}
        inner = (torch.compile(model, backend="coil", options=options)
                 if hasattr(torch, "compile") else ct.compile(model, options=options))
    else:
        inner = model
    ddp = nn.parallel.DistributedDataParallel(inner)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, D, generator=g)  # one batch, learnt over the steps
    y = torch.randint(0, 10, (BATCH,), generator=g)
    losses = []
    for _ in range(STEPS):
        half = slice(rank * BATCH // world, (rank + 1) * BATCH // world)
        loss = nn.functional.cross_entropy(ddp(x[half]), y[half])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    torch.save({"losses": losses, "state": model.state_dict()},
               os.path.join(out_dir, f"{'coil' if use_coil else 'eager'}{rank}.pt"))
    dist.destroy_process_group()


def _run(tmp_path, use_coil):
    init = tmp_path / f"init-{use_coil}"
    mp.spawn(_train, args=(2, str(init), use_coil, str(tmp_path)), nprocs=2, join=True)
    return [torch.load(tmp_path / f"{'coil' if use_coil else 'eager'}{r}.pt") for r in (0, 1)]


@pytest.mark.skipif(not dist.is_available(), reason="torch without torch.distributed")
def test_two_process_ddp_with_coil_matches_eager(tmp_path, monkeypatch):
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "cache"))
    eager, coil = _run(tmp_path, False), _run(tmp_path, True)
    for rank in (0, 1):
        torch.testing.assert_close(coil[rank]["losses"], eager[rank]["losses"], rtol=1e-4,
                                   atol=1e-5)
        for name, w in eager[rank]["state"].items():
            torch.testing.assert_close(coil[rank]["state"][name], w, rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"{name}: {m}")
    # DDP kept the replicas equal: both processes end with the same weights
    for name, w in coil[0]["state"].items():
        torch.testing.assert_close(coil[1]["state"][name], w, rtol=0, atol=0)
    # training moved them (the test compares something), and coil compiled the graphs (its
    # code cache holds the forward's and the backward's modules)
    assert coil[0]["losses"][-1] < 0.9 * coil[0]["losses"][0]
    modules = [f for _, _, files in os.walk(tmp_path / "cache") for f in files
               if f.endswith(".so")]
    assert len(modules) >= 2, modules
