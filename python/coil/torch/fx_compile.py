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
     allocates (no copies, no files, no processes). A graph on CUDA becomes coil's Triton
     module instead, loaded in this process and called with torch's CUDA tensors (cuda.py).
     A graph that mixes devices runs in eager.
"""

import os

import torch
import torch.fx
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import Graph, UnsupportedError, compile as coil_compile, coil_dtype
from .._host_memory import new_output as _new_output
from coil_runtime import logs
from . import lowering
from .lowering import Unsupported, Value, meta_of, symbols_of
from .symbolic import SymDim, graph_is_symbolic, is_size_value
from .lowering_complex import REAL_OF, ComplexPair, is_complex
from .lowering_sdpa import Opaque

_logged = set()


def _log_fallback(what, reason):
    key = (what, reason)
    if key in _logged:
        return
    _logged.add(key)
    logs.log("fallback", f"{what} runs in eager: {reason}")


def _type_text(shape, dtype):
    """coil's type of a graph input; a symbolic size must be one symbol (coil binds it from
    the input's dim at each call)."""
    def size(s):
        if isinstance(s, SymDim):
            if s.symbol_name is None:
                raise Unsupported(f"an input of size {s}: coil binds a size symbol from a dim "
                                  "that is the symbol alone")
            return s.symbol_name
        return str(int(s))
    return f"{coil_dtype(dtype)}[{', '.join(size(s) for s in shape)}]"


def _size_node_value(node, symbols):
    """The size an FX node computes when it is a symbolic integer (a placeholder Dynamo passes,
    sym_size, arithmetic on sizes): a SymDim, or an int; None for any other node."""
    val = node.meta.get("val")
    if is_size_value(val):
        return symbols.dim(val)
    target = str(getattr(node, "target", ""))
    if type(val) is int and (target.startswith("aten.sym_") or
                             getattr(node.target, "__module__", None) == "_operator"):
        return val
    return None


def _is_tensor_node(node):
    try:
        meta_of(node)
        return True
    except Unsupported:
        return False


