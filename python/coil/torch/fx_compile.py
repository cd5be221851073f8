"""An aten-level FX graph -> a coil-compiled callable, with unsupported ops left to eager.

compile_fx(gm, example_inputs) is what the torch.compile backend and coil.torch.compile hand
each forward and backward graph to:
  1. shapes: every node needs its shape and dtype (node.meta "val" from Dynamo/AOTAutograd, or
     "tensor_meta"; otherwise ShapeProp runs the graph once on the example inputs);
  2. partition: nodes whose op has a row in lowering.ROWS go to coil; when some do not, torch's
     CapabilityBasedPartitioner groups the supported ones into submodules and the others stay
     as they are (eager). Each op left to eager is logged once (COIL_LOGS=fallback);
  3. each supported (sub)graph becomes a coil graph (lowering.py), compiled through coil's disk
     cache (keyed by the generated code: a second process compiles nothing) and called with
     torch's CPU tensors in place: coil reads their memory and writes outputs that torch
     allocates (no copies, no files, no processes).
"""

import os

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import Graph, compile as coil_compile, coil_dtype
from coil_runtime import logs
from . import lowering
from .lowering import Unsupported, Value, meta_of

_logged = set()


def _log_fallback(what, reason):
    key = (what, reason)
    if key in _logged:
        return
    _logged.add(key)
    logs.log("fallback", f"{what} runs in eager: {reason}")


def _type_text(shape, dtype):
    return f"{coil_dtype(dtype)}[{', '.join(str(int(s)) for s in shape)}]"


def _is_tensor_node(node):
    try:
        meta_of(node)
        return True
    except Unsupported:
        return False


class CoilGraphCallable:
    """One FX graph whose every call_function node has a row, compiled by coil."""

    def __init__(self, gm, options, example_inputs=None):
        self.options = dict(options or {})
        g = Graph()
        L = lowering.Lowering(g)
        env = {}
        self.placeholders = []
        self.tensor_inputs = []  # the placeholders that are coil inputs (not None)
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                self.placeholders.append(node)
                if not _is_tensor_node(node):
                    # None (an absent optional tensor, e.g. a bias) passes through; other
                    # values would need guards on them
                    i = len(self.placeholders) - 1
                    if ("val" in node.meta and node.meta["val"] is None) or (
                            example_inputs is not None and i < len(example_inputs) and
                            example_inputs[i] is None):
                        env[node] = None
                        continue
                    raise Unsupported(f"input {node.name} is not a tensor")
                shape, dtype = meta_of(node)
                env[node] = Value(g.input(f"in{len(self.tensor_inputs)}",
                                          _type_text(shape, dtype)))
                self.tensor_inputs.append(len(self.placeholders) - 1)
            elif node.op == "get_attr":  # a tensor make_fx captured: a coil constant
                t = gm
                for part in node.target.split("."):
                    t = getattr(t, part)
                if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                    raise Unsupported(f"captured value {node.target} is not a CPU tensor")
                coil_dtype(t.dtype)  # a dtype coil lacks is an error naming it
                env[node] = Value(g.constant(f"c_{node.name}", t.detach().contiguous()))
            elif node.op == "call_function":
                row = lowering.row_for(node)
                if row is None:
                    raise Unsupported(f"{node.target} has no coil lowering")
                args = torch.fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
                try:
                    env[node] = row(L, node, list(args), dict(kwargs))
                except Unsupported:
                    raise
                except Exception as e:  # a coil error names the op; add the FX node
                    raise type(e)(f"{node.format_node()}: {e}") from e
                if isinstance(env[node], Value) and _is_tensor_node(node):
                    want = coil_dtype(meta_of(node)[1])
                    if g.type_of(env[node]).split("[")[0] != want:
                        env[node] = Value(L.cast(env[node], meta_of(node)[1]))
            elif node.op == "output":
                # Any nesting of outputs (tuples, lists, None, constants) as the FX graph has it.
                outs, self.out_tree = tree_flatten(node.args[0])
                self.plan = []  # per flat output: ("const", v), ("input", i), ("coil", j)
                coil_outs = {}
                for o in outs:
                    if not isinstance(o, torch.fx.Node):
                        self.plan.append(("const", o))
                    elif o.op == "placeholder":
                        self.plan.append(("input", self.placeholders.index(o)))
                    else:
                        v = env[o]
                        if not isinstance(v, Value):
                            raise Unsupported(f"output {o.name} is not a tensor")
                        if v not in coil_outs:
                            coil_outs[v] = len(coil_outs)
                            g.output(v, f"out{coil_outs[v]}")
                        self.plan.append(("coil", coil_outs[v]))
                # torch's error checks on factorizations' info (lowering_linalg.py): info is an
                # extra output, checked after each run
                self.checks = []
                for v, api, is_matrix in L.checks:
                    if v not in coil_outs:
                        coil_outs[v] = len(coil_outs)
                        g.output(v, f"out{coil_outs[v]}")
                    self.checks.append((coil_outs[v], api, is_matrix))
            else:
                raise Unsupported(f"FX node kind {node.op} ({node.name})")
        self.graph = g
        try:
            self.model = coil_compile(g, **self.options) if coil_outs else None
        except Exception as e:  # a coil error: keep the graph as a repro for `coil minify`
            path = _save_repro(gm, g, e)
            raise type(e)(f"{e}\n  the FX graph as a coil repro: {path} (`coil check {path}` "
                          f"reproduces it, `coil minify {path} -o small.coil` shrinks it; "
                          "docs/debugging.md)") from e
        self.out_specs = [(shape, _torch_dtype(dt)) for _, dt, shape in
                          (self.model.outputs if self.model else [])]

    def __call__(self, *args):
        outs = [torch.empty(shape, dtype=dt) for shape, dt in self.out_specs]
        if self.model is not None:
            self.model.run_into([args[i] for i in self.tensor_inputs], outs)
        for j, api, is_matrix in getattr(self, "checks", ()):
            torch.ops.aten._linalg_check_errors(outs[j], api, is_matrix=is_matrix)
        result = [p[1] if p[0] == "const" else args[p[1]] if p[0] == "input" else outs[p[1]]
                  for p in self.plan]
        return tree_unflatten(result, self.out_tree)


