"""Focused tests of lowering_qr.py and lowering_spectral.py (Householder QR, lstsq, symmetric
eigenvalues, singular values, pinv, matrix_exp) against eager: odd sizes (1x1, 2x2, 5x3, 3x5,
batches, the largest unrolled sizes), ill-conditioned and rank-deficient matrices. Each case
is traced with make_fx, must run fully in coil (no fallback) and match eager's LAPACK; where
eager's f32 is itself the less accurate one (ill-conditioned inputs), against eager in f64.
Several ops share one graph per case to keep the number of C++ compiles down."""

import pytest
import torch

from coil.torch import fx_compile, lowering
from test_lowering_more import _check, _run  # noqa: F401  (make_fx + compile_fx, no fallback)

TOL = dict(rtol=1e-4, atol=1e-5)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _fallbacks(f, *inputs):
    """(the fallback reasons, the result) of f through compile_fx."""
    from torch.fx.experimental.proxy_tensor import make_fx
    gm = make_fx(f, decomposition_table=lowering.DECOMPOSITIONS)(*inputs)
    fx_compile._ensure_shapes(gm, list(inputs))
    seen = []
    real = fx_compile._log_fallback
    fx_compile._log_fallback = lambda what, why: seen.append(f"{what}: {why}")
    try:
        out = fx_compile.compile_fx(gm, list(inputs), {"autotune": False})(*inputs)
    finally:
        fx_compile._log_fallback = real
    return seen, out


def _check64(f, *inputs):
    """coil (f32 inputs) against eager on the same inputs in f64, rounded to eager's f32
    result types (integer results such as ranks are compared exactly)."""
    want32 = torch.utils._pytree.tree_flatten(f(*[t.clone() for t in inputs]))[0]
    want64 = torch.utils._pytree.tree_flatten(f(*[t.double() for t in inputs]))[0]
    got = torch.utils._pytree.tree_flatten(_run(f, *[t.clone() for t in inputs]))[0]
    assert len(got) == len(want32)
    for g, w32, w64 in zip(got, want32, want64):
        assert g.dtype == w32.dtype and g.shape == w32.shape, (g.dtype, g.shape, w32.dtype)
        torch.testing.assert_close(g, w64.to(w32.dtype), **TOL)


def _graded(g, m, n, cond, batch=()):
    """A random m x n matrix with singular values from 1 down to 1/cond (log-spaced)."""
    k = min(m, n)
    U, _ = torch.linalg.qr(torch.randn(*batch, m, m, generator=g, dtype=torch.float64))
    V, _ = torch.linalg.qr(torch.randn(*batch, n, n, generator=g, dtype=torch.float64))
    S = torch.zeros(*batch, m, n, dtype=torch.float64)
    S[..., range(k), range(k)] = torch.logspace(0, -torch.log10(torch.tensor(float(cond))), k,
                                                dtype=torch.float64)
    return (U @ S @ V.mT).float()


# ---- Householder QR ---------------------------------------------------------------------------

def _qr_all(a):
    q, r = torch.linalg.qr(a)
    qc, rc = torch.linalg.qr(a, mode="complete")
    _, rr = torch.linalg.qr(a, mode="r")
    return torch.geqrf(a), q, r, qc, rc, rr


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 3), (3, 5), (2, 4, 4), (32, 32)])
def test_qr_family(shape):
    g = _gen(1)
    _check(_qr_all, torch.randn(*shape, generator=g), **TOL)


def test_qr_edges():
    g = _gen(2)
    # an upper triangular input: every reflector below the diagonal is zero (tau = 0, H = I,
    # negative diagonal kept), and a zero first column (tau = 0 at alpha = 0)
    T = torch.randn(4, 4, generator=g).triu()
    T[0, 0] = -2.0
    Z = torch.randn(4, 3, generator=g)
    Z[:, 0] = 0.0
    _check(lambda t, z: (_qr_all(t), _qr_all(z)), T, Z, **TOL)
    # an empty matrix: complete mode's Q is the identity
    _check(lambda a: torch.linalg.qr(a, mode="complete"), torch.zeros(5, 0), exact=True)