class CoilGraphCallable:
    """One FX graph whose every call_function node has a row, compiled by coil."""

    def __init__(self, gm, options, example_inputs=None, device="cpu", probe=False,
                 whole=True):
        """`probe`: only whether coil takes the graph for `device` (the CUDA module's source is
        generated, neither written nor loaded). `whole`: gm is the whole graph, not a partition
        of one (in-place writes are taken only then: mutation.py)."""
        self.options = dict(options or {})
        self.device = device
        g = Graph()
        L = lowering.Lowering(g)
        env = L.env
        L.writes_ok = whole
        L.order = {n: i for i, n in enumerate(gm.graph.nodes)}
        L.symbols = symbols_of(gm.graph)
        # The placeholders in calling order; coil's inputs are made in the order of their names.
        # AOTAutograd's partitioner orders a forward graph's saved tensors (extra outputs) and
        # so the backward graph's placeholders differently in each process (it collects them
        # in sets), under the same names: in calling order, the same graph would be a new
        # coil graph, a new cache key, a compile in every process.
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        position_of = {n: i for i, n in enumerate(self.placeholders)}
        visit = sorted(self.placeholders, key=lambda n: n.name) + \
            [n for n in gm.graph.nodes if n.op != "placeholder"]
        self.tensor_inputs = []  # the placeholders that are coil inputs (not None)
        self.complex_inputs = set()  # those passed as torch.view_as_real (lowering_complex)
        self.input_perms = {}  # those passed as t.permute(perm) (_dense_permutation)
        for node in visit:
            if node.op == "placeholder":
                pi = position_of[node]
                size = _size_node_value(node, L.symbols)
                if size is not None:  # a size Dynamo passes (coil binds it from a tensor)
                    env[node] = size
                    continue
                if _opaque_input(node):  # read only by rows that ignore it (lowering_sdpa)
                    env[node] = Opaque(*meta_of(node))
                    continue
                if not _is_tensor_node(node):
                    # None (an absent optional tensor, e.g. a bias) passes through; other
                    # values would need guards on them
                    if not node.users or ("val" in node.meta and node.meta["val"] is None) or (
                            example_inputs is not None and pi < len(example_inputs) and
                            example_inputs[pi] is None):
                        env[node] = None
                        continue
                    raise Unsupported(f"input {node.name} is not a tensor")
                shape, dtype = meta_of(node)
                if dtype in REAL_OF:  # complex: coil reads torch.view_as_real of it
                    env[node] = ComplexPair(g.input(f"in{len(self.tensor_inputs)}",
                                                    _type_text(shape + (2,), REAL_OF[dtype])))
                    self.complex_inputs.add(pi)
                elif (perm := _dense_permutation(node)) is not None:
                    # A permuted dense tensor (a weight read as W.t() by a backward graph): coil
                    # reads its memory as it is, as the contiguous S = t.permute(perm), and the
                    # graph permutes it back, a view its kernels read through strides; the
                    # runtime would otherwise copy it at every call.
                    stored = Value(g.input(f"in{len(self.tensor_inputs)}",
                                           _type_text(tuple(shape[p] for p in perm), dtype)))
                    inverse = [perm.index(d) for d in range(len(perm))]
                    env[node] = Value(L.op("permute", [stored], {"dims": inverse}))
                    self.input_perms[pi] = perm
                else:
                    env[node] = Value(g.input(f"in{len(self.tensor_inputs)}",
                                              _type_text(shape, dtype)))
                self.tensor_inputs.append(pi)
            elif node.op == "get_attr":  # a tensor make_fx captured: a coil constant
                t = gm
                for part in node.target.split("."):
                    t = getattr(t, part)
                if not isinstance(t, torch.Tensor) or t.device.type != device:
                    raise Unsupported(f"captured value {node.target} is not a tensor on "
                                      f"{device}")
                # (a CUDA one is read once here; the Triton module moves it back to the GPU)
                if t.dtype in REAL_OF:  # complex: its (re, im) pairs
                    pairs = torch.view_as_real(t.detach().resolve_conj().resolve_neg())
                    env[node] = ComplexPair(g.constant(f"c_{node.name}",
                                                       pairs.cpu().contiguous()))
                    continue
                coil_dtype(t.dtype)  # a dtype coil lacks is an error naming it
                env[node] = Value(g.constant(f"c_{node.name}", t.detach().cpu().contiguous()))
            elif node.op == "call_function" and (
                    size := _size_node_value(node, L.symbols)) is not None:
                env[node] = size  # computed from the input sizes
            elif node.op == "call_function":
                row = lowering.row_for(node)
                if row is None:
                    raise Unsupported(f"{node.target} has no coil lowering")
                args = torch.fx.node.map_arg(node.args, lambda n: env[n])
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
                if not _opaque_ok(node) and any(isinstance(x, Opaque) for x in
                                                tree_flatten((args, kwargs))[0]):
                    raise Unsupported(f"{node.name} reads a value coil does not compute")
                if not getattr(row, "complex_ok", False) and any(
                        is_complex(x) for x in tree_flatten((args, kwargs))[0]):
                    # never let a row read the (re, im) pairs as real data
                    raise Unsupported(f"complex operand of {node.target}: the row has no "
                                      "complex support")
                try:
                    env[node] = row(L, node, list(args), dict(kwargs))
                except Unsupported as e:
                    if "symbolic size" in str(e) and str(node.target) not in str(e):
                        # (a size decision inside a row: name the node that made it)
                        raise Unsupported(f"{node.format_node()}: {e}") from e
                    raise
                except Exception as e:  # a coil error names the op; add the FX node
                    raise type(e)(f"{node.format_node()}: {e}") from e
                if isinstance(env[node], Value) and _is_tensor_node(node):
                    dtype = meta_of(node)[1]
                    if (dtype in REAL_OF) != is_complex(env[node]):
                        raise RuntimeError(f"{node.format_node()}: the row returned a "
                                           f"{'complex' if is_complex(env[node]) else 'real'}"
                                           f" value for a {dtype} result (a bug in its row)")
                    want = coil_dtype(REAL_OF.get(dtype, dtype))
                    if g.type_of(env[node]).split("[")[0] != want:
                        cast = L.cast(env[node], REAL_OF.get(dtype, dtype))
                        env[node] = ComplexPair(cast) if dtype in REAL_OF else Value(cast)
            elif node.op == "output":
                # Any nesting of outputs (tuples, lists, None, constants) as the FX graph has it.
                outs, self.out_tree = tree_flatten(node.args[0])
                # per flat output: ("const", v), ("input", i), ("coil", j, complex?)
                self.plan = []
                coil_outs, out_key = {}, {}  # coil output index and its sort key, per Value
                for o in outs:
                    views = _views_of_input(o, L.writes)
                    if not isinstance(o, torch.fx.Node):
                        self.plan.append(("const", o))
                    elif o.op == "placeholder":
                        self.plan.append(("input", self.placeholders.index(o)))
                    elif views is not None:  # a view of an input: torch's, no copy by coil
                        self.plan.append(("view", self.placeholders.index(views[0]), views[1]))
                    else:
                        v = env[o]
                        if isinstance(v, SymDim) or type(v) is int:  # a size (for backward)
                            self.plan.append(("size", v) if isinstance(v, SymDim) else
                                             ("const", v))
                            continue
                        if isinstance(v, Opaque):  # (dropout's RNG state: never read)
                            self.plan.append(("zeros", v.shape, v.dtype))
                            continue
                        if not isinstance(v, Value):
                            raise Unsupported(f"output {o.name} is not a tensor")
                        out_key.setdefault(v, (0, L.order[o]))
                        # a complex output: coil writes its pairs, the caller gets
                        # torch.view_as_complex of them (zero-copy)
                        self.plan.append(("coil", v, is_complex(v)))
                # graph inputs written in place (mutation.py): their final values are extra
                # outputs, copied into the caller's tensors after each run
                self.write_backs = []
                for ph, v in L.writes.items():
                    out_key.setdefault(v, (1, ph.name))
                    self.write_backs.append((v, position_of[ph]))
                # torch's error checks on factorizations' info (lowering_linalg.py): info is an
                # extra output, checked after each run
                self.checks = []
                for k, (v, api, is_matrix) in enumerate(L.checks):
                    out_key.setdefault(v, (2, k))
                    self.checks.append((v, api, is_matrix))
                # coil's outputs in the order of the FX nodes that make them, not of the output
                # tuple (a forward graph's saved tensors come in any order; see above)
                for k, v in enumerate(sorted(out_key, key=out_key.get)):
                    coil_outs[v] = k
                    g.output(v, f"out{k}")
                self.plan = [(p[0], coil_outs[p[1]], p[2]) if p[0] == "coil" else p
                             for p in self.plan]
                self.write_backs = [(coil_outs[v], i) for v, i in self.write_backs]
                self.checks = [(coil_outs[v], a, m) for v, a, m in self.checks]
            else:
                raise Unsupported(f"FX node kind {node.op} ({node.name})")
        self.graph = g
        # size-generic: where each size symbol is bound (coil input index, dim)
        self.size_dims = {}
        for k, i in enumerate(self.tensor_inputs):
            shape = meta_of(self.placeholders[i])[0]
            for d, sz in enumerate(shape):
                if isinstance(sz, SymDim) and sz.symbol_name is not None:
                    self.size_dims.setdefault(sz.symbol_name, (k, d))
        aliases = {L.symbols.names[x] for x in L.symbols.equal if x in L.symbols.names}
        unbound = sorted(set(L.symbols.names.values()) - set(self.size_dims) - aliases)
        if unbound:
            raise Unsupported(f"the size symbols {', '.join(unbound)} are no input's dim (coil "
                              "binds each from a dim that is the symbol alone)")
        # inputs whose storage as_strided reads (lowering_strided.py): checked at each call
        self.exact_storage = [self.placeholders.index(n) for n in
                              getattr(L, "exact_storage", ())]
        self.gm = gm
        self.model = self.gpu = None
        try:
            if coil_outs and device == "cuda" and probe:
                from .cuda import gpu_options
                opts = gpu_options(self.options)
                opts.pop("output_dir", None), opts.pop("debug_dir", None)
                g.generate_gpu_module(**opts)
            elif coil_outs and device == "cuda":
                self.gpu = _gpu_module(g, self.options)
            elif coil_outs:
                from .cuda import BRIDGE_OPTIONS  # CUDA graphs: nothing to do on the CPU
                self.model = coil_compile(g, **{k: v for k, v in self.options.items()
                                                 if k not in BRIDGE_OPTIONS})
        except UnsupportedError as e:  # e.g. an op coil's GPU path lacks: eager, logged
            raise Unsupported(f"coil cannot compile it for {device}: {e}") from e
        except Exception as e:  # a coil error: keep the graph as a repro for `coil minify`
            path = _save_repro(gm, g, e)
            raise type(e)(f"{e}\n  the FX graph as a coil repro: {path} (`coil check {path}` "
                          f"reproduces it, `coil minify {path} -o small.coil` shrinks it; "
                          "docs/debugging.md)") from e
        self.out_specs = [(shape, _torch_dtype(dt)) for _, dt, shape in
                          (self.model.outputs if self.model else [])]
        # a size-generic model (symbolic sizes): its output shapes are asked per call
        self.size_generic = any(d < 0 for shape, _ in self.out_specs for d in shape) or \
            bool(self.size_dims)

    def __call__(self, *args):
        if not all(_own_storage(args[i]) for i in self.exact_storage):
            return self.gm(*args)  # as_strided of an input whose storage holds more than it
        inputs = [_as_pairs(args[i]) if i in self.complex_inputs else
                  _permuted(args[i], self.input_perms[i]) if i in self.input_perms else args[i]
                  for i in self.tensor_inputs]
        if self.gpu is not None:  # the Triton module allocates its outputs on the GPU
            outs = self.gpu.run(inputs)
        elif self.size_generic and self.model is not None:
            outs = [_new_output(shape, dt) for shape, (_, dt) in
                    zip(self.model.output_shapes(inputs), self.out_specs)]
        else:
            outs = [_new_output(shape, dt) for shape, dt in self.out_specs]
        if self.model is not None:
            self.model.run_into(inputs, outs)
        for j, api, is_matrix in getattr(self, "checks", ()):
            torch.ops.aten._linalg_check_errors(outs[j], api, is_matrix=is_matrix)
        for j, i in getattr(self, "write_backs", ()):
            args[i].copy_(outs[j])
        sizes = self._sizes(inputs) if self.size_dims else {}
        result = [p[1] if p[0] == "const" else args[p[1]] if p[0] == "input" else
                  _apply_views(args[p[1]], p[2]) if p[0] == "view" else
                  p[1].evaluate(sizes) if p[0] == "size" else
                  torch.zeros(p[1], dtype=p[2], device=self.device) if p[0] == "zeros" else
                  torch.view_as_complex(outs[p[1]]) if p[2] else outs[p[1]] for p in self.plan]
        return tree_unflatten(result, self.out_tree)


    def _sizes(self, inputs):
        """{symbol: size} of this call (each symbol read from its input dim)."""
        return {name: int(inputs[k].shape[d]) for name, (k, d) in self.size_dims.items()}


