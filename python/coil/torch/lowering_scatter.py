"""Rows of the aten table for scatters, scans and sorting, through coil's existing ops
(imported by lowering.py, which holds the table and the conventions).

  - index_add and index_put with accumulate (an embedding's gradient) are coil's index_add op
    (the slices added in index order: deterministic on the CPU, torch.index_add on CUDA);
  - the other scatters (scatter, scatter_add, scatter_reduce, index_copy, index_fill,
    index_reduce, index_put without accumulate, put, masked_scatter) are one-hot comparisons:
    for target position j along the scattered dim, E[i, j] = (index[i] == j); sums, products,
    maxima and minima are reductions over i of where(E, src, identity) (exact: never a
    multiplication by the 0/1 weights, so NaN and inf stay where they are), and a plain
    write takes the last i that hits j (max over i of where(E, i, -1), then a gather), as
    torch's CPU kernels write in order. Positions no index hits keep their value, bit for bit.
    The cost is |index| x size of the dim: a scatter whose one-hot tensor would exceed
    _MAX_ONEHOT elements stays in eager.
  - scans (cumprod, cummax, cummin, logcumsumexp) are log2(n) steps of a shifted combine
    (Hillis-Steele): products in f64 for floats (torch's CPU accumulates in double), cummax's
    index the last among equal maxima and the last NaN, as torch's.
  - sorting (sort, argsort, msort, topk, kthvalue, median, nanmedian) ranks each element by
    comparisons with the others along the dim (NaN largest; equal values by position: a stable
    sort), then places element i at its rank with a one-hot gather: exact values and indices.
    n^2 comparisons per row: dims longer than _MAX_SORT stay in eager.
"""

import math

import torch

from .. import DTypeName
from .lowering import Unsupported, Value, lowers, meta_of, _operand, _out_dtype
from .lowering_nn import shape, coil_dt, zeros, reshape, slice_, concat, _place, _wrap_index
from .lowering_math import X

_MAX_ONEHOT = 1 << 24
_MAX_SORT = 2048


def _iota(L, n, dt="i64"):
    return Value(L.op("iota", [], {"size": int(n), "dtype": DTypeName(dt)}))


def _along(L, v, rank, dim):
    """A 1-D value as rank-`rank` with its elements along `dim`."""
    n = shape(L, v)[0]
    return reshape(L, v, [n if k == dim else 1 for k in range(rank)])


def _numel(shp):
    n = 1
    for s in shp:
        n *= s
    return n


def _identity_of(reduce, dt):
    if reduce == "sum":
        return 0.0
    if reduce == "prod":
        return 1.0
    if dt.is_floating_point:
        return -math.inf if reduce == "amax" else math.inf
    if dt == torch.bool:
        return 0.0 if reduce == "amax" else 1.0
    info = torch.iinfo(dt)
    return float(info.min if reduce == "amax" else info.max)


