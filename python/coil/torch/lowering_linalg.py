"""Rows of the aten table for small dense linear algebra (imported by lowering.py, which holds
the table and the conventions): determinants, inverses and solves through an LU factorization
with partial pivoting (LAPACK's getrf: the first largest |a| of the column is the pivot, a zero
pivot leaves its column and sets info), Cholesky (potrf's info: the first non-positive pivot),
and triangular solves, unrolled over the (static) matrix size as whole-matrix masked updates.

They compute in f64 (f32, f16 and bf16 inputs are widened, the results rounded back): the same
algorithms as LAPACK in more precision, so the results differ from eager's f32 LAPACK by
eager's own rounding (cond(A) * 1e-7 relative). Matrices larger than _MAX_N stay in eager.

Errors: torch checks `info` after the factorization (aten._linalg_check_errors, e.g. a singular
matrix in linalg.inv); that row records the check and the compiled graph returns `info` as an
extra output that fx_compile checks with torch's own function after each run (the same error,
raised at the same call).
"""

import torch

from .. import DTypeName
from .lowering import Unsupported, Value, lowers, meta_of, _out_dtype
from .lowering_nn import shape, coil_dt, zeros, reshape, slice_
from .lowering_scatter import _gather_along, _iota

_MAX_N = 32


def _cast(L, v, dt):
    return Value(L.cast(v, dt))


def _ct(L, dt):
    if not dt.is_floating_point:
        raise Unsupported(f"linear algebra in {dt}")
    return torch.float64


def _prep(L, A, node_arg, square=True):
    dt = meta_of(node_arg)[1]
    ct = _ct(L, dt)
    s = list(shape(L, A))
    if len(s) < 2 or (square and s[-1] != s[-2]):
        raise Unsupported("a non-square matrix")
    if max(s[-2:]) > _MAX_N:
        raise Unsupported(f"a {s[-1]}x{s[-1]} matrix (coil unrolls up to {_MAX_N})")
    return _cast(L, A, ct), s, dt, ct


def _rc(L, n, rank, m=None):
    """(row index [.., m, 1], column index [.., 1, n]) i64, broadcastable to rank."""
    m = n if m is None else m
    r = reshape(L, _iota(L, m), [1] * (rank - 2) + [m, 1])
    c = reshape(L, _iota(L, n), [1] * (rank - 2) + [1, n])
    return r, c


def _op(L, name, *a, **attrs):
    return Value(L.op(name, list(a), attrs))


def _k(L, v, dt="i64"):
    return zeros(L, dt, [], v)


def _lu(L, A, s):
    """Partial-pivot LU of A [..., m, n] (f64): (packed LU, permutation sign [..., 1, 1],
    pivots (1-based, i32 [..., min(m, n)]), info (i32 [...]))."""
    m, n = s[-2], s[-1]
    rank = len(s)
    r, c = _rc(L, n, rank, m)
    cdt = coil_dt(L, A)
    sign = zeros(L, cdt, s[:-2] + [1, 1], 1.0)
    pivots = []
    info = zeros(L, "i32", s[:-2] + [1, 1])
    for k in range(min(m, n)):
        col = slice_(L, A, rank - 1, k, k + 1)  # [..., m, 1]
        cand = _op(L, "where", _op(L, "ge", r, _k(L, k)), _op(L, "abs", col), _k(L, -1.0, cdt))
        p = _op(L, "argmax", cand, axis=rank - 2, keepdim=True)  # [..., 1, 1]
        pivots.append(p)
        idx = _op(L, "where", _op(L, "eq", r, _k(L, k)), p,
                  _op(L, "where", _op(L, "eq", r, p), _k(L, k), r))  # [..., n, 1]
        idx = _op(L, "expand", idx, shape=s)
        A = _gather_along(L, A, rank - 2, idx)
        sign = _op(L, "where", _op(L, "ne", p, _k(L, k)), _op(L, "neg", sign), sign)
        piv = slice_(L, slice_(L, A, rank - 2, k, k + 1), rank - 1, k, k + 1)  # [..., 1, 1]
        zero = _op(L, "eq", piv, _k(L, 0.0, cdt))
        info = _op(L, "where", _op(L, "logical_and", zero, _op(L, "eq", info, _k(L, 0, "i32"))),
                   _k(L, k + 1, "i32"), info)
        col = slice_(L, A, rank - 1, k, k + 1)
        l = _op(L, "where", zero, _k(L, 0.0, cdt), _op(L, "div", col, piv))
        row = slice_(L, A, rank - 2, k, k + 1)  # [..., 1, n]
        below = _op(L, "gt", r, _k(L, k))
        right = _op(L, "gt", c, _k(L, k))
        upd = _op(L, "sub", A, _op(L, "mul", l, row))
        A = _op(L, "where", _op(L, "logical_and", below, right), upd,
                _op(L, "where", _op(L, "logical_and", below, _op(L, "eq", c, _k(L, k))),
                    _op(L, "where", zero, A, l), A))
    piv = reshape(L, _op(L, "concat", *pivots, dim=rank - 1) if len(pivots) > 1 else pivots[0],
                  s[:-2] + [min(m, n)])
    piv = _cast(L, _op(L, "add", piv, _k(L, 1)), torch.int32)
    return A, sign, piv, reshape(L, info, s[:-2])