# aten ops whose result is a view of their first argument (or, for reshape, whatever torch's
# reshape makes of it): an output that is a chain of them over a graph input is made by torch
# at each call, as Inductor's reinterpret_tensor of an input, instead of copied by coil.
_VIEW_OPS = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
             "aten._reshape_alias.default",
             "aten.t.default", "aten.transpose.int", "aten.permute.default",
             "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
             "aten.expand.default", "aten.alias.default", "aten.detach.default"}


def _views_of_input(node, written):
    """(placeholder, [(op, args, kwargs), ...]) when `node` is a chain of view ops with constant
    arguments over a graph input that the graph does not write, else None."""
    chain = []
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and \
            str(node.target) in _VIEW_OPS and node.args:
        rest, kwargs = node.args[1:], dict(node.kwargs)
        flat = tree_flatten((rest, kwargs))[0]
        if not all(type(x) in (int, bool) or x is None for x in flat):
            return None  # a symbolic size, or a tensor argument
        chain.append((node.target, rest, kwargs))
        node = node.args[0]
    if not chain or not isinstance(node, torch.fx.Node) or node.op != "placeholder" or \
            node in written or not _is_tensor_node(node) or meta_of(node)[1] in REAL_OF:
        return None
    return node, chain[::-1]


def _apply_views(t, chain):
    for op, rest, kwargs in chain:
        t = op(t, *rest, **kwargs)
    return t