def _scatter(L, x, dim, index, src, reduce, include_self=True):
    """x with src scattered along `dim` at `index` (torch.scatter's layout: index and src have
    x's rank, index no larger than src, and no larger than x off `dim`).
    reduce: None (the last write wins), "sum", "prod", "mean", "amax", "amin"."""
    xs = list(shape(L, x))
    rank = len(xs)
    ish = list(shape(L, index))
    dt_name = coil_dt(L, x)
    if rank == 0:  # a 0-d scatter: index and src are 0-d too (or 1 element)
        x1, i1 = reshape(L, x, [1]), reshape(L, index, [_numel(ish)])
        s1 = reshape(L, slice_(L, reshape(L, src, [_numel(shape(L, src))]), 0, 0, _numel(ish)),
                     [_numel(ish)])
        return reshape(L, _scatter(L, x1, 0, i1, s1, reduce, include_self), [])
    if 0 in ish:
        return x
    if len(ish) != rank:
        raise Unsupported("scatter with an index of another rank")
    n = xs[dim]
    if _numel(ish) * n > _MAX_ONEHOT:
        raise Unsupported(f"a scatter of {_numel(ish)} elements into a dim of {n} (the "
                          "one-hot form would be too large)")
    ss = shape(L, src)
    if list(ss) != ish:
        for k in range(rank):
            if ss[k] != ish[k]:
                src = slice_(L, src, k, 0, ish[k])
    # E: ish[:dim+1] + [n] + ish[dim+1:], axis dim = source position i, dim+1 = target j
    idx = Value(L.op("unsqueeze", [L.cast(index, torch.int64)], {"dim": dim + 1}))
    j = _along(L, _iota(L, n), rank + 1, dim + 1)
    E = Value(L.op("eq", [idx, j]))
    vals = Value(L.op("unsqueeze", [src], {"dim": dim + 1}))
    hit = Value(L.op("max", [L.cast(E, torch.int32)], {"axes": [dim], "keepdim": False}))
    hit = Value(L.op("gt", [hit, zeros(L, "i32", [])]))
    region = x  # x over out_shape's extent
    for k in range(rank):
        if k != dim and xs[k] != ish[k]:
            region = slice_(L, region, k, 0, ish[k])
    xdt = meta_dtype(L, x)
    if reduce is None:
        i = _along(L, _iota(L, ish[dim]), rank + 1, dim)
        sel = Value(L.op("where", [E, Value(L.op("expand", [i], {"shape": list(shape(L, E))})),
                                   zeros(L, "i64", [], -1)]))
        sel = Value(L.op("max", [sel], {"axes": [dim], "keepdim": False}))
        sel = Value(L.op("clamp", [sel], {"min": 0.0}))
        new = _gather_along(L, src, dim, sel)
    else:
        red = "sum" if reduce == "mean" else reduce
        ident = zeros(L, dt_name, [], _identity_of(red, xdt))
        masked = Value(L.op("where", [E, vals, ident]))
        op = {"sum": "sum", "prod": "prod", "amax": "max", "amin": "min"}[red]
        new = Value(L.op(op, [masked], {"axes": [dim], "keepdim": False}))
        if include_self:
            comb = {"sum": "add", "prod": "mul", "amax": "maximum", "amin": "minimum"}[red]
            new = Value(L.op(comb, [region, new]))
        if reduce == "mean":
            cnt = Value(L.op("sum", [L.cast(E, xdt)], {"axes": [dim], "keepdim": False}))
            if include_self:
                cnt = Value(L.op("add", [cnt, zeros(L, dt_name, [], 1.0)]))
            new = Value(L.op("div", [new, Value(L.op("maximum", [
                cnt, zeros(L, dt_name, [], 1.0)]))]))
            new = L.cast(new, xdt)
    new = L.cast(new, xdt)
    out = Value(L.op("where", [hit, new, region]))
    # back to x's extent: the positions beyond the index's, off the dim, are x's
    for k in range(rank):
        if k != dim and xs[k] != ish[k]:
            rest = slice_(L, x, k, ish[k], xs[k])
            cur = list(shape(L, out))
            for m in range(rank):  # later dims still have the index's extent
                if m != k and shape(L, rest)[m] != cur[m]:
                    rest = slice_(L, rest, m, 0, cur[m])
            out = concat(L, [out, rest], k)
    return out


def meta_dtype(L, v):
    from .. import _torch_dtype
    return _torch_dtype(coil_dt(L, v))


def _gather_along(L, src, dim, sel):
    """src gathered along dim at sel (sel: src's shape but any size along dim)."""
    from .lowering_nn import _strides, _take
    ss = shape(L, src)
    sh = shape(L, sel)
    rank = len(ss)
    st = _strides(ss)
    lin = Value(L.op("mul", [sel, zeros(L, "i64", [], st[dim])]))
    for k in range(rank):
        if k == dim:
            continue
        io = Value(L.op("iota", [], {"size": sh[k], "step": st[k], "dtype": DTypeName("i64")}))
        lin = Value(L.op("add", [lin, _along(L, io, rank, k)]))
    return _take(L, src, lin)


def _dim_of(L, x, d):
    r = max(L.rank(x), 1)
    return int(d) % r


@lowers("aten.scatter.src", "aten.scatter.value", "aten.scatter.reduce",
        "aten.scatter.value_reduce")
def _scatter_row(L, node, args, kwargs):
    x, dim, index, src = args[0], args[1], args[2], args[3]
    reduce = kwargs.get("reduce", args[4] if len(args) > 4 else None)
    dt = _out_dtype(node)
    dim = _dim_of(L, x, dim)
    if not isinstance(src, Value):
        src = Value(L.op("expand", [_operand(L, src, dt)], {"shape": list(shape(L, index))}))
    red = {None: None, "add": "sum", "multiply": "prod"}.get(reduce, "?")
    if red == "?":
        raise Unsupported(f"scatter with reduce={reduce!r}")
    return _scatter(L, x, dim, index, L.cast(src, dt), red, True)


@lowers("aten.scatter_add.default")
def _scatter_add(L, node, args, kwargs):
    x, dim, index, src = args[:4]
    return _scatter(L, x, _dim_of(L, x, dim), index, L.cast(src, _out_dtype(node)), "sum")


@lowers("aten.scatter_reduce.two")
def _scatter_reduce(L, node, args, kwargs):
    x, dim, index, src, reduce = args[:5]
    include_self = bool(kwargs.get("include_self", args[5] if len(args) > 5 else True))
    dt = _out_dtype(node)
    if reduce == "mean" and not dt.is_floating_point:
        raise Unsupported("scatter_reduce mean of integers (floor division)")
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise Unsupported(f"scatter_reduce {reduce!r}")
    return _scatter(L, x, _dim_of(L, x, dim), index, L.cast(src, dt), reduce, include_self)


