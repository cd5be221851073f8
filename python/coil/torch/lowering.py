"""aten -> coil: one row per op overload, each a function that adds coil nodes for one FX node.

A row is registered with @lowers("aten.add.Tensor", ...) (the overload's str(), the same on torch
1.13 and 2.x). It gets the Lowering (the coil graph under construction and helpers), the FX
node, and the node's arguments with every FX node replaced by its coil value (an int; a tuple
of them for multi-output nodes), and returns the node's coil value(s). A row may raise
Unsupported for arguments it cannot handle (the partitioner then leaves the node to eager).

What coil does not implement itself comes from torch's own decompositions (DECOMPOSITIONS),
applied while AOTAutograd traces, so the graphs this table sees hold only rows below.
"""

import operator

import torch

from .. import DTypeName, coil_dtype

aten = torch.ops.aten

ROWS = {}  # str(overload) -> function(L, node, args, kwargs) -> value(s)


class Unsupported(Exception):
    """This node cannot be lowered (the reason is the message); it runs in eager instead."""


def lowers(*names):
    def register(fn):
        for n in names:
            ROWS[n] = fn
        return fn
    return register


def _decompositions():
    """torch's decompositions of every op the table does not lower itself (backward ops,
    composites such as std, hardswish, addcmul, ...), as Inductor takes torch's table: the
    graphs this table sees then hold rows below where torch can decompose at all. Computed
    after every row is registered (the end of this module)."""
    from torch._decomp import decomposition_table
    table = {op: fn for op, fn in decomposition_table.items()
             if str(op) not in ROWS and str(op) not in _KEEP}
    nll2d = torch.ops.aten.nll_loss2d_forward.default
    if nll2d not in table and str(nll2d) not in ROWS:
        table[nll2d] = _nll_loss2d_forward
    return table


def _nll_loss2d_forward(x, target, weight, reduction, ignore_index):
    """nll_loss2d_forward ([N, C, H, W] scores, [N, H, W] targets; torch 1.13 has no
    decomposition) as nll_loss_forward of the [N*H*W, C] scores, whose decomposition torch
    has; per-element losses (reduction none) back to [N, H, W]."""
    c = x.shape[1]
    flat = x.movedim(1, -1).reshape(-1, c)
    out, total = torch.ops.aten.nll_loss_forward(flat, target.reshape(-1), weight, reduction,
                                                 ignore_index)
    if reduction == 0:  # none
        out = out.reshape(target.shape)
    return out, total


# Overloads left whole even though torch decomposes them: coil's fallback runs them in eager
# (their decompositions mutate inputs or need ops coil lacks).
_KEEP = {"aten.uniform.default", "aten.randn.default"}