def _dense_permutation(node):
    """The dim order `perm` in which a placeholder's example tensor is contiguous
    (t.permute(perm).is_contiguous()) when it is a permutation of a dense tensor and not
    contiguous itself; else None (contiguous, overlapping, gapped, symbolic or unknown)."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        shape, strides = tuple(val.shape), tuple(val.stride())
    else:  # torch 1.13's graphs: ShapeProp's tensor_meta
        tm = node.meta.get("tensor_meta")
        shape, strides = tuple(getattr(tm, "shape", ())), tuple(getattr(tm, "stride", ()))
    if len(shape) < 2 or len(strides) != len(shape) or \
            not all(type(s) is int for s in shape + strides):
        return None
    try:
        t = torch.empty_strided(shape, strides, device="meta")
        if t.is_contiguous():
            return None
        perm = sorted(range(len(shape)), key=lambda d: (-strides[d], d))
        return perm if t.permute(perm).is_contiguous() else None
    except Exception:  # noqa: BLE001 (a layout torch cannot make: the runtime copies)
        return None


def _permuted(t, perm):
    """t as the graph reads it: t.permute(perm), contiguous (a copy by torch when this call's
    tensor is laid out otherwise than the example was)."""
    s = t.permute(perm)
    return s if s.is_contiguous() else s.contiguous()


def _own_storage(t):
    """Whether t's storage is exactly its values in row-major order (what coil's as_strided
    assumes of the inputs it reads)."""
    if not (t.is_contiguous() and t.storage_offset() == 0):
        return False
    storage = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    size = storage.nbytes() if hasattr(storage, "nbytes") else storage.size() * t.element_size()
    return size == t.numel() * t.element_size()


def _as_pairs(t):
    """A complex tensor as coil reads it: its (re, im) pairs (torch.view_as_real, zero-copy
    unless a lazy conjugation or negation has to be applied first)."""
    return torch.view_as_real(t.resolve_conj().resolve_neg())


def _gpu_module(g, options):
    """coil's Triton module of `g` (cuda.py); a test without a GPU replaces it (tests/torch's
    test_cuda.py) to see the module's source without importing Triton."""
    from .cuda import GpuModule
    return GpuModule(g, options)


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
        try:  # on fake tensors: no arithmetic, no write to a real input
            _fake_shape_prop(gm, example_inputs)
        except Exception:  # an op without a fake kernel, or a data-dependent shape
            ShapeProp(gm).propagate(*example_inputs)