def _diag(L, A, s):
    n = s[-1]
    flat = reshape(L, A, s[:-2] + [n * n])
    idx = Value(L.op("iota", [], {"size": n, "step": n + 1, "dtype": DTypeName("i64")}))
    return Value(L.op("gather", [flat, idx], {"axis": len(s) - 2}))  # [..., n]


def _perm_rows(L, B, pivots_i64, n, rank):
    """P B: the row swaps of the factorization applied in order (swap k with pivot[k])."""
    bs = list(shape(L, B))
    r = reshape(L, _iota(L, n), [1] * (rank - 2) + [n, 1])
    for k in range(n):
        p = slice_(L, pivots_i64, rank - 2, k, k + 1)  # [..., 1] -> as [..., 1, 1]
        p = reshape(L, p, bs[:-2] + [1, 1])
        idx = _op(L, "where", _op(L, "eq", r, _k(L, k)), p,
                  _op(L, "where", _op(L, "eq", r, p), _k(L, k), r))
        B = _gather_along(L, B, rank - 2, _op(L, "expand", idx, shape=bs))
    return B


def _lu_solve(L, LU, piv0, B, n):
    """Solves A X = B from A's packed LU and 0-based pivots [..., n, 1] (i64)."""
    rank = len(shape(L, B))
    cdt = coil_dt(L, B)
    B = _perm_rows(L, B, piv0, n, rank)
    r, _ = _rc(L, n, rank)
    for j in range(n):  # L y = P b (unit lower)
        lcol = slice_(L, LU, rank - 1, j, j + 1)  # [..., n, 1]
        lcol = _op(L, "where", _op(L, "gt", r, _k(L, j)), lcol, _k(L, 0.0, cdt))
        yj = slice_(L, B, rank - 2, j, j + 1)  # [..., 1, m]
        B = _op(L, "sub", B, _op(L, "mul", lcol, yj))
    for j in reversed(range(n)):  # U x = y
        ujj = slice_(L, slice_(L, LU, rank - 2, j, j + 1), rank - 1, j, j + 1)
        xj = _op(L, "div", slice_(L, B, rank - 2, j, j + 1), ujj)
        B = _op(L, "where", _op(L, "eq", r, _k(L, j)), _op(L, "expand", xj, shape=list(
            shape(L, B))), B)
        ucol = slice_(L, LU, rank - 1, j, j + 1)
        ucol = _op(L, "where", _op(L, "lt", r, _k(L, j)), ucol, _k(L, 0.0, cdt))
        B = _op(L, "sub", B, _op(L, "mul", ucol, xj))
    return B