def meta_of(node):
    """(shape tuple, torch dtype) of an FX node's tensor value (FakeTensor or tensor_meta)."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        shape, dtype = val.shape, val.dtype
    else:
        tm = node.meta.get("tensor_meta")
        if tm is None or not hasattr(tm, "shape"):
            raise Unsupported(f"{node.name}: no shape information (run ShapeProp first)")
        shape, dtype = tm.shape, tm.dtype
    # Symbolic sizes (torch.compile's dynamic shapes) are SymDims (symbolic.py): rows pass them
    # on, and one that needs a size's value raises Unsupported (never a guessed number).
    if not all(type(s) is int for s in shape):
        symbols = symbols_of(node.graph)
        return tuple(symbols.dim(s) for s in shape), dtype
    return tuple(shape), dtype


def symbols_of(graph):
    """The size symbols of an FX graph (symbolic.Symbols), made at the first symbolic size."""
    symbols = getattr(graph, "_coil_symbols", None)
    if symbols is None:
        from .symbolic import Symbols
        symbols = graph._coil_symbols = Symbols()
        # named in the order of the inputs' dims, whichever node is looked at first
        for n in graph.nodes:
            if n.op == "placeholder":
                val = n.meta.get("val")
                for s in getattr(val, "shape", None) or ([val] if val is not None else []):
                    if type(s) is not int:
                        try:
                            symbols.dim(s)
                        except Unsupported:
                            pass
    return symbols


class Lowering:
    """The coil graph being built and what rows share."""

    def __init__(self, graph):
        self.g = graph
        # (info value, api name, is_matrix) of each aten._linalg_check_errors: the compiled
        # graph returns info, and the caller runs torch's check on it (lowering_linalg.py)
        self.checks = []
        # in-place writes (mutation.py): FX node -> Value and order, set by CoilGraphCallable;
        # the graph inputs written (placeholder node -> final Value), copied back after a run
        self.env, self.order, self.writes = {}, {}, {}
        self.writes_ok = False

    def op(self, name, inputs, attrs=None, node_name=None):
        attrs = attrs or {}
        if any(_has_symbolic(v) for v in attrs.values()):
            from .symbolic import resolve_attrs
            attrs = resolve_attrs(self, name, list(inputs), attrs)
        return self.g.node(name, list(inputs), attrs, node_name)

    def shape(self, v):
        """The shape of coil value v: ints, and SymDims where coil's type has a size symbol
        (torch's dynamic shapes; symbolic.py)."""
        t = self.g.type_of(v)
        inside = t[t.index("[") + 1:t.rindex("]")]
        sizes = [s.strip() for s in inside.split(",")] if inside.strip() else []
        if all(s.lstrip("-").isdigit() for s in sizes):
            return tuple(int(s) for s in sizes)
        from .symbolic import parse_size
        return tuple(parse_size(self, s) for s in sizes)

    def full(self, value, dtype, shape=()):
        return self.op("full", [], {"shape": list(shape), "value": float(value),
                                    "dtype": DTypeName(coil_dtype(dtype))})

    def cast(self, v, dtype):
        want = coil_dtype(dtype)
        if self.g.type_of(v).split("[")[0] == want:
            return v
        return self.op("cast", [v], {"dtype": DTypeName(want)})

    def rank(self, v):
        t = self.g.type_of(v)
        inside = t[t.index("[") + 1:t.rindex("]")]
        return 0 if not inside.strip() else inside.count(",") + 1


def _has_symbolic(v):
    from .symbolic import SymDim
    return isinstance(v, SymDim) or (isinstance(v, (list, tuple)) and
                                     any(isinstance(x, SymDim) for x in v))


class Value(int):
    """A coil value id (distinct from Python ints that are arguments)."""


def _operand(L, x, dtype):
    """x as a coil value of `dtype`: values are cast, Python numbers become 0-d constants."""
    if isinstance(x, Value):
        return L.cast(x, dtype)
    if isinstance(x, (bool, int, float)):
        return Value(L.full(x, dtype))
    raise Unsupported(f"operand {x!r}")


def _out_dtype(node):
    return meta_of(node)[1]


def _compute_dtype(node, args):
    """The dtype both operands of an elementwise op are computed in: torch's promotion of the
    tensor operands (Python scalars do not promote within a category)."""
    tensors = [a for a in args if isinstance(a, Value)]
    dt = None
    for a in node.args:
        if isinstance(a, torch.fx.Node):
            d = meta_of(a)[1]
            dt = d if dt is None else torch.promote_types(dt, d)
    if dt is None:
        return _out_dtype(node)
    for a in args:
        if isinstance(a, float) and not dt.is_floating_point:
            dt = torch.get_default_dtype()
    del tensors
    return dt


def _binary(coil_op):
    def row(L, node, args, kwargs):
        a, b = args[0], args[1]
        dt = _compute_dtype(node, [a, b])
        out = Value(L.op(coil_op, [_operand(L, a, dt), _operand(L, b, dt)]))
        return Value(L.cast(out, _out_dtype(node)))
    return row


def _add_like(coil_op):
    def row(L, node, args, kwargs):
        a, b = args[0], args[1]
        alpha = kwargs.get("alpha", args[2] if len(args) > 2 else 1)
        dt = _compute_dtype(node, [a, b])
        bv = _operand(L, b, dt)
        if alpha != 1:
            bv = Value(L.op("mul", [bv, _operand(L, alpha, dt)]))
        out = Value(L.op(coil_op, [_operand(L, a, dt), bv]))
        return Value(L.cast(out, _out_dtype(node)))
    return row


for _name, _op in [("add", "add"), ("sub", "sub")]:
    lowers(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar")(_add_like(_op))
for _name, _op in [("mul", "mul"), ("div", "div"), ("maximum", "maximum"),
                   ("minimum", "minimum"), ("eq", "eq"), ("ne", "ne"), ("lt", "lt"),
                   ("le", "le"), ("gt", "gt"), ("ge", "ge"), ("fmod", "fmod"),
                   ("logical_and", "logical_and"), ("logical_or", "logical_or")]:
    lowers(f"aten.{_name}.Tensor", f"aten.{_name}.Scalar", f"aten.{_name}.default")(
        _binary(_op))
lowers("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")(_binary("pow"))
lowers("aten.rsub.Scalar", "aten.rsub.Tensor")(
    lambda L, node, args, kwargs: _add_like("sub")(L, node, [args[1], args[0]] + list(args[2:]),
                                                   kwargs))


def _unary(coil_op):
    def row(L, node, args, kwargs):
        dt = _out_dtype(node)
        return Value(L.op(coil_op, [_operand(L, args[0], dt)]))
    return row


for _name in ["neg", "exp", "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "relu",
              "sigmoid", "tanh", "erf", "sin", "cos", "abs", "floor", "ceil", "round", "sign",
              "silu"]:
    lowers(f"aten.{_name}.default")(_unary(_name))
lowers("aten.logical_not.default")(lambda L, node, args, kwargs: Value(
    L.op("logical_not", [args[0]])))
lowers("aten.isnan.default")(lambda L, node, args, kwargs: Value(L.op("isnan", [args[0]])))


@lowers("aten.gelu.default")
def _gelu(L, node, args, kwargs):
    approximate = kwargs.get("approximate", args[1] if len(args) > 1 else "none")
    return Value(L.op("gelu", [args[0]], {"approximate": approximate}))


@lowers("aten.clamp.default", "aten.clamp_min.default", "aten.clamp_max.default",
        "aten.hardtanh.default")
def _clamp(L, node, args, kwargs):
    target = str(node.target)
    lo = hi = None
    if target == "aten.clamp_min.default":
        lo = args[1]
    elif target == "aten.clamp_max.default":
        hi = args[1]
    elif target == "aten.hardtanh.default":
        lo = args[1] if len(args) > 1 else kwargs.get("min_val", -1.0)
        hi = args[2] if len(args) > 2 else kwargs.get("max_val", 1.0)
    else:
        lo = args[1] if len(args) > 1 else kwargs.get("min")
        hi = args[2] if len(args) > 2 else kwargs.get("max")
    if isinstance(lo, Value) or isinstance(hi, Value):
        raise Unsupported("clamp with tensor bounds")
    attrs = {}
    if lo is not None:
        attrs["min"] = float(lo)
    if hi is not None:
        attrs["max"] = float(hi)
    return Value(L.op("clamp", [args[0]], attrs))


@lowers("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther",
        "aten.where.Scalar")
def _where(L, node, args, kwargs):
    dt = _out_dtype(node)
    cond = L.cast(args[0], torch.bool)
    return Value(L.op("where", [cond, _operand(L, args[1], dt), _operand(L, args[2], dt)]))


@lowers("aten.scalar_tensor.default")
def _scalar_tensor(L, node, args, kwargs):
    return Value(L.full(args[0], _out_dtype(node)))


@lowers("aten.full.default")
def _full(L, node, args, kwargs):
    return Value(L.full(args[1], _out_dtype(node), meta_of(node)[0]))


@lowers("aten.zeros_like.default", "aten.ones_like.default", "aten.full_like.default",
        "aten.new_zeros.default", "aten.new_ones.default", "aten.zeros.default",
        "aten.ones.default")
def _filled(L, node, args, kwargs):
    target = str(node.target)
    value = 1.0 if "ones" in target else 0.0
    if target == "aten.full_like.default":
        value = args[1]
    shape, dt = meta_of(node)
    return Value(L.full(value, dt, shape))


# ---- casts and copies -----------------------------------------------------------------------

def copies_across_devices(node, device):
    """Whether a copy to `device` moves its source to another device (the graph's device is
    its inputs' one: a copy to where the source already is, such as torch's GQA path's
    `.to(query.device)` on cuda, is a cast). Unknown sources count as moves."""
    if device is None:
        return False
    dev = torch.device(device)
    src = node.args[0].meta.get("val") if node.args and hasattr(node.args[0], "meta") else None
    if not isinstance(src, torch.Tensor):
        return dev.type != "cpu"
    have = src.device
    same_index = (dev.index if dev.index is not None else 0) == (
        have.index if have.index is not None else 0)
    return dev.type != have.type or (dev.type != "cpu" and not same_index)


@lowers("prims.convert_element_type.default", "aten._to_copy.default", "aten.to.dtype")
def _convert(L, node, args, kwargs):
    if copies_across_devices(node, kwargs.get("device")):
        raise Unsupported(f"a copy to {kwargs['device']}")
    return Value(L.cast(args[0], _out_dtype(node)))


@lowers("aten.clone.default", "aten.alias.default", "aten.detach.default",
        "aten.lift_fresh_copy.default", "aten.contiguous.default")
def _identity(L, node, args, kwargs):
    return args[0]


# ---- views ----------------------------------------------------------------------------------

@lowers("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
        "aten._reshape_alias.default")
def _view(L, node, args, kwargs):
    return Value(L.op("reshape", [args[0]], {"shape": list(meta_of(node)[0])}))


@lowers("aten.permute.default")
def _permute(L, node, args, kwargs):
    return Value(L.op("permute", [args[0]], {"dims": [int(d) for d in args[1]]}))


@lowers("aten.t.default")
def _t(L, node, args, kwargs):
    if L.rank(args[0]) < 2:
        return args[0]
    return Value(L.op("transpose", [args[0]], {"dim0": 0, "dim1": 1}))


@lowers("aten.transpose.int")
def _transpose(L, node, args, kwargs):
    return Value(L.op("transpose", [args[0]], {"dim0": int(args[1]), "dim1": int(args[2])}))


@lowers("aten.expand.default")
def _expand(L, node, args, kwargs):
    return Value(L.op("expand", [args[0]], {"shape": list(meta_of(node)[0])}))


@lowers("aten.unsqueeze.default")
def _unsqueeze(L, node, args, kwargs):
    return Value(L.op("unsqueeze", [args[0]], {"dim": int(args[1])}))


@lowers("aten.squeeze.dim", "aten.squeeze.default", "aten.squeeze.dims")
def _squeeze(L, node, args, kwargs):
    return Value(L.op("reshape", [args[0]], {"shape": list(meta_of(node)[0])}))


@lowers("aten.slice.Tensor")
def _slice(L, node, args, kwargs):
    dim = args[1] if len(args) > 1 else 0
    start = args[2] if len(args) > 2 else None
    end = args[3] if len(args) > 3 else None
    step = args[4] if len(args) > 4 else 1
    from .symbolic import SymDim
    bound = lambda b: b if isinstance(b, SymDim) else int(b)  # noqa: E731 (symbolic: resolve_attrs)
    attrs = {"dim": int(dim), "start": bound(start or 0), "step": int(step)}
    if end is not None and (isinstance(end, SymDim) or end < 2**62):
        attrs["end"] = bound(end)
    return Value(L.op("slice", [args[0]], attrs))


@lowers("aten.select.int")
def _select(L, node, args, kwargs):
    dim, index = int(args[1]), int(args[2])
    s = L.op("slice", [args[0]], {"dim": dim, "start": index,
                                  "end": index + 1 if index != -1 else 2**62, "step": 1})
    return Value(L.op("reshape", [s], {"shape": list(meta_of(node)[0])}))


@lowers("aten.cat.default")
def _cat(L, node, args, kwargs):
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    dt = _out_dtype(node)
    return Value(L.op("concat", [L.cast(v, dt) for v in args[0]], {"dim": int(dim)}))


# ---- reductions -----------------------------------------------------------------------------

def _reduce(coil_op):
    def row(L, node, args, kwargs):
        dims = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        if str(node.target) in ("aten.sum.default", "aten.mean.default"):
            dims, keepdim = None, False
        if isinstance(dims, int):
            dims = [dims]
        x = L.cast(args[0], _out_dtype(node)) if coil_op in ("sum", "mean") else args[0]
        attrs = {"keepdim": bool(keepdim)}
        if dims:
            attrs["axes"] = [int(d) for d in dims]
        return Value(L.op(coil_op, [x], attrs))
    return row


lowers("aten.sum.dim_IntList", "aten.sum.default")(_reduce("sum"))
lowers("aten.mean.dim", "aten.mean.default")(_reduce("mean"))
lowers("aten.amax.default")(_reduce("max"))
lowers("aten.amin.default")(_reduce("min"))
lowers("aten.prod.dim_int")(_reduce("prod"))


@lowers("aten.var.correction", "aten.var.dim")
def _var(L, node, args, kwargs):
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    if str(node.target) == "aten.var.dim":
        unbiased = args[2] if len(args) > 2 else kwargs.get("unbiased", True)
        correction = 1 if unbiased else 0
        keepdim = args[3] if len(args) > 3 else kwargs.get("keepdim", False)
    else:
        correction = kwargs.get("correction", 1)
        correction = 1 if correction is None else correction
        keepdim = kwargs.get("keepdim", False)
    attrs = {"keepdim": bool(keepdim), "correction": float(correction)}
    if dims:
        attrs["axes"] = [int(d) for d in ([dims] if isinstance(dims, int) else dims)]
    return Value(L.op("var", [args[0]], attrs))


@lowers("aten.argmax.default", "aten.argmin.default")
def _argmax(L, node, args, kwargs):
    dim = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    attrs = {"keepdim": bool(keepdim)}
    if dim is not None:
        attrs["axis"] = int(dim)
    op = "argmax" if "argmax" in str(node.target) else "argmin"
    return Value(L.op(op, [args[0]], attrs))


# ---- matmuls --------------------------------------------------------------------------------

@lowers("aten.mm.default", "aten.bmm.default", "aten.matmul.default")
def _mm(L, node, args, kwargs):
    return Value(L.op("matmul", [args[0], args[1]]))


@lowers("aten.addmm.default")
def _addmm(L, node, args, kwargs):
    beta = kwargs.get("beta", 1)
    alpha = kwargs.get("alpha", 1)
    return Value(L.op("addmm", [args[0], args[1], args[2]],
                      {"alpha": float(alpha), "beta": float(beta)}))


# ---- nn -------------------------------------------------------------------------------------

@lowers("aten._softmax.default", "aten._log_softmax.default")
def _softmax(L, node, args, kwargs):
    dim = int(args[1])
    op = "log_softmax" if "log_softmax" in str(node.target) else "softmax"
    x = L.cast(args[0], _out_dtype(node))
    return Value(L.op(op, [x], {"axis": dim}))


@lowers("aten.native_layer_norm.default")
def _native_layer_norm(L, node, args, kwargs):
    """(out, mean, rstd) as torch returns them; mean and rstd keep the normalized dims as 1s
    (what native_layer_norm_backward's decomposition reads)."""
    x, normalized_shape, weight, bias, eps = args[:5]
    dims = len(normalized_shape)
    rank = L.rank(x)
    axes = list(range(rank - dims, rank))
    inputs = [x] + [v for v in (weight, bias) if v is not None]
    mean = Value(L.op("mean", [x], {"axes": axes, "keepdim": True}))
    var = Value(L.op("var", [x], {"axes": axes, "keepdim": True, "correction": 0.0}))
    dt = meta_of(node.args[0])[1]
    rstd = Value(L.op("rsqrt", [Value(L.op("add", [var, _operand(L, float(eps), dt)]))]))
    if eps < 0 or (weight is None and bias is not None):
        # outside coil's layer_norm (eps >= 0; a bias needs a weight): spelled out
        out = Value(L.op("mul", [Value(L.op("sub", [x, mean])), rstd]))
        if weight is not None:
            out = Value(L.op("mul", [out, weight]))
        if bias is not None:
            out = Value(L.op("add", [out, bias]))
    else:
        out = Value(L.op("layer_norm", inputs, {"dims": dims, "eps": float(eps)}))
    return (out, mean, rstd)


@lowers("aten.embedding.default")
def _embedding(L, node, args, kwargs):
    weight, indices = args[0], args[1]
    return Value(L.op("gather", [weight, indices], {"axis": 0}))


@lowers("<built-in function getitem>")
def _getitem(L, node, args, kwargs):
    seq, index = args[0], args[1]
    if not isinstance(seq, tuple):
        raise Unsupported("getitem of a single value")
    v = seq[index]
    if v is None and not node.users:  # an output no one reads (make_fx leaves its getitem)
        return None
    if v is None:
        raise Unsupported(f"output {index} of {node.args[0].name} is not computed by coil")
    return v


@lowers("aten.bitwise_and.Tensor", "aten.bitwise_or.Tensor", "aten.bitwise_xor.Tensor",
        "aten.bitwise_not.default")
def _bitwise(L, node, args, kwargs):
    if _out_dtype(node) != torch.bool:
        raise Unsupported(f"{node.target} on {_out_dtype(node)} (coil has logical ops only)")
    name = str(node.target).split(".")[1]
    if name == "bitwise_not":
        return Value(L.op("logical_not", [L.cast(args[0], torch.bool)]))
    a, b = (_operand(L, v, torch.bool) for v in args[:2])
    if name == "bitwise_xor":
        return Value(L.op("ne", [a, b]))
    return Value(L.op("logical_and" if name == "bitwise_and" else "logical_or", [a, b]))


# Rows of ops without outputs (their node has no tensor metadata)
NO_OUTPUT = {"aten._linalg_check_errors.default"}


def row_for(node):
    """The row of an FX call_function node, or None."""
    if node.target is operator.getitem:
        return ROWS["<built-in function getitem>"]
    row = ROWS.get(str(node.target))
    if row is None:  # an in-place op whose functional twin has a row (mutation.py)
        from .mutation import inplace_row
        row = inplace_row(node, ROWS)
    return row


def supported_ops():
    """Every aten/prims overload the table lowers, sorted."""
    return sorted(k for k in ROWS if not k.startswith("<"))


def supported_inplace_ops():
    """The in-place aten overloads (X_) whose functional form has a row (mutation.inplace_row),
    sorted: those this torch has."""
    from .mutation import inplace_row
    found = set()
    for name in supported_ops():
        parts = name.split(".")
        if len(parts) != 3 or parts[0] != "aten":
            continue
        packet = getattr(torch.ops.aten, parts[1] + "_", None)
        op = getattr(packet, parts[2], None) if packet is not None else None
        if op is None:
            continue

        class _Node:  # what inplace_row reads of an FX node
            target = op
        if inplace_row(_Node, ROWS) is not None:
            found.add(str(op))
    return sorted(found)


from . import lowering_nn  # noqa: E402,F401  (registers its rows)
from . import lowering_math  # noqa: E402,F401
from . import lowering_bessel  # noqa: E402,F401
from . import lowering_scatter  # noqa: E402,F401
from . import lowering_pool  # noqa: E402,F401
from . import lowering_linalg  # noqa: E402,F401
from . import lowering_embedding_bag  # noqa: E402,F401
from . import lowering_attention  # noqa: E402,F401
from . import lowering_sdpa  # noqa: E402,F401
from . import lowering_sdpa_backward  # noqa: E402,F401
from . import mutation  # noqa: E402,F401
from . import lowering_fft  # noqa: E402,F401  (and lowering_complex: complex values as pairs)

DECOMPOSITIONS = _decompositions()
