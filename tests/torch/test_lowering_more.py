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


def _compile_no_fallback(f, *inputs):
    """f traced with coil.torch's decompositions and compiled; no op may fall back."""
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
    return gm, compiled


def _run(f, *inputs):
    return _compile_no_fallback(f, *inputs)[1](*inputs)


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


def test_copies_across_devices():
    """A copy to the device its source is on is a cast (torch's GQA path copies a mask
    `.to(query.device)` on cuda: it fell back to eager on torch 2.11); to another device it
    stays in eager."""
    class Source:
        def __init__(self, val):
            self.meta = {"val": val}

    class Node:
        def __init__(self, val):
            self.args = (Source(val),)

    on_meta, on_cpu = Node(torch.empty(2, device="meta")), Node(torch.empty(2))
    assert not lowering.copies_across_devices(on_meta, None)
    assert not lowering.copies_across_devices(on_meta, "meta")
    assert not lowering.copies_across_devices(on_cpu, torch.device("cpu"))
    assert lowering.copies_across_devices(on_meta, "cpu")
    assert lowering.copies_across_devices(on_cpu, "meta")
    assert lowering.copies_across_devices(Node(None), "cuda:0")  # unknown source: a move
    _check(lambda t: t.to(device="cpu", dtype=torch.float64) * 2, torch.randn(3, 4))


# ---- scatters, scans, sorting (lowering_scatter.py) ------------------------------------------

def _gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_family(dim):
    g = _gen(3)
    x = torch.randn(6, 5, 4, generator=g)
    ishape = [4, 3, 2]
    n = x.shape[dim]
    idx = torch.randint(0, n, ishape, generator=g)  # duplicates: the last write wins (CPU)
    src = torch.randn(5, 4, 3, generator=g)
    src[0, 0, 0] = math.nan
    _check(lambda a, i, s: torch.scatter(a, dim, i, s), x, idx, src, exact=True)
    _check(lambda a, i: torch.scatter(a, dim, i, 2.5), x, idx, exact=True)
    _check(lambda a, i, s: torch.scatter_add(a, dim, i, s), x, idx, src)
    _check(lambda a, i, s: torch.scatter(a, dim, i, s, reduce="multiply"), x, idx, src)
    for reduce in ["sum", "prod", "mean", "amax", "amin"]:
        for include_self in [True, False]:
            _check(lambda a, i, s: torch.scatter_reduce(a, dim, i, s, reduce,
                                                        include_self=include_self),
                   x, idx, src)
    xi = torch.randint(-50, 50, (6, 5, 4), generator=g)
    si = torch.randint(-50, 50, (5, 4, 3), generator=g)
    _check(lambda a, i, s: torch.scatter_add(a, dim, i, s), xi, idx, si, exact=True)
    _check(lambda a, i, s: torch.scatter_reduce(a, dim, i, s, "amax", include_self=False),
           xi, idx, si, exact=True)


@pytest.mark.parametrize("dim", [0, -2, 2])
def test_index_family(dim):
    g = _gen(4)
    x = torch.randn(5, 6, 4, generator=g)
    n = x.shape[dim]
    idx = torch.tensor([1, -1, 0, 1, n - 2])  # negative and repeated
    shp = list(x.shape)
    shp[dim] = len(idx)
    src = torch.randn(shp, generator=g)
    pos = idx % n
    _check(lambda a, s: a.index_add(dim, pos, s, alpha=-1.5), x, src)
    _check(lambda a, s: a.index_copy(dim, pos, s), x, src, exact=True)
    _check(lambda a: a.index_fill(dim, pos, -7.0), x, exact=True)
    for reduce in ["prod", "mean", "amax", "amin"]:
        for include_self in [True, False]:
            _check(lambda a, s: a.index_reduce(dim, pos, s, reduce, include_self=include_self),
                   x, src)


@pytest.mark.parametrize("vocab,dim,idx_shape,dtype", [
    (8192, 64, (8, 256), torch.float32),   # the bench GPT block's embedding gradient, narrower
    (50, 7, (3, 5, 4), torch.float32),     # an index of rank 3, odd row width
    (1, 3, (6,), torch.float32),           # every index the same row
    (33, 129, (17,), torch.float64),       # f64 (the one-hot matmul refused it)
    (10, 16, (40,), torch.bfloat16),       # bf16: sums rounded at each add, as torch's
    (12, 5, (9, 2), torch.int64),          # integers
])
def test_embedding_gradient_is_index_add_in_order(vocab, dim, idx_shape, dtype):
    """index_put(accumulate=True) with an index of any rank on dim 0 (embedding_dense_backward)
    is coil's index_add: each element sums its rows in index order, as torch's CPU kernel
    does, so the result equals eager's bit for bit (f32, bf16, f64) at any thread count; over
    2^24 one-hot elements, which ran in eager before (the GPT block's vocabulary of 8192)."""
    g = _gen(11)
    idx = torch.randint(0, vocab, idx_shape, generator=g)
    if dtype.is_floating_point:
        grad = (torch.randn(*idx_shape, dim, generator=g) * 3).to(dtype)
    else:
        grad = torch.randint(-50, 50, (*idx_shape, dim), generator=g)

    put = getattr(torch.ops.aten, "_unsafe_index_put", torch.ops.aten.index_put)  # 2.x / 1.13

    def f(gr, i):
        return put(gr.new_zeros(vocab, dim), [i], gr, True)

    _, compiled = _compile_no_fallback(f, grad, idx)
    assert torch.equal(compiled(grad, idx), f(grad, idx))
    # the gradient of an embedding lookup through autograd's own decomposition
    if dtype == torch.float32:
        def emb_grad(gr, i):
            return torch.ops.aten.embedding_dense_backward(gr, i, vocab, -1, False)
        _, c2 = _compile_no_fallback(emb_grad, grad, idx)
        assert torch.equal(c2(grad, idx), emb_grad(grad, idx))


