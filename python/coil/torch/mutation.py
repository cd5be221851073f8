"""In-place writes inside a graph coil compiles whole: copy_ into a graph input or an
intermediate (torch's decompositions of instance norm, functionalization's write-back of
mutated inputs), batch norm's running statistics in training mode, and any in-place aten op
whose functional form has a row (`inplace_row`: index_put_, index_copy_, add_, fill_, ...: a
KV cache written at a position, as torch 1.13 traces `cache[:, :, pos] = k` or
`cache.index_copy_(2, pos, k)` without functionalizing).

coil's values are never views, so a write is made functional while the graph is lowered, in
node order: the written node (and the nodes that are the same tensor under another name:
aten.alias, detach, a view to the same shape) take the new value for every node lowered after
the writer, as functionalization would rewrite them. A write that lands in a graph input is
also copied back into the caller's tensor after the run (fx_compile.CoilGraphCallable), as
eager mutates it.

A write is refused (Unsupported: the graph runs in eager) when that rewrite would not be what
eager computes:
  - another view of the same storage (a slice, a reshape to another shape, ...) taken before
    the writer is read after it: it would still hold the old value;
  - the write lands in part of an input (a view of it to another shape), or in a captured
    constant (its next call would have to see the new value);
  - the graph is a partition of a larger one (fx_compile._partitioned): eager ops outside it
    may read the tensor between the writer and the partition's end."""

import operator

import torch

from .lowering import Unsupported, Value, lowers, meta_of

_SAME_TENSOR_OPS = {"aten.alias.default", "aten.detach.default"}
# (a slice to the same shape is the whole tensor: `x[:, :]`, as 1.13 traces `x[:, :, i] = v`)
_SAME_SHAPE_VIEWS = {"aten.view.default", "aten._reshape_alias.default", "aten.reshape.default",
                     "aten._unsafe_view.default", "aten.expand.default", "aten.slice.Tensor"}


def _is_view(node):
    """Whether node's value shares its first argument's storage (torch's schema says so; a
    getitem of a view-returning op, e.g. split, too)."""
    if node.op != "call_function" or not node.args:
        return False
    if node.target is operator.getitem:
        return _is_view(node.args[0])
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.returns:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and not alias.is_write


def _shape(node):
    val = node.meta.get("val", node.meta.get("tensor_meta"))
    return tuple(getattr(val, "shape", ()) or ())


def _same_tensor(node):
    """Whether node is its first argument under another name."""
    t = str(node.target)
    if t in _SAME_TENSOR_OPS:
        return True
    src = node.args[0] if node.args else None
    return (t in _SAME_SHAPE_VIEWS and isinstance(src, torch.fx.Node)
            and _shape(node) == _shape(src))


def _storage_group(dst):
    """(root, every node sharing dst's storage): up through views to the root, then down
    through views from it."""
    root = dst
    while _is_view(root) and isinstance(root.args[0], torch.fx.Node):
        root = root.args[0]
    group, todo = {root}, [root]
    while todo:
        n = todo.pop()
        for u in n.users:
            if u not in group and _is_view(u) and u.args and u.args[0] is n:
                group.add(u)
                todo.append(u)
    return root, group


def _identity_set(dst, root):
    """dst and the nodes that are dst's very tensor: up and down through alias-like ops."""
    same, todo = {dst}, [dst]
    while todo:
        n = todo.pop()
        if _same_tensor(n) and isinstance(n.args[0], torch.fx.Node) and n.args[0] not in same:
            same.add(n.args[0])
            todo.append(n.args[0])
        for u in n.users:
            if u not in same and _same_tensor(u) and u.args[0] is n:
                same.add(u)
                todo.append(u)
    return same


