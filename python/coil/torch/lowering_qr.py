"""Rows of the aten table for Householder QR (imported by lowering_linalg.py): `geqrf`,
`linalg_qr` (modes reduced, complete, r), `linalg_householder_product` (LAPACK's orgqr),
`ormqr`, and `linalg_lstsq` with LAPACK's default-free driver `gels` (full-rank least squares
through QR, or LQ for a wide matrix).

QR is unique once the reflectors follow LAPACK's convention (dlarfg): for the column
x = [alpha; x2] below the diagonal, beta = -sign(alpha) * ||x||, tau = (beta - alpha) / beta,
v = [1; x2 / (alpha - beta)], and H = I - tau v v^T; an x2 of zeros gives tau = 0 and H = I
(the last row of a wide or square matrix always does). eager's Q and R come from exactly these
reflectors (geqrf then orgqr), so coil's match them up to eager's f32 rounding. Each reflector
is a whole-matrix step unrolled over the static size, computed in f64 like lowering_linalg.py's
LU; sizes above _MAX_N stay in eager.
"""

import torch

from .lowering import Unsupported, Value, lowers, meta_of
from .lowering_nn import shape, coil_dt, reshape, slice_
from .lowering_linalg import _MAX_N, _ct, _op, _k, _empty_outs, _rc, _tri_solve


def _f64(L, A, node_arg, what):
    dt = meta_of(node_arg)[1]
    s = list(shape(L, A))
    if len(s) < 2:
        raise Unsupported(f"{what} of a {len(s)}-d tensor")
    if max(s[-2:]) > _MAX_N:
        raise Unsupported(f"{what} of a {s[-2]}x{s[-1]} matrix (coil unrolls up to {_MAX_N})")
    return Value(L.cast(A, _ct(L, dt))), s


def _elem(L, A, rank, i, j):
    return slice_(L, slice_(L, A, rank - 2, i, i + 1), rank - 1, j, j + 1)  # [..., 1, 1]


def _negative(L, x):
    """x < 0 or x is -0.0 (Fortran's SIGN reads the sign bit)."""
    cdt = coil_dt(L, x)
    zero = _k(L, 0.0, cdt)
    negzero = _op(L, "logical_and", _op(L, "eq", x, zero),
                  _op(L, "lt", _op(L, "reciprocal", x), zero))
    return _op(L, "logical_or", _op(L, "lt", x, zero), negzero)


def _geqrf(L, A, s):
    """LAPACK's geqr2 on the f64 A [..., m, n]: (R above the diagonal and the reflectors'
    v below it, tau [..., k])."""
    m, n = s[-2], s[-1]
    rank = len(s)
    r, c = _rc(L, n, rank, m)
    cdt = coil_dt(L, A)
    taus = []
    for j in range(min(m, n)):
        col = slice_(L, A, rank - 1, j, j + 1)  # [..., m, 1]
        alpha = _elem(L, A, rank, j, j)
        below = _op(L, "gt", r, _k(L, j))
        x2 = _op(L, "where", below, col, _k(L, 0.0, cdt))
        xn2 = _op(L, "sum", _op(L, "mul", x2, x2), axes=[rank - 2], keepdim=True)
        norm = _op(L, "sqrt", _op(L, "add", _op(L, "mul", alpha, alpha), xn2))
        beta = _op(L, "where", _negative(L, alpha), norm, _op(L, "neg", norm))
        none = _op(L, "eq", xn2, _k(L, 0.0, cdt))  # H = I
        tau = _op(L, "where", none, _k(L, 0.0, cdt), _op(L, "div", _op(L, "sub", beta, alpha),
                                                         beta))
        scale = _op(L, "where", none, _k(L, 0.0, cdt),
                    _op(L, "reciprocal", _op(L, "sub", alpha, beta)))
        v = _op(L, "where", _op(L, "eq", r, _k(L, j)), _k(L, 1.0, cdt),
                _op(L, "mul", x2, scale))  # [..., m, 1], zero above j
        w = _op(L, "sum", _op(L, "mul", v, A), axes=[rank - 2], keepdim=True)  # [..., 1, n]
        upd = _op(L, "sub", A, _op(L, "mul", _op(L, "mul", tau, v), w))
        A = _op(L, "where", _op(L, "gt", c, _k(L, j)), upd, A)
        newcol = _op(L, "where", _op(L, "eq", r, _k(L, j)),
                     _op(L, "where", none, alpha, beta),
                     _op(L, "where", below, _op(L, "mul", x2, scale), col))
        A = _op(L, "where", _op(L, "eq", c, _k(L, j)), newcol, A)
        taus.append(reshape(L, tau, s[:-2] + [1]))
    if not taus:
        return A, None
    tau = _op(L, "concat", *taus, dim=rank - 2) if len(taus) > 1 else taus[0]
    return A, tau


