"""torch 1.13's aten._scaled_dot_product_attention_forward (F._scaled_dot_product_attention)
as its CPU math path computes it: softmax(q / sqrt(E) @ k^T (+ mask)) @ v, a boolean mask
(or is_causal's lower triangle) keeping positions where it is True (the others -inf), a float
mask added. Both outputs are that attention's (output, weights); torch returns the weights
whether need_attn_weights is set or not. Dropout (random) stays in eager."""

import math

import torch

from .lowering import Unsupported, Value, lowers, meta_of
from .lowering_nn import reshape, shape, zeros
from .lowering_scatter import _iota


@lowers("aten._scaled_dot_product_attention_forward.default")
def _sdpa(L, node, args, kwargs):
    names = ["query", "key", "value", "attn_mask", "dropout_p", "need_attn_weights",
             "is_causal"]
    a = dict(zip(names, [None, None, None, None, 0.0, False, False]))
    a.update(zip(names, args))
    unknown = set(kwargs) - set(names)
    if unknown:
        raise Unsupported(f"{node.target}: unknown argument {sorted(unknown)[0]}")
    a.update(kwargs)
    q, k, v, mask = a["query"], a["key"], a["value"], a["attn_mask"]
    if float(a["dropout_p"]) != 0.0:
        raise Unsupported("scaled dot product attention with dropout (random)")
    if a["is_causal"] and mask is not None:
        raise Unsupported("scaled dot product attention with both a mask and is_causal")
    dt = meta_of(node.args[0])[1]
    if dt not in (torch.float32, torch.float64):
        raise Unsupported(f"scaled dot product attention in {dt}")
    qs, ks = shape(L, q), shape(L, k)
    if len(qs) < 2 or len(ks) < 2:
        raise Unsupported("scaled dot product attention of rank below 2")
    e, lq, lk = qs[-1], qs[-2], ks[-2]
    cdt = "f64" if dt == torch.float64 else "f32"
    scaled = Value(L.op("div", [q, zeros(L, cdt, [], math.sqrt(e))]))
    kt = Value(L.op("transpose", [k], {"dim0": len(ks) - 2, "dim1": len(ks) - 1}))
    s = Value(L.op("matmul", [scaled, kt]))
    neg_inf = zeros(L, cdt, [], -math.inf)
    if a["is_causal"]:
        rows = reshape(L, _iota(L, lq), [lq, 1])
        cols = reshape(L, _iota(L, lk), [1, lk])
        s = Value(L.op("where", [Value(L.op("le", [cols, rows])), s, neg_inf]))
    elif mask is not None:
        if meta_of(node.args[3])[1] == torch.bool:
            s = Value(L.op("where", [mask, s, neg_inf]))
        else:
            s = Value(L.op("add", [s, L.cast(mask, dt)]))
    p = Value(L.op("softmax", [s], {"axis": len(shape(L, s)) - 1}))
    return (Value(L.op("matmul", [p, v])), p)
