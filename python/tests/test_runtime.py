"""Unit tests of coil_runtime.runtime (input checks, buffers, .npy files) and .testing."""

import math

import numpy as np
import pytest
import torch

from coil_runtime import runtime, testing


@pytest.fixture
def cpu_ok():
    runtime.allow_cpu_for_tests(True)
    yield
    runtime.allow_cpu_for_tests(False)


def test_check_input_accepts_the_declared_layout(cpu_ok):
    x = torch.zeros(4, 3)
    runtime.check_input(x, "x", (4, 3), (3, 1), torch.float32)
    runtime.check_input(x, "x", [4, 3], [3, 1], torch.float32)  # lists: the slow path agrees
    # Strides of size-1 dims do not matter.
    runtime.check_input(torch.zeros(4, 1)[:, :], "y", (4, 1), (1, 1), torch.float32)


@pytest.mark.parametrize("value, shape, stride, dtype, message", [
    (torch.zeros(4, 3), (4, 3), (3, 1), torch.float16, "input 'x': expected dtype torch.float16"),
    (torch.zeros(4, 3), (4, 4), (4, 1), torch.float32, r"input 'x': expected shape \(4, 4\)"),
    (torch.zeros(3, 4).t(), (4, 3), (3, 1), torch.float32, r"expected strides \(3, 1\), got \(1, 4\)"),
    (3.0, (4, 3), (3, 1), torch.float32, "expected a torch.Tensor, got float"),
])
def test_check_input_errors_name_the_input(cpu_ok, value, shape, stride, dtype, message):
    with pytest.raises(ValueError, match=message):
        runtime.check_input(value, "x", shape, stride, dtype)


def test_check_input_wants_cuda():
    with pytest.raises(ValueError, match="input 'w': expected a CUDA tensor"):
        runtime.check_input(torch.zeros(2), "w", (2,), (1,), torch.float32)


def test_poison(monkeypatch):
    monkeypatch.setattr(runtime, "_alloc",
                        lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype))
    runtime.set_poison(True)
    try:
        f = runtime.empty_strided((2, 3), (3, 1), torch.float32)
        i = runtime.empty_strided((5,), (1,), torch.int64)
        b = runtime.empty_strided((5,), (1,), torch.bfloat16)
    finally:
        runtime.set_poison(False)
    assert torch.isnan(f).all() and torch.isnan(b.float()).all()
    assert (i == -0x5A5A5A5A).all()
    assert runtime.empty_strided((2, 3), (1, 2), torch.float32).stride() == (1, 2)


def test_npy_round_trip_including_bf16(tmp_path):
    for t in (torch.randn(3, 5), torch.randn(7).to(torch.bfloat16), torch.randn(4).half(),
              torch.arange(6, dtype=torch.int64).view(2, 3), torch.tensor([True, False]),
              torch.randn(4, 6).t(), torch.tensor(2.5), torch.tensor(7, dtype=torch.int64),
              torch.tensor(1.5).to(torch.bfloat16)):
        path = tmp_path / "t.npy"
        runtime.write_npy(path, t)
        back = runtime.read_npy(path)
        assert back.dtype == t.dtype and back.shape == t.shape and torch.equal(back, t)
    # coil writes bf16 as numpy's '|V2': those bytes read back as the same bf16 values.
    bits = torch.tensor([1.5, -2.0, 3.0e38]).to(torch.bfloat16).view(torch.int16).numpy()
    np.save(tmp_path / "v2.npy", bits.view(np.dtype("V2")))
    got = runtime.read_npy(tmp_path / "v2.npy")
    assert got.dtype == torch.bfloat16 and got[0].item() == 1.5 and got[1].item() == -2.0
    runtime.write_npy(tmp_path / "f.npy", torch.zeros(2))
    assert np.load(tmp_path / "f.npy").dtype == np.float32  # a plain array for other dtypes


def test_load_module(tmp_path):
    path = tmp_path / "m.py"
    path.write_text("VALUE = 41 + 1\n")
    assert runtime.load_module(str(path)).VALUE == 42
    assert runtime.load_module(str(path), name="other_name").__name__ == "other_name"