def test_index_add_rows_negative_and_out_of_range():
    g = _gen(12)
    x = torch.randn(6, 4, 5, generator=g)
    src = torch.randn(6, 7, 5, generator=g)
    idx = torch.tensor([3, 0, 3, 1, 1, 3, 0])
    # along dim 1, against eager in order: exact
    got, want = _check(lambda a, s: a.index_add(1, idx, s), x, src, exact=True)
    # index_put(accumulate) with negative indices counts from the end, as torch's
    neg = torch.tensor([-1, 0, -4, 2, -1])
    v = torch.randn(5, 4, 5, generator=g)
    _check(lambda a, b: torch.index_put(a, (neg,), b, accumulate=True), x, v, exact=True)
    # an index out of range is a run-time error naming the op, never a silent result
    bad = torch.tensor([0, 6, 1])

    def f(a, b, i):
        return torch.index_put(a, (i,), b, accumulate=True)
    _, compiled = _compile_no_fallback(f, x, v[:3], torch.tensor([0, 5, 1]))
    with pytest.raises(Exception, match=r"index_add.*index 6 is out of range"):
        compiled(x, v[:3], bad)


def test_index_put_and_put():
    g = _gen(5)
    x = torch.randn(5, 4, 3, generator=g)
    i0 = torch.tensor([4, 0, -1, 2])
    i1 = torch.tensor([3, 1, 1, 0])
    v = torch.randn(4, 3, generator=g)
    _check(lambda a, b: torch.index_put(a, (i0,), b), x, v, exact=True)
    _check(lambda a, b: torch.index_put(a, (i0, i1), b), x, v, exact=True)
    _check(lambda a, b: torch.index_put(a, (i0, i1), b, accumulate=True), x, v)
    _check(lambda a, b: torch.index_put(a, (i0, i1), b[0, 0]), x, v, exact=True)
    mask = torch.tensor([True, False, True, True, False])
    _check(lambda a, b: torch.index_put(a, (mask,), b[:3, None, :].expand(3, 4, 3)), x,
           torch.randn(4, 3, generator=g).repeat(2, 1), exact=True)
    _check(lambda a: torch.index_put(a, (mask,), torch.tensor(1.5)), x, exact=True)
    _check(lambda a, b: torch.index_put(a, (mask,), b, accumulate=True), x, v[0], exact=True)
    _check(lambda a: a.masked_fill(a > 0, -1.0), x, exact=True)
    flat = torch.tensor([0, 59, -1, 7, 7])
    src = torch.randn(5, generator=g)
    _check(lambda a, s: a.put(flat, s), x, src, exact=True)
    _check(lambda a, s: a.put(flat, s, accumulate=True), x, src)
    m2 = torch.rand(5, 4, 3, generator=g) > 0.5
    _check(lambda a, m, s: a.masked_scatter(m, s), x, m2, torch.randn(60, generator=g),
           exact=True)
    _check(lambda a, m, s: a.masked_scatter(m, s), x[0, :, 0], m2[:, :, 0],
           torch.randn(30, generator=g), exact=True)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scans(dim):
    g = _gen(6)
    x = torch.randn(7, 6, 5, generator=g)
    x[1, 2, 3] = math.nan
    x[3, 0, 0] = math.inf
    t = torch.randint(-3, 3, (7, 6, 5), generator=g).float()  # ties
    t[2, 1, 1] = math.nan
    _check(lambda a: torch.logcumsumexp(a, dim), x)
    for fn in (torch.cummax, torch.cummin):
        _check(lambda a: fn(a, dim), x, exact=True)
        _check(lambda a: fn(a, dim), t, exact=True)
        _check(lambda a: fn(a, dim), t.long(), exact=True)
    _check(lambda a: torch.cummax(a, 0), torch.tensor(1.5), exact=True)
    # cumprod: zeros, negatives, NaN and inf (0 * inf = NaN from there on), integers (i64
    # products, as torch), a dtype argument, 0-d
    p = torch.randint(-3, 4, (7, 6, 5), generator=g).float() * 0.75
    p[4, 2, 1] = math.inf
    _check(lambda a: torch.cumprod(a, dim), p)
    _check(lambda a: torch.cumprod(a, dim), x)
    _check(lambda a: torch.cumprod(a, dim), t.long(), exact=True)
    _check(lambda a: torch.cumprod(a, dim, dtype=torch.float64), p)
    _check(lambda a: torch.cumprod(a, dim), (t * 0.5 + 1).int(), exact=True)
    _check(lambda a: torch.cumprod(a, 0), torch.tensor(-2.5), exact=True)


@pytest.mark.parametrize("dim", [0, -1, 1])
def test_sorting(dim):
    g = _gen(7)
    x = torch.randint(-4, 4, (6, 7, 5), generator=g).float()  # many ties: stable order
    x[0, 0, 0] = math.nan
    x[2, 3, 1] = math.nan
    x[1, 1, 1] = -0.0
    for desc in (False, True):
        _check(lambda a: torch.sort(a, dim=dim, descending=desc, stable=True), x, exact=True)
        _check(lambda a: torch.argsort(a, dim=dim, descending=desc), x, exact=True)
    r = torch.randn(6, 7, 5, generator=g)  # no ties
    _check(lambda a: torch.sort(a, dim=dim), r, exact=True)
    _check(lambda a: torch.topk(a, 3, dim=dim), r, exact=True)
    _check(lambda a: torch.topk(a, 2, dim=dim, largest=False), r, exact=True)
    _check(lambda a: torch.kthvalue(a, 2, dim=dim, keepdim=True), r, exact=True)
    _check(lambda a: torch.median(a, dim=dim), r, exact=True)
    _check(lambda a: torch.median(a), r, exact=True)
    _check(lambda a: torch.msort(a), r, exact=True)
    rn = r.clone()
    rn[0, 2, 1] = math.nan
    rn[3, 0, 0] = math.nan
    _check(lambda a: torch.median(a, dim=dim), rn, exact=True)
    _check(lambda a: torch.nanmedian(a, dim=dim), rn, exact=True)
    _check(lambda a: torch.nanmedian(a), rn, exact=True)
    _check(lambda a: torch.sort(a, dim=dim), torch.randint(-9, 9, (6, 7, 5), generator=g),
           exact=True)