def _eye(L, n, cdt, batch):
    r = reshape(L, _iota(L, n), [n, 1])
    c = reshape(L, _iota(L, n), [1, n])
    e = _cast(L, _op(L, "eq", r, c), _torch_dt(cdt))
    return _op(L, "expand", reshape(L, e, [1] * len(batch) + [n, n]), shape=batch + [n, n])


def _torch_dt(name):
    from .. import _torch_dtype
    return _torch_dtype(name)


def _empty_outs(node):
    val = node.meta.get("val", node.meta.get("tensor_meta"))
    vals = val if isinstance(val, (tuple, list)) and not hasattr(val, "dtype") else [val]
    return [(list(v.shape), v.dtype) for v in vals]


def _fill_empty(L, node):
    return tuple(Value(L.full(1 if i == 0 and "det" in str(node.target) and "slogdet" not in
                              str(node.target) else 0, dt, shp))
                 for i, (shp, dt) in enumerate(_empty_outs(node)))


@lowers("aten._linalg_det.default", "aten.linalg_det.default", "aten.det.default")
def _det(L, node, args, kwargs):
    outs = _empty_outs(node)
    A = args[0]
    s = list(shape(L, A))
    if 0 in s[:-2] or s[-1] == 0:
        if s[-1] == 0 and 0 not in s[:-2]:
            res = [Value(L.full(1, outs[0][1], outs[0][0]))] + [
                Value(L.full(0, dt, shp)) for shp, dt in outs[1:]]
            return tuple(res) if len(outs) > 1 else res[0]
        res = [Value(L.full(0, dt, shp)) for shp, dt in outs]
        return tuple(res) if len(outs) > 1 else res[0]
    A, s, dt, ct = _prep(L, A, node.args[0])
    LU, sign, piv, info = _lu(L, A, s)
    det = _op(L, "mul", _op(L, "prod", _diag(L, LU, s), axes=[len(s) - 2]),
              reshape(L, sign, s[:-2]))
    det = _cast(L, det, outs[0][1])
    if len(outs) == 1:
        return det
    return (det, _cast(L, LU, outs[1][1]), piv)


@lowers("aten._linalg_slogdet.default", "aten.linalg_slogdet.default", "aten.slogdet.default")
def _slogdet(L, node, args, kwargs):
    outs = _empty_outs(node)
    A = args[0]
    s = list(shape(L, A))
    if 0 in s[:-2] or s[-1] == 0:
        res = [Value(L.full(1 if (i == 0 and 0 not in s[:-2]) else 0, dt, shp))
               for i, (shp, dt) in enumerate(outs)]
        return tuple(res)
    A, s, dt, ct = _prep(L, A, node.args[0])
    LU, sign, piv, info = _lu(L, A, s)
    d = _diag(L, LU, s)
    ax = len(s) - 2
    sgn = _op(L, "mul", _op(L, "prod", _op(L, "sign", d), axes=[ax]), reshape(L, sign, s[:-2]))
    logabs = _op(L, "sum", _op(L, "log", _op(L, "abs", d)), axes=[ax])
    res = [_cast(L, sgn, outs[0][1]), _cast(L, logabs, outs[1][1])]
    if len(outs) > 2:
        res += [_cast(L, LU, outs[2][1]), piv]
    return tuple(res)


def _solve_core(L, A, B, s, vector):
    """X with A X = B (B [..., n, m], batch dims broadcast), f64."""
    n = s[-1]
    bs = list(shape(L, B))
    batch = list(torch.broadcast_shapes(tuple(s[:-2]), tuple(bs[:-2])))
    B = _op(L, "expand", B, shape=batch + bs[-2:])
    LU, sign, piv, info = _lu(L, A, s)  # A's own batch (torch's LU and pivots outputs)
    piv0 = reshape(L, _op(L, "sub", _cast(L, piv, torch.int64), _k(L, 1)), s[:-2] + [n, 1])
    X = _lu_solve(L, _op(L, "expand", LU, shape=batch + [n, n]),
                  _op(L, "expand", piv0, shape=batch + [n, 1]), B, n)
    return X, LU, piv, info


