"""torch.fft and complex values through coil (python/coil/torch/lowering_fft.py,
lowering_complex.py): each function traced with make_fx (coil.torch's decompositions), run
through compile_fx, required to run fully in coil, and compared with eager (pocketfft) over odd
sizes (1, 2, 7, 20, 33), every norm mode, several dims, n padding and trimming; complex inputs
and outputs (complex64 and complex128) across the graph's boundary and across partitions; and
complex values reaching ops without complex support, which must run in eager with a reason
(never a wrong answer)."""

import pytest
import torch

from coil.torch import fx_compile, lowering
from coil.torch.lowering import Unsupported

OPTIONS = {"autotune": False}
RTOL, ATOL = 1e-4, 1e-5  # the OpInfo sweep's tolerance (eager computes in f32 here)
NORMS = [None, "forward", "ortho"]  # (None is "backward")
SIZES = [1, 2, 7, 20, 33]


def _trace(f, *inputs):
    """make_fx of f, functionalized first as the OpInfo sweep does (stft transposes in place)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    try:
        from torch.func import functionalize
    except ImportError:
        from functorch.experimental import functionalize
    gm = make_fx(functionalize(f), decomposition_table=lowering.DECOMPOSITIONS)(*inputs)
    fx_compile._ensure_shapes(gm, list(inputs))
    return gm


def _compile(f, *inputs):
    """(compiled callable, [logged fallbacks])."""
    gm = _trace(f, *inputs)
    fallbacks = []
    real = fx_compile._log_fallback
    fx_compile._log_fallback = lambda what, why: fallbacks.append(f"{what}: {why}")
    try:
        compiled = fx_compile.compile_fx(gm, list(inputs), OPTIONS)
    finally:
        fx_compile._log_fallback = real
    return compiled, fallbacks


def _check(f, *inputs, rtol=RTOL, atol=ATOL, fallback_ok=False):
    want = f(*[t.clone() for t in inputs])
    compiled, fallbacks = _compile(f, *[t.clone() for t in inputs])
    if not fallback_ok:
        assert not fallbacks, fallbacks
    got = compiled(*[t.clone() for t in inputs])
    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        torch.testing.assert_close(g.resolve_conj(), w.resolve_conj(), rtol=rtol, atol=atol,
                                   equal_nan=True)
    return got, fallbacks


def _x(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.randn(*shape, dtype=dtype, generator=g) * 3
    return (torch.rand(*shape, generator=g, dtype=torch.float64) * 18 - 9).to(dtype)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("fn", ["fft", "ifft", "rfft", "ihfft"])
def test_real_input_1d(fn, norm, n):
    f = getattr(torch.fft, fn)
    _check(lambda x: f(x, norm=norm), _x(3, n))
    # n padding and trimming of dim 0
    _check(lambda x: f(x, n=n + 3, dim=0, norm=norm), _x(n, 2, seed=1))
    if n > 1:
        _check(lambda x: f(x, n=n - 1, dim=-2, norm=norm), _x(4, n, 2, seed=2))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("fn", ["irfft", "hfft"])
def test_half_spectrum_1d(fn, norm, n):
    """Real inverses of a half spectrum (the imaginary parts of X[0] and X[n/2], which
    pocketfft ignores, are not zero here), output sizes odd and even, trimmed and padded."""
    f = getattr(torch.fft, fn)
    x = _x(3, n // 2 + 1, dtype=torch.complex64, seed=n)
    _check(lambda z: f(z, n=n, norm=norm), x)
    if n > 1:
        _check(lambda z: f(z, norm=norm), x)  # n = 2 (m - 1)
    _check(lambda z: f(z, n=2 * n + 1, dim=0, norm=norm), _x(n, 3, dtype=torch.complex64))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("fn,dims", [("fft2", (-2, -1)), ("ifft2", (0, 2)), ("fftn", None),
                                     ("ifftn", (1,)), ("rfft2", (0, 1)), ("rfftn", None),
                                     ("irfft2", (-1, 0)), ("irfftn", None), ("hfft2", (1, 2)),
                                     ("hfftn", None), ("ihfft2", (2, 0)), ("ihfftn", None)])
def test_multi_dim(fn, dims, norm):
    f = getattr(torch.fft, fn)
    kw = {"norm": norm} if dims is None else {"dim": dims, "norm": norm}
    complex_in = fn.startswith(("irfft", "hfft"))
    x = _x(7, 2, 20, dtype=torch.complex64 if complex_in else torch.float32)
    _check(lambda t: f(t, **kw), x)
    if dims is not None:  # s: padding one dim, trimming the other
        _check(lambda t: f(t, s=(5, 9)[:len(dims)], **kw), x)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_inputs_and_outputs(dtype):
    """Complex graph inputs (passed as view_as_real, a conjugated one resolved first) and
    outputs (view_as_complex of coil's pairs): c2c in both directions, their round trip."""
    z = _x(4, 33, dtype=dtype)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.complex64 else dict(rtol=1e-10,
                                                                            atol=1e-10)
    _check(lambda t: torch.fft.fft(t), z, **tol)
    _check(lambda t: torch.fft.ifft(t, dim=0, norm="ortho"), z, **tol)
    _check(lambda t: torch.fft.ifft(torch.fft.fft(t)), z, **tol)
    _check(lambda t: torch.fft.fft(t), z.conj(), **tol)  # a lazily conjugated input
    got, _ = _check(lambda t: torch.fft.fft2(t), z, **tol)
    assert got[0].dtype == dtype and got[0].is_contiguous()


def test_f64_against_numpy():
    """complex128 and float64 transforms against numpy's f64 FFT, to f64 precision: the DFT
    matrices (their signs, the half-spectrum weights, normalization) exactly right."""
    import numpy as np
    x = _x(5, 20, dtype=torch.float64)
    z = _x(5, 20, dtype=torch.complex128)
    cases = [(lambda t: torch.fft.rfft(t, norm="ortho"), x, np.fft.rfft(x.numpy(), norm="ortho")),
             (lambda t: torch.fft.fft2(t), z, np.fft.fft2(z.numpy())),
             (lambda t: torch.fft.irfft(t, n=37), z, np.fft.irfft(z.numpy(), n=37)),
             (lambda t: torch.fft.hfft(t, n=38), z, np.fft.hfft(z.numpy(), n=38))]
    for f, inp, ref in cases:
        compiled, fallbacks = _compile(f, inp)
        assert not fallbacks, fallbacks
        got = compiled(inp.clone())
        got = got[0] if isinstance(got, (tuple, list)) else got
        np.testing.assert_allclose(got.resolve_conj().numpy(), ref, rtol=1e-11, atol=1e-11)


def test_complex_rows():
    """complex, polar, view_as_real, view_as_complex, real, imag, conj, abs, casts to complex,
    a real scalar times a complex value, and the view rows on complex values."""
    a, b = _x(5, 1), _x(6, seed=3)
    _check(lambda r, i: torch.complex(r, i), a, b)
    _check(lambda r, t: torch.polar(r.abs(), t), a, b)
    _check(lambda r, i: torch.view_as_real(torch.complex(r, i).conj_physical()), a, b)
    _check(lambda p: torch.view_as_complex(p) * 2.5, _x(4, 3, 2))
    # a real factor multiplies out as torch's complex product (infinite parts give its NaNs)
    p = torch.tensor([[1.0, 0.0], [0.0, 1.0], [float("inf"), 2.0], [3.0, float("-inf")],
                      [float("nan"), 1.0], [0.0, 0.0]])
    s = torch.tensor([2.0, float("inf"), 0.5, 0.0, -1.0, float("inf")])
    _check(lambda t, f: torch.view_as_complex(t) * f, p, s)
    _check(lambda t: torch.view_as_complex(t) * float("inf"), p)
    _check(lambda t, f: f[:, None] * torch.view_as_complex(t)[None], p, s)  # broadcast
    _check(lambda x: (torch.fft.fft(x).real, torch.fft.fft(x).imag, torch.fft.fft(x).abs()),
           _x(3, 7))
    _check(lambda x: x.to(torch.complex64), _x(3, 7))
    _check(lambda x: x.to(torch.complex128), _x(3, 7))
    _check(lambda x: x.chalf(), _x(3, 7))  # complex32: f16 pairs
    _check(lambda x: torch.view_as_real(x.to(torch.complex32)) * 3, _x(3, 7))
    _check(lambda x: torch.fft.fftshift(torch.fft.fft(x)), _x(6, 7))
    _check(lambda x: torch.fft.fft(x).permute(1, 0).reshape(-1)[2:9].unsqueeze(-1)
           .expand(7, 3).flip(0), _x(3, 7))
    _check(lambda x: torch.cat([torch.fft.fft(x), x.to(torch.complex64)], dim=-1)
           .transpose(0, 1)[1], _x(3, 7))
    _check(lambda x: torch.nn.functional.pad(torch.fft.fft(x), (1, 2)), _x(3, 7))


def test_through_coil_compile():
    """The public entry (coil.torch.compile, AOTAutograd) with a complex output and a real
    one."""
    import coil.torch
    f = lambda x: (torch.fft.rfft(x, dim=0), torch.fft.irfft(torch.fft.rfft(x)))  # noqa: E731
    x = _x(20, 7)
    got = coil.torch.compile(f, options=OPTIONS)(x)
    want = f(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=RTOL, atol=ATOL)


def test_unsupported_complex_falls_back():
    """A complex value reaching an op without complex support runs in eager with a reason,
    and the answer is still eager's: exp of a complex value (no complex row), complex x
    complex (the mul row refuses it), a size over the dense DFT's limit."""
    got, fallbacks = _check(lambda x: torch.view_as_real(torch.fft.fft(x).exp()) * 2, _x(3, 7),
                            fallback_ok=True)
    # only exp ran in eager: the partitions around it (a complex output, a complex input)
    # ran in coil
    assert len(fallbacks) == 1 and "aten.exp.default" in fallbacks[0], fallbacks
    assert "complex" in fallbacks[0], fallbacks
    _, fallbacks = _check(lambda x: torch.fft.fft(x) * torch.fft.fft(x, dim=0), _x(7, 7),
                          fallback_ok=True)
    assert any("complex multiplication" in f for f in fallbacks), fallbacks
    _, fallbacks = _check(lambda x: torch.fft.rfft(x), _x(2, 600), fallback_ok=True)
    assert any("size 600" in f for f in fallbacks), fallbacks


def test_complex_operand_refused_by_the_lowering():
    """The second guard: a graph that reaches CoilGraphCallable with a complex value feeding
    a row without complex support (here exp) is refused, naming the op, never lowered as real
    data."""
    gm = _trace(lambda x: torch.fft.fft(x).exp(), _x(3, 7))
    with pytest.raises(Unsupported, match="complex operand of aten.exp.default"):
        fx_compile.CoilGraphCallable(gm, OPTIONS)


@pytest.mark.parametrize("n_fft,hop,center", [(10, None, True), (16, 4, False), (7, 3, True)])
def test_stft(n_fft, hop, center):
    """torch.stft: its framing is aten.as_strided of the (reflection-padded) signal
    (lowering_strided.py), then _fft_r2c; with a window, complex and real outputs."""
    x = _x(2, 100)
    w = torch.hann_window(n_fft)
    _check(lambda t: torch.stft(t, n_fft, hop, window=w, center=center, return_complex=True), x)
    _check(lambda t: torch.stft(t.sum(0), n_fft, hop, center=center, return_complex=False,
                                normalized=True), x)


def test_as_strided():
    """as_strided reads its input's storage: coil takes it where that storage is one value's
    row-major elements (an input checked at each call, a fresh tensor, views of them that keep
    the offset), and leaves the rest to eager."""
    x = _x(4, 9)
    _check(lambda t: torch.as_strided(t, (3, 5), (7, 2), 3), x)
    _check(lambda t: torch.as_strided((t * 2).t(), (6, 4), (1, 5)), x)  # a view of a fresh one
    # a slice moves the storage offset: eager
    _, fallbacks = _check(lambda t: torch.as_strided(t[1:], (3, 3), (1, 3)), x,
                          fallback_ok=True)
    assert any("as_strided of a aten.slice.Tensor view" in f for f in fallbacks), fallbacks
    # compiled for a contiguous input, called with a view of a larger storage (offset 3): the
    # storage check sends that call to eager, which reads the storage before the view
    f = lambda t: torch.as_strided(t, (3, 3), (2, 1), 0)  # noqa: E731
    compiled, fallbacks = _compile(f, x.clone())
    assert not fallbacks, fallbacks
    big = _x(60, seed=5)
    view = big[3:39].view(4, 9)
    torch.testing.assert_close(compiled(view), f(view), rtol=0, atol=0)
    assert not torch.equal(f(view), f(view.clone()))  # (the storage really differs)
    torch.testing.assert_close(compiled(x.clone()), f(x), rtol=0, atol=0)


def test_as_strided_scatter():
    """as_strided_scatter: src written over the strided view of input's clone; a view that
    overlaps itself stays in eager (which element lands is TensorIterator's order)."""
    x, src = _x(4, 9), _x(3, 5, seed=7)
    _check(lambda t, s: torch.as_strided_scatter(t, s, (3, 5), (7, 2), 3), x, src)
    _check(lambda t, s: torch.as_strided_scatter(t * 2, s, (3, 5), (10, 2), 1), x, src)
    for stride in [(1, 1), (2, 1)]:  # (eager refuses a stride of 0 itself)
        _, fallbacks = _check(lambda t, s: torch.as_strided_scatter(t * 2, s, (3, 5), stride, 0),
                              x, src, fallback_ok=True)
        assert any("overlaps itself" in f for f in fallbacks), fallbacks
    # into a transposed value (its clone is transposed too): eager
    _, fallbacks = _check(lambda t, s: torch.as_strided_scatter(t.t() + 1, s, (3, 5), (1, 3)),
                          x, src, fallback_ok=True)
    assert any("not known to be row-major" in f for f in fallbacks), fallbacks