def test_searchsorted():
    g = _gen(8)
    b = torch.sort(torch.randint(-5, 5, (12,), generator=g).float()).values
    b = torch.cat([b, torch.tensor([math.nan])])
    v = torch.cat([torch.randint(-6, 6, (3, 10), generator=g).float(),
                   torch.tensor([[math.nan] * 10])])
    for right in (False, True):
        _check(lambda bb, vv: torch.searchsorted(bb, vv, right=right), b, v, exact=True)
        _check(lambda bb, vv: torch.bucketize(vv, bb, right=right, out_int32=True), b, v,
               exact=True)
    b2 = torch.sort(torch.randn(4, 9, generator=g), dim=-1).values
    v2 = torch.randn(4, 3, generator=g)
    _check(lambda bb, vv: torch.searchsorted(bb, vv), b2, v2, exact=True)
    perm = torch.randperm(9, generator=g)
    u = b2[:, perm]
    sorter = torch.argsort(u, dim=-1)
    _check(lambda bb, vv, s: torch.searchsorted(bb, vv, sorter=s), u, v2, sorter, exact=True)
    # unsorted boundaries and NaN-heavy ones: torch's binary search, step for step
    _check(lambda bb, vv: torch.searchsorted(bb, vv), u, v2, exact=True)
    nb = torch.tensor([-1.0, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, 2.0])
    _check(lambda bb, vv: torch.searchsorted(bb, vv), nb, torch.tensor([0.0, -3.0, 5.0]),
           exact=True)


# ---- windows, upsampling, view-like composites (lowering_pool.py) ----------------------------

def test_pooling_3d_and_adaptive():
    g = _gen(9)
    F = torch.nn.functional
    x = torch.randn(2, 3, 7, 6, 5, generator=g)
    x[0, 0, 1, 1, 1] = math.nan
    x[1, 2, :3, :3, :3] = -math.inf
    _check(lambda a: F.max_pool3d(a, 3, 2, 1, ceil_mode=True, return_indices=True), x,
           exact=True)
    _check(lambda a: F.max_pool3d(a, (2, 3, 2), (1, 2, 2), (1, 0, 1), dilation=(2, 1, 1),
                                  return_indices=True), x, exact=True)
    _check(lambda a: F.adaptive_max_pool3d(a, (3, 4, 2), return_indices=True), x, exact=True)
    _check(lambda a: F.adaptive_max_pool2d(a[0], (4, 3), return_indices=True), x, exact=True)
    _check(lambda a: F.adaptive_max_pool1d(a[0, 0, 0], 4, return_indices=True), x, exact=True)
    y = torch.randn(2, 3, 7, 6, 5, generator=g)
    _check(lambda a: F.adaptive_avg_pool3d(a, (3, 4, 2)), y, rtol=1e-6)
    for include_pad in (True, False):
        for ceil in (True, False):
            _check(lambda a: F.avg_pool3d(a, 3, 2, 1, ceil_mode=ceil,
                                          count_include_pad=include_pad), y, rtol=1e-6)
    _check(lambda a: F.avg_pool3d(a, (2, 3, 2), divisor_override=5), y, rtol=1e-6)
    _check(lambda a: F.avg_pool2d(a[0], 3, 2, 1, ceil_mode=True, divisor_override=4), y,
           rtol=1e-6)


def test_max_unpool():
    g = _gen(10)
    F = torch.nn.functional
    x = torch.randn(2, 3, 6, 7, generator=g)
    v, i = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    _check(lambda a, b: F.max_unpool2d(a, b, 3, 2, 1, output_size=(6, 7)), v, i, exact=True)
    # overlapping windows pick one position twice: the last write wins (eager's CPU order)
    v, i = F.max_pool2d(x, 3, 1, 1, return_indices=True)
    _check(lambda a, b: F.max_unpool2d(a, b, 3, 1, 1), v, i, exact=True)
    x3 = torch.randn(1, 2, 4, 5, 6, generator=g)
    v3, i3 = F.max_pool3d(x3, 2, 2, return_indices=True)
    _check(lambda a, b: F.max_unpool3d(a, b, 2, 2, output_size=(5, 5, 7)), v3, i3, exact=True)


@pytest.mark.parametrize("mode", ["nearest", "linear", "trilinear", "nearest-exact"])
def test_upsampling(mode):
    g = _gen(11)
    F = torch.nn.functional
    k = 3 if mode == "trilinear" else 1
    x = torch.randn(*([2, 3] + [5, 4, 3][:k] if k == 3 else [2, 3, 7]), generator=g)
    if mode == "nearest-exact" and not hasattr(torch.ops.aten, "_upsample_nearest_exact1d"):
        pytest.skip("no nearest-exact in this torch")
    align = [None] if mode.startswith("nearest") else [False, True]
    for ac in align:
        for size in ([3, 5, 4][:k], [11, 9, 7][:k], [7, 4, 3][:k]):
            _check(lambda a: F.interpolate(a, size=size, mode=mode, align_corners=ac), x,
                   rtol=1e-6, atol=1e-6)
        for sf in (1.7, 0.6, 2.0, 3.3):
            _check(lambda a: F.interpolate(a, scale_factor=sf, mode=mode, align_corners=ac),
                   x, rtol=1e-6, atol=1e-6)
    if mode == "nearest":
        _check(lambda a: F.interpolate(a, scale_factor=(1.5, 2.5), mode="nearest"),
               torch.randn(2, 3, 5, 4, generator=g), exact=True)


def test_view_composites():
    g = _gen(12)
    x = torch.randn(4, 5, 6, generator=g)
    for off, d1, d2 in [(0, 0, 1), (2, -1, 0), (-3, 1, 2), (9, 0, 1), (-1, 2, 0)]:
        _check(lambda a: torch.diagonal(a, off, d1, d2), x, exact=True)
        n = torch.diagonal(x, off, d1, d2).shape[-1]
        if n:
            src = torch.randn(torch.diagonal(x, off, d1, d2).shape, generator=g)
            _check(lambda a, s: torch.diagonal_scatter(a, s, off, d1, d2), x, src, exact=True)
    for dim, size, step in [(0, 2, 1), (-1, 3, 2), (1, 5, 5), (2, 1, 4)]:
        _check(lambda a: a.unfold(dim, size, step), x, exact=True)
    _check(lambda a, b, c: torch.block_diag(a, b, c), torch.randn(2, 3, generator=g),
           torch.randn(4, generator=g), torch.tensor(2.5), exact=True)
    _check(lambda a, b: torch.block_diag(a, b), torch.randn(0, 3, generator=g),
           torch.randn(2, 2, generator=g), exact=True)
    for p in (1, 2, 3.0, math.inf):
        _check(lambda a: torch.renorm(a, p, 1, 2.0), x, rtol=1e-5)
        _check(lambda a, b: torch.cdist(a, b, p), x[:, :4], x[:, 1:], rtol=1e-5, atol=1e-5)
        _check(lambda a: torch.nn.functional.pdist(a, p), x[0], rtol=1e-5, atol=1e-5)
    _check(lambda a, b: torch.cdist(a, b, 0.0), x.round(), x.round() + 1, rtol=1e-5)