def _index_to_scatter(L, x, dim, index, source):
    """index_add/index_copy/index_reduce's (1-D index along dim, source with x's shape but
    len(index) along dim) as scatter's full index."""
    xs = shape(L, x)
    if len(xs) == 0:
        return reshape(L, index, []), reshape(L, source, [])
    n = xs[dim]
    idx = _wrap_index(L, L.cast(reshape(L, index, [_numel(shape(L, index))]), torch.int64), n)
    ss = list(shape(L, source)) if L.rank(source) else [1] * len(xs)
    source = reshape(L, source, ss)
    full = Value(L.op("expand", [_along(L, idx, len(xs), dim)], {"shape": ss}))
    return full, source


def _index_add_op(L, x, dim, index, source):
    """x with source's slices added at `index` (1-D) along dim, in index order: coil's
    index_add (a loop over the index, not a one-hot comparison: any size). Negative indices
    count from the end; one out of range is a run-time error."""
    return Value(L.op("index_add", [x, index, source], {"axis": dim}))


@lowers("aten.index_add.default")
def _index_add(L, node, args, kwargs):
    x, dim, index, source = args[:4]
    alpha = kwargs.get("alpha", args[4] if len(args) > 4 else 1)
    dt = _out_dtype(node)
    dim = _dim_of(L, x, dim)
    source = L.cast(source, dt)
    if alpha != 1:
        source = Value(L.op("mul", [source, _operand(L, alpha, dt)]))
    if dt != torch.bool and L.rank(x) > 0:
        k = _numel(shape(L, index))
        ss = list(shape(L, x))
        ss[dim] = k
        source = Value(L.op("expand", [reshape(L, source, [1] * len(ss)) if L.rank(source) == 0
                                       else source], {"shape": ss}))
        return _index_add_op(L, x, dim, reshape(L, index, [k]), source)
    idx, source = _index_to_scatter(L, x, dim, index, source)
    return _scatter(L, x, dim, idx, source, "sum")


@lowers("aten.index_copy.default")
def _index_copy(L, node, args, kwargs):
    x, dim, index, source = args[:4]
    dim = _dim_of(L, x, dim)
    idx, source = _index_to_scatter(L, x, dim, index, L.cast(source, _out_dtype(node)))
    return _scatter(L, x, dim, idx, source, None)


@lowers("aten.index_reduce.default")
def _index_reduce(L, node, args, kwargs):
    x, dim, index, source, reduce = args[:5]
    include_self = bool(kwargs.get("include_self", args[5] if len(args) > 5 else True))
    dt = _out_dtype(node)
    if reduce == "mean" and not dt.is_floating_point:
        raise Unsupported("index_reduce mean of integers")
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise Unsupported(f"index_reduce {reduce!r}")
    dim = _dim_of(L, x, dim)
    idx, source = _index_to_scatter(L, x, dim, index, L.cast(source, dt))
    return _scatter(L, x, dim, idx, source, reduce, include_self)


@lowers("aten.index_fill.int_Scalar", "aten.index_fill.int_Tensor")
def _index_fill(L, node, args, kwargs):
    x, dim, index, value = args[:4]
    shp, dt = meta_of(node)
    if len(shp) == 0:
        return Value(L.cast(_operand(L, value, dt), dt))
    dim = _dim_of(L, x, dim)
    n = shp[dim]
    idx = _wrap_index(L, L.cast(reshape(L, index, [_numel(shape(L, index))]), torch.int64), n)
    if shape(L, idx)[0] == 0:
        return x
    E = Value(L.op("eq", [reshape(L, idx, [-1, 1]), reshape(L, _iota(L, n), [1, n])]))
    hit = Value(L.op("gt", [Value(L.op("max", [L.cast(E, torch.int32)], {"axes": [0]})),
                            zeros(L, "i32", [])]))
    v = L.cast(_operand(L, value, dt), dt)
    return Value(L.op("where", [_along(L, hit, len(shp), dim), v, x]))


@lowers("aten.put.default")
def _put(L, node, args, kwargs):
    x, index, source = args[:3]
    accumulate = bool(kwargs.get("accumulate", args[3] if len(args) > 3 else False))
    shp, dt = meta_of(node)
    n = _numel(shp)
    k = _numel(shape(L, index))
    if n == 0 or k == 0:
        return x
    flat = reshape(L, x, [n])
    idx = _wrap_index(L, L.cast(reshape(L, index, [k]), torch.int64), n)
    src = reshape(L, L.cast(source, dt), [k])
    out = _scatter(L, flat, 0, idx, src, "sum" if accumulate else None)
    return reshape(L, out, list(shp))