def _save_repro(gm, g, error):
    """Writes the coil graph of a failing FX graph (its text format, constants included), headed
    by the error and the FX graph as comments, under $COIL_DEBUG_DIR/fx-repros/ (else the temp
    directory's coil-fx-repros/); returns its path. The name is a hash of the text: the same
    failing graph is written once."""
    import hashlib
    import tempfile
    text = g.to_text()
    root = os.environ.get("COIL_DEBUG_DIR") or tempfile.gettempdir()
    sub = "fx-repros" if os.environ.get("COIL_DEBUG_DIR") else "coil-fx-repros"
    folder = os.path.join(root, sub)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, hashlib.sha256(text.encode()).hexdigest()[:16] + ".coil")
    comment = lambda t: "".join(f"# {line}\n" for line in str(t).splitlines())
    with open(path, "w") as f:
        f.write("# coil.torch: an FX graph that coil failed to compile\n")
        f.write(comment(f"error: {error}"))
        f.write("# the FX graph:\n" + comment(gm.graph))
        f.write(text)
    return path


def _torch_dtype(name):
    from .. import _torch_dtype as t
    return t(name)


def _ensure_shapes(gm, example_inputs):
    from torch.fx.passes.shape_prop import _extract_tensor_metadata
    for n in gm.graph.nodes:  # captured tensors (make_fx's get_attr): their own metadata
        if n.op == "get_attr" and "val" not in n.meta and "tensor_meta" not in n.meta:
            t = gm
            for part in n.target.split("."):
                t = getattr(t, part, None)
            if isinstance(t, torch.Tensor):
                n.meta["tensor_meta"] = _extract_tensor_metadata(t)
    need = any(n.op in ("placeholder", "call_function") and "val" not in n.meta and
               "tensor_meta" not in n.meta for n in gm.graph.nodes)
    if need:
        from torch.fx.passes.shape_prop import ShapeProp
        ShapeProp(gm).propagate(*example_inputs)


def _coil_dtypes(node):
    """Whether every tensor the node reads or makes has a coil dtype (complex, int16, ... stay
    in eager)."""
    def ok(n):
        val = n.meta.get("val", n.meta.get("tensor_meta"))
        # (TensorMetadata is a namedtuple: one value, not a tuple of them)
        vals = val if isinstance(val, (tuple, list)) and not hasattr(val, "dtype") else [val]
        for v in vals:
            dt = getattr(v, "dtype", None)
            if dt is not None:
                try:
                    coil_dtype(dt)
                except Exception:
                    return False
        return True
    args = [a for a in node.all_input_nodes]
    return ok(node) and all(ok(a) for a in args)


def _mutates(node):
    """Whether the node writes one of its arguments (copy_, fill_, add_, ...): coil's values are
    never views, so such a graph runs in eager as a whole (AOTAutograd on torch 2.x
    functionalizes graphs first; make_fx on 1.13 does not)."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return False
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _supported(node):
    """A call_function node with a row, coil dtypes and static shapes (tuple values, e.g.
    native_layer_norm's three outputs, included)."""
    if node.op != "call_function" or lowering.row_for(node) is None:
        return False
    if str(node.target) in lowering.NO_OUTPUT:
        return all(_coil_dtypes(a) for a in node.all_input_nodes)
    if not _coil_dtypes(node):
        return False
    try:
        meta_of(node)
        return True
    except Unsupported:
        pass
    val = node.meta.get("val", node.meta.get("tensor_meta"))
    return isinstance(val, (tuple, list)) and not hasattr(val, "dtype")


def compile_fx(gm, example_inputs, options=None):
    """A callable equivalent to `gm` (called with the same positional tensors)."""
    _ensure_shapes(gm, example_inputs)
    devices = {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)}
    if devices - {"cpu"}:
        _log_fallback("the graph", f"inputs on {sorted(devices)}: coil.torch runs CPU graphs "
                      "in-process (CUDA graphs: see docs/torch.md)")
        return gm
    mutating = [n for n in gm.graph.nodes if n.op == "call_function" and _mutates(n)]
    if mutating:
        _log_fallback("the graph", f"{mutating[0].target} writes its input in place (coil "
                      "compiles functional graphs)")
        return gm
    unsupported = [n for n in gm.graph.nodes if n.op == "call_function" and not _supported(n)]
    if not unsupported:
        try:
            return CoilGraphCallable(gm, options, example_inputs)
        except Unsupported as e:
            _log_fallback("a graph", str(e))
            unsupported = None  # partition below, node by node
    for n in unsupported or []:
        _log_fallback(str(n.target), "no coil lowering (python -m coil.torch --ops lists them)")
    return _partitioned(gm, options)


def _partitioned(gm, options):
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    class Support(OperatorSupport):
        def is_node_supported(self, submodules, node):
            return _supported(node)

    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    fused = partitioner.partition_and_fuse()
    for name, sub in list(fused.named_children()):
        if not name.startswith("fused_"):
            continue
        try:
            compiled = CoilGraphCallable(sub, options)
        except Unsupported as e:
            _log_fallback(f"partition {name}", str(e))
            continue
        setattr(fused, name, _CallableModule(compiled))
    fused.recompile()
    return fused


class _CallableModule(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)
