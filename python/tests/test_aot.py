"""The GPU export's recorder (coil_runtime/aot.py) on the CPU: what it writes for cuBLAS products
(f32, bf16, f16, with the math mode torch's flags give) and cuDNN convolutions, checked by
rebuilding each call's operands from the recorded buffers, offsets and strides alone and
recomputing it, bit for bit against what the call produced. The GPU replays these records
(bench/gpu/aot.sh); here, what it is given."""

import types

import pytest
import torch

from coil_runtime import aot


def recorder(*inputs):
    return aot._Recorder(torch, types.SimpleNamespace(), list(inputs))


def view(rec, ref, shape, strides, dtype):
    """The tensor a record names: its buffer's storage, a byte offset, element strides."""
    base = rec.buffers[ref["buffer"]]["tensor"]
    assert base.is_contiguous() and base.storage_offset() == 0 and base.dtype == dtype
    size = base.element_size()
    assert ref["offset"] % size == 0
    return torch.as_strided(base.reshape(-1), shape, strides, ref["offset"] // size)


def operand_view(rec, o, dtype):
    shape, strides = [o["rows"], o["cols"]], [o["row_stride"], o["col_stride"]]
    if o["batch"] > 1:
        shape, strides = [o["batch"]] + shape, [o["batch_stride"]] + strides
    return view(rec, o, shape, strides, dtype)


@pytest.mark.parametrize("dtype,name", [(torch.float32, "f32"), (torch.bfloat16, "bf16")])
def test_products_recorded_with_dtype_and_replayable(dtype, name):
    torch.manual_seed(0)
    a = torch.randn(64, dtype=torch.float32).to(dtype)  # a buffer holding a [4, 8] view at 8
    w = torch.randn(8, 6).to(dtype)
    rec = recorder(a, w)
    out = rec.alloc(torch.empty(4, 6, dtype=dtype))
    bt = rec.alloc(torch.empty(2, 4, 4, dtype=dtype))
    x = torch.as_strided(a, (4, 8), (8, 1), 8)
    with aot.recording_library_calls(torch, rec):
        torch.mm(x, w, out=out)
        torch.matmul(torch.as_strided(a, (2, 4, 8), (32, 8, 1), 0),
                     torch.as_strided(a, (2, 8, 4), (32, 1, 8), 0), out=bt)
    assert [list(launch) for launch in rec.launches] == [["gemm"], ["gemm"]]
    g, b = rec.launches[0]["gemm"], rec.launches[1]["gemm"]
    assert g["dtype"] == name and b["dtype"] == name
    assert g["math"] == 0  # torch's defaults: no TF32 for f32 here, reductions allowed
    assert g["a"]["offset"] == 8 * a.element_size()
    assert b["a"]["batch"] == 2 and b["a"]["batch_stride"] == 32
    assert b["b"]["col_stride"] == 8 and b["b"]["row_stride"] == 1  # a transposed view
    # Rebuilt from the records alone, the products are the ones computed.
    for rec_g, got in ((g, out), (b, bt)):
        want = torch.matmul(operand_view(rec, rec_g["a"], dtype),
                            operand_view(rec, rec_g["b"], dtype))
        assert torch.equal(operand_view(rec, rec_g["out"], dtype), got)
        assert torch.equal(want, got)


def test_cublas_math_follows_torch_flags(monkeypatch):
    mm = torch.backends.cuda.matmul
    monkeypatch.setattr(type(mm), "__getattr__",
                        lambda self, n: {"allow_tf32": True,
                                         "allow_bf16_reduced_precision_reduction": False,
                                         "allow_fp16_reduced_precision_reduction": True}[n],
                        raising=False)
    monkeypatch.setattr(type(mm), "__setattr__", lambda self, n, v: None, raising=False)
    assert aot.cublas_math(torch, torch.float32) == 3  # CUBLAS_TF32_TENSOR_OP_MATH
    assert aot.cublas_math(torch, torch.bfloat16) == 16  # DISALLOW_REDUCED_PRECISION_REDUCTION
    assert aot.cublas_math(torch, torch.float16) == 0


def test_products_refused_with_reasons():
    a = torch.ones(4, 4, dtype=torch.int32)
    rec = recorder(a)
    out = rec.alloc(torch.empty(4, 4, dtype=torch.int32))
    with pytest.raises(aot.Unsupported, match="torch.int32 matmul through cuBLAS"):
        rec.gemm(a, a, out)
    f, h = rec.alloc(torch.ones(4, 4)), rec.alloc(torch.ones(4, 4, dtype=torch.float16))
    with pytest.raises(aot.Unsupported, match="one dtype for cuBLAS"):
        rec.gemm(f, h, rec.alloc(torch.empty(4, 4)))
    with pytest.raises(aot.Unsupported, match="lies in no buffer"):
        rec.gemm(torch.ones(4, 4), f, rec.alloc(torch.empty(4, 4)))


def test_conv_recorded_and_replayable(monkeypatch):
    # As runtime.fp32_precision('highest') sets it around the module's call.
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
    torch.manual_seed(1)
    big = torch.randn(2 * 8 * 10 * 10 + 5)
    x = torch.as_strided(big, (2, 8, 9, 9), (800, 100, 10, 1), 5)  # a strided view, offset 5
    w = torch.randn(6, 4, 3, 3)
    bias = torch.randn(6)
    rec = recorder(big, w, bias)
    with aot.recording_library_calls(torch, rec):
        y = torch.nn.functional.conv2d(x, w, bias, stride=(2, 1), padding=(1, 2),
                                       dilation=(1, 2), groups=2)
        z = torch.nn.functional.conv2d(y, torch.as_strided(w, (6, 3, 1, 2), (6, 2, 2, 1), 0),
                                       groups=2)
    assert [list(launch) for launch in rec.launches] == [["conv"], ["conv"]]
    c, c2 = rec.launches[0]["conv"], rec.launches[1]["conv"]
    assert c["x_shape"] == [2, 8, 9, 9] and c["x_strides"] == [800, 100, 10, 1]
    assert c["x"] == {"buffer": 0, "offset": 5 * 4}
    assert c["stride"] == [2, 1] and c["padding"] == [1, 2] and c["dilation"] == [1, 2]
    assert c["groups"] == 2 and c["dtype"] == "f32" and c["tf32"] is False
    assert c["bias"] == {"buffer": 2, "offset": 0}
    assert c["w_shape"] == [6, 4, 3, 3] and c["out_shape"] == list(y.shape)
    assert rec.buffers[c["out"]["buffer"]]["kind"] == "temp"  # torch's new output, a buffer
    assert c2["x"]["buffer"] == c["out"]["buffer"] and "bias" not in c2
    # Rebuilt from the record alone, the convolution computes what torch computed.
    xs = view(rec, c["x"], c["x_shape"], c["x_strides"], torch.float32)
    ws = view(rec, c["w"], c["w_shape"], [36, 9, 3, 1], torch.float32)
    bs = view(rec, c["bias"], [6], [1], torch.float32)
    want = torch.nn.functional.conv2d(xs, ws, bs, stride=c["stride"], padding=c["padding"],
                                      dilation=c["dilation"], groups=c["groups"])
    assert torch.equal(want, y)
    assert torch.equal(view(rec, c["out"], c["out_shape"], list(y.stride()), torch.float32), y)
    assert z.shape == (2, 6, y.shape[2], y.shape[3] - 1)


def test_conv_refused_with_reasons():
    x = torch.randn(1, 2, 5, 5)
    w = torch.randn(3, 2, 3, 3)
    rec = recorder(x, w)
    y = torch.nn.functional.conv2d(x, w)
    with pytest.raises(aot.Unsupported, match="padding 'same'"):
        rec.conv(x, w, None, 1, "same", 1, 1, y)
    with pytest.raises(aot.Unsupported, match="weight is not contiguous"):
        rec.conv(x, w.transpose(2, 3), None, 1, 0, 1, 1, y)
    with pytest.raises(aot.Unsupported, match="torch.float64 conv2d"):
        rec.conv(x.double(), w.double(), None, 1, 0, 1, 1, y.double())
    cl = y.contiguous(memory_format=torch.channels_last)
    with pytest.raises(aot.Unsupported, match="not contiguous NCHW"):
        rec.conv(x, w, None, 1, 0, 1, 1, cl)
    with pytest.raises(aot.Unsupported, match="stride of"):
        rec.conv(x, w, None, (1, 1, 1), 0, 1, 1, rec.alloc(torch.empty(1, 3, 3, 3)))


def test_conv_tf32_follows_torch(monkeypatch):
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)
    x, w = torch.randn(1, 1, 3, 3), torch.randn(1, 1, 1, 1)
    rec = recorder(x, w)
    rec.conv(x, w, None, 1, 0, 1, 1, torch.nn.functional.conv2d(x, w))
    assert rec.launches[0]["conv"]["tf32"] is True
