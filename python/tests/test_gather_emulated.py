"""Gathers at run-time indices in Triton (an embedding's rows at token ids): the golden module
tests/golden/triton/embedding_gather.py executed on the CPU by tl_emulator.py through the fake
triton, against torch. Negative indices wrap once (numpy/ONNX); an index still out of range is
clamped in the kernel (no lane reads outside the table) and raised by the wrapper as an
IndexError naming the gather, the index and the size, as the CPU kernels' run checks do."""

import os

import pytest
import torch

import tl_emulator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "triton", "embedding_gather.py")


def _emulated(fake, tag):
    return tl_emulator.emulate_module(fake, GOLDEN, f"embedding_gather_{tag}")


def _inputs(ids):
    torch.manual_seed(0)
    return [torch.randn(1000, 64), ids, torch.randn(37, 64)]


def _reference(w, ids, pos):
    return w[torch.where(ids < 0, ids + 1000, ids)] + pos


@pytest.mark.parametrize("seed", [0, 1])
def test_rows_at_token_ids_match_torch(fake_gpu, seed):
    mod = _emulated(fake_gpu, f"ok{seed}")
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(-1000, 1000, (4, 37), generator=g)  # negative ones wrap once
    ids[0, :3] = torch.tensor([0, 999, -1000])  # both ends, and the most negative
    w, ids, pos = _inputs(ids)
    (y,) = mod.call([w, ids, pos])
    torch.testing.assert_close(y, _reference(w, ids, pos), rtol=0, atol=0)


@pytest.mark.parametrize("bad", [1000, -1001, 2**40])
def test_an_index_out_of_range_is_an_error_naming_the_gather(fake_gpu, bad):
    mod = _emulated(fake_gpu, f"bad{abs(bad)}")
    ids = torch.zeros(4, 37, dtype=torch.int64)
    ids[2, 5] = bad
    with pytest.raises(IndexError, match=rf"gather \(node e\), dim 0: index {bad} is out of range "
                                         r"for a dim of size 1000 \(valid: -1000 to 999\)"):
        mod.call(_inputs(ids))
    # the flag is clear again: the next call with good indices runs
    w, ids, pos = _inputs(torch.ones(4, 37, dtype=torch.int64))
    (y,) = mod.call([w, ids, pos])
    torch.testing.assert_close(y, _reference(w, ids, pos), rtol=0, atol=0)
