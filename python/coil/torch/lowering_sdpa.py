"""torch 2.x's scaled-dot-product-attention ops -> coil's `attention` op (forward), with the
extra outputs the fused variants return.

F.scaled_dot_product_attention reaches a backend as one of the fused ops torch picked for the
inputs: `_scaled_dot_product_flash_attention_for_cpu` (CPU), `_scaled_dot_product_flash_attention`
(CUDA flash), `_scaled_dot_product_efficient_attention` (CUDA memory-efficient),
`_scaled_dot_product_cudnn_attention` (cuDNN), or `scaled_dot_product_attention` itself where a
tracer keeps it whole. Each becomes one coil `attention` node. Differences from coil's op that
the rows bridge:
  - torch's is_causal is aligned top-left (query i sees keys j <= i); coil's `causal` is aligned
    bottom-right. Equal when Tq == Tk; otherwise the row passes the top-left triangle as a bool
    mask (and-ed with a bool mask, or as -inf where a float mask is added). The CUDA flash and
    cuDNN kernels align non-square causal attention their own way: those stay in eager.
  - dropout_p != 0 is random: Unsupported (eager).
  - logsumexp (f32, over the keys of the scaled, masked scores, natural log) is coil's
    `attention_lse` node, made only when a later node reads it: the forward of a training
    step, whose backward (lowering_sdpa_backward.py: `attention_grad`) reads it. Shapes as torch's meta functions give them:
    [B, H, Tq] (the CUDA efficient kernel pads Tq to a multiple of 32 with +inf, cuDNN's is
    [B, H, Tq, 1]).
  - the other outputs (philox seed/offset or rng_state, cum_seq_q/k, debug_attn_mask) exist
    for dropout and varlen batches; with dropout 0 their values are never read (the backward
    ignores them). They are `Opaque`: the callable makes zeros of their shape and dtype (even
    a dtype coil lacks, uint64) without any coil kernel. max_q/max_k are the lengths (ints).

These ops do not exist on torch 1.13: rows are registered only for the overloads this torch
has (ROW_FUNCTIONS has them all; tests on 1.13 call them through stand-ins)."""

import math
import operator

import torch

from .lowering import ROWS, Unsupported, Value, meta_of
from .lowering_nn import reshape, shape, zeros
from .lowering_scatter import _iota
from .symbolic import require_same