@lowers("aten._linalg_solve_ex.default", "aten.linalg_solve_ex.default",
        "aten.linalg_solve.default")
def _solve(L, node, args, kwargs):
    A, B = args[0], args[1]
    left = bool(kwargs.get("left", args[2] if len(args) > 2 else True))
    outs = _empty_outs(node)
    sa, sb = list(shape(L, A)), list(shape(L, B))
    if 0 in sa or 0 in sb:
        res = [Value(L.full(0, dt, shp)) for shp, dt in outs]
        return tuple(res) if len(res) > 1 else res[0]
    A, s, dt, ct = _prep(L, A, node.args[0])
    B = _cast(L, B, ct)
    # torch: B is a vector when it has one dim, or A's batch dims and n
    vector = len(sb) == 1 or (len(sb) == len(sa) - 1 and sb == sa[:-1])
    if vector:
        B = Value(L.op("unsqueeze", [B], {"dim": len(sb)}))
    if not left:
        if vector:
            raise Unsupported("linalg.solve with left=False and a vector")
        A = Value(L.op("transpose", [A], {"dim0": -1, "dim1": -2}))
        B = Value(L.op("transpose", [B], {"dim0": -1, "dim1": -2}))
    X, LU, piv, info = _solve_core(L, A, B, s, vector)
    if not left:
        X = Value(L.op("transpose", [X], {"dim0": -1, "dim1": -2}))
    X = reshape(L, _cast(L, X, outs[0][1]), outs[0][0])
    if len(outs) == 1:
        return X
    res = [X]
    for (shp, odt), v in zip(outs[1:], (LU, piv, info)):
        v = _cast(L, v, odt)
        if list(shape(L, v)) != shp:
            v = reshape(L, v, shp) if _numel(shape(L, v)) == _numel(shp) else _op(
                L, "expand", v, shape=shp)
        res.append(v)
    return tuple(res)


def _numel(shp):
    n = 1
    for e in shp:
        n *= e
    return n


@lowers("aten.linalg_inv_ex.default", "aten.linalg_inv.default", "aten.inverse.default")
def _inv(L, node, args, kwargs):
    A = args[0]
    outs = _empty_outs(node)
    sa = list(shape(L, A))
    if 0 in sa:
        res = [Value(L.full(0, dt, shp)) for shp, dt in outs]
        return tuple(res) if len(res) > 1 else res[0]
    A, s, dt, ct = _prep(L, A, node.args[0])
    eye = _eye(L, s[-1], coil_dt(L, A), s[:-2])
    X, LU, piv, info = _solve_core(L, A, eye, s, False)
    X = _cast(L, X, outs[0][1])
    if len(outs) == 1:
        return X
    return (X, _cast(L, info, outs[1][1]))


def _cholesky_core(L, A, s):
    """Lower Cholesky factor of A (its lower triangle read), f64, and potrf's info."""
    n = s[-1]
    rank = len(s)
    r, c = _rc(L, n, rank)
    cdt = coil_dt(L, A)
    S = A
    Lf = zeros(L, cdt, s)
    info = zeros(L, "i32", s[:-2] + [1, 1])
    for j in range(n):
        d = slice_(L, slice_(L, S, rank - 2, j, j + 1), rank - 1, j, j + 1)  # [..., 1, 1]
        bad = _op(L, "logical_not", _op(L, "gt", d, _k(L, 0.0, cdt)))  # <= 0 or NaN
        info = _op(L, "where", _op(L, "logical_and", bad, _op(L, "eq", info, _k(L, 0, "i32"))),
                   _k(L, j + 1, "i32"), info)
        ljj = _op(L, "sqrt", d)
        col = _op(L, "div", slice_(L, S, rank - 1, j, j + 1), ljj)  # [..., n, 1]
        below = _op(L, "gt", r, _k(L, j))
        colm = _op(L, "where", below, col, _k(L, 0.0, cdt))
        lcol = _op(L, "where", _op(L, "eq", r, _k(L, j)), ljj, colm)
        Lf = _op(L, "where", _op(L, "eq", c, _k(L, j)), _op(L, "expand", lcol, shape=s), Lf)
        rowm = Value(L.op("transpose", [colm], {"dim0": -1, "dim1": -2}))  # [..., 1, n]
        S = _op(L, "sub", S, _op(L, "mul", colm, rowm))
    return Lf, reshape(L, info, s[:-2])