@lowers("aten.index_put.default", "aten._unsafe_index_put.default")
def _index_put_any(L, node, args, kwargs):
    x, indices, values = args[0], args[1], args[2]
    accumulate = bool(args[3] if len(args) > 3 else kwargs.get("accumulate", False))
    shp, dt = meta_of(node)
    present = [i for i, v in enumerate(indices) if v is not None]
    if not present:
        raise Unsupported("index_put without index tensors")
    idx_nodes = [node.args[1][i] for i in present]
    idx_dts = [meta_of(n)[1] for n in idx_nodes]
    if any(d == torch.bool or d == torch.uint8 for d in idx_dts):
        if len(present) != 1:
            raise Unsupported("index_put with a boolean mask and other indices")
        return _index_put_mask(L, x, present[0], L.cast(indices[present[0]], torch.bool),
                               L.cast(values, dt), accumulate, shp)
    p, k = present[0], len(present)
    if present != list(range(p, p + k)):
        raise Unsupported("index_put with index tensors on non-adjacent dims")
    if 0 in shp[p:p + k]:
        raise Unsupported("index_put into an empty dim")
    from .lowering_nn import _strides
    ishapes = [shape(L, indices[i]) for i in present]
    bshape = list(torch.broadcast_shapes(*ishapes))
    if accumulate and dt != torch.bool and k == 1:
        # embedding backward's form (any vocabulary): coil's index_add, the slices added in
        # index order; it wraps a negative index once and checks the range itself
        K = _numel(bshape)
        before, after = list(shp[:p]), list(shp[p + 1:])
        vals = Value(L.op("expand", [L.cast(values, dt)], {"shape": before + bshape + after}))
        out = _index_add_op(L, x, p, reshape(L, indices[p], [K]),
                            reshape(L, vals, before + [K] + after))
        return out
    st = _strides(list(shp[p:p + k]))
    lin = None
    for jj, i in enumerate(present):
        t = Value(L.op("expand", [_wrap_index(L, L.cast(indices[i], torch.int64), shp[i])],
                       {"shape": bshape}))
        t = Value(L.op("mul", [t, zeros(L, "i64", [], st[jj])]))
        lin = t if lin is None else Value(L.op("add", [lin, t]))
    K = _numel(bshape)
    merged = _numel(shp[p:p + k])
    before, after = list(shp[:p]), list(shp[p + k:])
    xm = reshape(L, x, before + [merged] + after)
    res_shape = before + bshape + after
    vals = Value(L.op("expand", [L.cast(values, dt)], {"shape": res_shape}))
    vals = reshape(L, vals, before + [K] + after)
    if accumulate and dt != torch.bool:  # several index tensors: their flat index
        out = _index_add_op(L, xm, p, reshape(L, lin, [K]), vals)
    else:
        full = Value(L.op("expand", [_along(L, reshape(L, lin, [K]),
                                            len(before) + 1 + len(after), p)],
                          {"shape": before + [K] + after}))
        out = _scatter(L, xm, p, full, vals, "sum" if accumulate else None)
    return reshape(L, out, list(shp))


def _index_put_mask(L, x, p, m, values, accumulate, shp):
    """x[..., mask, ...] = values (or +=): the k-th True of the mask (row-major over the dims it
    covers) takes row k of values broadcast to [..., K, ...]; an inclusive prefix count of the
    mask gives k (a scan), a gather the rows. No duplicates: accumulate is an add."""
    ms = list(shape(L, m))
    before, after = list(shp[:p]), list(shp[p + len(ms):])
    M = _numel(ms)
    if M == 0:
        return x
    xm = reshape(L, x, before + [M] + after)
    mf = reshape(L, m, [M])
    R = len(before) + 1 + len(after)
    vs = list(shape(L, values))
    if len(vs) > R:
        raise Unsupported("index_put with values of a higher rank")
    vs = [1] * (R - len(vs)) + vs
    kv = vs[len(before)]
    want = before + [kv] + after
    v = Value(L.op("expand", [reshape(L, values, vs)], {"shape": want}))
    pos = Value(L.op("sub", [_scan(L, L.cast(mf, torch.int64), 0, "sum"),
                             zeros(L, "i64", [], 1)]))
    pos = Value(L.op("clamp", [pos], {"min": 0.0, "max": float(max(kv - 1, 0))}))
    g = Value(L.op("gather", [v, pos], {"axis": len(before)}))
    if accumulate:
        g = Value(L.op("add", [xm, g]))
    out = Value(L.op("where", [_along(L, mf, R, len(before)), g, xm]))
    return reshape(L, out, list(shp))


@lowers("aten.masked_scatter.default")
def _masked_scatter(L, node, args, kwargs):
    """The k-th True of the (broadcast) mask, in row-major order, takes source's k-th element:
    k is an exclusive prefix count of the mask (a scan), then a gather."""
    x, mask, source = args[:3]
    shp, dt = meta_of(node)
    n = _numel(shp)
    if n == 0:
        return x
    m = Value(L.op("expand", [L.cast(mask, torch.bool)], {"shape": list(shp)}))
    m = reshape(L, m, [n])
    counts = _scan(L, L.cast(m, torch.int64), 0, "sum")  # inclusive
    pos = Value(L.op("sub", [counts, zeros(L, "i64", [], 1)]))
    ns = _numel(shape(L, source))
    if ns == 0:
        raise Unsupported("masked_scatter from an empty source")
    pos = Value(L.op("clamp", [pos], {"min": 0.0, "max": float(ns - 1)}))
    g = Value(L.op("gather", [reshape(L, L.cast(source, dt), [ns]), pos], {"axis": 0}))
    xb = Value(L.op("expand", [x], {"shape": list(shp)}))
    out = Value(L.op("where", [m, g, reshape(L, xb, [n])]))
    return reshape(L, out, list(shp))