def _batch_norm_eval_stats(node, result):
    """torch 1.13's meta native_batch_norm gives the saved statistics [C] in eval mode too,
    where the kernels return empty tensors (found by the OpInfo sweep)."""
    args = list(node.args) + [None] * 8
    training = node.kwargs.get("training", args[5])
    if training:
        return result
    out, mean, invstd = result
    return out, mean.new_empty((0,)), invstd.new_empty((0,))


# Ops whose fake (meta) result differs from the real one on torch 1.13: a correction of it.
_FAKE_META_FIXES = {"aten.native_batch_norm.default": _batch_norm_eval_stats}


def _fake_shape_prop(gm, example_inputs):
    """torch 1.13's functorch graphs carry no shapes (torch 2.x's carry `val`): ShapeProp over
    fake tensors gives each node its shape, strides and dtype without computing it. Running the
    graph on the real inputs instead took a whole eager forward (GPT-2 small: 4.3 s against 0.46
    s here) and repeated the graph's in-place updates of its inputs (a BatchNorm's running
    statistics)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.node import map_aggregate
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    mode = FakeTensorMode()

    class FakeShapeProp(torch.fx.Interpreter):
        """ShapeProp's metadata, without its printed traceback when an op refuses fakes."""

        def fetch_attr(self, target):  # captured tensors (make_fx's get_attr) as fakes too
            t = super().fetch_attr(target)
            return mode.from_tensor(t) if isinstance(t, torch.Tensor) else t

        def run_node(self, n):
            with mode:
                result = super().run_node(n)
                fix = _FAKE_META_FIXES.get(str(n.target))
                if fix is not None:
                    result = fix(n, result)
            found = []

            def meta(obj):
                if isinstance(obj, torch.Tensor):
                    found.append(obj)
                    return _extract_tensor_metadata(obj)
                return obj

            tensor_meta = map_aggregate(result, meta)
            if found:
                n.meta["tensor_meta"] = tensor_meta
            n.meta["type"] = type(result)
            return result

    fakes = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in example_inputs]
    FakeShapeProp(gm).run(*fakes)