# ---- error-function family, Bessel I, zeta, Chebyshev (lowering_math.py) ---------------------

@pytest.mark.parametrize("name", ["special.erfc", "special.erfcx", "special.log_ndtr", "i0",
                                  "special.i0e", "special.i1", "special.i1e"])
def test_special_functions(name):
    f = eval("torch." + name)
    x = _values()
    x = x[torch.isfinite(x)]  # eager's f32 i0/i1 give NaN at +-inf (coil: +-inf)
    _check(f, x, rtol=2e-6, atol=1e-30, ref64=True)


BESSEL = {"bessel_j0": "j0", "bessel_j1": "j1", "bessel_y0": "y0", "bessel_y1": "y1",
          "modified_bessel_k0": "k0", "modified_bessel_k1": "k1",
          "scaled_modified_bessel_k0": "k0e", "scaled_modified_bessel_k1": "k1e"}


@pytest.mark.parametrize("name", sorted(BESSEL))
def test_bessel_jyk(name):
    """Against scipy in f64 (torch 1.13's own f64 J0 is off by 2e-6 near x = 5.05) and against
    eager's f32 at the OpInfo tolerance, across every branch edge (2, 12, 25), the special
    values, zeros of J and Y, and odd shapes."""
    import scipy.special
    f = getattr(torch.special, name)
    edges = torch.tensor([1.999, 2.0, 2.001, 11.99, 12.0, 12.01, 24.99, 25.0, 25.01, 700.0,
                          800.0, 1e-3, 1e-10, 2.404825, 3.831706, 0.893577, 2.197141])
    x = torch.cat([_values(), torch.linspace(0, 30, 601), edges]).float()
    got = _run(f, x)
    want = torch.from_numpy(getattr(scipy.special, BESSEL[name])(x.double().numpy()))
    if name.endswith(("y0", "y1")):
        want[x < 0] = math.nan  # scipy gives NaN too; torch 1.13 as well (-inf at 0 both)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.double(), want, rtol=2e-6, atol=1e-7, equal_nan=True)
    _check(f, x, rtol=1e-4, atol=1e-5)
    g = _gen(21)
    _check(f, torch.rand(7, 13, generator=g) * 40 - 5, rtol=1e-4, atol=1e-5)
    _check(f, torch.tensor(3.5), rtol=1e-4, atol=1e-5)


def test_airy_ai():
    """Against scipy in f64 (every branch: the K_{1/3} integral and its asymptotics above 2, the
    Maclaurin series on [-8, 2], DLMF 9.7.9 below) and eager's f32 where eager is accurate
    (|x| <= 100: beyond, eager's f32 phase drifts; torch gives NaN at +-inf)."""
    import scipy.special
    edges = torch.tensor([-8.0001, -8.0, -7.9999, 1.9999, 2.0, 2.0001, 11.5, 11.6, 11.7, 103.0,
                          104.0, -2.338107, -4.087949, -150.0])
    x = torch.cat([_values(), torch.linspace(-30, 30, 1201), edges]).float()
    got = _run(torch.special.airy_ai, x)
    want = torch.from_numpy(scipy.special.airy(x.double().numpy())[0])
    want[torch.isinf(x)] = math.nan
    ok = x.abs() < 1e4  # (at 1e30 the phase is all rounding: scipy gives NaN)
    torch.testing.assert_close(got.double()[ok], want[ok], rtol=2e-6, atol=1e-7, equal_nan=True)
    x = x[x.abs() <= 100]
    _check(torch.special.airy_ai, x, rtol=1e-4, atol=1e-5)
    _check(torch.special.airy_ai, torch.rand(5, 9, generator=_gen(34)) * 20 - 10, rtol=1e-4,
           atol=1e-5)


def test_quantiles():
    g = _gen(13)
    p = torch.cat([torch.rand(300, generator=g), torch.tensor(
        [0.0, 1.0, 0.5, 1e-30, 1 - 6e-8, 6e-8, 0.02425, 0.97575, -0.1, 1.1, math.nan])]).float()
    _check(torch.special.ndtri, p, rtol=2e-6, atol=1e-30, ref64=True)
    y = torch.cat([torch.rand(300, generator=g) * 2 - 1, torch.tensor(
        [0.0, -0.0, 1.0, -1.0, 1 - 6e-8, -1 + 6e-8, 1e-30, 0.5, -0.5, 1.5, math.nan])]).float()
    _check(torch.erfinv, y, rtol=2e-6, atol=1e-30, ref64=True)


def test_zeta():
    g = _gen(14)
    s = torch.cat([torch.rand(300, generator=g) * 18 - 9,
                   torch.randint(-3, 10, (300,), generator=g).float(),
                   torch.tensor([1.0, 2.0, 3.0, 0.5, math.inf, math.nan, 2.0, 3.0, 4.0])])
    q = torch.cat([torch.rand(300, generator=g) * 18 - 9, torch.rand(300, generator=g) * 30 - 20,
                   torch.tensor([1.0, 0.0, -2.0, -2.5, 1.0, 1.0, -0.5, -30.25, 1e-20])])
    _check(torch.special.zeta, s.float(), q.float(), rtol=2e-6, atol=1e-30, ref64=True)


@pytest.mark.parametrize("kind", ["t", "u", "v", "w"])
@pytest.mark.parametrize("shifted", [False, True])
@pytest.mark.skipif(not torch.__version__.startswith("1.13"),
                    reason="the Chebyshev rows are checked on torch 1.13 only")
def test_chebyshev(kind, shifted):
    g = _gen(15)
    x = torch.cat([torch.rand(400, generator=g) * 4 - 2, torch.rand(200, generator=g) * 18 - 9,
                   torch.tensor([1.0, -1.0, 0.0, 0.5, math.nan, 1.0, -1.0, 0.0])]).float()
    n = torch.cat([torch.randint(-2, 30, (400,), generator=g).float(),
                   torch.rand(200, generator=g) * 18 - 9,
                   torch.tensor([3.0, 3.0, 4.0, 20.0, 2.0, 12.0, 13.0, 9.7])]).float()
    if shifted:
        x = (x + 1) / 2
    f = getattr(torch.special, ("shifted_" if shifted else "") + f"chebyshev_polynomial_{kind}")
    keep = f(x.double(), n.double()).abs() < 1e30  # beyond, eager's f32 recurrence overflows
    _check(f, x[keep], n[keep], rtol=2e-6, atol=1e-5, ref64=True)