# ---- scans ----------------------------------------------------------------------------------

def _shift(L, v, dim, off, fill):
    """r[i] = v[i - off] along dim, `fill` for i < off."""
    n = shape(L, v)[dim]
    return _place(L, slice_(L, v, dim, 0, n - off), dim, off, n, fill)


def _scan(L, v, dim, how):
    """Inclusive scan along dim: how = "sum", "prod", "max", "min", "logaddexp"."""
    n = shape(L, v)[dim]
    dt = coil_dt(L, v)
    ident = {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf,
             "logaddexp": -math.inf}[how]
    if how in ("max", "min", "logaddexp") and not dt.startswith(("f", "bf")):
        raise Unsupported(f"a {how} scan of {dt}")
    off = 1
    while off < n:
        s = _shift(L, v, dim, off, ident)
        if how == "sum":
            v = Value(L.op("add", [s, v]))
        elif how == "prod":
            v = Value(L.op("mul", [s, v]))
        elif how == "max":
            v = Value(L.op("maximum", [s, v]))
        elif how == "min":
            v = Value(L.op("minimum", [s, v]))
        else:
            v = _log_add_exp(L, s, v)
        off *= 2
    return v


def _log_add_exp(L, a, b):
    """torch's _log_add_exp_helper: max + log1p(exp(min - max)), x itself when both are the
    same infinity."""
    dt = meta_dtype(L, a)
    A, B = X(L, a, dt), X(L, b, dt)
    mn = X(L, L.op("minimum", [a, b]), dt)
    mx = X(L, L.op("maximum", [a, b]), dt)
    r = mx + (mn - mx).fn("exp").fn("log1p")
    same_inf = mn.eq(mx) & mn.isinf()
    del B
    return X.where(same_inf, A, r).v


def _scan_dtype(node):
    dt = _out_dtype(node)
    return torch.float64 if dt.is_floating_point else torch.int64


# Products in f64 for floats (torch's CPU kernel accumulates in double), in i64 for integers.
@lowers("aten.cumprod.default")
def _cumprod(L, node, args, kwargs):
    x, dim = args[0], args[1]
    shp, dt = meta_of(node)
    if len(shp) == 0:
        return L.cast(x, dt)
    dim = int(dim) % len(shp)
    if dt == torch.bool:
        raise Unsupported("cumprod into bool")
    v = L.cast(x, _scan_dtype(node))
    return Value(L.cast(_scan(L, v, dim, "prod"), dt))


@lowers("aten.logcumsumexp.default")
def _logcumsumexp(L, node, args, kwargs):
    x, dim = args[0], args[1]
    shp, dt = meta_of(node)
    if not dt.is_floating_point:
        raise Unsupported("logcumsumexp of integers")
    if len(shp) == 0:
        return L.cast(x, dt)
    dim = int(dim) % len(shp)
    v = L.cast(x, torch.float64)
    return Value(L.cast(_scan(L, v, dim, "logaddexp"), dt))


@lowers("aten.cummax.default", "aten.cummin.default")
def _cummax(L, node, args, kwargs):
    """(values, indices): a scan of (value, index) pairs; the later one wins ties (torch:
    `x >= best`) and NaN wins over numbers (the last NaN once one is seen)."""
    x, dim = args[0], args[1]
    shp = shape(L, x)
    is_max = "cummax" in str(node.target)
    if len(shp) == 0:
        return (x, zeros(L, "i64", []))
    dim = int(dim) % len(shp)
    n = shp[dim]
    dt = meta_dtype(L, x)
    idx = Value(L.op("expand", [_along(L, _iota(L, n), len(shp), dim)], {"shape": list(shp)}))
    v, i = x, idx
    is_float = dt.is_floating_point
    off = 1
    while off < n:
        ident = (-math.inf if is_max else math.inf) if is_float else 0.0  # never wins: si < 0
        sv = _shift(L, v, dim, off, ident)
        si = _shift(L, i, dim, off, -1)
        # the later pair (v, i) wins unless the earlier one (sv, si) beats it strictly
        better = Value(L.op("gt" if is_max else "lt", [sv, v]))
        if is_float:
            nan_s = Value(L.op("isnan", [sv]))
            nan_v = Value(L.op("isnan", [v]))
            better = Value(L.op("logical_or", [
                Value(L.op("logical_and", [nan_s, Value(L.op("logical_not", [nan_v]))])),
                Value(L.op("logical_and", [better, Value(L.op("logical_not", [nan_v]))]))]))
        # an earlier identity (si = -1) never wins
        better = Value(L.op("logical_and", [better, Value(L.op("ge", [si, zeros(L, "i64", [])]))]))
        v = Value(L.op("where", [better, sv, v]))
        i = Value(L.op("where", [better, si, i]))
        off *= 2
    return (v, i)


