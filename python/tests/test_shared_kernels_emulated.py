"""Kernels of the same code share one definition (triton_module.cpp, share_identical_kernels):
tests/golden/triton/repeated_layers.py, three residual layers of the same shapes, defines its
layer norm, its matmul template (with the template's cuBLAS choice, extern_0) and the
template's epilogue kernel once each and launches them for each layer. Run on the CPU through
the fake triton and tl_emulator against torch, with the cuBLAS choice (the default mode) and
with the Triton template (max-autotune): each launch reads its own arguments."""

import ast
import os

import pytest
import torch

import tl_emulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "triton", "repeated_layers.py")


def test_the_module_defines_each_kernel_once():
    tree = ast.parse(open(GOLDEN).read())
    defs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("triton_")]
    assert len(defs) == len(set(defs))
    assert defs == ["triton_per_fused_layer_norm_0", "triton_tem_fused_matmul_gelu_add_1",
                    "triton_poi_fused_gelu_add_2"]
    externs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and
               n.name.startswith("extern_")]
    assert externs == ["extern_0"]


@pytest.mark.parametrize("mode", ["1", "max"])
@pytest.mark.parametrize("seed", [0, 1])
def test_shared_kernels_match_torch(fake_gpu, monkeypatch, seed, mode):
    monkeypatch.setenv("COIL_TRITON_AUTOTUNE", mode)
    mod = tl_emulator.emulate_module(fake_gpu, GOLDEN, f"repeated_layers_{seed}_{mode}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 32, generator=g)
    ws = [torch.randn(32, 32, generator=g) / 6 for _ in range(3)]
    gs = [torch.randn(32, generator=g) for _ in range(3)]
    bs = [torch.randn(32, generator=g) for _ in range(3)]
    (y,) = mod.call([x, *ws, gs[0], bs[0], gs[1], bs[1], gs[2], bs[2]])
    a = x.double()
    for w, gam, bet in zip(ws, gs, bs):
        ln = torch.nn.functional.layer_norm(a, (32,), gam.double(), bet.double(), 1e-5)
        a = a + torch.nn.functional.gelu(ln @ w.double())
    torch.testing.assert_close(y, a.float(), rtol=1e-4, atol=1e-4)
    # one kernel compiled (and autotuned) for the three layer norms, one for the epilogues; the
    # template only where its configs are timed
    compiled = {n for n, *_ in fake_gpu.COMPILES}
    assert compiled == {"triton_per_fused_layer_norm_0", "triton_poi_fused_gelu_add_2"} | (
        {"triton_tem_fused_matmul_gelu_add_1"} if mode == "max" else set())