# ---- linear algebra (lowering_linalg.py) -----------------------------------------------------

def _mats(seed):
    g = _gen(seed)
    A = torch.randn(3, 5, 5, generator=g)
    B = torch.randn(3, 5, 2, generator=g)
    spd = A @ A.mT + 0.5 * torch.eye(5)
    return g, A, B, spd


def test_det_inv_solve():
    g, A, B, spd = _mats(16)
    tol = dict(rtol=1e-4, atol=1e-5)
    _check(torch.linalg.det, A, **tol)
    _check(torch.linalg.slogdet, A, **tol)
    _check(torch.logdet, spd, **tol)
    _check(torch.linalg.inv, A, **tol)
    _check(torch.linalg.inv_ex, A, **tol)
    _check(torch.linalg.solve, A, B, **tol)
    _check(torch.linalg.solve, A[0], B[0, :, 0], **tol)  # a vector right-hand side
    _check(torch.linalg.solve, A, B[..., 0], **tol)  # a batch of vectors
    _check(lambda a, b: torch.linalg.solve(a, b, left=False), A, B.mT, **tol)
    _check(lambda a, b: torch.linalg.solve(a, b), A[:1], B, **tol)  # broadcast batch
    _check(torch.linalg.det, torch.zeros(0, 0), exact=True)
    _check(torch.linalg.det, torch.randn(4, 1, 1, generator=g), exact=True)
    # a zero pivot column: det 0; linalg.inv raises as eager does (info checked after the run)
    sing = A.clone()
    sing[:, :, 1] = 0
    _check(torch.linalg.det, sing, exact=True)
    with pytest.raises(Exception, match="singular|zero"):
        _run(torch.linalg.inv, sing)


def test_cholesky_triangular():
    g, A, B, spd = _mats(17)
    tol = dict(rtol=1e-4, atol=1e-5)
    _check(torch.linalg.cholesky, spd, **tol)
    _check(lambda a: torch.linalg.cholesky(a, upper=True), spd, **tol)
    _check(torch.linalg.cholesky_ex, spd, **tol)
    _check(lambda a: torch.linalg.cholesky_ex(a)[1], -spd, exact=True)  # info: first pivot
    with pytest.raises(Exception, match="positive-definite|not positive"):
        _run(torch.linalg.cholesky, -spd)
    U = A.triu() + 3 * torch.eye(5)
    Lo = A.tril() + 3 * torch.eye(5)
    for upper, T in ((True, U), (False, Lo)):
        for left in (True, False):
            for unit in (False, True):
                rhs = B if left else B.mT
                _check(lambda t, b: torch.linalg.solve_triangular(t, b, upper=upper, left=left,
                                                                  unitriangular=unit),
                       T, rhs, **tol)
    _check(lambda b, t: torch.triangular_solve(b, t, upper=False, transpose=True), B, Lo, **tol)
    Lc = torch.linalg.cholesky(spd)
    _check(torch.cholesky_solve, B, Lc, **tol)
    _check(lambda b, l: torch.cholesky_solve(b, l.mT, upper=True), B, Lc, **tol)
    _check(torch.cholesky_inverse, Lc[0], **tol)


@pytest.mark.parametrize("shape", [(3, 5, 5), (2, 4, 6), (2, 6, 3), (1, 1)])
def test_lu(shape):
    g = _gen(18)
    A = torch.randn(*shape, generator=g)
    tol = dict(rtol=1e-4, atol=1e-5)
    _check(torch.linalg.lu_factor_ex, A, **tol)
    _check(torch.linalg.lu, A, **tol)
    _check(lambda m: torch.lu_unpack(*torch.linalg.lu_factor(m)), A, **tol)
    if shape[-1] == shape[-2]:
        LU, piv = torch.linalg.lu_factor(A)
        b = torch.randn(*shape[:-1], 3, generator=g)
        _check(torch.linalg.lu_solve, LU, piv, b, **tol)


# ---- more composites: frexp, bilinear, margin losses, histc, layer_norm edge cases -----------

def test_more_composites():
    g = _gen(19)
    F = torch.nn.functional
    v = torch.tensor([0.0, -0.0, 1.0, 0.5, 0.75, 3.0, -5.5, 1e-40, -1e-45, 3e38, math.inf,
                      -math.inf, math.nan, 2.0 ** -126, 0.9999999, 1.0000001])
    _check(torch.frexp, v, exact=True)
    _check(torch.special.spherical_bessel_j0, torch.cat([v, torch.linspace(-10, 10, 41)]),
           rtol=1e-6, atol=1e-7)
    w, b = torch.randn(5, 4, 3, generator=g), torch.randn(5, generator=g)
    _check(lambda x1, x2: F.bilinear(x1, x2, w, b), torch.randn(6, 4, generator=g),
           torch.randn(6, 3, generator=g))
    x = torch.randn(5, 7, generator=g)
    t = torch.randint(0, 7, (5,), generator=g)
    wt = torch.rand(7, generator=g)
    for kw in [{}, {"p": 2}, {"margin": 0.5, "weight": wt}, {"reduction": "none"},
               {"reduction": "sum", "p": 2, "weight": wt}]:
        _check(lambda a, c: F.multi_margin_loss(a, c, **kw), x, t)
    _check(lambda a, c: F.multi_margin_loss(a, c), x[0], t[:1])
    tt = torch.tensor([[3, 0, -1, 1, 2, 2, 2], [1, 2, 3, 4, 5, 6, 0], [-1, 1, 2, 3, 4, 5, 6],
                       [2, 2, -1, -1, 0, 0, 0], [6, 5, 4, -1, 1, 1, 1]])
    for red in ["mean", "sum", "none"]:
        _check(lambda a, c: F.multilabel_margin_loss(a, c, reduction=red), x, tt)
    _check(lambda a: F.layer_norm(a, (7,), eps=-0.5), x.abs() + 1)
    _check(lambda a, c: torch.native_layer_norm(a, (7,), None, c, 1e-5), x, wt)
    _check(lambda a: torch.index_select(a, 0, torch.tensor([0])), torch.tensor(2.5), exact=True)
    if torch.__version__.startswith("1.13"):  # histc's row: torch 1.13's bin formula only
        h = torch.cat([torch.randn(500, generator=g), torch.linspace(-1, 1, 11)])
        for args in [(10, -1, 1), (7, 0, 0), (100, -3, 3), (5, 0.25, 0.75)]:
            _check(lambda a: torch.histc(a, *args), h, exact=True)
        _check(lambda a: torch.histc(a, 4), torch.ones(4), exact=True)