class Opaque:
    """A tensor value coil neither computes nor reads: torch's dropout RNG state and similar
    placeholders of the fused attention ops (dropout 0). An output that is Opaque becomes
    torch.zeros(shape, dtype) in the compiled callable; a graph input that is Opaque is not
    passed to coil at all."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype

    def __repr__(self):
        return f"Opaque({self.shape}, {self.dtype})"


# The schemas of torch 2.11 (native_functions.yaml), used to bind arguments where the overload
# has no _schema (the stand-ins of the 1.13 tests); a real overload's own schema wins.
_SCHEMAS = {
    "aten._scaled_dot_product_flash_attention_for_cpu.default": (
        ["query", "key", "value", "dropout_p", "is_causal", "attn_mask", "scale"],
        {"dropout_p": 0.0, "is_causal": False, "attn_mask": None, "scale": None}),
    "aten._scaled_dot_product_flash_attention.default": (
        ["query", "key", "value", "dropout_p", "is_causal", "return_debug_mask", "scale"],
        {"dropout_p": 0.0, "is_causal": False, "return_debug_mask": False, "scale": None}),
    "aten._scaled_dot_product_efficient_attention.default": (
        ["query", "key", "value", "attn_bias", "compute_log_sumexp", "dropout_p", "is_causal",
         "scale"],
        {"dropout_p": 0.0, "is_causal": False, "scale": None}),
    "aten._scaled_dot_product_cudnn_attention.default": (
        ["query", "key", "value", "attn_bias", "compute_log_sumexp", "dropout_p", "is_causal",
         "return_debug_mask", "scale"],
        {"dropout_p": 0.0, "is_causal": False, "return_debug_mask": False, "scale": None}),
    "aten.scaled_dot_product_attention.default": (
        ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"],
        {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None,
         "enable_gqa": False}),
    "aten._scaled_dot_product_flash_attention_for_cpu_backward.default": (
        ["grad_out", "query", "key", "value", "out", "logsumexp", "dropout_p", "is_causal",
         "attn_mask", "scale"],
        {"attn_mask": None, "scale": None}),
    "aten._scaled_dot_product_flash_attention_backward.default": (
        ["grad_out", "query", "key", "value", "out", "logsumexp", "cum_seq_q", "cum_seq_k",
         "max_q", "max_k", "dropout_p", "is_causal", "philox_seed", "philox_offset", "scale"],
        {"scale": None}),
    "aten._scaled_dot_product_efficient_attention_backward.default": (
        ["grad_out_", "query", "key", "value", "attn_bias", "out", "logsumexp", "philox_seed",
         "philox_offset", "dropout_p", "grad_input_mask", "is_causal", "scale"],
        {"is_causal": False, "scale": None}),
    "aten._scaled_dot_product_cudnn_attention_backward.default": (
        ["grad_out", "query", "key", "value", "out", "logsumexp", "philox_seed",
         "philox_offset", "attn_bias", "cum_seq_q", "cum_seq_k", "max_q", "max_k", "dropout_p",
         "is_causal", "scale"],
        {"scale": None}),
}


def bind(node, args, kwargs):
    """{argument name: value} of an attention node: the overload's schema where it has one
    (torch 2.x), else the table above."""
    key = str(node.target)
    schema = getattr(node.target, "_schema", None)
    if schema is not None:
        names = [a.name for a in schema.arguments]
        defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    else:
        names, defaults = _SCHEMAS[key]
    a = dict(defaults)
    a.update(zip(names, args))
    unknown = set(kwargs) - set(names)
    if unknown:
        raise Unsupported(f"{key}: unknown argument {sorted(unknown)[0]}")
    a.update(kwargs)
    missing = [n for n in names if n not in a]
    if missing:
        raise Unsupported(f"{key}: argument {missing[0]} missing")
    return a


def _meta_of_arg(node, a, name):
    """(shape, dtype) of the FX node bound to `name`."""
    # The FX argument (a Node) at the position or keyword of `name`.
    schema = getattr(node.target, "_schema", None)
    names = ([x.name for x in schema.arguments] if schema is not None
             else _SCHEMAS[str(node.target)][0])
    if name not in names:  # (an argument this torch's schema lacks: cuDNN's attn_bias < 2.5)
        return None
    i = names.index(name)
    fx = node.args[i] if i < len(node.args) else node.kwargs.get(name)
    if not isinstance(fx, torch.fx.Node):
        return None
    return meta_of(fx)


def operand_metas(node, a, names):
    """(shape, dtype) of each of `names` (None where absent); raises Unsupported unless q, k,
    v are 4-D of one floating dtype with Hkv dividing H."""
    metas = {n: _meta_of_arg(node, a, n) for n in names}
    q, k, v = (metas[n] for n in names[:3])
    if q is None or k is None or v is None:
        raise Unsupported(f"{node.target}: q, k, v must be tensors")
    if not (len(q[0]) == len(k[0]) == len(v[0]) == 4):
        raise Unsupported(f"{node.target}: q, k, v of ranks {len(q[0])}, {len(k[0])}, "
                          f"{len(v[0])} (coil's attention takes 4-D [B, H, T, D])")
    if not (q[1] == k[1] == v[1]) or q[1] not in (torch.float32, torch.float64,
                                                 torch.float16, torch.bfloat16):
        raise Unsupported(f"{node.target}: q, k, v of dtypes {q[1]}, {k[1]}, {v[1]}")
    if k[0][1] == 0 or q[0][1] % k[0][1] != 0:
        raise Unsupported(f"{node.target}: {q[0][1]} query heads and {k[0][1]} key heads "
                          "(grouped-query attention needs H % Hkv == 0)")
    return metas


def top_left_triangle(L, tq, tk):
    """[Tq, Tk] bool: key j visible from query i when j <= i (torch's is_causal)."""
    rows = reshape(L, _iota(L, tq), [tq, 1])
    cols = reshape(L, _iota(L, tk), [1, tk])
    return Value(L.op("le", [cols, rows]))


def coil_mask(L, q, k, mask, mask_dtype, causal, scale):
    """(mask or None, attrs) of coil's attention ops for torch's semantics (is_causal top-left,
    `mask` bool or floating of `mask_dtype`, scale None: 1/sqrt(D))."""
    tq, tk = shape(L, q)[2], shape(L, k)[2]
    attrs = {}
    if scale is not None:
        attrs["scale"] = float(scale)
    if causal and tq == tk:
        attrs["causal"] = True
    elif causal:  # top-left, not coil's bottom-right: as a mask
        tri = top_left_triangle(L, tq, tk)
        if mask is None:
            mask = tri
        elif mask_dtype == torch.bool:
            mask = Value(L.op("logical_and", [mask, tri]))
        else:
            wide = torch.float64 if mask_dtype == torch.float64 else torch.float32
            mask = Value(L.op("where", [tri, L.cast(mask, wide),
                                        zeros(L, "f64" if wide == torch.float64 else "f32", [],
                                              -math.inf)]))
    return mask, attrs


def attention(L, q, k, v, mask, mask_dtype, causal, scale):
    """coil's attention node for torch's semantics (coil_mask)."""
    # key and value lengths: one size for eager (checked when it runs), maybe two symbols here
    require_same("attention's key and value lengths", shape(L, k)[2], shape(L, v)[2])
    mask, attrs = coil_mask(L, q, k, mask, mask_dtype, causal, scale)
    inputs = [q, k, v] + ([mask] if mask is not None else [])
    return Value(L.op("attention", inputs, attrs))


def output_used(node, index):
    """Whether a later node (or the graph's output) reads output `index` of a tuple node."""
    for u in node.users:
        if u.op == "call_function" and u.target is operator.getitem and u.args[1] == index:
            if u.users:
                return True
        elif not (u.op == "call_function" and u.target is operator.getitem):
            return True  # the tuple itself is passed on: everything counts as read
    return False


def fit_lse(L, lse, want_shape, tq):
    """The [B, H, Tq] f32 logsumexp in the layout torch's op returns: as is, with a trailing 1
    (cuDNN), padded along the queries with +inf (the efficient kernel's multiple of 32), or
    empty (compute_log_sumexp=False)."""
    b, h = shape(L, lse)[:2]
    want = tuple(want_shape)
    if want == (b, h, tq):
        return lse
    if want == (b, h, tq, 1):
        return reshape(L, lse, [b, h, tq, 1])
    if len(want) == 3 and want[:2] == (b, h) and want[2] == 0:
        return zeros(L, "f32", want)
    if len(want) == 3 and want[:2] == (b, h) and want[2] > tq:
        pad = zeros(L, "f32", [b, h, want[2] - tq], math.inf)
        return Value(L.op("concat", [lse, pad], {"dim": 2}))
    raise Unsupported(f"logsumexp of shape {want} for [{b}, {h}, {tq}] queries")


def _vals(node):
    """The op's outputs as tensors (meta tensors where the graph has tensor_meta only: a graph
    per_size.concrete_graph made concrete), or Unsupported."""
    val = node.meta.get("val")
    if val is None:
        val = node.meta.get("tensor_meta")
        if isinstance(val, (tuple, list)):
            val = [torch.empty(m.shape, dtype=m.dtype, device="meta")
                   if hasattr(m, "shape") and hasattr(m, "dtype") else m for m in val]
    if not isinstance(val, (tuple, list)):
        raise Unsupported(f"{node.target}: no output metadata")
    return list(val)


def _fused_forward(kind):
    """A row of a fused forward op: output 0 the attention, 1 the logsumexp, the rest
    placeholders (`kind`: cpu, flash, efficient, cudnn)."""
    def row(L, node, args, kwargs):
        from .lowering_sdpa_backward import logsumexp
        a = bind(node, args, kwargs)
        if float(a.get("dropout_p") or 0.0) != 0.0:
            raise Unsupported(f"{node.target} with dropout_p={a['dropout_p']} (random: eager)")
        mask_name = "attn_mask" if kind == "cpu" else "attn_bias" if kind in (
            "efficient", "cudnn") else None
        names = ["query", "key", "value"] + ([mask_name] if mask_name else [])
        metas = operand_metas(node, a, names)
        q, k, v = a["query"], a["key"], a["value"]
        mask = a.get(mask_name) if mask_name else None
        mask_dtype = metas[mask_name][1] if mask is not None else None
        causal = bool(a["is_causal"])
        tq, tk = metas["query"][0][2], metas["key"][0][2]
        # The flash kernel's non-square causal mask has its own alignment; the dense cuDNN
        # kernel's is torch's top-left triangle (cudnn-frontend's causal mask; bottom-right is
        # an option torch's dense path does not set), which coil_mask passes as a mask.
        if causal and tq != tk and kind == "flash":
            raise Unsupported(f"{node.target}: is_causal with Tq {tq} != Tk {tk} (this kernel's "
                              "alignment is its own)")
        y = attention(L, q, k, v, mask, mask_dtype, causal, a.get("scale"))
        out = [y]
        vals = _vals(node)
        for i in range(1, len(vals)):
            val = vals[i]
            if not output_used(node, i):
                out.append(None)
            elif i == 1 and isinstance(val, torch.Tensor) and val.numel() == 0:
                out.append(zeros(L, "f32", val.shape))  # (compute_log_sumexp=False)
            elif i == 1 and isinstance(val, torch.Tensor):
                lse = logsumexp(L, q, k, mask, mask_dtype, causal, a.get("scale"))
                out.append(fit_lse(L, lse, val.shape, tq))
            elif isinstance(val, torch.Tensor):
                out.append(Opaque(val.shape, val.dtype))
            else:
                out.append(val)  # max_q, max_k: ints
        return tuple(out)
    row.opaque_ok = True
    return row


def _sdpa(L, node, args, kwargs):
    """aten.scaled_dot_product_attention (one output), where a tracer keeps it whole."""
    a = bind(node, args, kwargs)
    if float(a["dropout_p"]) != 0.0:
        raise Unsupported(f"{node.target} with dropout_p={a['dropout_p']} (random: eager)")
    metas = operand_metas(node, a, ["query", "key", "value", "attn_mask"])
    hq, hk = metas["query"][0][1], metas["key"][0][1]
    if hq != hk and not a.get("enable_gqa", False):
        raise Unsupported(f"{node.target}: {hq} query heads, {hk} key heads, enable_gqa=False")
    mask = a["attn_mask"]
    return attention(L, a["query"], a["key"], a["value"], mask,
                     metas["attn_mask"][1] if mask is not None else None,
                     bool(a["is_causal"]), a["scale"])


ROW_FUNCTIONS = {
    "aten._scaled_dot_product_flash_attention_for_cpu.default": _fused_forward("cpu"),
    "aten._scaled_dot_product_flash_attention.default": _fused_forward("flash"),
    "aten._scaled_dot_product_efficient_attention.default": _fused_forward("efficient"),
    "aten._scaled_dot_product_cudnn_attention.default": _fused_forward("cudnn"),
    "aten.scaled_dot_product_attention.default": _sdpa,
}


def overload_exists(name):
    """Whether this torch has the overload "aten.op.overload" (1.13 lacks the fused ones)."""
    _, op, overload = name.split(".")
    packet = getattr(torch.ops.aten, op, None)
    if packet is None:
        return False
    try:
        return getattr(packet, overload, None) is not None
    except Exception:  # (an OpOverloadPacket raises for a missing overload on some versions)
        return False


def register(functions):
    for name, fn in functions.items():
        if overload_exists(name):
            ROWS[name] = fn


register(ROW_FUNCTIONS)