@lowers("aten.linalg_cholesky_ex.default", "aten.cholesky.default",
        "aten.linalg_cholesky.default")
def _cholesky(L, node, args, kwargs):
    target = str(node.target)
    A = args[0]
    upper = bool(kwargs.get("upper", args[1] if len(args) > 1 else False))
    outs = _empty_outs(node)
    if 0 in shape(L, A):
        res = [Value(L.full(0, dt, shp)) for shp, dt in outs]
        return tuple(res) if len(res) > 1 else res[0]
    A, s, dt, ct = _prep(L, A, node.args[0])
    Lf, info = _cholesky_core(L, A, s)
    if upper:
        Lf = Value(L.op("transpose", [Lf], {"dim0": -1, "dim1": -2}))
    Lf = _cast(L, Lf, outs[0][1])
    if target == "aten.cholesky.default":  # raises on a non-positive-definite input
        L.checks.append((info, "cholesky", True))
    if len(outs) == 1:
        return Lf
    return (Lf, _cast(L, info, outs[1][1]))


def _tri_solve(L, T, B, upper, unit, n):
    """Solves T X = B for triangular T (f64)."""
    rank = len(shape(L, B))
    cdt = coil_dt(L, B)
    r, _ = _rc(L, n, rank)
    order = reversed(range(n)) if upper else range(n)
    bs = list(shape(L, B))
    for j in order:
        xj = slice_(L, B, rank - 2, j, j + 1)
        if not unit:
            tjj = slice_(L, slice_(L, T, rank - 2, j, j + 1), rank - 1, j, j + 1)
            xj = _op(L, "div", xj, tjj)
        B = _op(L, "where", _op(L, "eq", r, _k(L, j)), _op(L, "expand", xj, shape=bs), B)
        tcol = slice_(L, T, rank - 1, j, j + 1)
        rest = _op(L, "lt" if upper else "gt", r, _k(L, j))
        tcol = _op(L, "where", rest, tcol, _k(L, 0.0, cdt))
        B = _op(L, "sub", B, _op(L, "mul", tcol, xj))
    return B


def _tri_common(L, T, B, node_T, upper, unit, left, out_shape, out_dt):
    T, s, dt, ct = _prep(L, T, node_T)
    B = _cast(L, B, ct)
    n = s[-1]
    if not left:  # X T = B  <=>  T^T X^T = B^T
        T = Value(L.op("transpose", [T], {"dim0": -1, "dim1": -2}))
        B = Value(L.op("transpose", [B], {"dim0": -1, "dim1": -2}))
        upper = not upper
    bs = list(shape(L, B))
    batch = list(torch.broadcast_shapes(tuple(s[:-2]), tuple(bs[:-2])))
    T = _op(L, "expand", T, shape=batch + [n, n])
    B = _op(L, "expand", B, shape=batch + bs[-2:])
    X = _tri_solve(L, T, B, upper, unit, n)
    if not left:
        X = Value(L.op("transpose", [X], {"dim0": -1, "dim1": -2}))
    return _cast(L, X, out_dt)


