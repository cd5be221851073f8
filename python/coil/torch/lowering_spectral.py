"""Rows of the aten table for the unique results of symmetric eigenvalue problems and the SVD
(imported by lowering_linalg.py): eigenvalues of symmetric matrices (`_linalg_eigh`,
`symeig`), singular values (`_linalg_svd`, what svdvals, cond, matrix_rank and the nuclear
norm trace to), the pseudo-inverse (`linalg_pinv`) and the matrix exponential.

Eigenvectors and singular vectors themselves are never lowered: their signs (and, for equal
values, their basis) are LAPACK's choice, so these rows refuse a graph that reads them (it runs
in eager). What is lowered is unique: the values, sorted as torch sorts them (eigenvalues
ascending, singular values descending), and products such as V diag(1/l) V^T, which do not
depend on the basis chosen.

The eigenvalues come from two-sided cyclic Jacobi in f64 (S <- J^T S J), unrolled over the
static size; singular values are the square roots of the eigenvalues of the f64 Gram matrix
(_gram says why that is accurate enough for f32 inputs, and why f64 inputs stay in eager).
Each sweep visits every pair of indices once in the round-robin ("chess tournament") order of
parallel Jacobi: n - 1 rounds of n/2 disjoint pairs (an odd n gets a zero pad row and column,
which no rotation touches). A round is two small kernels over the flat matrix (every read a
gather at constant positions): the rotations of the round's pairs as [..., n] vectors (c, s
per index, from a_pp, a_qq, a_pq), then one elementwise expression in which element (i, j)
combines the four entries (i or its partner, j or its partner) with i's and j's rotations.
The number of sweeps is fixed by n (_sweeps, measured) and the size is capped at _MAX_ITER_N;
larger matrices stay in eager.
"""

import torch

from .lowering import Unsupported, Value, lowers, meta_of
from .lowering_nn import shape, coil_dt, reshape
from .lowering_pool import const
from .lowering_scatter import _sorted
from .lowering_linalg import _MAX_N, _ct, _op, _k, _empty_outs, _eye, _rc

_EPS = {torch.float32: 1.1920928955078125e-07, torch.float64: 2.220446049250313e-16,
        torch.float16: 0.0009765625, torch.bfloat16: 0.0078125}


# The largest Jacobi problem: a sweep is n - 1 rounds (n rounded up to even) of two small
# kernels each, so a 16x16 problem is 135 rounds (about 15 s of C++ compile here); 32x32 would
# be about 370.
_MAX_ITER_N = 16


def _sweeps(n):
    """Jacobi sweeps for an n x n problem (quadratic convergence once the off-diagonal is
    below the gaps between eigenvalues)."""
    if n <= 2:
        return 1  # one rotation diagonalizes a 2x2
    # the first sweep count whose worst error (150 random, graded, clustered, low-rank and
    # Gram matrices per n, simulated in f64) was below 1e-13 of the largest eigenvalue; the
    # sweep before it was at most 3e-6 (quadratic convergence: one more sweep squares it)
    return 4 if n <= 5 else 5 if n <= 6 else 6 if n <= 8 else 8 if n <= 12 else 9