def test_nextafter_isin_angle_lu_solve_modes():
    g = _gen(20)
    s = torch.tensor([0.0, -0.0, 1.0, -1.0, 2.0, 0.5, 3.0, -5.5, 1e-40, -1e-45, 1.17549435e-38,
                      3.4028235e38, math.inf, -math.inf, math.nan, 0.1, 1e-30, 2.0 ** -126])
    a = torch.cat([s.repeat_interleave(len(s)), torch.randn(200, generator=g) * 10])
    b = torch.cat([s.repeat(len(s)), torch.randn(200, generator=g) * 10])
    got, want = _check(torch.nextafter, a, b, exact=True)
    zero = (got == 0) & (want == 0)
    assert torch.equal(torch.signbit(got[zero]), torch.signbit(want[zero]))
    e = torch.randint(-5, 5, (4, 6), generator=g)
    t = torch.tensor([1, 3, -2, 7])
    _check(lambda x, y: torch.isin(x, y), e, t, exact=True)
    _check(lambda x, y: torch.isin(x, y, invert=True), e, t, exact=True)
    _check(torch.angle, s, exact=True)
    _check(lambda x: torch.max(x, 0), torch.tensor(2.5), exact=True)
    _check(lambda x: torch.min(x, -1, keepdim=True), torch.tensor(-1.5), exact=True)
    A = torch.randn(3, 5, 5, generator=g)
    B = torch.randn(3, 5, 2, generator=g)
    LU, piv = torch.linalg.lu_factor(A)
    for left in (True, False):
        for adjoint in (False, True):
            _check(lambda l, p, c: torch.linalg.lu_solve(l, p, c, left=left, adjoint=adjoint),
                   LU, piv, B if left else B.mT, rtol=1e-4, atol=1e-5)


def test_segment_reduce():
    d = torch.tensor([-7.0, -0.5, 7.8, 2.9, 8.1])
    d2 = d.reshape(5, 1).repeat(1, 3) * torch.tensor([1.0, -1.0, 2.0])
    lengths = torch.tensor([0, 1, 2, 2])
    offsets = torch.tensor([0, 0, 1, 3, 5])
    for red in ["max", "min", "sum", "mean", "prod"]:
        for init in [None, 1.0, 100.0]:
            kw = {} if init is None else {"initial": init}
            for data in (d, d2):
                _check(lambda x, n: torch.segment_reduce(x, red, lengths=n, **kw), data,
                       lengths, rtol=1e-6)
                _check(lambda x, o: torch.segment_reduce(x, red, offsets=o, **kw), data,
                       offsets, rtol=1e-6)


# ---- in-place writes: copy_, batch norm's running statistics (mutation.py) -------------------

def _check_writes(f, *inputs, eager=False):
    """f traced (on clones: make_fx runs the ops, writes included) and compiled; its outputs
    and every input after the call (the in-place writes) against eager's. eager=True: coil must
    refuse the graph (a fallback logged) and the result still be eager's."""
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(f, decomposition_table=lowering.DECOMPOSITIONS)(*[t.clone() for t in inputs])
    fx_compile._ensure_shapes(gm, [t.clone() for t in inputs])
    fallbacks = []
    real = fx_compile._log_fallback
    fx_compile._log_fallback = lambda what, why: fallbacks.append(f"{what}: {why}")
    try:
        compiled = fx_compile.compile_fx(gm, [t.clone() for t in inputs], OPTIONS)
    finally:
        fx_compile._log_fallback = real
    assert bool(fallbacks) == eager, fallbacks
    mine, theirs = [t.clone() for t in inputs], [t.clone() for t in inputs]
    for _ in range(2):  # twice: the second call starts from the first one's statistics
        # (atol 1e-5 on outputs: one value per channel normalizes eager's rounding residue
        # x - mean ~ 1e-8 by 1/sqrt(eps); coil's is 0)
        torch.testing.assert_close(compiled(*mine), f(*theirs), rtol=1e-5, atol=1e-5)
        for a, b in zip(mine, theirs):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, equal_nan=True)
    return fallbacks


def test_batch_norm_running_stats_in_training():
    F = torch.nn.functional
    g = _gen(31)
    for shp in [(4, 3, 5, 7), (6, 3), (2, 3, 9), (1, 3, 1, 2)]:
        x = torch.randn(*shp, generator=g) * 3 + 1
        rm, rv = torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5
        w, b = torch.randn(3, generator=g), torch.randn(3, generator=g)
        for m in (0.1, 0.0, 1.0, 0.37):
            _check_writes(lambda x, rm, rv: F.batch_norm(x, rm, rv, training=True,
                                                         momentum=m), x, rm, rv)
            _check_writes(lambda x, rm, rv, w, b: F.batch_norm(
                x, rm, rv, w, b, training=True, momentum=m), x, rm, rv, w, b)
            if math.prod(shp[2:]) > 1:  # (torch refuses one spatial element)
                _check_writes(lambda x, rm, rv: F.instance_norm(
                    x, rm, rv, use_input_stats=True, momentum=m), x, rm, rv)
    # one value per channel: the unbiased variance is NaN, as torch's
    _check_writes(lambda x, rm, rv: torch.native_batch_norm(x, None, None, rm, rv, True, 0.2,
                                                            1e-5), torch.randn(1, 5, generator=g),
                  torch.randn(5, generator=g), torch.rand(5, generator=g))


def test_copy_into_inputs_and_intermediates():
    g = _gen(32)
    x, y = torch.randn(4, 5, generator=g), torch.randn(5, generator=g)

    def into_input(a, b):  # broadcast and a dtype cast into the input, then read it again
        a.copy_(b.double() * 2)
        return a + 1

    _check_writes(into_input, x, y)

    def through_alias(a, b):
        c = torch.ops.aten.alias(a)
        c.copy_(b.exp())
        return a * 3, c - 1

    _check_writes(through_alias, x, y)

    def into_intermediate(a, b):
        t = a * 2
        s = t.view(20).sum()  # read before the write: the old value
        t.copy_(b)
        return s, t.view(20) + 1  # a view taken after sees the write

    _check_writes(into_intermediate, x, y)
    _check_writes(lambda a, b: torch.ops.prims.copy_to(torch.empty_like(a), a.flip(0) * b) - a,
                  x, y)
    # refused (the graph stays in eager): a view taken before the write read after it; a
    # write into part of an input
    assert "reads it after" in _check_writes(_stale_view, x, y, eager=True)[0]
    assert "part of the input" in _check_writes(lambda a, b: a[1].copy_(b) * 2, x, y,
                                                eager=True)[0]


