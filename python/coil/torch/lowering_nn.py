"""Rows of the aten table for convolutions, pooling, batch norm and indexing (imported by
lowering.py, which holds the table and the conventions).

Everything here lowers through coil's existing ops:
  - convolution (1-D and 2-D, grouped, dilated, transposed) -> conv2d (oneDNN), a 1-D one as
    a 2-D one of height 1; a transposed convolution is a conv2d of the input with zeros between
    its elements (`_interleave`), padded by hand (`_place`), with the weight's groups swapped
    and its taps flipped (a gather with a reversed iota);
  - convolution_backward: grad_input is that transposed convolution of grad_output; grad_weight
    is a conv2d of the input (channels as the batch) with grad_output as the weight, stride and
    dilation swapped; grad_bias a sum;
  - max_pool2d_with_indices: the values from max_pool2d; the indices (torch's: the first
    maximum of each window, the last NaN) from one comparison per window tap; its backward adds,
    per tap, the gradient of the outputs whose index is that tap, placed back on the input;
  - native_batch_norm: inference (running statistics) and training (running statistics, when
    given, updated in place through mutation.py); its backward is torch's decomposition;
  - index.Tensor / index_select as gather (index_put is lowering_scatter.py's).
"""

import torch

from .. import DTypeName
from .lowering import Unsupported, Value, lowers, meta_of, _operand, _out_dtype

_BIG = 2**62


def shape(L, v):
    return L.shape(v)


def coil_dt(L, v):
    return L.g.type_of(v).split("[")[0]


def zeros(L, dt, shp, value=0.0):
    return Value(L.op("full", [], {"shape": list(shp), "value": float(value),
                                   "dtype": DTypeName(dt)}))


def reshape(L, v, shp):
    return Value(L.op("reshape", [v], {"shape": list(shp)}))


def slice_(L, v, dim, start, end=None, step=1):
    attrs = {"dim": dim, "start": int(start), "step": int(step)}
    if end is not None:
        attrs["end"] = int(end)
    return Value(L.op("slice", [v], attrs))


def concat(L, parts, dim):
    return parts[0] if len(parts) == 1 else Value(L.op("concat", parts, {"dim": dim}))


def _place(L, v, dim, offset, size, value=0.0):
    """r with r[i] = v[i - offset] along `dim` for i in [0, size), `value` elsewhere."""
    shp = list(shape(L, v))
    n = shp[dim]
    lo, hi = offset, offset + n  # where v lands
    a, b = max(lo, 0), min(hi, size)  # the part of v inside [0, size)
    if b <= a:
        shp[dim] = size
        return zeros(L, coil_dt(L, v), shp, value)
    if a - lo > 0 or b - lo < n:
        v = slice_(L, v, dim, a - lo, b - lo)
    parts = []
    if a > 0:
        shp[dim] = a
        parts.append(zeros(L, coil_dt(L, v), shp, value))
    parts.append(v)
    if size - b > 0:
        shp[dim] = size - b
        parts.append(zeros(L, coil_dt(L, v), shp, value))
    return concat(L, parts, dim)


def _pad(L, v, dim, lo, hi, value=0.0):
    return _place(L, v, dim, lo, shape(L, v)[dim] + lo + hi, value)


def _interleave(L, v, dim, s):
    """s - 1 zeros after each element along `dim` but the last: size (n - 1) * s + 1."""
    shp = list(shape(L, v))
    n = shp[dim]
    if s == 1 or n == 0:
        return v
    u = Value(L.op("unsqueeze", [v], {"dim": dim + 1}))
    zshape = shp[:dim + 1] + [s - 1] + shp[dim + 1:]
    c = concat(L, [u, zeros(L, coil_dt(L, v), zshape)], dim + 1)
    r = reshape(L, c, shp[:dim] + [n * s] + shp[dim + 1:])
    return slice_(L, r, dim, 0, (n - 1) * s + 1)


def _flip(L, v, dim):
    n = shape(L, v)[dim]
    if n <= 1:
        return v
    idx = Value(L.op("iota", [], {"size": n, "start": n - 1, "step": -1,
                                  "dtype": DTypeName("i64")}))
    return Value(L.op("gather", [v, idx], {"axis": dim}))


def _pairs(v, n=2):
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    if len(v) == 1:
        v = v * n
    if len(v) != n or not all(isinstance(e, int) for e in v):
        raise Unsupported(f"window parameter {v!r}")
    return v


def _check_float(node, what):
    dt = _out_dtype(node) if not isinstance(node, torch.dtype) else node
    if dt not in (torch.float32, torch.float16, torch.bfloat16):
        raise Unsupported(f"{what} in {dt} (coil's conv2d computes f32, f16 and bf16)")


def _conv2d(L, x, w, b, stride, padding, dilation, groups):
    inputs = [x, w] + ([b] if b is not None else [])
    return Value(L.op("conv2d", inputs, {"stride": list(stride), "padding": list(padding),
                                         "dilation": list(dilation), "groups": int(groups)}))


