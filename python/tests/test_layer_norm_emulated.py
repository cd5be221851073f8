"""A training layer norm on CUDA (tests/golden/triton/layer_norm_training.py: the residual sum,
its mean and variance, and the normalized output in one persistent kernel, whose shifted sums
read each row's first element recomputed from its loads) run on the CPU through the fake
triton and tl_emulator, against torch."""

import os

import pytest
import torch

import tl_emulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "triton", "layer_norm_training.py")


@pytest.mark.parametrize("seed", [0, 1])
def test_layer_norm_training_matches_torch(fake_gpu, seed):
    mod = tl_emulator.emulate_module(fake_gpu, GOLDEN, f"layer_norm_training_{seed}")
    g = torch.Generator().manual_seed(seed)
    x, p = torch.randn(2, 6, 48, generator=g) * 3 + 5, torch.randn(6, 48, generator=g)
    w, b = torch.randn(48, generator=g), torch.randn(48, generator=g)
    y, m, v = mod.call([x, p, w, b])
    t = (x + p).double()
    torch.testing.assert_close(m, t.mean(2, keepdim=True).float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(v, t.var(2, keepdim=True, unbiased=False).float(), rtol=1e-5,
                               atol=1e-5)
    want = torch.nn.functional.layer_norm(t, (48,), w.double(), b.double(), 1e-5).float()
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    assert [n for n, *_ in fake_gpu.LAUNCHES][-1] == "triton_per_fused_mean_var_layer_norm_add_0"


def test_an_element_of_the_row_at_an_offset_is_recomputed(fake_gpu):
    path = os.path.join(ROOT, "tests", "golden", "triton", "row_element_recomputed.py")
    mod = tl_emulator.emulate_module(fake_gpu, path, "row_element_recomputed")
    g = torch.Generator().manual_seed(3)
    x, p = torch.randn(3, 5, 40, generator=g), torch.randn(5, 40, generator=g)
    r, m = mod.call([x, p])
    t = x.exp() + p
    z = t - t[:, :, 7:8]
    torch.testing.assert_close(r, z / z.sum(2, keepdim=True), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(m, t.mean(2, keepdim=True))
    assert "40*x0 + 7" in open(path).read()  # column 7, from the input, not from another lane