def test_householder_product_and_ormqr():
    g = _gen(3)
    V, tau = torch.geqrf(torch.randn(2, 1, 6, 5, generator=g))
    V2, tau2 = torch.geqrf(torch.randn(5, 5, generator=g))
    C = torch.randn(5, 3, generator=g)

    def f(v, t, v2, t2, c):
        outs = [torch.linalg.householder_product(v, t),
                torch.linalg.householder_product(v[..., :3], t[..., :2])]  # k < n
        for tr in (False, True):
            outs.append(torch.ormqr(v2, t2, c, left=True, transpose=tr))
            outs.append(torch.ormqr(v2, t2, c.mT, left=False, transpose=tr))
        return outs
    _check(f, V, tau, V2, tau2, C, **TOL)


def test_lstsq_gels():
    g = _gen(4)
    A = [torch.randn(4, 3, generator=g), torch.randn(3, 3, generator=g),
         torch.randn(2, 2, 3, generator=g)]
    B = [torch.randn(4, 2, generator=g), torch.randn(3, 1, generator=g),
         torch.randn(2, 2, 4, generator=g)]

    def f(a0, a1, a2, b0, b1, b2, v):
        return (torch.linalg.lstsq(a0, b0, driver="gels"),  # residuals (m > n)
                torch.linalg.lstsq(a1, b1, driver="gels"),
                torch.linalg.lstsq(a2, b2, driver="gels"),  # minimum norm (m < n), batched
                torch.linalg.lstsq(a0, v, driver="gels").solution)  # a vector b
    _check(f, *A, *B, torch.randn(4, generator=g), **TOL)
    # a zero column: R has a zero diagonal, which eager reports as an error (so does coil)
    Z = torch.randn(4, 3, generator=g)
    Z[:, 1] = 0.0
    with pytest.raises(Exception, match="full rank"):
        _run(lambda a, b: torch.linalg.lstsq(a, b, driver="gels").solution, Z, B[0])
    seen, _ = _fallbacks(lambda a, b: torch.linalg.lstsq(a, b).solution, A[0], B[0])
    assert seen and "gelsy" in seen[0], seen  # the default driver stays in eager


# ---- eigenvalues and singular values ----------------------------------------------------------

def _values(a):
    s = a + a.mT
    return (torch.linalg.eigvalsh(s), torch.linalg.eigvalsh(a, UPLO="U"), torch.linalg.svdvals(a),
            torch.linalg.matrix_rank(a), torch.linalg.matrix_rank(s, hermitian=True),
            torch.linalg.cond(a), torch.linalg.matrix_norm(a, "nuc"),
            torch.linalg.eigh(s).eigenvalues)


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (5, 5), (3, 4, 4), (7, 7)])
def test_square_values(shape):
    g = _gen(5)
    _check(_values, torch.randn(*shape, generator=g), **TOL)


def test_largest_jacobi():
    """16x16, the largest unrolled Jacobi (9 sweeps of 15 rounds); two problems only, as each
    is about 270 small kernels to compile."""
    g = _gen(12)
    A = torch.randn(16, 16, generator=g)
    _check(lambda a: (torch.linalg.eigvalsh(a + a.mT), torch.linalg.svdvals(a)), A, **TOL)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 6, 1), (40, 3)])
def test_rectangular_values(shape):
    g = _gen(6)
    _check(lambda a: (torch.linalg.svdvals(a), torch.linalg.matrix_rank(a),
                      torch.linalg.matrix_norm(a, "nuc"), torch.linalg.pinv(a)),
           torch.randn(*shape, generator=g), **TOL)