def _reflector(L, V, tau, j, m, rank):
    """(v [..., m, 1], tau_j [..., 1, 1]) of reflector j stored in V's column j."""
    r, _ = _rc(L, 1, rank, m)
    cdt = coil_dt(L, V)
    col = slice_(L, V, rank - 1, j, j + 1)
    v = _op(L, "where", _op(L, "eq", r, _k(L, j)), _k(L, 1.0, cdt),
            _op(L, "where", _op(L, "gt", r, _k(L, j)), col, _k(L, 0.0, cdt)))
    t = Value(L.op("unsqueeze", [slice_(L, tau, rank - 2, j, j + 1)], {"dim": rank - 2}))
    return v, t


def _apply_left(L, V, tau, C, order):
    """H_j C for j in `order` (H_j = I - tau_j v_j v_j^T from V's column j)."""
    rank = len(shape(L, C))
    m = shape(L, C)[-2]
    for j in order:
        v, t = _reflector(L, V, tau, j, m, rank)
        w = _op(L, "sum", _op(L, "mul", v, C), axes=[rank - 2], keepdim=True)  # v^T C
        C = _op(L, "sub", C, _op(L, "mul", _op(L, "mul", t, v), w))
    return C


def _eye_mn(L, m, n, cdt, batch):
    r, c = _rc(L, n, len(batch) + 2, m)
    e = _op(L, "where", _op(L, "eq", r, c), _k(L, 1.0, cdt), _k(L, 0.0, cdt))
    return _op(L, "expand", e, shape=batch + [m, n])


def _orgqr(L, V, tau, m, ncols, k, batch):
    """The first ncols columns of H_0 ... H_{k-1} (LAPACK's org2r: applied backwards to the
    identity's columns)."""
    Q = _eye_mn(L, m, ncols, coil_dt(L, V), batch)
    return _apply_left(L, V, tau, Q, reversed(range(k)))


def _triu(L, A, s):
    r, c = _rc(L, s[-1], len(s), s[-2])
    return _op(L, "where", _op(L, "le", r, c), A, _k(L, 0.0, coil_dt(L, A)))


def _fill(L, outs, eye_where_square=False):
    res = []
    for shp, dt in outs:
        if eye_where_square and len(shp) >= 2 and shp[-1] == shp[-2] and shp[-1] > 0 \
                and 0 not in shp[:-2]:
            res.append(Value(L.cast(_eye_mn(L, shp[-1], shp[-1], "f64", list(shp[:-2])), dt)))
        else:
            res.append(Value(L.full(0, dt, shp)))
    return tuple(res)


@lowers("aten.geqrf.default")
def _geqrf_row(L, node, args, kwargs):
    outs = _empty_outs(node)
    if 0 in shape(L, args[0]):
        return _fill(L, outs)
    A, s = _f64(L, args[0], node.args[0], "geqrf")
    QR, tau = _geqrf(L, A, s)
    return (Value(L.cast(QR, outs[0][1])), Value(L.cast(tau, outs[1][1])))


@lowers("aten.linalg_qr.default")
def _linalg_qr(L, node, args, kwargs):
    mode = kwargs.get("mode", args[1] if len(args) > 1 else "reduced")
    outs = _empty_outs(node)
    s0 = list(shape(L, args[0]))
    if 0 in s0:  # complete mode's Q of an m x 0 matrix is the identity
        return _fill(L, outs, eye_where_square=(mode == "complete"))
    A, s = _f64(L, args[0], node.args[0], "linalg.qr")
    m, n = s[-2], s[-1]
    k = min(m, n)
    QR, tau = _geqrf(L, A, s)
    rank = len(s)
    if mode == "complete":
        R = _triu(L, QR, s)
        Q = _orgqr(L, QR, tau, m, m, k, s[:-2])
    else:
        Rk = slice_(L, QR, rank - 2, 0, k) if k != m else QR
        R = _triu(L, Rk, s[:-2] + [k, n])
        Q = None if mode == "r" else _orgqr(L, QR, tau, m, k, k, s[:-2])
    Q = Value(L.full(0, outs[0][1], outs[0][0])) if Q is None else Value(L.cast(Q, outs[0][1]))
    return (Q, Value(L.cast(R, outs[1][1])))


def _batched(L, v, batch):
    """v expanded to the broadcast batch dims."""
    s = list(shape(L, v))
    return v if s[:-2] == batch else _op(L, "expand", v, shape=batch + s[-2:])


@lowers("aten.linalg_householder_product.default")
def _householder_product(L, node, args, kwargs):
    shp, dt = meta_of(node)
    if 0 in shape(L, args[0]) or 0 in shape(L, args[1]):
        raise Unsupported("householder_product of empty reflectors")
    V, s = _f64(L, args[0], node.args[0], "householder_product")
    tau = Value(L.cast(args[1], _ct(L, meta_of(node.args[1])[1])))
    m, n = s[-2], s[-1]
    k = shape(L, tau)[-1]
    return Value(L.cast(_orgqr(L, V, tau, m, n, k, s[:-2]), dt))


