"""Focused tests of the rows of lowering_math.py and lowering_scatter.py where the OpInfo samples
are thin: special values (signed zeros, infinities, NaN, poles, domain edges), odd shapes,
negative dims, empty and 0-d tensors, integer dtypes. Each case is traced with make_fx and
coil.torch's decompositions, must run fully in coil (no fallback) and match eager."""

import math

import pytest
import torch

from coil.torch import fx_compile, lowering

OPTIONS = {"autotune": False}

SPECIALS = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 1e-30, -1e-30, 1e30, -1e30, math.inf,
            -math.inf, math.nan, 3.0, -3.0, 1.0000001, 0.9999999, 1.4616321, 20.0, -20.5, 88.0,
            -88.0, 1e-7, 0.66, 2.414, 2.5, -2.457]


def _values():
    g = torch.Generator().manual_seed(0)
    return torch.cat([torch.tensor(SPECIALS), torch.linspace(-10, 10, 401),
                      torch.randn(200, generator=g) * 100]).float()


def _run(f, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(f, decomposition_table=lowering.DECOMPOSITIONS)(*inputs)
    fx_compile._ensure_shapes(gm, list(inputs))
    fallbacks = []
    real = fx_compile._log_fallback
    fx_compile._log_fallback = lambda what, why: fallbacks.append(f"{what}: {why}")
    try:
        compiled = fx_compile.compile_fx(gm, list(inputs), OPTIONS)
    finally:
        fx_compile._log_fallback = real
    assert not fallbacks, fallbacks
    return compiled(*inputs)


def _check(f, *inputs, rtol=1e-5, atol=1e-6, exact=False, ref64=False):
    """ref64: against eager in f64, rounded (where eager's f32 is itself less accurate)."""
    want = f(*[t.clone() for t in inputs])
    if ref64:
        want = f(*[t.double() for t in inputs]).to(want.dtype)
    got = _run(f, *[t.clone() for t in inputs])
    for g, w in zip(torch.utils._pytree.tree_flatten(got)[0],
                    torch.utils._pytree.tree_flatten(want)[0]):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if exact:
            assert torch.equal(g, w) or (g.dtype.is_floating_point and torch.allclose(
                g, w, rtol=0, atol=0, equal_nan=True)), (g, w)
        else:
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)
    return got, want


UNARY = ["atan", "asin", "acos", "asinh", "acosh", "atanh", "tan", "log2", "log10", "exp2",
         "lgamma", "digamma", "deg2rad", "rad2deg", "special.entr", "isfinite"]


@pytest.mark.parametrize("name", UNARY)
def test_unary_special_values(name):
    f = eval("torch." + name)
    x = _values()
    got, want = _check(f, x, rtol=2e-6, atol=1e-6)
    if want.dtype.is_floating_point:
        # signed zeros and the NaN/inf pattern exactly as eager
        assert torch.equal(torch.isnan(got), torch.isnan(want))
        assert torch.equal(got[torch.isinf(want)], want[torch.isinf(want)])
        zero = (want == 0) & (got == 0)
        assert torch.equal(torch.signbit(got[zero]), torch.signbit(want[zero]))


@pytest.mark.parametrize("name", ["sinh", "cosh"])
def test_hyperbolic(name):
    # within f32's range (eager's f32 overflows a little early, near |x| = 88.7)
    x = _values()
    x = x[~(x.abs() > 88.5) | torch.isinf(x)]
    _check(eval("torch." + name), x, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["atan2", "special.xlog1py", "logaddexp2"])