# ---- sorting --------------------------------------------------------------------------------

def _ranks(L, x, dim, descending):
    """The stable sort rank of each element along dim (NaN largest, equal values by position),
    and the pairwise-compare layout: returns rank (i64, x's shape)."""
    shp = list(shape(L, x))
    rank = len(shp)
    n = shp[dim]
    dt = meta_dtype(L, x)
    a = Value(L.op("unsqueeze", [x], {"dim": dim + 1}))  # element i at dim, j at dim + 1
    b = Value(L.op("unsqueeze", [x], {"dim": dim}))      # element j at dim + 1
    # before(j, i): j sorts before i
    if descending:
        lt = Value(L.op("gt", [b, a]))
    else:
        lt = Value(L.op("lt", [b, a]))
    eq = Value(L.op("eq", [b, a]))
    if dt.is_floating_point:
        na = Value(L.op("isnan", [a]))
        nb = Value(L.op("isnan", [b]))
        not_na = Value(L.op("logical_not", [na]))
        not_nb = Value(L.op("logical_not", [nb]))
        if descending:  # NaN first
            lt = Value(L.op("logical_or", [Value(L.op("logical_and", [nb, not_na])), lt]))
        else:  # NaN last: a number sorts before a NaN
            lt = Value(L.op("logical_or", [Value(L.op("logical_and", [not_nb, na])), lt]))
        eq = Value(L.op("logical_or", [eq, Value(L.op("logical_and", [na, nb]))]))
        del not_nb
    jlt = Value(L.op("lt", [_along(L, _iota(L, n), rank + 1, dim + 1),
                            _along(L, _iota(L, n), rank + 1, dim)]))
    before = Value(L.op("logical_or", [lt, Value(L.op("logical_and", [eq, jlt]))]))
    return Value(L.op("sum", [L.cast(before, torch.int64)], {"axes": [dim + 1],
                                                             "keepdim": False}))


def _sorted(L, x, dim, descending, k=None):
    """(values, indices) of the first k of x sorted along dim."""
    shp = list(shape(L, x))
    n = shp[dim]
    if n > _MAX_SORT:
        raise Unsupported(f"sorting a dim of {n} (coil sorts by n^2 comparisons up to "
                          f"{_MAX_SORT})")
    k = n if k is None else k
    r = _ranks(L, x, dim, descending)  # x's shape
    rank = len(shp)
    # idx[.., p, ..] = the i whose rank is p
    rr = Value(L.op("unsqueeze", [r], {"dim": dim + 1}))  # i at dim, p at dim + 1
    p = _along(L, _iota(L, k), rank + 1, dim + 1)
    E = Value(L.op("eq", [rr, p]))
    i = _along(L, _iota(L, n), rank + 1, dim)
    sel = Value(L.op("where", [E, Value(L.op("expand", [i], {"shape": list(shape(L, E))})),
                               zeros(L, "i64", [], 0)]))
    idx = Value(L.op("sum", [sel], {"axes": [dim], "keepdim": False}))  # one hit per p
    vals = _gather_along(L, x, dim, idx)
    return vals, idx


def _sort_args(L, node, args, kwargs):
    target = str(node.target)
    x = args[0]
    if target == "aten.sort.stable":
        dim = kwargs.get("dim", -1)
        descending = bool(kwargs.get("descending", False))
    else:
        dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
        descending = bool(args[2] if len(args) > 2 else kwargs.get("descending", False))
    return x, dim, descending


@lowers("aten.sort.default", "aten.sort.stable")
def _sort(L, node, args, kwargs):
    x, dim, descending = _sort_args(L, node, args, kwargs)
    if L.rank(x) == 0:
        return (x, zeros(L, "i64", []))
    dim = int(dim) % L.rank(x)
    if shape(L, x)[dim] == 0:
        raise Unsupported("sorting an empty dim")
    if meta_dtype(L, x) == torch.bool:
        x = L.cast(x, torch.int32)
        v, i = _sorted(L, x, dim, descending)
        return (L.cast(v, torch.bool), i)
    return _sorted(L, x, dim, descending)


@lowers("aten.topk.default")
def _topk(L, node, args, kwargs):
    x, k = args[0], int(args[1])
    dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
    largest = bool(args[3] if len(args) > 3 else kwargs.get("largest", True))
    srt = bool(args[4] if len(args) > 4 else kwargs.get("sorted", True))
    if L.rank(x) == 0:
        return (x, zeros(L, "i64", []))
    dim = int(dim) % L.rank(x)
    if k == 0 or shape(L, x)[dim] == 0:
        raise Unsupported("topk of nothing")
    del srt  # sorted or not, torch's CPU topk returns them sorted
    return _sorted(L, x, dim, largest, k)