@lowers("aten.linalg_solve_triangular.default")
def _solve_triangular(L, node, args, kwargs):
    A, B = args[0], args[1]
    upper = bool(kwargs.get("upper", args[2] if len(args) > 2 else False))
    left = bool(kwargs.get("left", True))
    unit = bool(kwargs.get("unitriangular", False))
    shp, dt = meta_of(node)
    if 0 in shape(L, A) or 0 in shape(L, B):
        return Value(L.full(0, dt, shp))
    return _tri_common(L, A, B, node.args[0], upper, unit, left, shp, dt)


@lowers("aten.triangular_solve.default")
def _triangular_solve(L, node, args, kwargs):
    B, A = args[0], args[1]
    upper = bool(kwargs.get("upper", args[2] if len(args) > 2 else True))
    transpose = bool(kwargs.get("transpose", args[3] if len(args) > 3 else False))
    unit = bool(kwargs.get("unitriangular", args[4] if len(args) > 4 else False))
    outs = _empty_outs(node)
    if 0 in shape(L, A) or 0 in shape(L, B):
        return tuple(Value(L.full(0, dt, shp)) for shp, dt in outs)
    T = A
    if transpose:
        T = Value(L.op("transpose", [A], {"dim0": -1, "dim1": -2}))
        upper = not upper
    X = _tri_common(L, T, B, node.args[1], upper, unit, True, outs[0][0], outs[0][1])
    Ac = _op(L, "expand", A, shape=outs[1][0])
    return (X, _cast(L, Ac, outs[1][1]))


@lowers("aten.cholesky_solve.default", "aten._cholesky_solve_helper.default")
def _cholesky_solve(L, node, args, kwargs):
    B, Lf = args[0], args[1]
    upper = bool(kwargs.get("upper", args[2] if len(args) > 2 else False))
    shp, dt = meta_of(node)
    if 0 in shape(L, Lf) or 0 in shape(L, B):
        return Value(L.full(0, dt, shp))
    T, s, _, ct = _prep(L, Lf, node.args[1])
    if upper:  # A = U^T U
        T = Value(L.op("transpose", [T], {"dim0": -1, "dim1": -2}))
    n = s[-1]
    Bc = _cast(L, B, ct)
    bs = list(shape(L, Bc))
    batch = list(torch.broadcast_shapes(tuple(s[:-2]), tuple(bs[:-2])))
    T = _op(L, "expand", T, shape=batch + [n, n])
    Bc = _op(L, "expand", Bc, shape=batch + bs[-2:])
    Y = _tri_solve(L, T, Bc, False, False, n)
    Tt = Value(L.op("transpose", [T], {"dim0": -1, "dim1": -2}))
    X = _tri_solve(L, Tt, Y, True, False, n)
    return _cast(L, X, dt)


@lowers("aten.cholesky_inverse.default")
def _cholesky_inverse(L, node, args, kwargs):
    Lf = args[0]
    upper = bool(kwargs.get("upper", args[1] if len(args) > 1 else False))
    shp, dt = meta_of(node)
    if 0 in shape(L, Lf):
        return Value(L.full(0, dt, shp))
    T, s, _, ct = _prep(L, Lf, node.args[0])
    if upper:
        T = Value(L.op("transpose", [T], {"dim0": -1, "dim1": -2}))
    n = s[-1]
    eye = _eye(L, n, coil_dt(L, T), s[:-2])
    Y = _tri_solve(L, T, eye, False, False, n)
    Tt = Value(L.op("transpose", [T], {"dim0": -1, "dim1": -2}))
    return _cast(L, _tri_solve(L, Tt, Y, True, False, n), dt)


@lowers("aten._linalg_check_errors.default")
def _check_errors(L, node, args, kwargs):
    """Deferred: the compiled graph returns info, fx_compile runs torch's check on it."""
    info = args[0]
    api = args[1] if len(args) > 1 else kwargs.get("api_name", "")
    is_matrix = bool(kwargs.get("is_matrix", args[2] if len(args) > 2 else False))
    if not isinstance(info, Value):
        raise Unsupported("_linalg_check_errors of a non-tensor")
    L.checks.append((info, api, is_matrix))
    return None


# ---- LU factorization, unpacking and solves ---------------------------------------------------