def _rounds(n):
    """The round-robin pairings of 0..n-1 (n even): per round, the partner of each index."""
    idx = list(range(n))
    rounds = []
    for _ in range(n - 1):
        part = [0] * n
        for k in range(n // 2):
            a, b = idx[k], idx[n - 1 - k]
            part[a], part[b] = b, a
        rounds.append(part)
        idx = [idx[0], idx[-1]] + idx[1:-1]
    return rounds


def _const(L, values, dt=torch.int64):
    """A constant, made once per graph for each list of values."""
    cache = L.__dict__.setdefault("_spectral_consts", {})
    key = (tuple(values), dt)
    if key not in cache:
        cache[key] = const(L, torch.tensor(values, dtype=dt))
    return cache[key]


def _pick(L, v, axis, index):
    """v's elements at the static `index` along `axis` (a gather with a constant index)."""
    return Value(L.op("gather", [v, _const(L, index)], {"axis": axis}))


def _rotation(L, flat, part):
    """(c, s) [..., N] per index of the rotation that zeroes a_pq of its pair (p < q):
    the smaller of the two angles (|t| <= 1); s signed for the index's role (-s at p, +s at
    q); a_pq == 0: no rotation. Both members of a pair read the same three numbers, so the
    rotation is orthogonal even where a_pq's two copies differ in the last bit."""
    N = len(part)
    lo = [min(i, p) for i, p in enumerate(part)]
    hi = [max(i, p) for i, p in enumerate(part)]
    sign = [-1.0 if i == lo[i] else 1.0 for i in range(N)]
    cdt = coil_dt(L, flat)
    ax = len(shape(L, flat)) - 1
    app = _pick(L, flat, ax, [p * N + p for p in lo])
    aqq = _pick(L, flat, ax, [q * N + q for q in hi])
    off = _pick(L, flat, ax, [p * N + q for p, q in zip(lo, hi)])
    tau = _op(L, "div", _op(L, "sub", aqq, app), _op(L, "mul", off, _k(L, 2.0, cdt)))
    sgn = _op(L, "where", _op(L, "ge", tau, _k(L, 0.0, cdt)), _k(L, 1.0, cdt), _k(L, -1.0, cdt))
    root = _op(L, "sqrt", _op(L, "add", _op(L, "mul", tau, tau), _k(L, 1.0, cdt)))
    t = _op(L, "div", sgn, _op(L, "add", _op(L, "abs", tau), root))
    t = _op(L, "where", _op(L, "eq", off, _k(L, 0.0, cdt)), _k(L, 0.0, cdt), t)
    c = _op(L, "rsqrt", _op(L, "add", _op(L, "mul", t, t), _k(L, 1.0, cdt)))
    s = _op(L, "mul", _op(L, "mul", t, c), _const(L, sign, torch.float64))
    return c, s


def _round_tables(N, part):
    """Per element (i, j) of the flat N x N matrix: i, j, and the flat positions of (i, j'),
    (i', j), (i', j') (' the partner)."""
    E = [(i, j) for i in range(N) for j in range(N)]
    return {
        "i": [i for i, _ in E], "j": [j for _, j in E],
        "ij'": [i * N + part[j] for i, j in E],
        "i'j": [part[i] * N + j for i, j in E],
        "i'j'": [part[i] * N + part[j] for i, j in E],
    }


def _jacobi_eigh(L, S, vectors=False):
    """Eigenvalues [..., n] (unsorted) of the symmetric f64 S [..., n, n], and the
    accumulated rotations V (S = V diag V^T, [..., n, n]) when asked."""
    s = list(shape(L, S))
    n = s[-1]
    rank = len(s)
    batch = s[:-2]
    N = n + n % 2
    F = reshape(L, S, batch + [n * n])  # the matrix stays flat: every read is a gather
    if N != n:  # a zero row and column: a_pq = 0 with it, so no rotation touches it
        E = [(i, j) for i in range(N) for j in range(N)]
        F = _pick(L, F, rank - 2, [min(i, n - 1) * n + min(j, n - 1) for i, j in E])
        inside = _op(L, "gt", _const(L, [float(i < n and j < n) for i, j in E], torch.float64),
                     _k(L, 0.5, "f64"))
        F = _op(L, "where", inside, F, _k(L, 0.0, "f64"))
    ax = rank - 2
    V = reshape(L, _eye(L, N, coil_dt(L, S), batch), batch + [N * N]) if vectors else None
    if n > 1:
        for _ in range(_sweeps(n)):
            for part in _rounds(N):
                tb = _round_tables(N, part)
                # the round's rotations as [..., N] vectors (a small kernel), read by row and
                # by column below. (Computed per element instead, coil stored one of them over
                # the other in place before reading it: wrong results.)
                c, sn = _rotation(L, F, part)
                ci, si = _pick(L, c, ax, tb["i"]), _pick(L, sn, ax, tb["i"])
                cj, sj = _pick(L, c, ax, tb["j"]), _pick(L, sn, ax, tb["j"])
                # (J^T S J)[i, j] = c_i c_j S[i, j] + c_i s_j S[i, j'] + s_i c_j S[i', j]
                #                   + s_i s_j S[i', j']: one expression
                F_ij_ = _pick(L, F, ax, tb["ij'"])
                left = _op(L, "add", _op(L, "mul", F, cj), _op(L, "mul", F_ij_, sj))
                right = _op(L, "add", _op(L, "mul", _pick(L, F, ax, tb["i'j"]), cj),
                            _op(L, "mul", _pick(L, F, ax, tb["i'j'"]), sj))
                F_new = _op(L, "add", _op(L, "mul", ci, left), _op(L, "mul", si, right))
                if vectors:  # V J: column j becomes c_j V[:, j] + s_j V[:, j']
                    V = _op(L, "add", _op(L, "mul", V, cj),
                            _op(L, "mul", _pick(L, V, ax, tb["ij'"]), sj))
                F = F_new
    w = _pick(L, F, ax, [i * N + i for i in range(n)])
    if vectors:
        V = reshape(L, _pick(L, V, ax, [i * N + j for i in range(n) for j in range(n)]),
                    batch + [n, n])
    return w, V


def _check_size(s, what):
    if min(s[-2:]) > _MAX_ITER_N:
        raise Unsupported(f"{what} of a {s[-2]}x{s[-1]} matrix (coil's Jacobi is unrolled up "
                          f"to {_MAX_ITER_N}x{_MAX_ITER_N})")


def _f64(L, A, node_arg):
    dt = meta_of(node_arg)[1]
    return Value(L.cast(A, _ct(L, dt))), dt


def _symmetric(L, A, upper):
    """The symmetric matrix LAPACK's syevd reads: A's lower (or upper) triangle mirrored."""
    s = list(shape(L, A))
    r, c = _rc(L, s[-1], len(s))
    At = Value(L.op("transpose", [A], {"dim0": -1, "dim1": -2}))
    keep = _op(L, "le" if upper else "ge", r, c)
    return _op(L, "where", keep, A, At)


def _unused(node, index):
    """True when no getitem of output `index` of a multi-output node is read."""
    import operator
    for u in node.users:
        if u.target is operator.getitem and u.args[1] == index and u.users:
            return False
        if u.target is not operator.getitem:
            return False
    return True


def _filled(L, outs):
    return tuple(Value(L.full(0, dt, shp)) for shp, dt in outs)


def _eigvals_sorted(L, A, node_arg, upper, descending=False):
    A, dt = _f64(L, A, node_arg)
    S = _symmetric(L, A, upper)
    w, _ = _jacobi_eigh(L, S)
    w, _ = _sorted(L, w, len(shape(L, w)) - 1, descending)
    return w


def _values_without_vectors(L, node, A, vectors, upper, what):
    """(outputs' metas, eigenvalues as the first output's dtype, or the filled outputs of an
    empty input): eigh's and symeig's shared part; their vectors stay in eager unless unused."""
    outs = _empty_outs(node)
    s = list(shape(L, A))
    if 0 in s:
        return outs, None, _filled(L, outs)
    if vectors and not _unused(node, 1):
        raise Unsupported("eigenvectors (their signs are LAPACK's choice)")
    _check_size(s, what)
    w = _eigvals_sorted(L, A, node.args[0], upper)
    return outs, Value(L.cast(w, outs[0][1])), None


@lowers("aten._linalg_eigh.default")
def _linalg_eigh(L, node, args, kwargs):
    uplo = kwargs.get("UPLO", args[1] if len(args) > 1 else "L")
    compute_v = bool(kwargs.get("compute_v", args[2] if len(args) > 2 else True))
    _, w, empty = _values_without_vectors(L, node, args[0], compute_v, uplo == "U", "eigh")
    return empty if empty is not None else (w, None)


@lowers("aten.symeig.default")
def _symeig(L, node, args, kwargs):
    vectors = bool(kwargs.get("eigenvectors", args[1] if len(args) > 1 else False))
    upper = bool(kwargs.get("upper", args[2] if len(args) > 2 else True))
    outs, w, empty = _values_without_vectors(L, node, args[0], vectors, upper, "symeig")
    if empty is not None:
        return empty
    # without eigenvectors, symeig's second output is an empty tensor
    second = Value(L.full(0, outs[1][1], outs[1][0])) if 0 in outs[1][0] else None
    return (w, second)


def _gram(L, A, node_arg, what):
    """The f64 Gram matrix of A [..., m, n]: A^T A when m >= n, else A A^T (k x k, k the
    smaller side), and whether it is A A^T. Its eigenvalues are the squared singular
    values: an absolute error of eps64 * s_max^2 each, so s_i is off by eps64 * s_max^2 / s_i,
    below f32's own rounding (eps32 * s_max) for condition numbers up to 1e9. An f64 input
    would lose that: it stays in eager."""
    dt = meta_of(node_arg)[1]
    if dt == torch.float64:
        raise Unsupported(f"{what} of an f64 matrix (coil's singular values come from the "
                          "Gram matrix, accurate to f32's rounding only)")
    A = Value(L.cast(A, _ct(L, dt)))
    At = Value(L.op("transpose", [A], {"dim0": -1, "dim1": -2}))
    s = list(shape(L, A))
    wide = s[-2] < s[-1]
    return (Value(L.op("matmul", [A, At])) if wide else Value(L.op("matmul", [At, A]))), A, wide


def _svdvals(L, A, node_arg, what):
    """Singular values [..., k] of A, descending, f64."""
    G, _, _ = _gram(L, A, node_arg, what)
    lam, _ = _jacobi_eigh(L, G)
    lam, _ = _sorted(L, lam, len(shape(L, lam)) - 1, True)
    return _op(L, "sqrt", _op(L, "clamp", lam, min=0.0))


@lowers("aten._linalg_svd.default")
def _linalg_svd(L, node, args, kwargs):
    A = args[0]
    compute_uv = bool(kwargs.get("compute_uv", args[2] if len(args) > 2 else True))
    outs = _empty_outs(node)
    s = list(shape(L, A))
    if 0 in s:  # U and Vh of an empty matrix: identities where a side is not empty
        res = []
        for shp, dt in outs:
            if len(shp) >= 2 and shp[-1] == shp[-2] and shp[-1] > 0 and 0 not in shp[:-2]:
                res.append(Value(L.cast(_eye(L, shp[-1], "f64", list(shp[:-2])), dt)))
            else:
                res.append(Value(L.full(0, dt, shp)))
        return tuple(res)
    if compute_uv and not (_unused(node, 0) and _unused(node, 2)):
        raise Unsupported("singular vectors (their signs are LAPACK's choice)")
    _check_size(s, "svd")
    sv = _svdvals(L, A, node.args[0], "svd")
    return (None, Value(L.cast(sv, outs[1][1])), None)


def _tol_operand(L, v, batch):
    """atol / rtol as f64 [..., 1] (a tensor, a Python number or None)."""
    if v is None:
        return None
    if isinstance(v, Value):
        v = Value(L.cast(v, torch.float64))
        return Value(L.op("unsqueeze", [v], {"dim": len(shape(L, v))}))
    return Value(L.full(float(v), torch.float64, [1]))


def _pinv_tol(L, node, args, kwargs, dt, m, n):
    """(atol, rtol) by torch's rule: atol 0 when absent; rtol eps(dtype) * max(m, n) when
    absent, or 0 where atol > 0 was given."""
    target = str(node.target)
    if target in ("aten.linalg_pinv.default", "aten.linalg_pinv.rcond_tensor"):
        atol, rtol = None, args[1]  # rcond is rtol
    else:
        atol, rtol = kwargs.get("atol"), kwargs.get("rtol")
    a = _tol_operand(L, atol, None)
    r = _tol_operand(L, rtol, None)
    if r is None:
        default = Value(L.full(_EPS[dt] * max(m, n), torch.float64, [1]))
        r = default if a is None else _op(L, "where", _op(L, "gt", a, _k(L, 0.0, "f64")),
                                          _k(L, 0.0, "f64"), default)
    if a is None:
        a = Value(L.full(0.0, torch.float64, [1]))
    return a, r


@lowers("aten.linalg_pinv.atol_rtol_tensor", "aten.linalg_pinv.atol_rtol_float",
        "aten.linalg_pinv.default", "aten.linalg_pinv.rcond_tensor")
def _pinv(L, node, args, kwargs):
    """torch's pseudo-inverse: the singular values (|eigenvalues| when hermitian) above
    max(atol, rtol * the largest) are inverted, the others dropped. Through the eigenvectors
    V of the Gram matrix (S itself when hermitian): V diag(1/l) V^T times A^T, which does not
    depend on the basis Jacobi picks within a cluster of equal values (as long as the cutoff
    does not split one, where eager's own result is unstable too)."""
    A = args[0]
    hermitian = bool(kwargs.get("hermitian", args[2] if len(args) > 2 and isinstance(
        args[2], bool) else False))
    shp, dt = meta_of(node)
    s = list(shape(L, A))
    if 0 in s:
        return Value(L.full(0, dt, shp))
    m, n = s[-2], s[-1]
    rank = len(s)
    atol, rtol = _pinv_tol(L, node, args, kwargs, meta_of(node.args[0])[1], m, n)
    _check_size(s, "pinv")
    if hermitian:
        A64, _ = _f64(L, A, node.args[0])
        lam, V = _jacobi_eigh(L, _symmetric(L, A64, False), vectors=True)
        mag = _op(L, "abs", lam)
    else:
        G, A64, wide = _gram(L, A, node.args[0], "pinv")
        lam, V = _jacobi_eigh(L, G, vectors=True)
        mag = _op(L, "sqrt", _op(L, "clamp", lam, min=0.0))
    top = _op(L, "max", mag, axes=[rank - 2], keepdim=True)
    tol = _op(L, "maximum", atol, _op(L, "mul", rtol, top))
    inv = _op(L, "where", _op(L, "gt", mag, tol), _op(L, "reciprocal", lam), _k(L, 0.0, "f64"))
    Vt = Value(L.op("transpose", [V], {"dim0": -1, "dim1": -2}))
    M = Value(L.op("matmul", [_op(L, "mul", V, Value(L.op("unsqueeze", [inv], {
        "dim": rank - 2}))), Vt]))
    if not hermitian:
        At = Value(L.op("transpose", [A64], {"dim0": -1, "dim1": -2}))
        M = Value(L.op("matmul", [At, M] if wide else [M, At]))
    return Value(L.cast(M, dt))


_EXP_SQUARINGS = 40  # ||A||_1 up to 0.5 * 2^40: beyond, e^A is inf or 0 in f32 (or very far)
_EXP_DEGREE = 12  # Taylor terms at ||B||_1 <= 1/2: a relative error below 2e-14


@lowers("aten.linalg_matrix_exp.default")
def _matrix_exp(L, node, args, kwargs):
    """Scaling and squaring in f64: B = A / 2^s with s = ceil(log2(2 ||A||_1)) (0 at most),
    e^B by its Taylor polynomial (Horner), then squared s times. s depends on the data and the
    graph does not: all _EXP_SQUARINGS squarings are in the graph, each one taken only where
    its index is below s."""
    A = args[0]
    shp, dt = meta_of(node)
    s = list(shape(L, A))
    if 0 in s:
        return Value(L.full(0, dt, shp))
    if s[-1] > _MAX_N:
        raise Unsupported(f"matrix_exp of a {s[-1]}x{s[-1]} matrix (coil unrolls up to "
                          f"{_MAX_N})")
    A, _ = _f64(L, A, node.args[0])
    rank = len(s)
    n = s[-1]
    norm = _op(L, "max", _op(L, "sum", _op(L, "abs", A), axes=[rank - 2], keepdim=True),
               axes=[rank - 1], keepdim=True)  # [..., 1, 1]
    sc = _op(L, "ceil", _op(L, "div", _op(L, "log", _op(L, "mul", norm, _k(L, 2.0, "f64"))),
                            _k(L, 0.6931471805599453, "f64")))
    sc = _op(L, "clamp", sc, min=0.0, max=float(_EXP_SQUARINGS))
    sc = _op(L, "where", _op(L, "isnan", sc), _k(L, 0.0, "f64"), sc)
    B = _op(L, "mul", A, _op(L, "pow", _k(L, 2.0, "f64"), _op(L, "neg", sc)))
    eye = _eye(L, n, "f64", s[:-2])
    T = eye
    for k in range(_EXP_DEGREE, 0, -1):  # T = I + B T / k
        T = _op(L, "add", eye, _op(L, "div", Value(L.op("matmul", [B, T])), _k(L, float(k),
                                                                             "f64")))
    for i in range(_EXP_SQUARINGS):
        T = _op(L, "where", _op(L, "lt", _k(L, float(i), "f64"), sc),
                Value(L.op("matmul", [T, T])), T)
    return Value(L.cast(T, dt))