def test_binary_special_values(name):
    f = eval("torch." + name)
    s = torch.tensor(SPECIALS)
    a = s.repeat_interleave(len(SPECIALS))
    b = s.repeat(len(SPECIALS))
    got, want = _check(f, a, b, rtol=2e-6, atol=1e-6)
    zero = (want == 0) & (got == 0)
    assert torch.equal(torch.signbit(got[zero]), torch.signbit(want[zero]))


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_polygamma(n):
    x = _values()
    x = x[x.abs() < 30]
    # negative integers are poles: eager's trigamma gives a large finite value there (from
    # sin(pi x) rounding), coil inf; eager's f32 trigamma loses digits below 0 (up to 1e-4
    # relative, more near the poles): the reference is eager's f64
    if n == 1:
        x = x[~((x <= 0) & (x == x.floor()))]
    _check(lambda t: torch.polygamma(n, t), x, rtol=1e-5, atol=1e-6, ref64=True)


def test_lgamma_f64_falls_back():
    from torch.fx.experimental.proxy_tensor import make_fx
    x = torch.rand(5, dtype=torch.float64) + 1
    gm = make_fx(torch.lgamma, decomposition_table=lowering.DECOMPOSITIONS)(x)
    fx_compile._ensure_shapes(gm, [x])
    fallbacks = []
    real = fx_compile._log_fallback
    fx_compile._log_fallback = lambda what, why: fallbacks.append(why)
    try:
        out = fx_compile.compile_fx(gm, [x], OPTIONS)(x)
    finally:
        fx_compile._log_fallback = real
    assert fallbacks and "f64" in fallbacks[0]
    torch.testing.assert_close(out, torch.lgamma(x))


@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_division(mode, dtype):
    g = torch.Generator().manual_seed(1)
    big = 2 ** 62 if dtype == torch.int64 else 2 ** 30
    a = torch.cat([torch.randint(-big, big, (500,), generator=g),
                   torch.randint(-100, 100, (500,), generator=g),
                   torch.tensor([7, -7, 7, -7, 0, 1, -1])]).to(dtype)
    b = torch.cat([torch.randint(-2 ** 20, 2 ** 20, (500,), generator=g),
                   torch.randint(-10, 10, (500,), generator=g),
                   torch.tensor([2, 2, -2, -2, 5, 3, 3])]).to(dtype)
    b[b == 0] = 1
    _check(lambda x, y: torch.div(x, y, rounding_mode=mode), a, b, exact=True)
    _check(lambda x: torch.div(x, 3, rounding_mode=mode), a, exact=True)


def test_small_composites():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 0, 4) if False else torch.randn(3, 5, 4, generator=g)
    y = torch.randn(3, 5, 4, generator=g)
    _check(lambda t: torch.aminmax(t, dim=-2), x)
    _check(lambda t: torch.aminmax(t), x)
    _check(lambda t: (t.max(), t.min()), x)
    _check(lambda t: torch.count_nonzero(t.round(), dim=(0, -1)), x, exact=True)
    for p in [0, 1, 2, 3.5, math.inf, -math.inf]:
        _check(lambda a, b: torch.dist(a, b, p), x, y, rtol=1e-5)
    _check(lambda a, b: torch.nn.functional.smooth_l1_loss(a, b, beta=0.5), x, y)
    _check(lambda a, b: torch.nn.functional.smooth_l1_loss(a, b, reduction="none", beta=0.0),
           x, y)
    _check(lambda a, b: torch.linalg.cross(a[:, :3], b[:, :3], dim=-2), x, y)
    w = torch.tensor([0.0, 0.25, 0.5, 0.75, 1.0, -1.0, 2.0])
    _check(lambda a, b, t: torch.lerp(a[:7, 0, 0], b[:7, 0, 0], t), x.repeat(3, 1, 1),
           y.repeat(3, 1, 1), w)
    z = torch.tensor([math.nan, math.inf, -math.inf, 1.0, -0.0])
    _check(lambda t: torch.nan_to_num(t), z, exact=True)
    _check(lambda t: torch.nan_to_num(t, nan=1.5, posinf=2.0, neginf=-3.0), z, exact=True)
    _check(lambda t: torch.special.multigammaln(t, 3), x.abs() + 1.5)
