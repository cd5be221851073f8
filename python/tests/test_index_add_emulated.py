"""An embedding's gradient on CUDA (coil's index_add: the table of zeros filled in place, then
torch.index_add in the wrapper): the golden module tests/golden/triton/embedding_gradient.py run
on the CPU through the fake triton (the wrapper's library calls are torch's, on CPU tensors),
against torch's own embedding gradient. Negative token ids count from the end, as in coil's
reference; duplicates add up; an id out of range is an IndexError naming the op."""

import os

import pytest
import torch

import tl_emulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "triton", "embedding_gradient.py")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_embedding_gradient_matches_torch(fake_gpu, seed):
    mod = tl_emulator.emulate_module(fake_gpu, GOLDEN, f"embedding_gradient_{seed}")
    g = torch.Generator().manual_seed(seed)
    grad = torch.randn(4, 37, 64, generator=g)
    ids = torch.randint(-1000, 1000, (4, 37), generator=g)
    ids[0, :4] = torch.tensor([5, 5, 5, -995])  # duplicates, and a negative id of the same row
    (y,) = mod.call([grad, ids])
    wrapped = torch.where(ids < 0, ids + 1000, ids)
    want = torch.ops.aten.embedding_dense_backward(grad, wrapped, 1000, -1, False)
    torch.testing.assert_close(y, want, rtol=1e-6, atol=1e-6)
    assert y.shape == (1000, 64) and y[wrapped.flatten()].abs().sum() > 0


@pytest.mark.parametrize("bad", [1000, -1001])
def test_an_id_out_of_range_is_an_error_naming_the_op(fake_gpu, bad):
    """runtime.wrap_rows checks the ids where the wrapper may read back (the CPU here; on CUDA
    with COIL_SYNC_INDEX_CHECKS=1), in the words of the CPU kernels' run check."""
    mod = tl_emulator.emulate_module(fake_gpu, GOLDEN, f"embedding_gradient_bad{abs(bad)}")
    ids = torch.zeros(4, 37, dtype=torch.int64)
    ids[1, 2] = bad
    with pytest.raises(IndexError, match=rf"index_add \(node y\), dim 0: index {bad} is out of "
                                         r"range for a dim of size 1000 \(valid: -1000 to 999\)"):
        mod.call([torch.randn(4, 37, 64), ids])