def _opaque_ok(node):
    """Whether the node's row takes Opaque values (lowering_sdpa: the fused attention ops and
    the getitems of their outputs), whose dtypes coil may lack (uint64 RNG state)."""
    import operator
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        src = node.args[0]
        return isinstance(src, torch.fx.Node) and _opaque_ok(src)
    return getattr(lowering.row_for(node), "opaque_ok", False)


def _opaque_input(node):
    """A graph input of a dtype coil lacks that only rows taking Opaque values read (the
    saved RNG state an attention backward ignores)."""
    try:
        shape, dtype = meta_of(node)
        coil_dtype(dtype)
        return False
    except Unsupported:
        return False
    except Exception:
        return bool(node.users) and all(_opaque_ok(u) for u in node.users)


def _coil_dtypes(node):
    """Whether every tensor the node reads or makes has a coil dtype (complex, int16, ... stay
    in eager). The rows of the fused attention ops check their own operands."""
    if _opaque_ok(node):
        return True
    # complex values are float pairs, read only by rows marked complex_ok (lowering_complex.py)
    complex_ok = getattr(lowering.row_for(node), "complex_ok", False)

    def ok(n):
        val = n.meta.get("val", n.meta.get("tensor_meta"))
        # (TensorMetadata is a namedtuple: one value, not a tuple of them)
        vals = val if isinstance(val, (tuple, list)) and not hasattr(val, "dtype") else [val]
        for v in vals:
            dt = getattr(v, "dtype", None)
            if dt is not None and not (complex_ok and dt in REAL_OF):
                try:
                    coil_dtype(dt)
                except Exception:
                    return False
        return True
    args = [a for a in node.all_input_nodes]
    return ok(node) and all(ok(a) for a in args)


def _why_unsupported(node):
    """The logged reason a node (not _supported) runs in eager."""
    if lowering.row_for(node) is not None and not _coil_dtypes(node):
        dts = sorted({str(getattr(v, "dtype", "")) for n in [node] + node.all_input_nodes
                      for v in [n.meta.get("val", n.meta.get("tensor_meta"))]} - {""})
        return (f"its dtypes ({', '.join(dts)}) include one its row does not take (coil has no "
                "complex, int16, ... dtype; complex values are float pairs only for the rows "
                "of lowering_complex.py and lowering_fft.py)")
    return "no coil lowering (python -m coil.torch --ops lists them)"


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
    if node.op == "call_function" and _size_node_value(node, symbols_of(node.graph)) is not None:
        return True  # a size: computed from the inputs' sizes
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


def graph_devices(gm, example_inputs):
    """The device types of the graph's tensors: its example inputs' and, where the tracer
    recorded them (node.meta["val"], fake or real tensors), every node's values, so that a
    factory op's device counts too."""
    devices = {t.device.type for t in example_inputs if isinstance(t, torch.Tensor)}
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        vals = val if isinstance(val, (tuple, list)) else [val]
        devices |= {v.device.type for v in vals if isinstance(v, torch.Tensor)}
    return devices