def test_in_place_ops_with_a_functional_row():
    """An in-place op whose functional twin has a row (mutation.inplace_row) is that row plus a
    write into its first argument: index_put_ (x[:, i] = v, as 1.13 traces it: a write into a
    full slice of the input), index_copy_, add_ with a dtype kept, masked_fill_, an
    intermediate's mul_; a write into part of an input is still refused."""
    g = _gen(34)
    x, y = torch.randn(3, 6, 4, generator=g), torch.randn(3, 2, 4, generator=g)
    idx = torch.tensor([4, 1])

    def put(a, b, i):
        a[:, i] = b
        return a.sum(1)

    _check_writes(put, x, y, idx)
    _check_writes(lambda a, b, i: a.index_copy_(1, i, b) * 2, x, y, idx)
    _check_writes(lambda a, b, i: (a.index_put_((i,), a[i] * 3, accumulate=True), a)[1] - 1,
                  x, y, torch.tensor([2, 0, 2]))
    n = torch.arange(12).reshape(3, 4)
    _check_writes(lambda a, b: a.add_(b[0, 0].round().long()) + b.sum(0), n,
                  torch.randn(2, 4, generator=g) * 4)
    _check_writes(lambda a, b: a.masked_fill_(a > 0.5, -1.0).exp() + b.sum(), x, y)

    def intermediate(a, b):
        t = a * 2
        t.mul_(b.mean())
        return t.sum(0)

    _check_writes(intermediate, x, y)
    assert "part of the input" in _check_writes(lambda a, b: a[1].add_(b[0, 0]) * 2, x, y,
                                                eager=True)[0]


def test_in_place_ops_listed_and_metadata_ops_refused():
    """`python -m coil.torch --ops` lists the in-place overloads taken through their functional
    row; ops that change a tensor's metadata (transpose_, squeeze_, as_strided_) or storage
    (resize_as_) are not among them, and a graph with one runs in eager."""
    listed = set(lowering.supported_inplace_ops())
    assert {"aten.index_put_.default", "aten.index_copy_.default", "aten.add_.Tensor",
            "aten.masked_fill_.Scalar"} <= listed
    assert not {"aten.transpose_.default", "aten.squeeze_.dim", "aten.as_strided_.default",
                "aten.resize_as_.default", "aten.t_.default"} & listed
    x = torch.randn(4, 4, generator=_gen(36))
    assert "writes its input in place" in _check_writes(lambda a: a.t_() + 1, x, eager=True)[0]


def test_kv_cache_written_in_place_at_each_step():
    """A decode step that writes its new key and value into preallocated caches at a position
    tensor (index_copy_, the in-place KV cache of issue 24) compiles whole: every step's output
    and both caches after it equal eager's."""
    B, H, T, D = 1, 2, 16, 8
    g = _gen(35)
    wq, wk, wv = (torch.randn(H * D, H * D, generator=g) * 0.2 for _ in range(3))

    def step(x, kc, vc, pos):
        q, k, v = ((x @ w).view(B, 1, H, D).transpose(1, 2) for w in (wq, wk, wv))
        kc.index_copy_(2, pos, k)
        vc.index_copy_(2, pos, v)
        s = (q @ kc.transpose(2, 3)) / D ** 0.5
        s = s.masked_fill(torch.arange(T).view(1, 1, 1, T) > pos, float("-inf"))
        return (s.softmax(-1) @ vc).transpose(1, 2).reshape(B, 1, H * D)

    from torch.fx.experimental.proxy_tensor import make_fx
    kc, vc = torch.zeros(B, H, T, D), torch.zeros(B, H, T, D)
    x0 = torch.randn(B, 1, H * D, generator=g)
    args = [x0, kc, vc, torch.tensor([0])]
    gm = make_fx(step, decomposition_table=lowering.DECOMPOSITIONS)(*[a.clone() for a in args])
    fx_compile._ensure_shapes(gm, [a.clone() for a in args])
    compiled = fx_compile.compile_fx(gm, [a.clone() for a in args], OPTIONS)
    assert compiled is not gm  # not left to eager
    mine = [kc.clone(), vc.clone()]
    theirs = [kc.clone(), vc.clone()]
    for p in range(5):
        x = torch.randn(B, 1, H * D, generator=g)
        pos = torch.tensor([p])
        torch.testing.assert_close(compiled(x, *mine, pos), step(x, *theirs, pos), rtol=1e-5,
                                   atol=1e-6)
        for a, b in zip(mine, theirs):
            torch.testing.assert_close(a, b, rtol=0, atol=0)


def _stale_view(a, b):
    t = a * 2
    v = t.view(20)
    t.copy_(b)
    return v + 1


def test_embedding_bag():
    F = torch.nn.functional
    g = _gen(33)
    w = torch.randn(11, 7, generator=g)
    w[3, 2] = math.inf  # another bag's inf must not become NaN (no 0 * inf)
    idx = torch.randint(0, 11, (13,), generator=g)
    offsets = torch.tensor([0, 0, 4, 9, 9])  # empty bags (first and fourth)
    psw = torch.randn(13, generator=g)
    for mode in ("sum", "mean"):
        for pad in (None, int(idx[5]), -int(11 - idx[2])):
            _check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=pad), w, idx,
                   offsets)
            _check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode, padding_idx=pad,
                                                   include_last_offset=True), w, idx,
                   torch.tensor([0, 2, 2, 9, 13]))
        _check(lambda w, i: F.embedding_bag(i, w, mode=mode), w, idx[:12].reshape(3, 4))
        _check(lambda w, i, o: F.embedding_bag(i, w, o, mode=mode), w, idx.int(), offsets.int())
    _check(lambda w, i, o, p: F.embedding_bag(i, w, o, mode="sum", per_sample_weights=p), w,
           idx, offsets, psw)
    _check(lambda w, i, p: F.embedding_bag(i, w, mode="sum", per_sample_weights=p), w,
           idx[:12].reshape(4, 3), psw[:12].reshape(4, 3))
    _check(lambda w, i, o: F.embedding_bag(i, w, o, mode="sum"), w, idx[:0], offsets[:1])