@lowers("aten.kthvalue.default")
def _kthvalue(L, node, args, kwargs):
    x, k = args[0], int(args[1])
    dim = args[2] if len(args) > 2 else kwargs.get("dim", -1)
    keepdim = bool(args[3] if len(args) > 3 else kwargs.get("keepdim", False))
    if L.rank(x) == 0:
        return (x, zeros(L, "i64", []))
    dim = int(dim) % L.rank(x)
    v, i = _sorted(L, x, dim, False, k)
    v, i = slice_(L, v, dim, k - 1, k), slice_(L, i, dim, k - 1, k)
    if not keepdim:
        s = list(shape(L, v))
        del s[dim]
        v, i = reshape(L, v, s), reshape(L, i, s)
    return (v, i)


@lowers("aten.median.default", "aten.median.dim", "aten.nanmedian.default",
        "aten.nanmedian.dim")
def _median(L, node, args, kwargs):
    """The lower median (the (n - 1) // 2-th of the sorted values). median: a row with a NaN
    gives NaN and the index of its first NaN (as torch); nanmedian: the lower median of the
    row's numbers (NaN, index 0, when it has none)."""
    target = str(node.target)
    x = args[0]
    nan_ignoring = "nanmedian" in target
    with_dim = target.endswith(".dim")
    dt = meta_dtype(L, x)
    if with_dim:
        dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
        keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    else:
        x = reshape(L, x, [_numel(shape(L, x))])
        dim, keepdim = 0, False
    if L.rank(x) == 0:
        return (x, zeros(L, "i64", [])) if with_dim else x
    dim = int(dim) % L.rank(x)
    shp = list(shape(L, x))
    n = shp[dim]
    if n == 0:
        raise Unsupported("median of an empty dim")
    raise_nan = dt.is_floating_point and not nan_ignoring
    v, i = _sorted(L, x, dim, False)
    if nan_ignoring and dt.is_floating_point:
        cnt = Value(L.op("sum", [L.cast(Value(L.op("logical_not", [Value(L.op("isnan", [x]))])),
                                        torch.int64)], {"axes": [dim], "keepdim": True}))
        # (count - 1) // 2, 0 when every value is NaN (then the result is NaN, index 0's NaN)
        pos = Value(L.op("clamp", [Value(L.op("sub", [cnt, zeros(L, "i64", [], 1)]))],
                         {"min": 0.0}))
        from .lowering_math import int_trunc_div
        pos = int_trunc_div(L, pos, zeros(L, "i64", [], 2), torch.int64)
        vm, im = _gather_along(L, v, dim, pos), _gather_along(L, i, dim, pos)
    else:
        m = (n - 1) // 2
        vm, im = slice_(L, v, dim, m, m + 1), slice_(L, i, dim, m, m + 1)
        if raise_nan:
            anynan = Value(L.op("max", [L.cast(Value(L.op("isnan", [x])), torch.int32)],
                                {"axes": [dim], "keepdim": True}))
            anynan = Value(L.op("gt", [anynan, zeros(L, "i32", [])]))
            # the first NaN along the dim: the smallest index among NaNs
            nan_pos = Value(L.op("where", [Value(L.op("isnan", [x])), Value(L.op(
                "expand", [_along(L, _iota(L, n), len(shp), dim)], {"shape": shp})),
                zeros(L, "i64", [], n)]))
            nan_pos = Value(L.op("min", [nan_pos], {"axes": [dim], "keepdim": True}))
            vm = Value(L.op("where", [anynan, zeros(L, coil_dt(L, x), [], math.nan), vm]))
            im = Value(L.op("where", [anynan, nan_pos, im]))
    if not keepdim:
        s = list(shape(L, vm))
        del s[dim]
        vm, im = reshape(L, vm, s), reshape(L, im, s)
    if not with_dim:
        return vm
    return (vm, im)