def _perm_vector(L, piv1, batch, m):
    """perm [..., m] (i64) with (P^T A)[i] = A[perm[i]]: LAPACK's row swaps (1-based pivots
    [..., k]) applied in order to 0..m-1."""
    k = shape(L, piv1)[-1]
    perm = _op(L, "expand", reshape(L, _iota(L, m), [1] * len(batch) + [m]), shape=batch + [m])
    i = reshape(L, _iota(L, m), [1] * len(batch) + [m])
    p0 = _op(L, "sub", _cast(L, piv1, torch.int64), _k(L, 1))
    for j in range(k):
        p = slice_(L, p0, len(batch), j, j + 1)  # [..., 1]
        pj = slice_(L, perm, len(batch), j, j + 1)
        pp = _op(L, "gather", perm, _op(L, "clamp", p, min=0.0, max=float(m - 1)),
                 axis=len(batch)) if len(batch) == 0 else _gather_along(
                     L, perm, len(batch), _op(L, "clamp", p, min=0.0, max=float(m - 1)))
        perm = _op(L, "where", _op(L, "eq", i, _k(L, j)), pp,
                   _op(L, "where", _op(L, "eq", i, p), pj, perm))
    return perm


def _p_matrix(L, perm, batch, m, dt):
    """P [..., m, m] with P[r, c] = (perm[c] == r): A = P L U."""
    r = reshape(L, _iota(L, m), [1] * len(batch) + [m, 1])
    pc = Value(L.op("unsqueeze", [perm], {"dim": len(batch)}))  # [..., 1, m]
    return _cast(L, _op(L, "eq", pc, r), dt)


def _unpack(L, LU, s, dt):
    m, n = s[-2], s[-1]
    k = min(m, n)
    rank = len(s)
    cdt = coil_dt(L, LU)
    r, c = _rc(L, k, rank, m)
    Lm = slice_(L, LU, rank - 1, 0, k) if n != k else LU  # [..., m, k]
    Lm = _op(L, "where", _op(L, "gt", r, c), Lm, _op(L, "where", _op(L, "eq", r, c),
                                                     _k(L, 1.0, cdt), _k(L, 0.0, cdt)))
    r2, c2 = _rc(L, n, rank, k)
    Um = slice_(L, LU, rank - 2, 0, k) if m != k else LU  # [..., k, n]
    Um = _op(L, "where", _op(L, "le", r2, c2), Um, _k(L, 0.0, cdt))
    return _cast(L, Lm, dt), _cast(L, Um, dt)


@lowers("aten.linalg_lu_factor_ex.default")
def _lu_factor_ex(L, node, args, kwargs):
    A = args[0]
    pivot = bool(kwargs.get("pivot", args[1] if len(args) > 1 else True))
    if not pivot:
        raise Unsupported("LU without pivoting")
    outs = _empty_outs(node)
    if 0 in shape(L, A):
        return tuple(Value(L.full(0, dt, shp)) for shp, dt in outs)
    A, s, dt, ct = _prep(L, A, node.args[0], square=False)
    LU, sign, piv, info = _lu(L, A, s)
    return (_cast(L, LU, outs[0][1]), _cast(L, piv, outs[1][1]), _cast(L, info, outs[2][1]))


@lowers("aten.linalg_lu.default")
def _linalg_lu(L, node, args, kwargs):
    A = args[0]
    pivot = bool(kwargs.get("pivot", args[1] if len(args) > 1 else True))
    if not pivot:
        raise Unsupported("LU without pivoting")
    outs = _empty_outs(node)
    if 0 in shape(L, A):
        return tuple(Value(L.full(0, dt, shp)) for shp, dt in outs)
    A, s, dt, ct = _prep(L, A, node.args[0], square=False)
    LU, sign, piv, info = _lu(L, A, s)
    perm = _perm_vector(L, piv, s[:-2], s[-2])
    P = _p_matrix(L, perm, s[:-2], s[-2], outs[0][1])
    Lm, Um = _unpack(L, LU, s, outs[1][1])
    return (P, Lm, Um)