def test_resize_functional():
    """resize_as_ made functional: the first elements in storage order, when that is the
    logical order (a contiguous input) and the size does not grow; otherwise eager."""
    from functorch.experimental import functionalize
    g = _gen(35)
    x = torch.randn(3, 4, 5, generator=g)
    for shp in [(60,), (5, 12), (2, 7), (1,), (0, 3)]:
        t = torch.empty(shp)  # (only its shape matters)
        _check(functionalize(lambda a, b: a.clone().resize_as_(b) * 2), x, t, exact=True)
    # a transposed input: its storage order is not its logical order
    assert "non-contiguous" in _check_writes(functionalize(lambda a, b: a.clone().resize_as_(b)
                                                           * 2), x.transpose(0, 2),
                                             torch.empty(6, 5), eager=True)[0]


def test_scaled_dot_product_attention():
    """torch 1.13's math path, bit for bit where the matmuls agree: no mask, a float mask, a
    boolean mask (a fully masked row gives NaN, as eager), is_causal, odd sizes, batch dims."""
    sdpa = torch.ops.aten._scaled_dot_product_attention_forward
    g = _gen(36)
    q, k, v = (torch.randn(2, 3, 5, 7, generator=g), torch.randn(2, 3, 9, 7, generator=g),
               torch.randn(2, 3, 9, 4, generator=g))
    fmask = torch.randn(5, 9, generator=g)
    bmask = torch.rand(3, 5, 9, generator=g) > 0.3
    bmask[1, 2] = False  # a fully masked row
    for weights in (False, True):
        _check(lambda a, b, c: sdpa(a, b, c, None, 0.0, weights, False), q, k, v)
        _check(lambda a, b, c: sdpa(a, b, c, None, 0.0, weights, True), q, k, v)
        _check(lambda a, b, c, m: sdpa(a, b, c, m, 0.0, weights, False), q, k, v, fmask)
        _check(lambda a, b, c, m: sdpa(a, b, c, m, 0.0, weights, False), q, k, v, bmask)
        _check(lambda a, b, c: sdpa(a, b, c, None, 0.0, weights, True), q[0, 0], k[0, 0],
               v[0, 0])


def test_cross_entropy_2d():
    """nll_loss2d_forward (cross entropy of [N, C, H, W] scores) through nll_loss_forward's
    decomposition: every reduction, class weights, ignore_index, odd sizes."""
    F = torch.nn.functional
    g = _gen(37)
    x = torch.randn(3, 5, 4, 7, generator=g)
    t = torch.randint(0, 5, (3, 4, 7), generator=g)
    w = torch.rand(5, generator=g) + 0.1
    for red in ("none", "mean", "sum"):
        _check(lambda a, b: F.cross_entropy(a, b, reduction=red), x, t, rtol=1e-5, atol=1e-5)
        _check(lambda a, b, c: F.cross_entropy(a, b, c, reduction=red, ignore_index=2), x, t, w,
               rtol=1e-5, atol=1e-5)
        _check(lambda a, b: F.nll_loss(a, b, reduction=red), x[:1, :, :1], t[:1, :1],
               rtol=1e-5, atol=1e-5)


def test_shapes_come_from_fake_tensors_without_running_the_graph(monkeypatch):
    """torch 1.13's graphs carry no shapes: _ensure_shapes propagates fake tensors (the same
    metadata as ShapeProp on the real inputs, which ran the whole graph), and falls back to the
    real run for a graph a fake tensor cannot take (a shape that depends on the data)."""
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.passes.shape_prop import ShapeProp

    def f(x, w):
        y = torch.nn.functional.layer_norm(x @ w, (6,)).transpose(0, 1)
        return y.softmax(-1), y.sum(0, keepdim=True).to(torch.float64)

    def traced(f, *inputs):  # as functorch's AOT graphs come: no shapes
        gm = make_fx(f)(*inputs)
        for n in gm.graph.nodes:
            n.meta.clear()
        return gm

    inputs = [torch.randn(5, 4), torch.randn(4, 6)]
    fake, real = traced(f, *inputs), traced(f, *inputs)
    ran = []
    real_run = ShapeProp.run_node
    monkeypatch.setattr(ShapeProp, "run_node", lambda self, n: ran.append(n) or real_run(self, n))
    fx_compile._ensure_shapes(fake, inputs)
    assert not ran  # the real ShapeProp did not run
    ShapeProp(real).propagate(*inputs)
    got = [repr(n.meta.get("tensor_meta")) for n in fake.graph.nodes]
    want = [repr(n.meta.get("tensor_meta")) for n in real.graph.nodes]
    assert got == want and any(g != "None" for g in got)

    ran.clear()
    x = torch.tensor([1.0, -1.0, 2.0, 0.0, 3.0, -2.0, 4.0])
    data_dependent = traced(lambda x: torch.nonzero(x > 0), x)
    fx_compile._ensure_shapes(data_dependent, [x])
    assert ran  # the real run after the fake one failed
    out = [n for n in data_dependent.graph.nodes if n.op == "call_function"][-1]  # nonzero
    assert tuple(out.meta["tensor_meta"].shape) == (4, 1)


def test_fake_shapes_of_an_eval_batch_norm_are_its_kernels():
    """torch 1.13's meta native_batch_norm says the saved statistics are [C] in eval mode, where
    the kernels return empty tensors (the OpInfo sweep's native_batch_norm sample 1)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, m, v):
        return torch.ops.aten.native_batch_norm.default(x, None, None, m, v, False, 0.1, 1e-5)

    inputs = [torch.randn(3, 2, 4), torch.randn(2), torch.rand(2) + 0.5]
    gm = make_fx(f)(*inputs)
    for n in gm.graph.nodes:
        n.meta.clear()
    fx_compile._ensure_shapes(gm, inputs)
    got = [tuple(n.meta["tensor_meta"].shape) for n in gm.graph.nodes
           if n.op == "call_function" and "getitem" in str(n.target)]
    assert got == [tuple(t.shape) for t in f(*inputs)] == [(3, 2, 4), (0,), (0,)]