@lowers("aten.searchsorted.Tensor", "aten.bucketize.Tensor")
def _searchsorted(L, node, args, kwargs):
    """torch's binary search itself (cus_lower_bound / cus_upper_bound), unrolled: bit_length(n)
    steps of mid = start + (end - start) // 2, a gather of the boundary at mid, and
    start = mid + 1 while !(b[mid] >= v) (left) or !(b[mid] > v) (right), else end = mid.
    Exact for any boundaries, sorted or not, NaN included."""
    target = str(node.target)
    if target == "aten.bucketize.Tensor":
        v, b = args[0], args[1]
    else:
        b, v = args[0], args[1]
    out_int32 = bool(kwargs.get("out_int32", False))
    right = bool(kwargs.get("right", False))
    side = kwargs.get("side")
    if side is not None:
        right = side == "right"
    sorter = kwargs.get("sorter")
    bs, vs = list(shape(L, b)), list(shape(L, v))
    odt = torch.int32 if out_int32 else torch.int64
    if 0 in bs or 0 in vs:
        return Value(L.full(0, odt, meta_of(node)[0]))
    if sorter is not None:  # the boundaries in sorted order
        b = _gather_along(L, b, len(bs) - 1, L.cast(sorter, torch.int64))
    if len(bs) > 1 and bs[:-1] != vs[:-1]:
        raise Unsupported("searchsorted with mismatched leading dims")
    dt = torch.promote_types(meta_dtype(L, b), meta_dtype(L, v))
    b, v = L.cast(b, dt), L.cast(v, dt)
    n = bs[-1]
    I = torch.int64
    start = X(L, zeros(L, "i64", vs), I)
    end = X(L, zeros(L, "i64", vs, n), I)
    vv = X(L, v, dt)
    for _ in range(n.bit_length()):
        active = start.lt(end)
        half = X(L, L.cast((X(L, L.cast((end - start).v, torch.float64), torch.float64) * 0.5)
                           .fn("floor").v, I), I)
        mid = start + half
        midc = X(L, L.op("clamp", [mid.v], {"min": 0.0, "max": float(n - 1)}), I)
        if len(bs) == 1:
            bm = Value(L.op("gather", [b, midc.v], {"axis": 0}))
        else:
            bm = _gather_along(L, b, len(bs) - 1, midc.v)
        bm = X(L, bm, dt)
        go_right = ~(bm.gt(vv) if right else bm.ge(vv))
        start = X.where(active & go_right, mid + 1.0, start)
        end = X.where(active & ~go_right, mid, end)
    return Value(L.cast(start.v, odt))


@lowers("aten.segment_reduce.default", "aten._segment_reduce.default")
def _segment_reduce(L, node, args, kwargs):
    """torch's segment_reduce along axis 0 with 1-D lengths (or offsets): segment s covers
    [start_s, start_s + length_s) (starts: a prefix sum); a one-hot [S, N] mask reduces the data
    with the reduction's identity elsewhere; `initial` takes part in every segment's reduction
    (mean: (initial + sum) / length, an empty segment gives initial; without initial NaN, as
    0 / 0)."""
    data, reduce = args[0], args[1]
    get = lambda i, k, d: args[i] if len(args) > i else kwargs.get(k, d)
    lengths, indices, offsets = get(2, "lengths", None), get(3, "indices", None), \
        get(4, "offsets", None)
    axis, initial = int(get(5, "axis", 0)), get(7, "initial", None)
    shp, dt = meta_of(node)
    if indices is not None or axis != 0 or not dt.is_floating_point:
        raise Unsupported("segment_reduce with indices, another axis, or integers")
    if reduce not in ("sum", "mean", "max", "min", "prod"):
        raise Unsupported(f"segment_reduce {reduce!r}")
    if lengths is not None:
        if L.rank(lengths) != 1:
            raise Unsupported("segment_reduce with batched lengths")
        lens = L.cast(lengths, torch.int64)
        S = shape(L, lens)[0]
    elif offsets is not None:
        if L.rank(offsets) != 1:
            raise Unsupported("segment_reduce with batched offsets")
        off = L.cast(offsets, torch.int64)
        S = shape(L, off)[0] - 1
        lens = Value(L.op("sub", [slice_(L, off, 0, 1, S + 1), slice_(L, off, 0, 0, S)]))
    else:
        raise Unsupported("segment_reduce without lengths or offsets")
    ds = list(shape(L, data))
    N = ds[0]
    R = _numel(ds[1:])
    if S == 0 or N == 0:
        raise Unsupported("segment_reduce of nothing")
    ends = _scan(L, lens, 0, "sum")
    starts = Value(L.op("sub", [ends, lens]))
    i = reshape(L, _iota(L, N), [1, N])
    E = Value(L.op("logical_and", [Value(L.op("ge", [i, reshape(L, starts, [S, 1])])),
                                   Value(L.op("lt", [i, reshape(L, ends, [S, 1])]))]))
    E3 = reshape(L, E, [S, N, 1])
    d = reshape(L, L.cast(data, dt), [1, N, R])
    cd = coil_dt(L, d)
    red = "sum" if reduce == "mean" else reduce
    ident = {"sum": 0.0, "prod": 1.0, "max": -math.inf, "min": math.inf}[red]
    masked = Value(L.op("where", [E3, d, zeros(L, cd, [], ident)]))
    op = {"sum": "sum", "prod": "prod", "max": "max", "min": "min"}[red]
    r = Value(L.op(op, [masked], {"axes": [1], "keepdim": False}))  # [S, R]
    if initial is not None:
        iv = zeros(L, cd, [], float(initial))
        comb = {"sum": "add", "prod": "mul", "max": "maximum", "min": "minimum"}[red]
        r = Value(L.op(comb, [r, iv]))
    if reduce == "mean":
        cnt = reshape(L, L.cast(lens, dt), [S, 1])
        r = Value(L.op("div", [r, cnt]))
        if initial is not None:
            empty = Value(L.op("eq", [reshape(L, lens, [S, 1]), zeros(L, "i64", [])]))
            r = Value(L.op("where", [empty, zeros(L, cd, [], float(initial)), r]))
    return reshape(L, r, list(shp))
