"""aten.as_strided and as_strided_scatter (imported by lowering_fft.py: torch.stft frames its
signal with as_strided).

as_strided reads its input's *storage*, not its values: out[i] = storage[offset + sum(i_d *
stride_d)]. coil's values are never views, so the row takes it only where the storage is known
to be exactly the values of one coil value, `root`, in row-major order:
  - the input is `root` itself or a chain of views that keep the storage offset at 0 and do not
    reorder storage (view, reshape, unsqueeze, squeeze, expand, alias, detach, permute,
    transpose: they only change how the storage is read, which as_strided ignores);
  - `root` is a node that makes a fresh contiguous tensor (its recorded strides are row-major),
    or a graph input: an input is
    checked at each call (contiguous, storage offset 0, storage of numel elements:
    CoilGraphCallable's `exact_storage` inputs), and a call with another layout runs the graph
    in eager instead;
  - every index read lies inside root's elements.
The result is one gather from root's flattened values at indices computed when the graph is
built (a constant of the output's size).
"""

import numpy as np
import torch

from .lowering import Unsupported, Value, lowers, meta_of
from .lowering_nn import reshape

# views whose result has the storage offset of their input (0 stays 0)
_OFFSET_KEEPING = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
                   "aten._reshape_alias.default", "aten.unsqueeze.default",
                   "aten.squeeze.dim", "aten.squeeze.default", "aten.squeeze.dims",
                   "aten.expand.default", "aten.alias.default", "aten.detach.default",
                   "aten.permute.default", "aten.transpose.int", "aten.t.default"}
_MAX_ELEMENTS = 1 << 22


def _row_major(shape, stride):
    expect = 1
    for n, s in reversed(list(zip(shape, stride))):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _recorded_stride(node):
    val = node.meta.get("val", node.meta.get("tensor_meta"))
    stride = getattr(val, "stride", None)
    return tuple(stride() if callable(stride) else stride) if stride is not None else None


def _storage_root(L, node):
    """The node whose values are the storage `node` views, or Unsupported."""
    from .mutation import _is_view
    while node.op == "call_function" and _is_view(node):
        if str(node.target) not in _OFFSET_KEEPING:
            raise Unsupported(f"as_strided of a {node.target} view (its storage offset or "
                              "extent is not tracked)")
        node = node.args[0]
    if node.op == "placeholder":
        L.__dict__.setdefault("exact_storage", set()).add(node)
    elif node.op == "get_attr":  # (its storage is not looked at: eager)
        raise Unsupported("as_strided of a captured constant")
    else:
        shape = meta_of(node)[0]
        stride = _recorded_stride(node)
        if stride is None or not _row_major(shape, stride):
            raise Unsupported(f"as_strided of {node.name}, whose layout {stride} is not "
                              "row-major")
    return node


def _indices(size, stride, offset, numel):
    """The storage index of each element of as_strided(size, stride, offset), row-major, or
    Unsupported when one lies outside a storage of `numel` elements."""
    if any(s < 0 for s in stride) or offset < 0:
        raise Unsupported("as_strided with a negative stride or offset")
    count = int(np.prod(size))
    if count > _MAX_ELEMENTS:
        raise Unsupported(f"as_strided of {count} elements (coil gathers up to "
                          f"{_MAX_ELEMENTS})")
    if count and offset + sum((n - 1) * s for n, s in zip(size, stride)) >= numel:
        raise Unsupported(f"as_strided of {size}, {stride} at {offset} reads past a storage of "
                          f"{numel}")
    idx = np.full(size, offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return idx.reshape(-1)


def _args(node, args, kwargs, at):
    size = [int(s) for s in args[at]]
    stride = [int(s) for s in args[at + 1]]
    offset = args[at + 2] if len(args) > at + 2 else kwargs.get("storage_offset")
    return size, stride, offset


@lowers("aten.as_strided.default")
def _as_strided(L, node, args, kwargs):
    size, stride, offset = _args(node, args, kwargs, 1)
    root = _storage_root(L, node.args[0])
    numel = int(np.prod(meta_of(root)[0]))
    idx = _indices(size, stride, 0 if offset is None else int(offset), numel)
    if idx.size == 0:
        return Value(L.full(0, meta_of(node)[1], size))
    flat = reshape(L, L.env[root], [numel])
    const = Value(L.g.constant(f"strided_{node.name}", np.ascontiguousarray(idx)))
    return reshape(L, Value(L.op("gather", [flat, const], {"axis": 0})), size)


@lowers("aten.as_strided_scatter.default")
def _as_strided_scatter(L, node, args, kwargs):
    """input with as_strided(...) of it (on its clone's storage: a fresh tensor whose strides
    are input's when those are dense) overwritten by src. A view that overlaps itself stays
    in eager: which src element lands there follows the order TensorIterator picks."""
    x, src = args[0], args[1]
    size, stride, offset = _args(node, args, kwargs, 2)
    inp = node.args[0]
    if inp.op == "placeholder":
        L.__dict__.setdefault("exact_storage", set()).add(inp)  # (checked at each call)
    elif inp.op == "get_attr" or not _row_major(meta_of(inp)[0], _recorded_stride(inp) or ()):
        raise Unsupported(f"as_strided_scatter into {inp.name}, whose layout is not known to "
                          "be row-major")
    out_shape, dt = meta_of(node)
    numel = int(np.prod(out_shape))
    idx = _indices(size, stride, 0 if offset is None else int(offset), numel)
    if idx.size == 0:
        return x
    if np.unique(idx).size != idx.size:
        raise Unsupported("as_strided_scatter into a view that overlaps itself")
    source = np.full(numel, -1, dtype=np.int64)  # storage index -> the src element landing there
    source[idx] = np.arange(idx.size, dtype=np.int64)
    hit = Value(L.g.constant(f"hit_{node.name}", source >= 0))
    where = Value(L.g.constant(f"from_{node.name}", np.maximum(source, 0)))
    flat_src = reshape(L, Value(L.cast(src, dt)), [idx.size])
    moved = Value(L.op("gather", [flat_src, where], {"axis": 0}))
    out = Value(L.op("where", [hit, moved, reshape(L, x, [numel])]))
    return reshape(L, out, list(out_shape))
