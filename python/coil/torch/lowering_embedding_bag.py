"""embedding_bag's forward (aten._embedding_bag_forward_only and aten._embedding_bag, which
F.embedding_bag calls with 1-D indices and offsets: a 2-D input is flattened in Python first).

Modes sum and mean (with per_sample_weights, padding_idx, include_last_offset): each bag is
a masked sum over all positions, rows outside the bag replaced by 0 with `where` (a one-hot
matmul would turn an inf row of another bag into NaN: 0 * inf). Bag b holds positions
offsets[b] <= i < offsets[b+1]; a position whose index is padding_idx counts in no bag
(mean divides by the bag's other positions); an empty bag is 0, as torch's.

Mode max stays in eager: torch keeps the first NaN of a bag and ignores later ones
(`if (v > best)`), which a max reduction does not reproduce. Only the first output (the bags)
is computed; offset2bag, bag_size and max_indices (used by the backward) stay in eager."""

import torch

from .lowering import Unsupported, Value, lowers
from .lowering_nn import _metas, coil_dt, reshape, shape, slice_, zeros
from .lowering_scatter import _iota

_SUM, _MEAN, _MAX = 0, 1, 2


@lowers("aten._embedding_bag_forward_only.default", "aten._embedding_bag.default")
def _embedding_bag(L, node, args, kwargs):
    names = ["weight", "indices", "offsets", "scale_grad_by_freq", "mode", "sparse",
             "per_sample_weights", "include_last_offset", "padding_idx"]
    defaults = [None, None, None, False, 0, False, None, False, -1]
    a = dict(zip(names, defaults))
    a.update(zip(names, args))
    unknown = set(kwargs) - set(names)
    if unknown:
        raise Unsupported(f"embedding_bag: unknown argument {sorted(unknown)[0]}")
    a.update(kwargs)
    weight, indices, offsets = a["weight"], a["indices"], a["offsets"]
    mode, psw = int(a["mode"]), a["per_sample_weights"]
    if mode not in (_SUM, _MEAN):
        raise Unsupported(f"embedding_bag in mode {mode} (max: torch keeps a bag's first NaN)")
    if psw is not None and mode != _SUM:
        raise Unsupported("embedding_bag: per_sample_weights with a mode other than sum")
    out_shape, dt = _metas(node)[0]
    if len(shape(L, indices)) != 1 or len(shape(L, offsets)) != 1:
        raise Unsupported("embedding_bag with indices or offsets not 1-D")
    n = shape(L, indices)[0]
    bags, width = out_shape
    idx = L.cast(indices, torch.int64)
    offs = L.cast(offsets, torch.int64)
    cdt = coil_dt(L, weight)
    if bags == 0 or n == 0 or width == 0:
        return (zeros(L, cdt, out_shape), None, None, None)
    # member[b, i] = offsets[b] <= i < offsets[b+1] (the last bag: to the end), and the index
    # is not padding_idx
    pos = reshape(L, _iota(L, n), [1, n])
    starts = reshape(L, slice_(L, offs, 0, 0, bags), [bags, 1])
    member = Value(L.op("le", [starts, pos]))
    if bags > 1:
        nxt = reshape(L, slice_(L, offs, 0, 1, bags), [bags - 1, 1])
        ends = Value(L.op("concat", [nxt, zeros(L, "i64", [1, 1], float(n))], {"dim": 0}))
    else:
        ends = zeros(L, "i64", [1, 1], float(n))
    if a["include_last_offset"]:
        ends = reshape(L, slice_(L, offs, 0, 1, bags + 1), [bags, 1])
    member = Value(L.op("logical_and", [member, Value(L.op("lt", [pos, ends]))]))
    pad = int(a["padding_idx"]) if a["padding_idx"] is not None else -1
    if pad >= 0:
        keep = Value(L.op("ne", [reshape(L, idx, [1, n]), zeros(L, "i64", [], float(pad))]))
        member = Value(L.op("logical_and", [member, keep]))
    rows = Value(L.op("gather", [weight, idx], {"axis": 0}))  # [n, width]
    if psw is not None:
        rows = Value(L.op("mul", [rows, reshape(L, L.cast(psw, dt), [n, 1])]))
    picked = Value(L.op("where", [reshape(L, member, [bags, n, 1]),
                                  reshape(L, rows, [1, n, width]), zeros(L, cdt, [])]))
    total = Value(L.op("sum", [picked], {"axes": [1], "keepdim": False}))
    if mode == _MEAN:
        count = Value(L.op("sum", [L.cast(member, dt)], {"axes": [1], "keepdim": True}))
        safe = Value(L.op("maximum", [count, zeros(L, cdt, [], 1.0)]))
        total = Value(L.op("div", [total, safe]))  # an empty bag's sum is 0: 0 / 1
    return (total, None, None, None)