def write(L, writer, dst, new):
    """Records that FX node `writer` stores `new` (a coil Value of dst's shape and dtype) into
    FX node `dst`: see the module's docstring."""
    if not L.writes_ok:
        raise Unsupported(f"{writer.target} writes {dst.name} in place inside a partition "
                          "(coil takes such writes in graphs it compiles whole)")
    if not isinstance(dst, torch.fx.Node):
        raise Unsupported(f"{writer.target} writes a value that is not a graph node")
    root, group = _storage_group(dst)
    same = _identity_set(dst, root)
    if root.op == "get_attr":
        raise Unsupported(f"{writer.target} writes the captured constant {root.target}")
    if root.op == "placeholder" and root not in same:
        raise Unsupported(f"{writer.target} writes part of the input {root.name} (a view of "
                          "it to another shape)")
    after = L.order[writer]
    # a view lowered after the writer from a fresh one is fresh too; the others (stale: they
    # hold the old value) must not be read after the writer
    fresh = set(same)
    for n in sorted(group - same, key=lambda n: L.order.get(n, -1)):
        if L.order.get(n, -1) > after and n.args[0] in fresh:
            fresh.add(n)
    for n in group - fresh:
        late = [u for u in n.users if u is not writer and L.order.get(u, -1) > after]
        if late or L.order.get(n, -1) > after:
            raise Unsupported(f"{writer.target} writes {dst.name} in place and "
                              f"{(late or [n])[0].name} reads it after through the view "
                              f"{n.name}")
    for n in same:
        L.env[n] = new
    if root.op == "placeholder":
        L.writes[root] = new


COPY_OPS = ("aten.copy_.default", "prims.copy_to.default")


@lowers(*COPY_OPS)
def _copy_(L, node, args, kwargs):
    """dst.copy_(src), prims.copy_to(dst, src): src cast to dst's dtype and broadcast to its
    shape, written into dst."""
    shp, dt = meta_of(node.args[0])
    new = L.cast(args[1], dt)
    if meta_of(node.args[1])[0] != shp:
        new = Value(L.op("expand", [new], {"shape": list(shp)}))
    write(L, node, node.args[0], new)
    return new


def _functional_name(node):
    """aten.X_.overload's functional twin aten.X.overload, when the op writes its first argument
    and nothing else (the in-place convention: it returns that argument); else None."""
    name = str(node.target)
    schema = getattr(node.target, "_schema", None)
    if schema is None or not name.startswith("aten.") or name.count(".") != 2:
        return None
    _, op, overload = name.split(".")
    if not op.endswith("_") or op.startswith("_") or name in COPY_OPS or op.startswith("resize"):
        return None  # (resize_, resize_as_: storage, not values)
    written = [i for i, a in enumerate(schema.arguments)
               if a.alias_info is not None and a.alias_info.is_write]
    if written != [0]:
        return None
    # A twin that returns a view (transpose, squeeze, as_strided, ...) means the in-place op
    # changes the tensor's metadata, not its data: not a write of values.
    twin = getattr(getattr(torch.ops.aten, op[:-1], None), overload, None)
    twin_schema = getattr(twin, "_schema", None)
    if twin_schema is None or any(r.alias_info is not None for r in twin_schema.returns):
        return None
    return f"aten.{op[:-1]}.{overload}"


def inplace_row(node, rows):
    """The row of an in-place op (`rows`: lowering.ROWS): its functional twin's row, the
    result cast to the written tensor's dtype (as in-place ops keep it) and written into the
    first argument (`write`); None when the op has no twin with a row."""
    twin = _functional_name(node)
    fn = rows.get(twin) if twin else None
    if fn is None:
        return None

    def row(L, node, args, kwargs):
        shp, dt = meta_of(node.args[0])
        if tuple(meta_of(node)[0]) != tuple(shp):
            raise Unsupported(f"{node.target} changes its input's shape")
        new = L.cast(fn(L, node, args, kwargs), dt)
        write(L, node, node.args[0], new)
        return new
    return row


def takes_write(node, rows):
    """Whether coil lowers the in-place node (in a graph it compiles whole)."""
    return str(node.target) in COPY_OPS or inplace_row(node, rows) is not None