def _conv_transpose2d(L, x, w, stride, padding, dilation, output_padding, groups):
    """torch's conv_transpose2d(x [N, Cin, H, W], w [Cin, OCg, KH, KW]) without bias."""
    cin, ocg, kh, kw = shape(L, w)
    g = groups
    v = x
    for i, dim in enumerate((2, 3)):
        k = (kh, kw)[i]
        v = _interleave(L, v, dim, stride[i])
        lo = dilation[i] * (k - 1) - padding[i]
        v = _pad(L, v, dim, lo, lo + output_padding[i])
    wt = reshape(L, w, [g, cin // g, ocg, kh, kw])
    wt = Value(L.op("permute", [wt], {"dims": [0, 2, 1, 3, 4]}))
    wt = reshape(L, wt, [g * ocg, cin // g, kh, kw])
    wt = _flip(L, _flip(L, wt, 2), 3)
    return _conv2d(L, v, wt, None, (1, 1), (0, 0), dilation, g)


def _conv_args(args):
    stride, padding, dilation = args[3], args[4], args[5]
    return [list(stride), list(padding), list(dilation)]


@lowers("aten.convolution.default")
def _convolution(L, node, args, kwargs):
    x, w, b = args[0], args[1], args[2]
    stride, padding, dilation = _conv_args(args)
    transposed, output_padding, groups = bool(args[6]), list(args[7]), int(args[8])
    _check_float(node, "convolution")
    rank = L.rank(x)
    if rank == 3:  # 1-D: a 2-D convolution of height 1
        xs, ws = shape(L, x), shape(L, w)
        x = reshape(L, x, [xs[0], xs[1], 1, xs[2]])
        w = reshape(L, w, [ws[0], ws[1], 1, ws[2]])
        stride, padding, dilation = [1] + stride, [0] + padding, [1] + dilation
        output_padding = [0] + list(output_padding)
    elif rank != 4:
        raise Unsupported(f"convolution of a rank-{rank} input (coil lowers 1-D and 2-D)")
    stride, padding, dilation = _pairs(stride), _pairs(padding), _pairs(dilation)
    if transposed:
        out = _conv_transpose2d(L, x, w, stride, padding, dilation, _pairs(output_padding),
                                groups)
        if b is not None:
            oc = shape(L, out)[1]
            out = Value(L.op("add", [out, reshape(L, b, [1, oc, 1, 1])]))
    else:
        out = _conv2d(L, x, w, b, stride, padding, dilation, groups)
    want = list(meta_of(node)[0])
    return reshape(L, out, want) if list(shape(L, out)) != want else out


@lowers("aten.convolution_backward.default")
def _convolution_backward(L, node, args, kwargs):
    go, x, w = args[0], args[1], args[2]
    stride, padding, dilation = _conv_args(args[1:])
    transposed, groups, mask = bool(args[7]), int(args[9]), list(args[10])
    if transposed:
        raise Unsupported("the backward of a transposed convolution")
    _check_float(meta_of(node.args[1])[1], "convolution_backward")
    rank = L.rank(x)
    xs0, ws0 = shape(L, x), shape(L, w)
    if rank == 3:
        go = reshape(L, go, [shape(L, go)[0], shape(L, go)[1], 1, shape(L, go)[2]])
        x = reshape(L, x, [xs0[0], xs0[1], 1, xs0[2]])
        w = reshape(L, w, [ws0[0], ws0[1], 1, ws0[2]])
        stride, padding, dilation = [1] + stride, [0] + padding, [1] + dilation
    elif rank != 4:
        raise Unsupported(f"convolution_backward of a rank-{rank} input")
    s, p, d = _pairs(stride), _pairs(padding), _pairs(dilation)
    n, c, h, wd = shape(L, x)
    oc, cg, kh, kw = shape(L, w)
    _, _, oh, ow = shape(L, go)
    g = groups
    gi = gw = gb = None
    if mask[0]:
        extra = [(h, wd)[i] - ((oh, ow)[i] - 1) * s[i] + 2 * p[i] - d[i] * ((kh, kw)[i] - 1) - 1
                 for i in range(2)]
        gi = _conv_transpose2d(L, go, w, s, p, d, extra, g)
        gi = reshape(L, gi, xs0) if rank == 3 else gi
    if mask[1]:
        # grad_w[g*OCg+o, c, kh, kw] = sum_{n,oh,ow} go[n, g*OCg+o, oh, ow] * x[n, g*Cg+c, ...]:
        # a conv2d over batch Cg of input [Cg, G*N, H, W] and weight [OC, N, OH, OW].
        xi = reshape(L, x, [n, g, cg, h, wd])
        xi = Value(L.op("permute", [xi], {"dims": [2, 1, 0, 3, 4]}))
        xi = reshape(L, xi, [cg, g * n, h, wd])
        wi = Value(L.op("permute", [go], {"dims": [1, 0, 2, 3]}))
        r = _conv2d(L, xi, wi, None, d, p, s, g)  # [Cg, OC, KH', KW']
        rs = shape(L, r)
        if rs[2] != kh:
            r = slice_(L, r, 2, 0, kh)
        if rs[3] != kw:
            r = slice_(L, r, 3, 0, kw)
        gw = Value(L.op("permute", [r], {"dims": [1, 0, 2, 3]}))
        gw = reshape(L, gw, ws0) if rank == 3 else gw
    if mask[2]:
        gb = Value(L.op("sum", [go], {"axes": [0, 2, 3], "keepdim": False}))
    return (gi, gw, gb)


# ---- pooling --------------------------------------------------------------------------------

def _pool_params(args, kwargs):
    kernel = _pairs(args[1])
    stride = _pairs(args[2]) if len(args) > 2 and args[2] else kernel
    padding = _pairs(args[3]) if len(args) > 3 else [0, 0]
    dilation = _pairs(args[4]) if len(args) > 4 else [1, 1]
    ceil_mode = bool(args[5]) if len(args) > 5 else False
    return kernel, stride, padding, dilation, ceil_mode


def _tap_index(L, rank, oh, ow, w_size, kh, kw, stride, padding, dilation):
    """The flat input index (row * W + col) of tap (kh, kw) of each output [OH, OW] window, and
    whether it lies inside the input (i64 [OH, OW], bool [OH, OW]) broadcastable to rank."""
    def axis(size, k, i):
        return Value(L.op("iota", [], {"size": size, "start": k * dilation[i] - padding[i],
                                       "step": stride[i], "dtype": DTypeName("i64")}))
    rows = reshape(L, axis(oh, kh, 0), [oh, 1])
    cols = reshape(L, axis(ow, kw, 1), [1, ow])
    flat = Value(L.op("add", [Value(L.op("mul", [rows, zeros(L, "i64", [], w_size)])), cols]))
    return flat, rows, cols


@lowers("aten.max_pool2d_with_indices.default")
def _max_pool2d_with_indices(L, node, args, kwargs):
    x = args[0]
    kernel, stride, padding, dilation, ceil_mode = _pool_params(args, kwargs)
    rank = L.rank(x)
    xs = shape(L, x)
    h, wd = xs[-2], xs[-1]
    out = Value(L.op("max_pool2d", [x], {"kernel": kernel, "stride": stride, "padding": padding,
                                         "dilation": dilation, "ceil_mode": ceil_mode}))
    oh, ow = shape(L, out)[-2:]
    dt = coil_dt(L, x)
    # The input padded with -inf so that every tap's strided slice has OH x OW elements.
    need = [((oh, ow)[i] - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1
            for i in range(2)]
    xp = x
    for i, dim in enumerate((rank - 2, rank - 1)):
        size = (h, wd)[i]
        xp = _pad(L, xp, dim, padding[i], max(0, need[i] - size - padding[i]), float("-inf"))
    idx = zeros(L, "i64", shape(L, out))
    found = zeros(L, "bool", shape(L, out))
    for kh in range(kernel[0]):
        for kw in range(kernel[1]):
            t = slice_(L, xp, rank - 2, kh * dilation[0], kh * dilation[0] + need[0] - (
                kernel[0] - 1) * dilation[0], stride[0])
            t = slice_(L, t, rank - 1, kw * dilation[1], kw * dilation[1] + need[1] - (
                kernel[1] - 1) * dilation[1], stride[1])
            flat, rows, cols = _tap_index(L, rank, oh, ow, wd, kh, kw, stride, padding,
                                          dilation)
            inside = Value(L.op("logical_and", [
                Value(L.op("logical_and", [Value(L.op("ge", [rows, zeros(L, "i64", [])])),
                                           Value(L.op("lt", [rows, zeros(L, "i64", [], h)]))])),
                Value(L.op("logical_and", [Value(L.op("ge", [cols, zeros(L, "i64", [])])),
                                           Value(L.op("lt", [cols, zeros(L, "i64", [], wd)]))]))]))
            eq = Value(L.op("eq", [t, out]))
            first = Value(L.op("logical_and", [eq, Value(L.op("logical_not", [found]))]))
            take = Value(L.op("logical_and", [Value(L.op("logical_or", [
                first, Value(L.op("isnan", [t]))])), inside]))
            idx = Value(L.op("where", [take, Value(L.op("expand", [flat], {
                "shape": list(shape(L, out))})), idx]))
            found = Value(L.op("logical_or", [found, Value(L.op("logical_and", [eq, inside]))]))
    del dt
    return (out, idx)


@lowers("aten.max_pool2d_with_indices_backward.default")
def _max_pool2d_with_indices_backward(L, node, args, kwargs):
    go, x = args[0], args[1]
    kernel, stride, padding, dilation, ceil_mode = _pool_params(args[1:], {})
    indices = args[7]
    rank = L.rank(x)
    xs = shape(L, x)
    h, wd = xs[-2], xs[-1]
    oh, ow = shape(L, go)[-2:]
    dt = coil_dt(L, go)
    total = None
    for kh in range(kernel[0]):
        for kw in range(kernel[1]):
            flat, _, _ = _tap_index(L, rank, oh, ow, wd, kh, kw, stride, padding, dilation)
            hit = Value(L.op("eq", [indices, flat]))
            v = Value(L.op("where", [hit, go, zeros(L, dt, [])]))
            for i, dim in enumerate((rank - 2, rank - 1)):
                v = _interleave(L, v, dim, stride[i])
                v = _place(L, v, dim, (kh, kw)[i] * dilation[i] - padding[i], (h, wd)[i])
            total = v if total is None else Value(L.op("add", [total, v]))
    return total


# ---- batch norm -----------------------------------------------------------------------------

def _metas(node):
    val = node.meta.get("val", node.meta.get("tensor_meta"))
    if not isinstance(val, (tuple, list)):
        raise Unsupported(f"{node.name}: no shape information for its outputs")
    return [(tuple(v.shape), v.dtype) for v in val]


@lowers("aten.native_batch_norm.default", "aten._native_batch_norm_legit_no_training.default",
        "aten._native_batch_norm_legit.default", "aten._native_batch_norm_legit.no_stats")
def _native_batch_norm(L, node, args, kwargs):
    target = str(node.target)
    x, weight, bias = args[0], args[1], args[2]
    if target == "aten._native_batch_norm_legit_no_training.default":
        rm, rv, training, eps = args[3], args[4], False, args[6]
    elif target == "aten._native_batch_norm_legit.no_stats":
        rm = rv = None
        training, eps = bool(args[3]), args[5]
    else:
        rm, rv, training, eps = args[3], args[4], bool(args[5]), args[7]
    if training and (rm is None) != (rv is None):
        raise Unsupported("batch norm in training mode with only one running statistic")
    if not training and (rm is None or rv is None):
        raise Unsupported("batch norm in inference mode without running statistics")
    metas = _metas(node)
    dt = metas[0][1]
    rank = L.rank(x)
    xs = shape(L, x)
    c = xs[1] if rank > 1 else 1
    bshape = [1, c] + [1] * (rank - 2)
    axes = [0] + list(range(2, rank))
    xf = L.cast(x, torch.float32) if dt in (torch.float16, torch.bfloat16) else x
    cdt = torch.float32 if dt in (torch.float16, torch.bfloat16) else dt
    if training:
        mean = Value(L.op("mean", [xf], {"axes": axes, "keepdim": False}))
        var = Value(L.op("var", [xf], {"axes": axes, "keepdim": False, "correction": 0.0}))
    else:
        mean, var = L.cast(rm, cdt), L.cast(rv, cdt)
    invstd = Value(L.op("rsqrt", [Value(L.op("add", [var, _operand(L, float(eps), cdt)]))]))
    y = Value(L.op("mul", [Value(L.op("sub", [xf, reshape(L, mean, bshape)])),
                           reshape(L, invstd, bshape)]))
    if weight is not None:
        y = Value(L.op("mul", [y, reshape(L, L.cast(weight, cdt), bshape)]))
    if bias is not None:
        y = Value(L.op("add", [y, reshape(L, L.cast(bias, cdt), bshape)]))
    y = L.cast(y, dt)
    if training and rm is not None:
        _update_running_stats(L, node, xf, mean, float(args[6]), axes)
    outs = [y]
    for v, (shp, mdt) in zip((mean, invstd), metas[1:3]):
        if 0 in shp:  # torch's CPU inference gives empty save_mean / save_invstd
            outs.append(zeros(L, coil_dt(L, v), shp))
        else:
            outs.append(L.cast(reshape(L, v, shp), mdt))
    return tuple(outs) + tuple(None for _ in metas[3:])


def _update_running_stats(L, node, x, mean, momentum, axes):
    """Training mode's in-place update of running_mean/running_var (node.args[3], [4]), as
    torch's CPU kernel: (1 - momentum) * running + momentum * batch statistic, the variance
    unbiased (n - 1: NaN for one element per channel, as torch); written through mutation.py."""
    from .mutation import write
    var = Value(L.op("var", [x], {"axes": axes, "keepdim": False, "correction": 1.0}))
    for stat, batch in ((node.args[3], mean), (node.args[4], var)):
        sdt = meta_of(stat)[1]
        cdt = torch.float64 if sdt == torch.float64 else torch.float32
        old = L.cast(L.env[stat], cdt)
        new = Value(L.op("add", [Value(L.op("mul", [old, _operand(L, 1.0 - momentum, cdt)])),
                                 Value(L.op("mul", [L.cast(batch, cdt),
                                                    _operand(L, momentum, cdt)]))]))
        write(L, node, stat, L.cast(new, sdt))


# ---- indexing -------------------------------------------------------------------------------

def _wrap_index(L, idx, n):
    """Negative indices count from the end (as torch's)."""
    dt = coil_dt(L, idx)
    neg = Value(L.op("lt", [idx, zeros(L, dt, [])]))
    return Value(L.op("where", [neg, Value(L.op("add", [idx, zeros(L, dt, [], n)])), idx]))


def _one_index(node_indices, indices):
    """(position, value) of the only tensor among index_put/index's indices, or Unsupported."""
    present = [(i, v) for i, v in enumerate(indices) if v is not None]
    if len(present) != 1:
        raise Unsupported(f"indexing with {len(present)} index tensors (coil lowers one)")
    pos, v = present[0]
    n = node_indices[pos]
    dt = meta_of(n)[1]
    if dt not in (torch.int64, torch.int32):
        raise Unsupported(f"indexing with a {dt} index (coil lowers integer indices)")
    return pos, v


def _adjacent_indices(L, node, x, indices):
    """x[..., i0, i1, ..., ik-1, ...] for integer index tensors of adjacent dims p..p+k-1
    (broadcast together; None, i.e. a full slice, elsewhere): one gather along dim p of x with
    those dims merged, at the flat index. Non-adjacent index tensors (torch moves the result's
    indexed dims first) refuse."""
    present = [i for i, v in enumerate(indices) if v is not None]
    p, k = present[0], len(present)
    if present != list(range(p, p + k)):
        raise Unsupported("index tensors on non-adjacent dims")
    for n in node.args[1]:
        if n is not None and meta_of(n)[1] not in (torch.int64, torch.int32):
            raise Unsupported("indexing with a non-integer index")
    xs = list(shape(L, x))
    if 0 in xs[p:p + k]:
        raise Unsupported("indexing an empty dim")
    st = _strides(xs[p:p + k])
    lin = None
    for j in range(k):
        idx = indices[p + j]
        term = Value(L.op("mul", [_wrap_index(L, L.cast(idx, torch.int64), xs[p + j]),
                                  zeros(L, "i64", [], st[j])]))
        lin = term if lin is None else Value(L.op("add", [lin, term]))
    merged = 1
    for s in xs[p:p + k]:
        merged *= s
    flat = reshape(L, x, xs[:p] + [merged] + xs[p + k:])
    return Value(L.op("gather", [flat, lin], {"axis": p}))


@lowers("aten.index.Tensor")
def _index(L, node, args, kwargs):
    x, indices = args[0], args[1]
    if sum(1 for v in indices if v is not None) > 1:
        return _adjacent_indices(L, node, x, indices)
    pos, idx = _one_index(node.args[1], indices)
    n = shape(L, x)[pos]
    if n == 0:
        raise Unsupported("indexing an empty dim")
    return Value(L.op("gather", [x, _wrap_index(L, idx, n)], {"axis": pos}))


@lowers("aten.index_select.default")
def _index_select(L, node, args, kwargs):
    x, dim, idx = args[0], int(args[1]), args[2]
    if L.rank(x) == 0:  # the index can only be 0 (or -1): x itself, in the result's shape
        return Value(L.op("reshape", [x], {"shape": list(meta_of(node)[0])}))
    dim = dim % L.rank(x)
    n = shape(L, x)[dim]
    if n == 0:
        raise Unsupported("index_select of an empty dim")
    if L.rank(idx) == 0:
        idx = reshape(L, idx, [1])
    return Value(L.op("gather", [x, _wrap_index(L, idx, n)], {"axis": dim}))


@lowers("aten.masked_fill.Scalar", "aten.masked_fill.Tensor")
def _masked_fill(L, node, args, kwargs):
    x, mask, value = args[0], args[1], args[2]
    dt = _out_dtype(node)
    return Value(L.op("where", [L.cast(mask, torch.bool), _operand(L, value, dt), x]))


# ---- splits ---------------------------------------------------------------------------------

@lowers("aten.split.Tensor", "aten.split_with_sizes.default")
def _split(L, node, args, kwargs):
    x = args[0]
    dim = args[2] if len(args) > 2 else kwargs.get("dim", 0)
    dim = int(dim) % max(L.rank(x), 1)
    n = shape(L, x)[dim]
    if str(node.target) == "aten.split.Tensor":
        size = int(args[1])
        sizes = [min(size, n - s) for s in range(0, n, size)] if size > 0 else [n]
    else:
        sizes = [int(s) for s in args[1]]
    outs, start = [], 0
    for s in sizes:
        outs.append(slice_(L, x, dim, start, start + s))
        start += s
    return tuple(outs)


@lowers("aten.unbind.int")
def _unbind(L, node, args, kwargs):
    x = args[0]
    dim = int(args[1] if len(args) > 1 else kwargs.get("dim", 0)) % L.rank(x)
    xs = list(shape(L, x))
    out_shape = xs[:dim] + xs[dim + 1:]
    return tuple(reshape(L, slice_(L, x, dim, i, i + 1), out_shape) for i in range(xs[dim]))


# ---- scatters of views (the backward of slice and select) -----------------------------------

def _slice_bounds(n, start, end, step):
    start = 0 if start is None else int(start)
    end = n if end is None or end >= _BIG else int(end)
    start = max(0, min(n, start + n if start < 0 else start))
    end = max(start, min(n, end + n if end < 0 else end))
    return start, end, int(step)


def _scatter_into(L, x, src, dim, start, step):
    """x with src's elements along `dim` at start, start + step, ... (src already sized)."""
    n = shape(L, x)[dim]
    m = shape(L, src)[dim]
    if m == 0:
        return x
    placed = _place(L, _interleave(L, src, dim, step), dim, start, n)
    ones_shape = [1] * L.rank(x)
    ones_shape[dim] = m
    mask = _place(L, _interleave(L, zeros(L, "bool", ones_shape, 1.0), dim, step), dim, start, n)
    return Value(L.op("where", [mask, placed, x]))


@lowers("aten.slice_scatter.default")
def _slice_scatter(L, node, args, kwargs):
    x, src = args[0], args[1]
    dim = int(args[2] if len(args) > 2 else kwargs.get("dim", 0)) % L.rank(x)
    start = args[3] if len(args) > 3 else kwargs.get("start")
    end = args[4] if len(args) > 4 else kwargs.get("end")
    step = args[5] if len(args) > 5 else kwargs.get("step", 1)
    start, end, step = _slice_bounds(shape(L, x)[dim], start, end, step)
    return _scatter_into(L, x, L.cast(src, _out_dtype(node)), dim, start, step)


@lowers("aten.select_scatter.default")
def _select_scatter(L, node, args, kwargs):
    x, src, dim, index = args[0], args[1], int(args[2]), int(args[3])
    dim %= L.rank(x)
    n = shape(L, x)[dim]
    index = index + n if index < 0 else index
    src = Value(L.op("unsqueeze", [L.cast(src, _out_dtype(node))], {"dim": dim}))
    return _scatter_into(L, x, src, dim, index, 1)


# ---- prims (what torch._refs-based decompositions leave) and more aten composites -----------

from .lowering import _binary, _bitwise, _compute_dtype  # noqa: E402

for _name, _op in [("add", "add"), ("sub", "sub"), ("mul", "mul"), ("maximum", "maximum"),
                   ("minimum", "minimum"), ("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"),
                   ("gt", "gt"), ("ge", "ge"), ("fmod", "fmod"), ("pow", "pow")]:
    lowers(f"prims.{_name}.default")(_binary(_op))
for _name in ["neg", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "sigmoid",
              "tanh", "erf", "sin", "cos", "abs", "floor", "ceil", "sign"]:
    lowers(f"prims.{_name}.default")(
        lambda L, node, args, kwargs, _n=_name: Value(L.op(_n, [
            _operand(L, args[0], _out_dtype(node))])))


@lowers("prims.div.default")
def _prims_div(L, node, args, kwargs):
    dt = _out_dtype(node)
    if not dt.is_floating_point:  # truncating division (lowering_math.int_trunc_div)
        from .lowering_math import int_trunc_div
        cdt = _compute_dtype(node, args[:2])
        if cdt.is_floating_point or dt == torch.bool:
            raise Unsupported(f"prims.div of {cdt} into {dt}")
        if isinstance(args[1], (int, float)) and args[1] == 0:
            raise Unsupported("integer division by zero")
        return int_trunc_div(L, _operand(L, args[0], cdt), _operand(L, args[1], cdt), dt)
    return _binary("div")(L, node, args, kwargs)


@lowers("prims.to_dtype.default")
def _to_dtype(L, node, args, kwargs):
    return Value(L.cast(args[0], _out_dtype(node)))


@lowers("prims.empty_strided.default", "aten.empty.memory_format", "aten.empty_like.default",
        "aten.new_empty.default", "aten.new_empty_strided.default", "aten.empty_strided.default")
def _empty(L, node, args, kwargs):
    """Uninitialized memory in torch: zeros here (a program may not read it before writing)."""
    shp, dt = meta_of(node)
    return Value(L.full(0, dt, shp))


@lowers("prims.arange.default", "aten.arange.start_step", "aten.arange.start",
        "aten.arange.default")
def _arange(L, node, args, kwargs):
    shp, dt = meta_of(node)
    target = str(node.target)
    if target == "aten.arange.default":
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if len(args) > 2 else kwargs.get("step", 1)
    if any(isinstance(v, Value) for v in (start, step)):
        raise Unsupported("arange with tensor bounds")
    if dt.is_floating_point or isinstance(start, float) or isinstance(step, float):
        # torch computes start + i * step in double, then rounds to the dtype
        i = Value(L.op("iota", [], {"size": shp[0], "dtype": DTypeName("f64")}))
        v = Value(L.op("add", [Value(L.op("mul", [i, L.full(float(step), torch.float64)])),
                               L.full(float(start), torch.float64)]))
        return Value(L.cast(v, dt))
    return Value(L.op("iota", [], {"size": shp[0], "start": int(start), "step": int(step),
                                   "dtype": DTypeName(coil_dt_name(dt))}))


def coil_dt_name(dt):
    from .. import coil_dtype
    return coil_dtype(dt)


@lowers("prims.sum.default", "prims.var.default")
def _prims_reduce(L, node, args, kwargs):
    x, dims = args[0], args[1]
    attrs = {"keepdim": False}
    if dims is not None:
        attrs["axes"] = [int(d) for d in dims]
    if dims is not None and len(dims) == 0:
        return Value(L.cast(x, _out_dtype(node)))
    if str(node.target) == "prims.var.default":
        attrs["correction"] = float(kwargs.get("correction", args[2] if len(args) > 2 else 1))
        return Value(L.cast(Value(L.op("var", [x], attrs)), _out_dtype(node)))
    return Value(L.op("sum", [L.cast(x, _out_dtype(node))], attrs))


@lowers("prims.rev.default", "aten.flip.default")
def _rev(L, node, args, kwargs):
    v = args[0]
    for d in args[1]:
        v = _flip(L, v, int(d) % L.rank(v))
    return v


def _remainder(L, a, b):
    r = Value(L.op("fmod", [a, b]))
    zero = zeros(L, coil_dt(L, r), [])
    fix = Value(L.op("logical_and", [
        Value(L.op("ne", [r, zero])),
        Value(L.op("ne", [Value(L.op("lt", [r, zero])), Value(L.op("lt", [b, zero]))]))]))
    return Value(L.op("where", [fix, Value(L.op("add", [r, b])), r]))


@lowers("prims.remainder.default", "aten.remainder.Tensor", "aten.remainder.Scalar")
def _remainder_row(L, node, args, kwargs):
    dt = _compute_dtype(node, args[:2])
    a, b = _operand(L, args[0], dt), _operand(L, args[1], dt)
    return Value(L.cast(_remainder(L, a, b), _out_dtype(node)))


@lowers("prims.signbit.default", "aten.signbit.default")
def _signbit(L, node, args, kwargs):
    x = args[0]
    if not meta_of(node.args[0])[1].is_floating_point:
        return Value(L.op("lt", [x, zeros(L, coil_dt(L, x), [])]))
    zero = zeros(L, coil_dt(L, x), [])
    negzero = Value(L.op("logical_and", [
        Value(L.op("eq", [x, zero])), Value(L.op("lt", [Value(L.op("reciprocal", [x])), zero]))]))
    return Value(L.op("logical_or", [Value(L.op("lt", [x, zero])), negzero]))


def _fmaxmin(which):
    def row(L, node, args, kwargs):
        dt = _compute_dtype(node, args[:2])
        a, b = _operand(L, args[0], dt), _operand(L, args[1], dt)
        m = Value(L.op(which, [a, b]))
        if dt.is_floating_point:
            m = Value(L.op("where", [Value(L.op("isnan", [a])), b, Value(L.op(
                "where", [Value(L.op("isnan", [b])), a, m]))]))
        return Value(L.cast(m, _out_dtype(node)))
    return row


lowers("prims.fmax.default", "aten.fmax.default")(_fmaxmin("maximum"))
lowers("prims.fmin.default", "aten.fmin.default")(_fmaxmin("minimum"))


@lowers("aten.round.decimals")
def _round_decimals(L, node, args, kwargs):
    x = args[0]
    d = int(kwargs.get("decimals", args[1] if len(args) > 1 else 0))
    dt = _out_dtype(node)
    if d == 0:
        return Value(L.op("round", [x]))
    scale = _operand(L, 10.0 ** abs(d), dt)
    if d > 0:
        return Value(L.op("div", [Value(L.op("round", [Value(L.op("mul", [x, scale]))])), scale]))
    return Value(L.op("mul", [Value(L.op("round", [Value(L.op("div", [x, scale]))])), scale]))


@lowers("aten.avg_pool2d.default")
def _avg_pool2d(L, node, args, kwargs):
    kernel = _pairs(args[1])
    stride = _pairs(args[2]) if len(args) > 2 and args[2] else kernel
    padding = _pairs(args[3]) if len(args) > 3 else [0, 0]
    ceil_mode = bool(args[4]) if len(args) > 4 else False
    include_pad = bool(args[5]) if len(args) > 5 else True
    divisor = args[6] if len(args) > 6 else kwargs.get("divisor_override")
    if divisor is not None:
        raise Unsupported("avg_pool2d with divisor_override")
    return Value(L.op("avg_pool2d", [args[0]], {
        "kernel": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode,
        "count_include_pad": include_pad}))


@lowers("aten.max.dim", "aten.min.dim")
def _max_dim(L, node, args, kwargs):
    x, dim = args[0], int(args[1])
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    if L.rank(x) == 0:  # the value itself, index 0
        return (x, zeros(L, "i64", []))
    which = "max" if "max" in str(node.target) else "min"
    vals = Value(L.op(which, [x], {"axes": [dim], "keepdim": keepdim}))
    idx = Value(L.op("arg" + which, [x], {"axis": dim, "keepdim": keepdim}))
    return (vals, idx)


def _scaled_sum(L, node, self_, prod, beta, alpha):
    dt = _out_dtype(node)
    if alpha != 1:
        prod = Value(L.op("mul", [prod, _operand(L, alpha, dt)]))
    if beta == 0:  # torch ignores self (its NaN and inf too)
        return Value(L.op("expand", [prod], {"shape": list(meta_of(node)[0])}))
    s = self_ if beta == 1 else Value(L.op("mul", [self_, _operand(L, beta, dt)]))
    return Value(L.op("add", [s, prod]))


@lowers("aten.addmv.default", "aten.baddbmm.default", "aten.addbmm.default",
        "aten.addr.default")
def _addmv(L, node, args, kwargs):
    self_, a, b = args[0], args[1], args[2]
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    target = str(node.target)
    if target == "aten.addr.default":
        prod = Value(L.op("mul", [Value(L.op("unsqueeze", [a], {"dim": 1})),
                                  Value(L.op("unsqueeze", [b], {"dim": 0}))]))
    else:
        prod = Value(L.op("matmul", [a, b]))
        if target == "aten.addbmm.default":
            prod = Value(L.op("sum", [prod], {"axes": [0], "keepdim": False}))
    return _scaled_sum(L, node, self_, prod, beta, alpha)


def _take(L, x, lin):
    """x.flatten()[lin] (lin: i64 indices of any shape)."""
    n = 1
    for s in shape(L, x):
        n *= s
    return Value(L.op("gather", [reshape(L, x, [n]), lin], {"axis": 0}))


def _strides(shp):
    st, acc = [], 1
    for s in reversed(shp):
        st.append(acc)
        acc *= s
    return list(reversed(st))


@lowers("aten.gather.default")
def _torch_gather(L, node, args, kwargs):
    """torch.gather (take along a dim): a flat gather at index * stride[dim] + the other
    coordinates."""
    x, dim, index = args[0], int(args[1]), args[2]
    if kwargs.get("sparse_grad") or (len(args) > 3 and args[3]):
        raise Unsupported("gather with sparse_grad")
    xs, ish = shape(L, x), shape(L, index)
    rank = len(ish)
    if 0 in ish:
        return Value(L.full(0, _out_dtype(node), ish))
    if rank == 0 and len(xs) == 0:  # the index can only be 0 (or -1)
        return x
    if rank == 0 or len(xs) != rank or 0 in xs:
        raise Unsupported("gather of a 0-d or empty tensor")
    dim %= rank
    st = _strides(xs)
    lin = Value(L.op("mul", [L.cast(index, torch.int64), zeros(L, "i64", [], st[dim])]))
    for j in range(rank):
        if j == dim:
            continue
        io = Value(L.op("iota", [], {"size": ish[j], "step": st[j], "dtype": DTypeName("i64")}))
        lin = Value(L.op("add", [lin, reshape(L, io, [ish[j] if k == j else 1
                                                        for k in range(rank)])]))
    return _take(L, x, lin)


@lowers("aten.fill.Scalar", "aten.fill.Tensor")
def _fill(L, node, args, kwargs):
    shp, dt = meta_of(node)
    v = args[1]
    if isinstance(v, Value):
        return Value(L.op("expand", [L.cast(v, dt)], {"shape": list(shp)}))
    return Value(L.full(v, dt, shp))


@lowers("prims.broadcast_in_dim.default")
def _broadcast_in_dim(L, node, args, kwargs):
    x, out_shape, bdims = args[0], list(args[1]), list(args[2])
    xs = shape(L, x)
    mid = [1] * len(out_shape)
    for i, d in enumerate(bdims):
        mid[d] = xs[i]
    return Value(L.op("expand", [reshape(L, x, mid)], {"shape": out_shape}))


@lowers("prims.where.default")
def _prims_where(L, node, args, kwargs):
    dt = _out_dtype(node)
    return Value(L.op("where", [L.cast(args[0], torch.bool), _operand(L, args[1], dt),
                                _operand(L, args[2], dt)]))


lowers("prims.bitwise_and.default", "prims.bitwise_or.default", "prims.bitwise_xor.default",
       "prims.bitwise_not.default")(_bitwise)


@lowers("prims.trunc.default", "aten.trunc.default")
def _trunc(L, node, args, kwargs):
    x = args[0]
    if not _out_dtype(node).is_floating_point:
        return x
    neg = Value(L.op("lt", [x, zeros(L, coil_dt(L, x), [])]))
    return Value(L.op("where", [neg, Value(L.op("ceil", [x])), Value(L.op("floor", [x]))]))


@lowers("aten.logaddexp.default")
def _logaddexp(L, node, args, kwargs):
    dt = _compute_dtype(node, args[:2])
    if not dt.is_floating_point:
        raise Unsupported("logaddexp of integers")
    a, b = _operand(L, args[0], dt), _operand(L, args[1], dt)
    m = Value(L.op("maximum", [a, b]))
    d = Value(L.op("abs", [Value(L.op("sub", [a, b]))]))
    r = Value(L.op("add", [m, Value(L.op("log1p", [Value(L.op("exp", [
        Value(L.op("neg", [d]))]))]))]))
    # torch: equal infinities give that infinity (their difference is NaN)
    same_inf = Value(L.op("logical_and", [Value(L.op("eq", [a, b])), Value(L.op("eq", [
        Value(L.op("abs", [a])), zeros(L, coil_dt(L, a), [], float("inf"))]))]))
    return Value(L.cast(Value(L.op("where", [same_inf, a, r])), _out_dtype(node)))


@lowers("aten.constant_pad_nd.default")
def _constant_pad_nd(L, node, args, kwargs):
    """pad = [last dim's (before, after), the one before's, ...]; negative pads crop."""
    x, pad = args[0], list(args[1])
    value = args[2] if len(args) > 2 else kwargs.get("value", 0)
    if isinstance(value, Value):
        raise Unsupported("constant_pad_nd with a tensor value")
    rank = L.rank(x)
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise Unsupported(f"constant_pad_nd with pad {pad} on a rank-{rank} tensor")
    for i in range(len(pad) // 2):
        dim = rank - 1 - i
        x = _pad(L, x, dim, int(pad[2 * i]), int(pad[2 * i + 1]), float(value))
    return x


@lowers("prims.scalar_tensor.default")
def _prims_scalar_tensor(L, node, args, kwargs):
    return Value(L.full(args[0], _out_dtype(node)))


@lowers("aten.vdot.default", "aten.dot.default")
def _vdot(L, node, args, kwargs):
    dt = _out_dtype(node)
    prod = Value(L.op("mul", [L.cast(args[0], dt), L.cast(args[1], dt)]))
    return Value(L.op("sum", [prod], {"keepdim": False}))


@lowers("aten.nansum.default")
def _nansum(L, node, args, kwargs):
    x = args[0]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = bool(args[2] if len(args) > 2 else kwargs.get("keepdim", False))
    dt = _out_dtype(node)
    x = L.cast(x, dt)
    if dt.is_floating_point:
        x = Value(L.op("where", [Value(L.op("isnan", [x])), zeros(L, coil_dt(L, x), []), x]))
    attrs = {"keepdim": keepdim}
    if dims:
        attrs["axes"] = [int(d) for d in ([dims] if isinstance(dims, int) else dims)]
    return Value(L.op("sum", [x], attrs))


@lowers("aten.hypot.default", "prims.hypot.default")
def _hypot(L, node, args, kwargs):
    dt = _compute_dtype(node, args[:2])
    a, b = _operand(L, args[0], dt), _operand(L, args[1], dt)
    a2 = Value(L.op("mul", [a, a]))
    b2 = Value(L.op("mul", [b, b]))
    return Value(L.cast(Value(L.op("sqrt", [Value(L.op("add", [a2, b2]))])), _out_dtype(node)))


@lowers("aten.pixel_shuffle.default", "aten.pixel_unshuffle.default")
def _pixel_shuffle(L, node, args, kwargs):
    x, r = args[0], int(args[1])
    xs = list(shape(L, x))
    lead, (c, h, w) = xs[:-3], xs[-3:]
    k = len(lead)
    if str(node.target) == "aten.pixel_shuffle.default":
        v = reshape(L, x, lead + [c // (r * r), r, r, h, w])
        perm = list(range(k)) + [k, k + 3, k + 1, k + 4, k + 2]
    else:
        v = reshape(L, x, lead + [c, h // r, r, w // r, r])
        perm = list(range(k)) + [k, k + 2, k + 4, k + 1, k + 3]
    v = Value(L.op("permute", [v], {"dims": perm}))
    return reshape(L, v, list(meta_of(node)[0]))


@lowers("aten.narrow_copy.default", "aten.narrow.default")
def _narrow(L, node, args, kwargs):
    x, dim, start, length = args[0], int(args[1]), int(args[2]), int(args[3])
    dim %= L.rank(x)
    n = shape(L, x)[dim]
    start = start + n if start < 0 else start
    return slice_(L, x, dim, start, start + length)


@lowers("aten.take.default")
def _take_row(L, node, args, kwargs):
    x, idx = args[0], args[1]
    n = 1
    for s in shape(L, x):
        n *= s
    if n == 0:
        raise Unsupported("take from an empty tensor")
    return _take(L, x, _wrap_index(L, L.cast(idx, torch.int64), n))


def _pad_index(L, n, lo, hi, mode):
    """i64 [n + lo + hi]: the source index of each padded position (reflect or replicate)."""
    i = Value(L.op("iota", [], {"size": n + lo + hi, "start": -lo, "dtype": DTypeName("i64")}))
    if mode == "replicate":
        return Value(L.op("clamp", [i], {"min": 0.0, "max": float(n - 1)}))
    # reflect: |i|, then n-1 - |n-1 - |i||
    a = Value(L.op("abs", [i]))
    last = zeros(L, "i64", [], n - 1)
    return Value(L.op("sub", [last, Value(L.op("abs", [Value(L.op("sub", [last, a]))]))]))


def _pad_mode(mode, dims):
    def row(L, node, args, kwargs):
        x, pad = args[0], list(args[1])
        rank = L.rank(x)
        for i in range(dims):
            dim = rank - 1 - i
            lo, hi = int(pad[2 * i]), int(pad[2 * i + 1])
            n = shape(L, x)[dim]
            if mode == "reflect" and (lo >= n or hi >= n):
                raise Unsupported("reflection padding as wide as the input")
            if lo < 0 or hi < 0:
                raise Unsupported(f"{mode} padding with negative pads")
            x = Value(L.op("gather", [x, _pad_index(L, n, lo, hi, mode)], {"axis": dim}))
        return x
    return row


for _d in (1, 2, 3):
    lowers(f"aten.reflection_pad{_d}d.default")(_pad_mode("reflect", _d))
    lowers(f"aten.replication_pad{_d}d.default")(_pad_mode("replicate", _d))


@lowers("aten.diag.default")
def _diag(L, node, args, kwargs):
    x = args[0]
    k = int(args[1] if len(args) > 1 else kwargs.get("diagonal", 0))
    out_shape, dt = meta_of(node)
    if L.rank(x) == 1:
        n = shape(L, x)[0]
        m = out_shape[0]
        rows = reshape(L, Value(L.op("iota", [], {"size": m, "dtype": DTypeName("i64")})), [m, 1])
        cols = reshape(L, Value(L.op("iota", [], {"size": m, "dtype": DTypeName("i64")})), [1, m])
        on = Value(L.op("eq", [Value(L.op("sub", [cols, rows])), zeros(L, "i64", [], k)]))
        if n == 0:
            return Value(L.full(0, dt, out_shape))
        # the element of row r (k >= 0) or of column c (k < 0)
        src = rows if k >= 0 else cols
        src = Value(L.op("clamp", [Value(L.op("expand", [src], {"shape": [m, m]}))],
                         {"min": 0.0, "max": float(n - 1)}))
        vals = Value(L.op("gather", [x, src], {"axis": 0}))
        return Value(L.op("where", [on, vals, zeros(L, coil_dt(L, x), [])]))
    if L.rank(x) != 2:
        raise Unsupported("diag of a tensor of rank > 2")
    r, c = shape(L, x)
    m = out_shape[0]
    if m == 0:
        return Value(L.full(0, dt, out_shape))
    i = Value(L.op("iota", [], {"size": m, "dtype": DTypeName("i64")}))
    start = (-k) * c if k < 0 else k
    lin = Value(L.op("add", [Value(L.op("mul", [i, zeros(L, "i64", [], c + 1)])),
                             zeros(L, "i64", [], start)]))
    return _take(L, x, lin)