@lowers("aten.ormqr.default")
def _ormqr(L, node, args, kwargs):
    V, tau, C = args[0], args[1], args[2]
    left = bool(kwargs.get("left", args[3] if len(args) > 3 else True))
    transpose = bool(kwargs.get("transpose", args[4] if len(args) > 4 else False))
    shp, dt = meta_of(node)
    if 0 in shape(L, V) or 0 in shape(L, tau) or 0 in shape(L, C):
        raise Unsupported("ormqr of empty operands")
    V, s = _f64(L, V, node.args[0], "ormqr")
    C, sc = _f64(L, C, node.args[2], "ormqr")
    tau = Value(L.cast(tau, torch.float64))
    k = shape(L, tau)[-1]
    if list(s[:-2]) != list(sc[:-2]):
        raise Unsupported("ormqr with batch dims that differ")
    # left: Q C = H_0 (... (H_{k-1} C)), Q^T C = H_{k-1} (... (H_0 C));
    # right: C Q = (C^T Q^T)^T and C Q^T = (Q C^T)^T
    if not left:
        C = Value(L.op("transpose", [C], {"dim0": -1, "dim1": -2}))
        transpose = not transpose
    X = _apply_left(L, V, tau, C, range(k) if transpose else reversed(range(k)))
    if not left:
        X = Value(L.op("transpose", [X], {"dim0": -1, "dim1": -2}))
    return Value(L.cast(X, dt))


@lowers("aten.linalg_lstsq.default")
def _lstsq(L, node, args, kwargs):
    """gels: A full rank (as LAPACK's gels assumes; an exactly zero diagonal of R is the
    error eager raises). m >= n: R x = (Q^T b)[:n], residuals the squares of (Q^T b)[n:]
    summed when m > n; m < n: the minimum-norm x = Q [R^-T b; 0] from the QR of A^T."""
    A, B = args[0], args[1]
    driver = kwargs.get("driver", None)
    if driver != "gels":
        raise Unsupported(f"lstsq with driver {driver or 'gelsy (the default)'}: the "
                          "rank-revealing drivers are not reproduced")
    outs = _empty_outs(node)
    sa, sb = list(shape(L, A)), list(shape(L, B))
    if 0 in sa or 0 in sb:
        raise Unsupported("lstsq of empty matrices")
    A, s = _f64(L, A, node.args[0], "linalg.lstsq")
    B = Value(L.cast(B, torch.float64))
    m, n = s[-2], s[-1]
    vector = len(sb) == 1 or (len(sb) == len(sa) - 1 and sb == sa[:-1])  # torch's rule
    if vector:
        B = Value(L.op("unsqueeze", [B], {"dim": len(sb)}))
    sb = list(shape(L, B))
    batch = list(torch.broadcast_shapes(tuple(s[:-2]), tuple(sb[:-2])))
    A = _batched(L, A, batch)
    B = _batched(L, B, batch)
    rank = len(batch) + 2
    p = sb[-1]
    if m >= n:
        QR, tau = _geqrf(L, A, batch + [m, n])
        QtB = _apply_left(L, QR, tau, B, range(n))
        R = _triu(L, slice_(L, QR, rank - 2, 0, n), batch + [n, n])
        X = _tri_solve(L, R, slice_(L, QtB, rank - 2, 0, n), True, False, n)
        diag_src = R
        k = n
    else:
        At = Value(L.op("transpose", [A], {"dim0": -1, "dim1": -2}))  # [..., n, m]
        QR, tau = _geqrf(L, At, batch + [n, m])
        R = _triu(L, slice_(L, QR, rank - 2, 0, m), batch + [m, m])
        Rt = Value(L.op("transpose", [R], {"dim0": -1, "dim1": -2}))
        y = _tri_solve(L, Rt, B, False, False, m)  # [..., m, p]
        y = _op(L, "concat", y, Value(L.full(0, torch.float64, batch + [n - m, p])),
                dim=rank - 2)
        X = _apply_left(L, QR, tau, y, reversed(range(m)))
        diag_src = R
        k = m
    # trtrs's info: the first exactly zero diagonal element of R (1-based), checked as eager
    info = Value(L.full(0, torch.int32, batch + [1]))
    for j in reversed(range(k)):
        d = reshape(L, _elem(L, diag_src, rank, j, j), batch + [1])
        info = _op(L, "where", _op(L, "eq", d, _k(L, 0.0, "f64")), _k(L, j + 1, "i32"), info)
    L.checks.append((reshape(L, info, batch), "torch.linalg.lstsq", not batch))
    sol_shape, sol_dt = outs[0]
    X = Value(L.cast(X, sol_dt))
    if vector:
        X = reshape(L, X, sol_shape)
    res = [X]
    rshape, rdt = outs[1]
    if m > n and 0 not in rshape:
        tail = slice_(L, QtB, rank - 2, n, m)
        r2 = _op(L, "sum", _op(L, "mul", tail, tail), axes=[rank - 2])
        res.append(reshape(L, Value(L.cast(r2, rdt)), rshape))
    else:
        res.append(Value(L.full(0, rdt, rshape)))
    res += [Value(L.full(0, dt, shp)) for shp, dt in outs[2:]]
    return tuple(res)
