"""A graph with symbolic sizes that coil cannot compile size-generic, compiled per size.

torch.compile hands a backend a graph with symbolic sizes (SymInts) once a size changed
(automatic dynamic shapes) or with dynamic=True. fx_compile first tries one size-generic coil
model for the whole graph (symbolic.py). Where that fails (an op whose row needs a size's value,
a reshape to several symbolic sizes, the CUDA path), PerSizeCallable takes the graph: at each
call it looks at the sizes of the arguments and, for a tuple of sizes not seen before, makes the
graph concrete at those sizes (every size computation folded to its value, every tensor given
its shape) and compiles that like any static graph (compile_fx: coil, with its usual fallbacks).
Dynamo does not retrace for a new size, and coil's compile cache makes a size seen in an earlier
process a load. Graphs whose sizes depend on data (unbacked symbols: nonzero, item) stay eager:
their sizes are not a function of the arguments' sizes.
"""

import collections
import copy
import re

import torch
import torch.fx
from torch.fx.node import map_aggregate, map_arg

from coil_runtime import logs
from .symbolic import is_size_value, symint_expr

_UNBACKED = re.compile(r"[ui]\d+$")  # torch 2.x's names of data-dependent sizes


def _size_targets(node):
    """Whether the node only computes a size (sym_size, sym_numel, ... and arithmetic)."""
    if node.op != "call_function":
        return False
    target = str(node.target)
    return (target.startswith("aten.sym_") or target.startswith("<built-in function") or
            getattr(node.target, "__module__", None) in ("_operator", "math") or
            getattr(node.target, "__name__", "").startswith("sym_"))


def has_unbacked(gm):
    """Whether a size of the graph depends on data (an unbacked symbol)."""
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        for x in (v if isinstance(v, (tuple, list)) else [v]):
            sizes = [x] if is_size_value(x) else list(getattr(x, "shape", []) or [])
            for s in sizes:
                e = symint_expr(s) if not isinstance(s, int) else None
                if e is not None and any(_UNBACKED.match(str(f)) for f in e.free_symbols):
                    return True
    return False


def concrete_graph(gm, args):
    """A copy of gm at the sizes of `args`: runs it once (on copies of the arguments, so that
    in-place writes do not happen twice), gives each node the metadata of its value
    (tensor_meta, as ShapeProp does) and replaces every size computation by its value."""
    from torch.fx.passes.shape_prop import _extract_tensor_metadata
    graph = copy.deepcopy(gm.graph)
    out = torch.fx.GraphModule(gm, graph)
    values = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            values[n] = super().run_node(n)
            return values[n]

    copies = [a.detach().clone() if isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        Recorder(out).run(*copies)
    meta = lambda x: _extract_tensor_metadata(x) if isinstance(x, torch.Tensor) else x  # noqa
    for n in list(graph.nodes):
        n.meta.pop("val", None)
        if n.op == "output" or n not in values:
            continue
        r = values[n]
        fold = isinstance(r, (int, float)) and not isinstance(r, bool) and (
            n.op == "placeholder" or _size_targets(n))
        if fold:
            for user in list(n.users):
                user.args = map_arg(user.args, lambda a, n=n, r=r: r if a is n else a)
                user.kwargs = map_arg(user.kwargs, lambda a, n=n, r=r: r if a is n else a)
            if n.op != "placeholder":  # (the call keeps its signature)
                graph.erase_node(n)
            continue
        n.meta["tensor_meta"] = map_aggregate(r, meta)
    out.recompile()
    return out


class PerSizeCallable:
    """Compiles `gm` for each tuple of argument sizes it is called with (see the module). At
    most MAX_SIZES compiled sizes stay loaded, the least recently used leaving first (a serving
    process sees a new size on almost every request; a size that comes back is a code-cache
    load, not a compile)."""

    MAX_SIZES = 64

    def __init__(self, gm, options=None):
        self.gm, self.options = gm, options
        self.compiled = collections.OrderedDict()  # key of the sizes -> the compiled callable
        self.eager = has_unbacked(gm)
        if self.eager:
            logs.log("fallback", "a graph whose sizes depend on data runs in eager")

    @staticmethod
    def _key(args):
        return tuple((tuple(a.shape), a.dtype, a.device.type) if isinstance(a, torch.Tensor)
                     else (type(a).__name__, a if isinstance(a, (int, float, bool)) else None)
                     for a in args)

    def __call__(self, *args):
        if self.eager:
            return self.gm(*args)
        key = self._key(args)
        fn = self.compiled.get(key)
        if fn is not None:
            self.compiled.move_to_end(key)
        else:
            while len(self.compiled) >= self.MAX_SIZES:
                self.compiled.popitem(last=False)
            from .fx_compile import compile_fx
            sizes = [k[0] for k in key if isinstance(k[0], tuple)]
            logs.log("guards", f"compiling the graph for the sizes {sizes} "
                     f"({len(self.compiled) + 1} size tuples so far)")
            fn = self.compiled[key] = compile_fx(concrete_graph(self.gm, args), list(args),
                                                 self.options)
        return fn(*args)