def test_ill_conditioned_and_rank_deficient():
    g = _gen(7)
    A = _graded(g, 6, 6, 1e4, batch=(2,))
    a, b = torch.randn(3, 7, 2, generator=g), torch.randn(3, 5, 2, generator=g)
    D = a @ b.mT  # rank 2, 7 x 5
    S = _graded(g, 5, 5, 1e3)
    S = S @ S.mT  # symmetric positive definite, condition 1e6
    # clustered eigenvalues: 1, 1, 1 and 2, 2
    Q, _ = torch.linalg.qr(torch.randn(5, 5, generator=g, dtype=torch.float64))
    C = (Q @ torch.diag(torch.tensor([1.0, 1, 1, 2, 2], dtype=torch.float64)) @ Q.mT).float()
    C = (C + C.mT) / 2

    def f(a, d, s, c):
        # pinv(d) with f32's default rtol spelled out, so that eager in f64 drops the same
        # (zero) singular values
        return (torch.linalg.svdvals(a), torch.linalg.svdvals(d), torch.linalg.eigvalsh(s),
                torch.linalg.eigvalsh(c), torch.linalg.pinv(d, rtol=7 * 1.1920929e-07),
                torch.linalg.pinv(c, hermitian=True), torch.linalg.matrix_rank(c, hermitian=True))
    _check64(f, A, D, S, C)
    got, want = _check(torch.linalg.matrix_rank, D, exact=True)
    assert got.tolist() == [2, 2, 2]


def test_symeig_and_empty():
    g = _gen(8)
    A = torch.randn(4, 4, generator=g)
    with pytest.warns(UserWarning):
        _check(lambda a: torch.symeig(a + a.mT)[0], A, **TOL)
    _check(lambda a: torch.linalg.svd(a), torch.zeros(5, 0), exact=True)
    _check(lambda a: torch.linalg.eigh(a), torch.zeros(0, 3, 3), exact=True)


def test_vectors_and_sizes_fall_back():
    g = _gen(9)
    A = torch.randn(5, 5, generator=g)
    for f, x in [(lambda a: torch.linalg.eigh(a + a.mT).eigenvectors, A),
                 (lambda a: torch.linalg.svd(a).U, A),
                 (torch.linalg.eigvalsh, torch.randn(17, 17, generator=g)),  # > _MAX_ITER_N
                 (torch.linalg.svdvals, A.double())]:  # f64: the Gram matrix is not enough
        seen, out = _fallbacks(f, x)
        assert seen, "expected a fallback"
        torch.testing.assert_close(out, f(x))


# ---- pinv and matrix_exp ----------------------------------------------------------------------

def test_pinv_tolerances():
    g = _gen(10)
    A = _graded(g, 5, 5, 20.0, batch=(2,)) * 3  # well conditioned: eager's f32 is accurate
    r = torch.tensor(0.3)

    def f(a, r):
        return (torch.linalg.pinv(a), torch.pinverse(a), torch.linalg.pinv(a, rtol=r),
                torch.linalg.pinv(a, atol=1.0), torch.linalg.pinv(a, atol=1.0, rtol=0.5),
                torch.linalg.pinv(a + a.mT, hermitian=True),
                torch.linalg.pinv(a[0] @ a[0].mT, hermitian=True, rtol=0.2))
    _check(f, A, r, **TOL)


@pytest.mark.parametrize("scale", [0.0, 1.0, 10.0])
def test_matrix_exp(scale):
    g = _gen(11)
    A = torch.randn(3, 5, 5, generator=g) * scale
    N = torch.triu(torch.randn(4, 4, generator=g), 1)  # nilpotent: exp is a finite series

    def f(a, n):
        return torch.linalg.matrix_exp(a), torch.linalg.matrix_exp(n), torch.linalg.matrix_exp(
            a[:1, :1, :1])
    _check64(f, A, N)


# The coil miscompile these rows ran into (a buffer taking its input's slot in place although
# a later computation of the fused body still read the input) has its regression test in C++:
# tests/correctness/random_graph_regressions_test.cpp, InPlaceUpdateStoresAfterEveryRead.