def compile_fx(gm, example_inputs, options=None):
    """A callable equivalent to `gm` (called with the same positional tensors). A graph on the
    CPU compiles to C++, one on CUDA to coil's Triton module; one on several devices (or on
    another device) runs in eager."""
    devices = graph_devices(gm, example_inputs)
    device = next(iter(devices)) if len(devices) == 1 else "cpu" if not devices else None
    if device not in ("cpu", "cuda"):
        _log_fallback("the graph", f"its tensors are on {', '.join(sorted(devices))}: coil "
                      "compiles graphs whose tensors are all on the CPU or all on CUDA")
        return gm
    _ensure_shapes(gm, example_inputs)
    if graph_is_symbolic(gm):
        return _compile_symbolic(gm, example_inputs, options, device)
    mutating = [n for n in gm.graph.nodes if n.op == "call_function" and _mutates(n)]
    unsupported = [n for n in gm.graph.nodes if n.op == "call_function" and not _supported(n)]
    # copy_, copy_to and in-place ops with a functional row (mutation.py) are taken in a graph
    # coil compiles whole; other in-place ops, or a write in a graph that must be partitioned,
    # leave the graph to eager
    from .mutation import takes_write
    writers = [n for n in mutating if not takes_write(n, lowering.ROWS) or unsupported]
    if writers:
        _log_fallback("the graph", f"{writers[0].target} writes its input in place (coil "
                      "compiles functional graphs)")
        return gm
    supported = _supported
    if not unsupported:
        try:
            return CoilGraphCallable(gm, options, example_inputs, device)
        except Unsupported as e:
            if mutating:  # its in-place writes cannot be split across partitions
                _log_fallback("the graph", str(e))
                return gm
            if device != "cuda":
                _log_fallback("a graph", str(e))
            unsupported = None  # partition below, node by node
            # coil's CUDA path lacks some of what its CPU path does (e.g. gathers at indices
            # computed at run time: embeddings, index): each node is tried alone, and those it
            # refuses run in eager
            if device == "cuda":
                supported = lambda n: _supported(n) and _supported_on_gpu(n, options)  # noqa
    for n in unsupported or []:
        _log_fallback(str(n.target), _why_unsupported(n))
    return _partitioned(gm, options, device, supported)


def _compile_symbolic(gm, example_inputs, options, device):
    """A graph with symbolic sizes (torch.compile's dynamic shapes): one size-generic coil model
    for every size where the whole graph lowers with its sizes symbolic (on CUDA one
    size-generic Triton module, cuda.GpuModule, where coil's generator keeps every size
    symbolic); otherwise the graph is compiled for each new tuple of sizes it is called with
    (per_size.py), so that it still runs in coil, never in eager for being dynamic."""
    from .per_size import PerSizeCallable
    why = None
    on_gpu = device == "cuda"
    # No per-node CUDA probe here (_supported_on_gpu): a node alone has the graph's derived
    # sizes (a KV cache's s0 + 1 after a cat) as its inputs' sizes, which a module binds from
    # no input, so every node past the cat would be refused. The whole graph is tried below;
    # where coil's CUDA path refuses it, the per-size graphs are static and partitioned with
    # the probes as usual.
    blockers = [n for n in gm.graph.nodes if n.op == "call_function" and
                (_mutates(n) or not _supported(n))]
    if device not in ("cpu", "cuda") or (on_gpu and not (options or {}).get("size_generic",
                                                                             True)):
        why = f"coil's {device} path compiles each size (size-generic modules are off)"
    elif blockers:
        why = f"{blockers[0].target} " + ("writes its input" if _mutates(blockers[0]) else
                                          _why_unsupported(blockers[0]))
    else:
        from .symbolic import SameSize
        # Each SameSize makes two symbols one, then the graph is lowered again: at most one
        # round per symbol (a decoder's KV caches have a pair per layer: 24 for 12 layers).
        rounds = 1 + sum(len(getattr(n.meta.get("val"), "shape", ()) or ())
                         for n in gm.graph.nodes if n.op == "placeholder")
        for _ in range(rounds):
            try:
                return CoilGraphCallable(gm, options, example_inputs, device)
            except SameSize as e:
                why = f"{e} [{_raised_at(e)}]"
                if not symbols_of(gm.graph).assume_equal(e.a, e.b):
                    break
                logs.log("guards", f"assuming {e.a.text} == {e.b.text}: {e} (coil checks "
                         "the inputs' sizes agree at each call)")
            except Unsupported as e:
                why = f"{e} [{_raised_at(e)}]"
                break
            except Exception as e:  # coil refused the symbolic graph (e.g. a reshape it
                why = str(e).splitlines()[0]  # cannot infer): the per-size graphs are static
                break
    logs.log("guards", f"a graph with symbolic sizes is compiled per size: {why}")
    return PerSizeCallable(gm, options)


def _raised_at(e):
    """file:line of the coil code that raised `e` (the innermost frame of its first cause),
    for the guards log: which row decided on a symbolic size."""
    import traceback
    cause = e.__cause__ or e
    frames = traceback.extract_tb(cause.__traceback__) or traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if "symbolic.py" not in f.filename] or frames
    return f"{os.path.basename(ours[-1].filename)}:{ours[-1].lineno}" if ours else "?"


