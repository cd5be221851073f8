"""The backward of torch 2.x's fused attention ops and the forward's logsumexp, as coil's
`attention_grad` and `attention_lse` nodes (lowering_sdpa.py maps the forward).

With s = scale * Q K^T (+ mask, -inf where masked or past the causal limit) and
P = softmax(s) = exp(s - lse):
    dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dO * O));
    dQ = scale * dS K;  dK = scale * dS^T Q;  d(additive mask) = dS.
Each gradient is one `attention_grad` node ({wrt: q, k or v}; grouped-query k and v summed
over each group by the op), computed in f32 (f64 for f64) and rounded once to the inputs'
dtype: on the CPU the blocked flash backward of coil_attention.h, memory O(T); on cuda (no
kernel yet) and for f64 written out by coil's decomposition (O(T^2), the score matrix exists).
The efficient kernel's attn_bias gradient is dS itself ([B, H, Tq, Tk]): when it is asked
for, the whole backward is written out here (`written_out_backward`)."""

import math

import torch

from .lowering import Unsupported, Value
from .lowering_nn import reshape, shape, zeros
from .lowering_sdpa import (Opaque, bind, coil_mask, operand_metas, output_used, register,
                            top_left_triangle)


def _compute_dtype(L, v):
    return torch.float64 if L.g.type_of(v).startswith("f64") else torch.float32


def _const(L, dt, value):
    return zeros(L, "f64" if dt == torch.float64 else "f32", [], value)


def expand_heads(L, x, heads):
    """[B, Hkv, T, D] -> [B, H, T, D], head h reading kv head h / (H / Hkv)."""
    b, hkv, t, d = shape(L, x)
    if hkv == heads:
        return x
    g = heads // hkv
    x5 = reshape(L, x, [b, hkv, 1, t, d])
    x5 = Value(L.op("expand", [x5], {"shape": [b, hkv, g, t, d]}))
    return reshape(L, x5, [b, heads, t, d])