def test_compare_tolerances():
    e = torch.tensor([1.0, 2.0, float("nan"), float("inf"), 0.0])
    ok = testing.compare(e + torch.tensor([1e-5, -1e-4, 0, 0, 5e-6]), e)
    assert ok["ok"], ok["message"]
    bad = testing.compare(e + torch.tensor([0, 1e-2, 0, 0, 0]), e)
    assert not bad["ok"] and bad["bad"] == 1 and bad["first_bad"] == (1,)
    assert "1 of 5 elements differ" in bad["message"]
    assert not testing.compare(torch.tensor([float("-inf")]), torch.tensor([float("inf")]))["ok"]
    assert not testing.compare(torch.tensor([1.0]), torch.tensor([float("nan")]))["ok"]
    assert not testing.compare(torch.tensor([1, 2]), torch.tensor([1, 3]))["ok"]
    assert testing.compare(torch.tensor([1, 2]), torch.tensor([1, 2]))["ok"]
    assert "dtype" in testing.compare(torch.tensor([1.0]), torch.tensor([1.0]).double())["message"]
    assert "shape" in testing.compare(torch.zeros(2), torch.zeros(3))["message"]
    # bf16: 2e-2 relative.
    x = torch.tensor([100.0]).to(torch.bfloat16)
    assert testing.compare(x, torch.tensor([101.0]).to(torch.bfloat16))["ok"]
    assert testing.default_tolerance(torch.int32) == (0.0, 0.0)
    assert math.isclose(testing.relative_error(torch.tensor([1.0, 2.0]),
                                               torch.tensor([1.0, 2.0])), 0.0)


def _tf32_flags():
    """(cuBLAS, cuDNN conv) TF32 allowed, read with the API this torch has (runtime's choice)."""
    if runtime._Fp32Precision._new_api():
        return (torch.backends.cuda.matmul.fp32_precision == "tf32",
                torch.backends.cudnn.conv.fp32_precision == "tf32")
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.mark.parametrize("mode, tf32", [("highest", False), ("high", True)])
def test_fp32_precision_sets_the_library_flags_and_restores_them(mode, tf32):
    before = _tf32_flags()
    with runtime.fp32_precision(mode):
        assert _tf32_flags() == (tf32, tf32)
    assert _tf32_flags() == before
    # Restored when the call raises, too.
    with pytest.raises(RuntimeError, match="boom"):
        with runtime.fp32_precision(mode):
            raise RuntimeError("boom")
    assert _tf32_flags() == before


def test_fp32_precision_names_a_bad_mode():
    with pytest.raises(ValueError, match="fp32 precision 'medium'"):
        runtime.fp32_precision("medium")


def test_fp32_precision_with_torch_2_9_flags_sets_and_restores_only_what_differs(monkeypatch):
    """torch >= 2.9's per-backend flags (faked here: torch 1.13 has the legacy ones). Entering
    sets only the flags that differ from the mode and exiting restores only those, so that the
    usual call (the caller's flags already the module's) costs two reads."""
    import types

    class Flags(types.SimpleNamespace):
        writes = []

        def __setattr__(self, name, value):
            Flags.writes.append((name, value))
            super().__setattr__(name, value)

    mm, conv = Flags(fp32_precision="ieee"), Flags(fp32_precision="tf32")
    Flags.writes.clear()
    monkeypatch.setattr(runtime, "_new_precision_api", True)
    monkeypatch.setattr(torch.backends.cuda, "matmul", mm)
    monkeypatch.setattr(torch.backends.cudnn, "conv", conv, raising=False)
    with runtime.fp32_precision("highest"):
        assert (mm.fp32_precision, conv.fp32_precision) == ("ieee", "ieee")
        with runtime.fp32_precision("highest"):  # nested: nothing to set or restore
            pass
        assert (mm.fp32_precision, conv.fp32_precision) == ("ieee", "ieee")
    assert (mm.fp32_precision, conv.fp32_precision) == ("ieee", "tf32")
    assert Flags.writes == [("fp32_precision", "ieee"), ("fp32_precision", "tf32")]
    with pytest.raises(RuntimeError, match="boom"):
        with runtime.fp32_precision("high"):
            assert (mm.fp32_precision, conv.fp32_precision) == ("tf32", "tf32")
            raise RuntimeError("boom")
    assert (mm.fp32_precision, conv.fp32_precision) == ("ieee", "tf32")
