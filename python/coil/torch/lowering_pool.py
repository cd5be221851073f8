"""Rows of the aten table for windowed ops beyond coil's max_pool2d / avg_pool2d (3-D and
adaptive pooling with indices, divisor_override, max_unpool), upsampling (nearest, linear,
trilinear), and view-like composites (diagonal, diagonal_scatter, unfold, block_diag), with
renorm, cdist and pdist. Imported by lowering.py, which holds the table and the conventions.

Windows are static: each output position's window [start, end) along each spatial dim is known
when the graph is built, so a window op is one gather per tap (tap t of output o reads
start[o] + t * dilation, masked off past end[o] or outside the input), and the taps combine in
the order torch's CPU kernels visit them (row-major over the window): sums add in that order
from 0 (bit-exact), maxima keep the first maximum and the last NaN (`val > max || isnan(val)`),
as do their indices. Upsampling's source indices and weights are computed here in f32 with
torch's formulas (area_pixel_compute_source_index, nearest_idx) and are graph constants.
"""

import itertools
import math

import numpy as np
import torch

from .lowering import Unsupported, Value, lowers, meta_of, _out_dtype
from .lowering_nn import shape, coil_dt, zeros, reshape, slice_, concat, _place
from .lowering_math import X
from .lowering_scatter import _scatter, _numel, _gather_along

_counter = itertools.count()


def const(L, array):
    t = torch.as_tensor(array)
    return Value(L.g.constant(f"k_pool{next(_counter)}", t.contiguous()))


def _taps(L, x, k, windows, pad_value):
    """Per tap (row-major over the window offsets): (values gathered at the tap, valid mask,
    flat input index of the tap). windows[d] = (positions [out][kmax] int64, valid [out][kmax]
    bool) for spatial dim d (the last k dims of x)."""
    xs = shape(L, x)
    rank = len(xs)
    ins = xs[rank - k:]
    kmax = [w[0].shape[1] for w in windows]
    for t in itertools.product(*[range(m) for m in kmax]):
        v = x
        valid = None
        flat = None
        for d in range(k):
            pos, ok = windows[d]
            p = const(L, np.clip(pos[:, t[d]], 0, max(ins[d] - 1, 0)).astype(np.int64))
            v = Value(L.op("gather", [v, p], {"axis": rank - k + d}))
            shp = [1] * k
            shp[d] = pos.shape[0]
            okv = reshape(L, const(L, ok[:, t[d]].copy()), shp)
            valid = okv if valid is None else Value(L.op("logical_and", [valid, okv]))
            stride = int(np.prod(ins[d + 1:])) if d + 1 < k else 1
            fl = reshape(L, const(L, (pos[:, t[d]] * stride).astype(np.int64)), shp)
            flat = fl if flat is None else Value(L.op("add", [flat, fl]))
        yield t, v, valid, flat


def _pool_windows(ins, outs, kernel, stride, padding, dilation):
    """Windows of a (max or avg) pool: positions start + t * dilation, valid inside the input."""
    wins = []
    for d in range(len(ins)):
        o = np.arange(outs[d])
        start = o * stride[d] - padding[d]
        pos = start[:, None] + np.arange(kernel[d])[None, :] * dilation[d]
        ok = (pos >= 0) & (pos < ins[d])
        wins.append((pos.astype(np.int64), ok))
    return wins