def sum_groups(L, x, kv_heads):
    """[B, H, T, D] -> [B, Hkv, T, D]: the sum over each group of H / Hkv query heads."""
    b, h, t, d = shape(L, x)
    if h == kv_heads:
        return x
    x5 = reshape(L, x, [b, kv_heads, h // kv_heads, t, d])
    return Value(L.op("sum", [x5], {"axes": [2], "keepdim": False}))


def _transpose(L, x):
    return Value(L.op("transpose", [x], {"dim0": 2, "dim1": 3}))


def scores(L, q, k, mask, mask_dtype, causal, scale, dt):
    """s = scale * q k^T, then the mask (bool: -inf where false; floating: added) and torch's
    top-left causal limit (-inf past it): [B, H, Tq, Tk] in `dt`."""
    qs = shape(L, q)
    h, tq, d = qs[1], qs[2], qs[3]
    tk = shape(L, k)[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    kx = expand_heads(L, L.cast(k, dt), h)
    s = Value(L.op("matmul", [L.cast(q, dt), _transpose(L, kx)]))
    s = Value(L.op("mul", [s, _const(L, dt, scale)]))
    neg_inf = _const(L, dt, -math.inf)
    if mask is not None and mask_dtype == torch.bool:
        s = Value(L.op("where", [mask, s, neg_inf]))
    elif mask is not None:
        s = Value(L.op("add", [s, L.cast(mask, dt)]))
    if causal:
        s = Value(L.op("where", [top_left_triangle(L, tq, tk), s, neg_inf]))
    return s


def logsumexp(L, q, k, mask, mask_dtype, causal, scale):
    """[B, H, Tq] f32: log(sum_j exp(s_ij)) over the keys of the scaled, masked scores; -inf
    for a row with every key masked (coil's attention_lse)."""
    mask, attrs = coil_mask(L, q, k, mask, mask_dtype, causal, scale)
    lse = Value(L.op("attention_lse", [q, k] + ([mask] if mask is not None else []), attrs))
    return Value(L.cast(lse, torch.float32))


def _lse_for_grad(L, q, k, lse, mask, mask_dtype, causal, scale):
    """The logsumexp attention_grad reads ([B, H, Tq], f32; f64 for f64 q): torch's saved one
    (the efficient kernel's padding sliced off), else computed again."""
    b, h, tq, _ = shape(L, q)
    dt = _compute_dtype(L, q)
    if lse is None or len(shape(L, lse)) < 3 or shape(L, lse)[2] < tq:
        lse = logsumexp(L, q, k, mask, mask_dtype, causal, scale)
    elif shape(L, lse)[2] > tq:  # the efficient kernel's padding
        lse = Value(L.op("slice", [lse], {"dim": 2, "start": 0, "end": tq, "step": 1}))
    return reshape(L, L.cast(lse, dt), [b, h, tq])


def backward(L, dout, q, k, v, out, lse, mask, mask_dtype, causal, scale, want_mask_grad):
    """(dq, dk, dv, d mask or None) of attention(q, k, v, mask) with torch's semantics."""
    if want_mask_grad:
        return written_out_backward(L, dout, q, k, v, out, lse, mask, mask_dtype, causal, scale)
    lse = _lse_for_grad(L, q, k, lse, mask, mask_dtype, causal, scale)
    cmask, attrs = coil_mask(L, q, k, mask, mask_dtype, causal, scale)
    qt = _torch_dtype_of(L, q)
    inputs = [q, k, v, L.cast(out, qt), L.cast(dout, qt), lse] + (
        [cmask] if cmask is not None else [])
    grads = [Value(L.op("attention_grad", inputs, dict(attrs, wrt=wrt))) for wrt in "qkv"]
    return grads + [None]


def written_out_backward(L, dout, q, k, v, out, lse, mask, mask_dtype, causal, scale):
    """(dq, dk, dv, dS) written out with coil ops: the score matrix exists (O(T^2)), as the
    mask's gradient dS does anyway."""
    qdt = torch.float64 if L.g.type_of(q).startswith("f64") else None
    dt = qdt or torch.float32
    b, h, tq, d = shape(L, q)
    hkv = shape(L, k)[1]
    scale_v = 1.0 / math.sqrt(d) if scale is None else float(scale)
    s = scores(L, q, k, mask, mask_dtype, causal, scale, dt)
    lse_ok = lse is not None and len(shape(L, lse)) >= 3 and shape(L, lse)[2] >= tq
    if lse_ok:
        lse_v = L.cast(lse, dt)
        if shape(L, lse_v)[2] > tq:  # the efficient kernel's padding
            lse_v = Value(L.op("slice", [lse_v], {"dim": 2, "start": 0, "end": tq, "step": 1}))
        lse_v = reshape(L, lse_v, [b, h, tq, 1])
        # a row with every key masked has lse -inf: its scores are all -inf, P = 0
        lse_v = Value(L.op("where", [Value(L.op("eq", [lse_v, _const(L, dt, -math.inf)])),
                                     _const(L, dt, 0.0), lse_v]))
        p = Value(L.op("exp", [Value(L.op("sub", [s, lse_v]))]))
    else:
        p = Value(L.op("softmax", [s], {"axis": 3}))
    do = L.cast(dout, dt)
    qc = L.cast(q, dt)
    kx = expand_heads(L, L.cast(k, dt), h)
    vx = expand_heads(L, L.cast(v, dt), h)
    dv = Value(L.op("matmul", [_transpose(L, p), do]))
    dp = Value(L.op("matmul", [do, _transpose(L, vx)]))
    delta = Value(L.op("sum", [Value(L.op("mul", [do, L.cast(out, dt)]))],
                       {"axes": [3], "keepdim": True}))
    ds = Value(L.op("mul", [p, Value(L.op("sub", [dp, delta]))]))
    sc = _const(L, dt, scale_v)
    dq = Value(L.op("mul", [Value(L.op("matmul", [ds, kx])), sc]))
    dk = Value(L.op("mul", [Value(L.op("matmul", [_transpose(L, ds), qc])), sc]))
    dk, dv = sum_groups(L, dk, hkv), sum_groups(L, dv, hkv)
    qt = _torch_dtype_of(L, q)
    grads = [Value(L.cast(g, qt)) for g in (dq, dk, dv)]
    return grads + [ds]


def _torch_dtype_of(L, v):
    from .. import _torch_dtype
    return _torch_dtype(L.g.type_of(v).split("[")[0])


def reduce_to(L, x, want, dtype):
    """x [B, H, Tq, Tk] summed over the dims a mask of shape `want` broadcast along."""
    xs = shape(L, x)
    want = tuple(want)
    lead = len(xs) - len(want)
    axes = list(range(lead)) + [lead + i for i, n in enumerate(want) if n == 1 and
                                xs[lead + i] != 1]
    if axes:
        x = Value(L.op("sum", [x], {"axes": axes, "keepdim": True}))
    return Value(L.cast(reshape(L, x, list(want)), dtype))


def _grads_row(kind):
    def row(L, node, args, kwargs):
        a = bind(node, args, kwargs)
        if float(a.get("dropout_p") or 0.0) != 0.0:
            raise Unsupported(f"{node.target} with dropout_p={a['dropout_p']} (random: eager)")
        mask_name = {"cpu": "attn_mask", "efficient": "attn_bias", "cudnn": "attn_bias"}.get(kind)
        names = ["query", "key", "value"] + ([mask_name] if mask_name else [])
        metas = operand_metas(node, a, names)
        mask = a.get(mask_name) if mask_name else None
        if kind == "cudnn" and mask is not None and 0 in tuple(metas[mask_name][0]):
            mask = None  # (cuDNN's attn_bias is not optional: an empty tensor stands for none)
        if isinstance(mask, Opaque):
            raise Unsupported(f"{node.target}: mask of a dtype coil lacks")
        mask_dtype = metas[mask_name][1] if mask is not None else None
        causal = bool(a["is_causal"])
        tq, tk = metas["query"][0][2], metas["key"][0][2]
        if causal and tq != tk and kind == "flash":
            raise Unsupported(f"{node.target}: is_causal with Tq {tq} != Tk {tk}")
        lse = a.get("logsumexp")
        if not isinstance(lse, Value):
            lse = None
        vals = node.meta.get("val")
        want_mask_grad = (kind == "efficient" and mask is not None and
                          isinstance(vals, (tuple, list)) and len(vals) > 3 and
                          isinstance(vals[3], torch.Tensor) and output_used(node, 3))
        grad_out = a.get("grad_out", a.get("grad_out_"))
        dq, dk, dv, dmask = backward(L, grad_out, a["query"], a["key"], a["value"], a["out"],
                                     lse, mask, mask_dtype, causal, a.get("scale"),
                                     want_mask_grad)
        if kind != "efficient":
            return (dq, dk, dv)
        if dmask is not None:
            dmask = reduce_to(L, dmask, vals[3].shape, vals[3].dtype)
        return (dq, dk, dv, dmask)
    row.opaque_ok = True
    return row


ROW_FUNCTIONS = {
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": _grads_row("cpu"),
    "aten._scaled_dot_product_flash_attention_backward.default": _grads_row("flash"),
    "aten._scaled_dot_product_efficient_attention_backward.default": _grads_row("efficient"),
    "aten._scaled_dot_product_cudnn_attention_backward.default": _grads_row("cudnn"),
}

register(ROW_FUNCTIONS)