@lowers("aten.lu_unpack.default")
def _lu_unpack(L, node, args, kwargs):
    LU, piv = args[0], args[1]
    unpack_data = bool(kwargs.get("unpack_data", args[2] if len(args) > 2 else True))
    unpack_piv = bool(kwargs.get("unpack_pivots", args[3] if len(args) > 3 else True))
    outs = _empty_outs(node)
    s = list(shape(L, LU))
    if 0 in s or not (unpack_data and unpack_piv):
        raise Unsupported("lu_unpack of empty factors or without both parts")
    dt = outs[1][1]
    perm = _perm_vector(L, piv, s[:-2], s[-2])
    P = _p_matrix(L, perm, s[:-2], s[-2], outs[0][1])
    Lm, Um = _unpack(L, LU, s, dt)
    return (P, Lm, Um)


def _lu_solve_row(L, LU, piv, B, node_LU, left, adjoint, out_shape, out_dt):
    LUc, s, dt, ct = _prep(L, LU, node_LU)
    n = s[-1]
    Bc = _cast(L, B, ct)
    bs = list(shape(L, Bc))
    batch = list(torch.broadcast_shapes(tuple(s[:-2]), tuple(bs[:-2])))
    LUc = _op(L, "expand", LUc, shape=batch + [n, n])
    piv = _op(L, "expand", piv, shape=batch + [n])
    if not left:  # X A = B  <=>  A^T X^T = B^T
        Bc = Value(L.op("transpose", [Bc], {"dim0": -1, "dim1": -2}))
        bs = list(shape(L, Bc))
        adjoint = not adjoint
    Bc = _op(L, "expand", Bc, shape=batch + bs[-2:])
    if not adjoint:  # A X = B, A = P L U
        piv0 = reshape(L, _op(L, "sub", _cast(L, piv, torch.int64), _k(L, 1)), batch + [n, 1])
        X = _lu_solve(L, LUc, piv0, Bc, n)
    else:  # A^T X = B: U^T z = B, L^T w = z, X = P w
        Lm, Um = _unpack(L, LUc, batch + [n, n], ct)
        z = _tri_solve(L, Value(L.op("transpose", [Um], {"dim0": -1, "dim1": -2})), Bc,
                       False, False, n)
        w = _tri_solve(L, Value(L.op("transpose", [Lm], {"dim0": -1, "dim1": -2})), z,
                       True, True, n)
        perm = _perm_vector(L, piv, batch, n)  # (P^T A)[i] = A[perm[i]]: (P w)[perm[i]] = w[i]
        P = _p_matrix(L, perm, batch, n, ct)
        X = Value(L.op("matmul", [P, w]))
    if not left:
        X = Value(L.op("transpose", [X], {"dim0": -1, "dim1": -2}))
    return _cast(L, X, out_dt)


@lowers("aten.linalg_lu_solve.default")
def _linalg_lu_solve(L, node, args, kwargs):
    LU, piv, B = args[0], args[1], args[2]
    left = bool(kwargs.get("left", True))
    adjoint = bool(kwargs.get("adjoint", False))
    shp, dt = meta_of(node)
    if 0 in shape(L, LU) or 0 in shape(L, B):
        return Value(L.full(0, dt, shp))
    return _lu_solve_row(L, LU, piv, B, node.args[0], left, adjoint, shp, dt)


@lowers("aten.lu_solve.default")
def _old_lu_solve(L, node, args, kwargs):
    B, LU, piv = args[0], args[1], args[2]
    shp, dt = meta_of(node)
    if 0 in shape(L, LU) or 0 in shape(L, B):
        return Value(L.full(0, dt, shp))
    return _lu_solve_row(L, LU, piv, B, node.args[1], True, False, shp, dt)


from . import lowering_spectral, lowering_qr  # noqa: E402,F401  (register their rows)