_gpu_probes = {}  # (op, argument metadata) -> None, or the reason coil's CUDA path refuses it


def _supported_on_gpu(node, options):
    """Whether coil's CUDA path takes the node alone: a graph of it, its inputs as placeholders,
    through generate_gpu_module (cached per op and argument metadata; the refusal logged)."""
    import operator
    if node.target is operator.getitem:  # with its tuple's producer
        src = node.args[0]
        return src.op != "call_function" or _supported_on_gpu(src, options)
    describe = lambda a: (meta_of(a) if _is_tensor_node(a) else a.name)  # noqa: E731
    key = (str(node.target), repr(torch.fx.node.map_arg((node.args, node.kwargs), describe)))
    if key not in _gpu_probes:
        graph = torch.fx.Graph()
        env = {}
        for a in node.all_input_nodes:
            env[a] = graph.placeholder(a.name)
            env[a].meta = dict(a.meta)
        new = graph.node_copy(node, lambda a: env[a])
        val = node.meta.get("val", node.meta.get("tensor_meta"))
        if _is_tensor_node(node) or not isinstance(val, (tuple, list)):
            graph.output(new)
        else:  # a tuple (native_layer_norm, ...): its elements are the outputs
            outs = []
            for i, v in enumerate(val):
                if v is None or isinstance(v, (int, float)):  # (attention's max_q, cum_seq)
                    continue
                item = graph.call_function(operator.getitem, (new, i))
                item.meta = {"val": v} if isinstance(v, torch.Tensor) else {"tensor_meta": v}
                outs.append(item)
            graph.output(tuple(outs))
        try:
            CoilGraphCallable(torch.fx.GraphModule(torch.nn.Module(), graph), options,
                              device="cuda", probe=True, whole=False)
            _gpu_probes[key] = None
        except Exception as e:  # any refusal: this node runs in eager
            _gpu_probes[key] = str(e).splitlines()[0]
    if _gpu_probes[key] is not None:
        _log_fallback(str(node.target), f"coil's CUDA path refuses it: {_gpu_probes[key]}")
    return _gpu_probes[key] is None


def _partitioned(gm, options, device="cpu", supported=_supported):
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupport

    class Support(OperatorSupport):
        def is_node_supported(self, submodules, node):
            return supported(node)

    partitioner = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True)
    position = {n.name: i for i, n in enumerate(gm.graph.nodes)}
    fused = partitioner.partition_and_fuse()
    _canonical_order(fused, position)
    for name, sub in list(fused.named_children()):
        if not name.startswith("fused_"):
            continue
        try:
            compiled = CoilGraphCallable(sub, options, device=device, whole=False)
        except Unsupported as e:
            _log_fallback(f"partition {name}", str(e))
            continue
        setattr(fused, name, _CallableModule(compiled))
    fused.recompile()
    return fused


def _canonical_order(fused, position):
    """Orders each partition's inputs as their producers are ordered in the outer graph, and its
    nodes as they were in the graph before partitioning (`position`: name -> index; that order
    is topological). The partitioner collects both in sets, whose order changes from process to
    process: the same partition would become a coil graph with its inputs or nodes permuted, a
    new cache key, and a second process would compile it again."""
    order = {n: i for i, n in enumerate(fused.graph.nodes)}
    for node in fused.graph.nodes:
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub = getattr(fused, node.target)
        inputs = [n for n in sub.graph.nodes if n.op == "placeholder"]
        perm = sorted(range(len(inputs)), key=lambda i: order.get(node.args[i], -1))
        body = [n for n in sub.graph.nodes if n.op not in ("placeholder", "output")]
        if not all(n.name in position for n in body):  # (renamed: keep the partitioner's)
            body = []
        output = next(n for n in sub.graph.nodes if n.op == "output")
        anchor = next(n for n in sub.graph.nodes if n.op != "placeholder")
        for i in perm:
            anchor.prepend(inputs[i])
        for n in sorted(body, key=lambda n: position[n.name]):
            output.prepend(n)
        node.args = tuple(node.args[i] for i in perm)
        sub.recompile()


class _CallableModule(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)