def _adaptive_windows(ins, outs):
    wins = []
    for d in range(len(ins)):
        n, m = ins[d], outs[d]
        starts = [(i * n) // m for i in range(m)]
        ends = [-(-((i + 1) * n) // m) for i in range(m)]
        kmax = max(e - s for s, e in zip(starts, ends)) if m else 1
        pos = np.array([[s + t for t in range(kmax)] for s in starts], dtype=np.int64).reshape(
            m, kmax)
        ok = np.array([[s + t < e for t in range(kmax)] for s, e in zip(starts, ends)],
                      dtype=bool).reshape(m, kmax)
        wins.append((pos, ok))
    return wins


def _window_max(L, x, k, windows, out_shape):
    """(max, flat index) over each window, torch's CPU order: the first maximum, the last NaN;
    a window of -inf (or empty) keeps its first valid tap's index."""
    dt = coil_dt(L, x)
    is_float = dt.startswith(("f", "bf"))
    best = zeros(L, dt, out_shape, -math.inf if is_float else _int_min(dt))
    bidx = None
    seen = None
    for t, v, valid, flat in _taps(L, x, k, windows, None):
        bv = Value(L.op("gt", [v, best]))
        if is_float:
            bv = Value(L.op("logical_or", [bv, Value(L.op("isnan", [v]))]))
        take = Value(L.op("logical_and", [bv, valid]))
        flat_e = Value(L.op("expand", [flat], {"shape": out_shape}))
        if bidx is None:
            bidx = Value(L.op("where", [Value(L.op("expand", [valid], {"shape": out_shape})),
                                        flat_e, zeros(L, "i64", out_shape)]))
            seen = Value(L.op("expand", [valid], {"shape": out_shape}))
        else:
            first = Value(L.op("logical_and", [valid, Value(L.op("logical_not", [seen]))]))
            bidx = Value(L.op("where", [first, flat_e, bidx]))
            seen = Value(L.op("logical_or", [seen, valid]))
        best = Value(L.op("where", [take, v, best]))
        bidx = Value(L.op("where", [take, flat_e, bidx]))
    return best, bidx


def _int_min(dt):
    from .. import _torch_dtype
    return float(torch.iinfo(_torch_dtype(dt)).min)


def _window_sum(L, x, k, windows, out_shape):
    """Sum over each window, adding the valid taps in row-major order from 0, and the count
    of valid taps."""
    dt = coil_dt(L, x)
    total = zeros(L, dt, out_shape)
    count = np.zeros([w[0].shape[0] for w in windows], dtype=np.int64)
    for t, v, valid, flat in _taps(L, x, k, windows, None):
        total = Value(L.op("add", [total, Value(L.op("where", [valid, v, zeros(L, dt, [])]))]))
        m = None
        for d, (pos, ok) in enumerate(windows):
            col = ok[:, t[d]].reshape([-1 if e == d else 1 for e in range(k)])
            m = col if m is None else (m & col)
        count = count + m.astype(np.int64)
    return total, count


def _float_only(node, what):
    dt = _out_dtype(node)
    if not dt.is_floating_point:
        raise Unsupported(f"{what} of {dt}")
    return dt


def _ints(v, n):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if len(v) == 1:
        v = v * n
    if len(v) != n or not all(isinstance(e, int) for e in v):
        raise Unsupported(f"window parameter {v!r}")
    return v


@lowers("aten.max_pool3d_with_indices.default")
def _max_pool3d(L, node, args, kwargs):
    x = args[0]
    kernel = _ints(args[1], 3)
    stride = _ints(args[2], 3) if len(args) > 2 and args[2] else kernel
    padding = _ints(args[3], 3) if len(args) > 3 else [0, 0, 0]
    dilation = _ints(args[4], 3) if len(args) > 4 else [1, 1, 1]
    out_shape = _out_shapes(node)[0]
    xs = shape(L, x)
    wins = _pool_windows(xs[-3:], out_shape[-3:], kernel, stride, padding, dilation)
    return _window_max(L, x, 3, wins, out_shape)


def _out_shapes(node):
    val = node.meta.get("val", node.meta.get("tensor_meta"))
    if isinstance(val, (tuple, list)) and not hasattr(val, "dtype"):
        return [list(v.shape) for v in val]
    return [list(val.shape)]


@lowers("aten.adaptive_max_pool2d.default", "aten.adaptive_max_pool3d.default")
def _adaptive_max_pool(L, node, args, kwargs):
    x = args[0]
    k = 2 if "2d" in str(node.target) else 3
    out_shape = _out_shapes(node)[0]
    xs = shape(L, x)
    if 0 in xs:
        raise Unsupported("adaptive pooling of an empty tensor")
    wins = _adaptive_windows(xs[-k:], out_shape[-k:])
    return _window_max(L, x, k, wins, out_shape)


@lowers("aten._adaptive_avg_pool3d.default", "aten.adaptive_avg_pool3d.default")
def _adaptive_avg_pool3d(L, node, args, kwargs):
    x = args[0]
    _float_only(node, "adaptive_avg_pool3d")
    out_shape = _out_shapes(node)[0]
    xs = shape(L, x)
    if 0 in xs:
        raise Unsupported("adaptive pooling of an empty tensor")
    wins = _adaptive_windows(xs[-3:], out_shape[-3:])
    total, count = _window_sum(L, x, 3, wins, out_shape)
    return Value(L.op("div", [total, L.cast(const(L, count), _out_dtype(node))]))


def _avg_pool(L, node, args, k):
    x = args[0]
    _float_only(node, f"avg_pool{k}d")
    kernel = _ints(args[1], k)
    stride = _ints(args[2], k) if len(args) > 2 and args[2] else kernel
    padding = _ints(args[3], k) if len(args) > 3 else [0] * k
    include_pad = bool(args[5]) if len(args) > 5 else True
    divisor = args[6] if len(args) > 6 else None
    out_shape = _out_shapes(node)[0]
    xs = shape(L, x)
    ins = xs[-k:]
    wins = _pool_windows(ins, out_shape[-k:], kernel, stride, padding, [1] * k)
    total, count = _window_sum(L, x, k, wins, out_shape)
    if divisor is not None:
        if divisor == 0:
            raise Unsupported("avg_pool with divisor_override=0")
        div = np.full(count.shape, divisor, dtype=np.int64)
    elif include_pad:
        # torch: the window clamped to the padded input, before clamping to the input
        div = None
        for d in range(k):
            o = np.arange(out_shape[-k + d])
            start = o * stride[d] - padding[d]
            end = np.minimum(start + kernel[d], ins[d] + padding[d])
            size = (end - start).reshape([-1 if e == d else 1 for e in range(k)])
            div = size if div is None else div * size
    else:
        div = count
    div = np.broadcast_to(div, count.shape).astype(np.int64)
    return Value(L.op("div", [total, L.cast(const(L, div.copy()), _out_dtype(node))]))


@lowers("aten.avg_pool3d.default")
def _avg_pool3d(L, node, args, kwargs):
    a = list(args) + [None] * (7 - len(args))
    a = a[:7]
    for i, (name, default) in enumerate([("stride", []), ("padding", 0), ("ceil_mode", False),
                                         ("count_include_pad", True),
                                         ("divisor_override", None)], start=2):
        if len(args) <= i:
            a[i] = kwargs.get(name, default)
    return _avg_pool(L, node, a, 3)


# avg_pool2d with divisor_override (coil's avg_pool2d takes the rest): taps here
_prev_avg_pool2d = None


def _avg_pool2d_divisor(L, node, args, kwargs):
    divisor = args[6] if len(args) > 6 else kwargs.get("divisor_override")
    if divisor is None:
        return _prev_avg_pool2d(L, node, args, kwargs)
    a = list(args) + [None] * (7 - len(args))
    defaults = [None, None, [], 0, False, True, None]
    for i in range(2, 7):
        if len(args) <= i:
            a[i] = defaults[i]
    a[6] = divisor
    return _avg_pool(L, node, a, 2)


def _register_avg_pool2d():
    global _prev_avg_pool2d
    from .lowering import ROWS
    _prev_avg_pool2d = ROWS["aten.avg_pool2d.default"]
    ROWS["aten.avg_pool2d.default"] = _avg_pool2d_divisor


_register_avg_pool2d()


@lowers("aten.max_unpool2d.default", "aten.max_unpool3d.default")
def _max_unpool(L, node, args, kwargs):
    """out[n, c, indices[n, c, k]] = x[n, c, k] over the flattened output spatial dims (the
    last write wins, as torch's CPU loop), zeros elsewhere."""
    x, indices = args[0], args[1]
    out_shape, dt = meta_of(node)
    k = 2 if "2d" in str(node.target) else 3
    xs = shape(L, x)
    lead = list(xs[:-k])
    K = _numel(xs[-k:])
    M = _numel(out_shape[-k:])
    if K == 0 or M == 0:
        return Value(L.full(0, dt, out_shape))
    xv = reshape(L, x, lead + [K])
    iv = reshape(L, L.cast(indices, torch.int64), lead + [K])
    base = zeros(L, coil_dt(L, x), lead + [M])
    out = _scatter(L, base, len(lead), iv, xv, None)
    return reshape(L, out, list(out_shape))


# ---- upsampling ------------------------------------------------------------------------------

f32 = np.float32


def _scale_value(scale, n_in, n_out):
    """torch's compute_scales_value<float>: 1 / scale (in double, then float) when given, else
    in / out in float."""
    if scale is not None and scale > 0:
        return f32(1.0 / scale)
    return f32(n_in) / f32(n_out)


def _nearest_index(n_in, n_out, scale, exact=False):
    if n_out == n_in and not exact:
        return np.arange(n_out, dtype=np.int64)
    if n_out == 2 * n_in and not exact:
        return np.arange(n_out, dtype=np.int64) >> 1
    s = _scale_value(scale, n_in, n_out)
    o = np.arange(n_out).astype(f32)
    if exact:  # (dst + 0.5) is a double in torch: the product too, floorf of it as a float
        src = np.floor(((o.astype(np.float64) + 0.5) * np.float64(s)).astype(f32)).astype(
            np.int64)
    else:
        src = np.floor(o * s).astype(np.int64)
    return np.minimum(src, n_in - 1)


def _upsample_args(node, args, k, linear):
    """(output spatial sizes, per-dim scales or None, align_corners)."""
    target = str(node.target)
    out_shape = list(meta_of(node)[0])
    outs = out_shape[-k:]
    align = False
    if target.endswith(".vec"):
        scale_factors = args[3] if linear else args[2]
        if linear:
            align = bool(args[2])
        scales = list(scale_factors) if scale_factors else [None] * k
        if args[1] is not None:
            scales = [None] * k
    else:
        if linear:
            align = bool(args[2])
            rest = list(args[3:])
        else:
            rest = list(args[2:])
        scales = (rest + [None] * k)[:k]
    return outs, scales, align


def _upsample_nearest(k, exact=False):
    def row(L, node, args, kwargs):
        x = args[0]
        xs = shape(L, x)
        outs, scales, _ = _upsample_args(node, args, k, False)
        v = x
        for d in range(k):
            idx = _nearest_index(xs[-k + d], outs[d], scales[d], exact)
            if xs[-k + d] == 0 or outs[d] == 0:
                raise Unsupported("upsampling an empty tensor")
            v = Value(L.op("gather", [v, const(L, idx)], {"axis": len(xs) - k + d}))
        return v
    return row


for _k in (1, 2, 3):
    lowers(f"aten.upsample_nearest{_k}d.vec", f"aten.upsample_nearest{_k}d.default")(
        _upsample_nearest(_k))
    lowers(f"aten._upsample_nearest_exact{_k}d.vec", f"aten._upsample_nearest_exact{_k}d.default")(
        _upsample_nearest(_k, exact=True))


def _linear_weights(n_in, n_out, scale, align):
    """torch's compute_source_index_and_lambda: (index 0, index 1, lambda 0, lambda 1), in f32
    (scale * (dst + 0.5) - 0.5 in double, as torch's mixed arithmetic has it)."""
    if n_out == n_in:
        i = np.arange(n_out, dtype=np.int64)
        return i, i, np.ones(n_out, dtype=f32), np.zeros(n_out, dtype=f32)
    if align:
        s = f32(n_in - 1) / f32(n_out - 1) if n_out > 1 else f32(0)
    else:
        s = _scale_value(scale, n_in, n_out)
    o = np.arange(n_out).astype(f32)
    if align:
        src = (s * o).astype(f32)
    else:
        src = (np.float64(s) * (o.astype(np.float64) + 0.5) - 0.5).astype(f32)
        src = np.where(src < 0, f32(0), src).astype(f32)
    i0 = np.minimum(src.astype(np.int64), n_in - 1)  # truncation, src >= 0
    step = (i0 < n_in - 1).astype(np.int64)
    lam1 = np.minimum(np.maximum((src - i0.astype(f32)).astype(f32), f32(0)), f32(1))
    lam0 = (f32(1) - lam1).astype(f32)
    return i0, i0 + step, lam0, lam1


def _upsample_linear(k):
    def row(L, node, args, kwargs):
        x = args[0]
        dt = _float_only(node, "linear upsampling")
        if dt != torch.float32:
            raise Unsupported(f"linear upsampling of {dt} (weights computed in f32)")
        xs = shape(L, x)
        if 0 in xs:
            raise Unsupported("upsampling an empty tensor")
        outs, scales, align = _upsample_args(node, args, k, True)
        v = x
        rank = len(xs)
        for d in reversed(range(k)):  # the last dim first, as torch's kernel nests them
            n_in = xs[-k + d]
            i0, i1, l0, l1 = _linear_weights(n_in, outs[d], scales[d], align)
            axis = rank - k + d
            a = Value(L.op("gather", [v, const(L, i0)], {"axis": axis}))
            b = Value(L.op("gather", [v, const(L, i1)], {"axis": axis}))
            shp = [1] * rank
            shp[axis] = outs[d]
            w0 = reshape(L, const(L, l0), shp)
            w1 = reshape(L, const(L, l1), shp)
            v = Value(L.op("add", [Value(L.op("mul", [w0, a])), Value(L.op("mul", [w1, b]))]))
        return v
    return row


lowers("aten.upsample_linear1d.vec", "aten.upsample_linear1d.default")(_upsample_linear(1))
lowers("aten.upsample_trilinear3d.vec", "aten.upsample_trilinear3d.default")(
    _upsample_linear(3))


# ---- view-like composites --------------------------------------------------------------------

def _diag_layout(L, x, offset, d1, d2):
    """x with d1, d2 moved last; the diagonal's length and its (row, col) coordinates."""
    xs = list(shape(L, x))
    rank = len(xs)
    d1 %= rank
    d2 %= rank
    rest = [d for d in range(rank) if d not in (d1, d2)]
    n1, n2 = xs[d1], xs[d2]
    if offset >= 0:
        m = max(0, min(n1, n2 - offset))
        rows, cols = np.arange(m), np.arange(m) + offset
    else:
        m = max(0, min(n1 + offset, n2))
        rows, cols = np.arange(m) - offset, np.arange(m)
    return rest, d1, d2, n1, n2, m, rows, cols


@lowers("aten.diagonal.default", "aten.diagonal_copy.default")
def _diagonal(L, node, args, kwargs):
    x = args[0]
    offset = int(args[1] if len(args) > 1 else kwargs.get("offset", 0))
    d1 = int(args[2] if len(args) > 2 else kwargs.get("dim1", 0))
    d2 = int(args[3] if len(args) > 3 else kwargs.get("dim2", 1))
    out_shape, dt = meta_of(node)
    rest, d1, d2, n1, n2, m, rows, cols = _diag_layout(L, x, offset, d1, d2)
    if m == 0 or 0 in out_shape:
        return Value(L.full(0, dt, out_shape))
    xs = shape(L, x)
    v = Value(L.op("permute", [x], {"dims": rest + [d1, d2]}))
    v = reshape(L, v, [xs[d] for d in rest] + [n1 * n2])
    lin = const(L, (rows * n2 + cols).astype(np.int64))
    return Value(L.op("gather", [v, lin], {"axis": len(rest)}))


@lowers("aten.diagonal_scatter.default")
def _diagonal_scatter(L, node, args, kwargs):
    x, src = args[0], args[1]
    offset = int(args[2] if len(args) > 2 else kwargs.get("offset", 0))
    d1 = int(args[3] if len(args) > 3 else kwargs.get("dim1", 0))
    d2 = int(args[4] if len(args) > 4 else kwargs.get("dim2", 1))
    out_shape, dt = meta_of(node)
    rest, d1, d2, n1, n2, m, rows, cols = _diag_layout(L, x, offset, d1, d2)
    if m == 0:
        return x
    xs = shape(L, x)
    rank = len(xs)
    perm = rest + [d1, d2]
    v = Value(L.op("permute", [x], {"dims": perm}))
    # k of each (r, c) on the diagonal, the mask of the diagonal
    kk = np.zeros((n1, n2), dtype=np.int64)
    mask = np.zeros((n1, n2), dtype=bool)
    kk[rows, cols] = np.arange(m)
    mask[rows, cols] = True
    s = L.cast(src, dt)  # rest dims + [m]
    g = Value(L.op("gather", [s, const(L, kk.reshape(-1))], {"axis": len(rest)}))
    g = reshape(L, g, [xs[d] for d in rest] + [n1, n2])
    out = Value(L.op("where", [const(L, mask), g, v]))
    inv = [0] * rank
    for i, p in enumerate(perm):
        inv[p] = i
    return Value(L.op("permute", [out], {"dims": inv}))


@lowers("aten.unfold.default")
def _unfold(L, node, args, kwargs):
    x, dim, size, step = args[0], int(args[1]), int(args[2]), int(args[3])
    out_shape, dt = meta_of(node)
    xs = list(shape(L, x))
    if len(xs) == 0:
        return reshape(L, x, [1])
    dim %= len(xs)
    nw = out_shape[dim]
    if nw == 0 or size == 0:
        return Value(L.full(0, dt, out_shape))
    idx = (np.arange(nw)[:, None] * step + np.arange(size)[None, :]).reshape(-1)
    v = Value(L.op("gather", [x, const(L, idx.astype(np.int64))], {"axis": dim}))
    v = reshape(L, v, xs[:dim] + [nw, size] + xs[dim + 1:])
    perm = list(range(dim + 1)) + list(range(dim + 2, len(xs) + 1)) + [dim + 1]
    return Value(L.op("permute", [v], {"dims": perm}))


@lowers("aten.resize_as.default")
def _resize(L, node, args, kwargs):
    """Functionalization's resize_as (from resize_as_): the first numel(template) elements of
    self's storage, laid out contiguously. Taken when self is contiguous (its storage order is
    then its logical order) and the size does not grow (the elements past the old ones are
    uninitialized in eager). (aten.resize, from resize_, is followed by an as_strided of its
    storage, which coil has no row for: it has none either.)"""
    unknown = set(kwargs) - {"memory_format"}
    if unknown:
        raise Unsupported(f"{node.target}: unknown argument {sorted(unknown)[0]}")
    if kwargs.get("memory_format") not in (None, torch.contiguous_format):
        raise Unsupported(f"{node.target} to {kwargs['memory_format']}")
    src = node.args[0]
    val = src.meta.get("val", src.meta.get("tensor_meta"))
    old_shape = meta_of(src)[0]
    stride = tuple(val.stride() if isinstance(val, torch.Tensor) else getattr(val, "stride", ()))
    contiguous = torch.empty(old_shape, device="meta").stride()
    if _numel(old_shape) > 1 and stride != contiguous:
        raise Unsupported(f"{node.target} of a non-contiguous tensor (strides {stride}: its "
                          "storage order is not its logical order)")
    new_shape = list(meta_of(node)[0])
    n_new, n_old = _numel(new_shape), _numel(old_shape)
    if n_new > n_old:
        raise Unsupported(f"{node.target} growing {n_old} to {n_new} elements (the new ones "
                          "are uninitialized)")
    flat = reshape(L, args[0], [n_old])
    if n_new < n_old:
        flat = slice_(L, flat, 0, 0, n_new)
    return reshape(L, flat, new_shape)


@lowers("aten.block_diag.default")
def _block_diag(L, node, args, kwargs):
    tensors = args[0]
    out_shape, dt = meta_of(node)
    C = out_shape[1]
    rows = []
    c0 = 0
    for t in tensors:
        ts = shape(L, t)
        if len(ts) == 0:
            t, ts = reshape(L, t, [1, 1]), (1, 1)
        elif len(ts) == 1:
            t, ts = reshape(L, t, [1, ts[0]]), (1, ts[0])
        r, c = ts
        if r == 0:
            c0 += c
            continue
        rows.append(_place(L, L.cast(t, dt), 1, c0, C))
        c0 += c
    if not rows:
        return Value(L.full(0, dt, out_shape))
    return reshape(L, concat(L, rows, 0), list(out_shape))


@lowers("aten.renorm.default")
def _renorm(L, node, args, kwargs):
    """torch: the p-norm of each slice along dim; slices above maxnorm scale by
    maxnorm / (norm + 1e-7)."""
    x, p, dim, maxnorm = args[0], float(args[1]), int(args[2]), float(args[3])
    dt = _float_only(node, "renorm")
    xs = shape(L, x)
    rank = len(xs)
    dim %= max(rank, 1)
    axes = [d for d in range(rank) if d != dim]
    a = X(L, x, dt).fn("abs")
    if p == 2:
        s = X(L, L.op("sum", [(a * a).v], {"axes": axes, "keepdim": True}), dt).fn("sqrt")
    elif p == 1:
        s = X(L, L.op("sum", [a.v], {"axes": axes, "keepdim": True}), dt)
    elif p == math.inf:
        s = X(L, L.op("max", [a.v], {"axes": axes, "keepdim": True}), dt)
    elif p > 0:
        s = X(L, L.op("sum", [(a ** p).v], {"axes": axes, "keepdim": True}), dt) ** (1.0 / p)
    else:
        raise Unsupported(f"renorm with p={p}")
    factor = X.where(s.gt(maxnorm), maxnorm / (s + 1e-7), 1.0)
    return Value(L.op("mul", [x, factor.v]))


def _pnorm_last(L, d, p, dt, axis):
    """The p-norm of d along axis (d: |differences|)."""
    if p == 0:
        return Value(L.op("sum", [L.cast(d.ne(0).v, dt)], {"axes": [axis]}))
    if p == 1:
        return Value(L.op("sum", [d.v], {"axes": [axis]}))
    if p == 2:
        return X(L, L.op("sum", [(d * d).v], {"axes": [axis]}), dt).fn("sqrt").v
    if p == math.inf:
        return Value(L.op("max", [d.v], {"axes": [axis]}))
    return (X(L, L.op("sum", [(d ** p).v], {"axes": [axis]}), dt) ** (1.0 / p)).v


@lowers("aten._cdist_forward.default")
def _cdist(L, node, args, kwargs):
    """The direct form sqrt(sum((a - b)^2)) (torch's own for small inputs; its matmul form for
    large ones is only an approximation of this, so compute_mode 1 (always mm) refuses)."""
    x1, x2, p = args[0], args[1], float(args[2])
    mode = args[3] if len(args) > 3 else None
    dt = _float_only(node, "cdist")
    mode = 0 if mode is None else int(mode)
    if p == 2 and mode == 1:
        raise Unsupported("cdist with compute_mode use_mm_for_euclid_dist")
    s1, s2 = shape(L, x1), shape(L, x2)
    r = len(s1)
    if 0 in s1 or 0 in s2:
        raise Unsupported("cdist of empty inputs")
    if p == 2 and mode == 0 and (s1[-2] > 25 or s2[-2] > 25):
        raise Unsupported("cdist where torch uses its matmul form (more than 25 rows)")
    a = Value(L.op("unsqueeze", [x1], {"dim": r - 1}))  # [..., P, 1, M]
    b = Value(L.op("unsqueeze", [x2], {"dim": r - 2}))  # [..., 1, R, M]
    d = X(L, L.op("sub", [a, b]), dt).fn("abs")
    if p < 0:
        raise Unsupported("cdist with p < 0")
    return Value(L.op("expand", [_pnorm_last(L, d, p, dt, r)],
                      {"shape": list(meta_of(node)[0])}))


@lowers("aten._pdist_forward.default")
def _pdist(L, node, args, kwargs):
    x, p = args[0], float(args[1] if len(args) > 1 else 2.0)
    dt = _float_only(node, "pdist")
    n, m = shape(L, x)
    if n < 2:
        return Value(L.full(0, dt, meta_of(node)[0]))
    ii, jj = np.triu_indices(n, 1)
    a = Value(L.op("gather", [x, const(L, ii.astype(np.int64))], {"axis": 0}))
    b = Value(L.op("gather", [x, const(L, jj.astype(np.int64))], {"axis": 0}))
    d = X(L, L.op("sub", [a, b]), dt).fn("abs")
    if p < 0:
        raise Unsupported("pdist with p < 0")
    return _pnorm_last(L, d, p, dt, 1)
