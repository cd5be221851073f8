"""CUDA graphs: a coil graph -> coil's Triton module, loaded in this process, called with torch's
CUDA tensors.

The module is the one `coil compile --device cuda` writes (coil_generate_gpu_module): Triton
kernels plus a `call(args)` that checks the inputs, allocates the outputs with torch on the
current device and launches on the current stream (coil_runtime). So inputs are read and
outputs written in place: no copies, no files besides the module, no child processes.

Cache across processes: the module is stored as `<cache>/torch_cuda/<key>.py`, `<key>` a hash
of the coil graph's text, the options and coil's version (`<cache>` is $COIL_CACHE_DIR, else
$XDG_CACHE_HOME/coil, else ~/.cache/coil, as coil's other caches). A second process with the
same graph finds the file and generates nothing; its kernels then come from Triton's cache and
their launch configs from coil_runtime's autotune cache.
"""

import hashlib
import json
import os
import sys
import tempfile

from .. import version as coil_version

# Options of coil's CPU compile that mean nothing to the Triton module (the remote cache serves
# CPU compiles only; generate_gpu_module refuses it). Others pass through (precision, fusion,
# mode, debug_dir, output_dir, ...), and an unknown one is coil's error.
_CPU_ONLY_OPTIONS = ("isa", "remote_cache", "autotune")
# Options of the bridge itself, never coil's: "cuda_graphs" (bool) replays each call of a
# Triton module as one CUDA graph (CudaGraphCall; torch.compile's mode="reduce-overhead" sets it).
# "size_generic" (bool, default True): a graph with symbolic sizes becomes one size-generic
# Triton module (fx_compile._compile_symbolic); False compiles it per size, as before.
BRIDGE_OPTIONS = ("cuda_graphs", "sdpa_math", "size_generic")


def gpu_options(options):
    """coil's options for generate_gpu_module from coil.torch's (CPU-only and the bridge's own
    dropped)."""
    opts = {k: v for k, v in (options or {}).items()
            if k not in _CPU_ONLY_OPTIONS and k not in BRIDGE_OPTIONS}
    opts["device"] = "cuda"
    return opts


def cache_root():
    from coil_runtime import autotune  # the runtime's rule for coil's cache directory
    return os.path.join(autotune.cache_root(), "torch_cuda")


def module_key(graph_text, options):
    text = "\n".join([coil_version(), json.dumps(options, sort_keys=True), graph_text])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# Statistics of this process, for tests and the comparison script: modules generated (cache
# misses) and found in the cache (hits), and CUDA graphs captured (CudaGraphCall).
stats = {"generated": 0, "cached": 0, "graphs_captured": 0}


def module_path(graph, options):
    """The path of the Triton module of `graph` (a coil.Graph) in the cache, generated and
    written there unless a previous run (any process) did."""
    opts = gpu_options(options)
    key = module_key(graph.to_text(), opts)
    folder = cache_root()
    path = os.path.join(folder, key + ".py")
    if os.path.exists(path):
        stats["cached"] += 1
        return path
    source, _ = graph.generate_gpu_module(**opts)
    os.makedirs(folder, exist_ok=True)
    # Written under another name and renamed: a concurrent process never imports half a file.
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=key, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(tmp, path)
    stats["generated"] += 1
    return path


def load_module(path):
    """Imports a generated module (once per process: graphs with the same key share it)."""
    name = "coil_torch_" + os.path.basename(path)[:-3]
    if name in sys.modules:
        return sys.modules[name]
    from coil_runtime import runtime
    return runtime.load_module(path, name=name)


def _copy_all(dsts, srcs):
    """dst.copy_(src) for each pair, in one multi-tensor kernel where torch has it."""
    import torch
    if not dsts:
        return
    if hasattr(torch, "_foreach_copy_"):
        torch._foreach_copy_(dsts, srcs)
    else:
        for d, t in zip(dsts, srcs):
            d.copy_(t)


class CudaGraphCall:
    """One call of a module's `call(args)` captured as a CUDA graph and replayed: what
    torch.compile's mode="reduce-overhead" does for launch-bound models, one graph launch instead
    of a launch per kernel (and none of the wrapper's Python per kernel).

    Inputs are of two kinds. `live` ones (GpuModule passes those whose address did not change
    between two calls: weights, a reused buffer) are the caller's own tensors, captured in place:
    a replay reads whatever they hold then (an optimizer's in-place update included), which is
    right whenever the caller passes a tensor at that address. The others are copied into
    buffers of this object before each replay (one multi-tensor copy). A live input passed at
    another address cannot be replayed (`matches` says so; GpuModule captures again with it
    copied). Outputs are copied out of the graph's buffers (one multi-tensor copy), since the
    next replay overwrites them; torch's cudagraph trees hand the buffers out and fail a later
    read instead, a contract coil does not ask of its callers.

    Before the capture, `warmup` calls run on a side stream (as torch requires): Triton compiles
    and coil_runtime autotunes there."""

    def __init__(self, call, inputs, live, warmup=1):
        import torch
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(warmup):
                call(list(inputs))
        torch.cuda.current_stream().wait_stream(stream)
        self.live = list(live)
        self.inputs = [t if is_live else t.detach().clone()
                       for t, is_live in zip(inputs, self.live)]
        self.ptrs = [t.data_ptr() for t in self.inputs]
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            # A copy of the list: a module's call() may empty the list it is given (as
            # Inductor's wrappers do, to free inputs early).
            self.outputs = list(call(list(self.inputs)))
        stats["graphs_captured"] = stats.get("graphs_captured", 0) + 1

    def matches(self, inputs):
        """Whether every live input is at its captured address."""
        return all(not lv or t.data_ptr() == p for t, lv, p in zip(inputs, self.live, self.ptrs))

    def __call__(self, inputs):
        import torch
        dsts, srcs = [], []
        for t, s, lv in zip(inputs, self.inputs, self.live):
            if not lv and t.data_ptr() != s.data_ptr():
                dsts.append(s)
                srcs.append(t)
        _copy_all(dsts, srcs)
        self.graph.replay()
        outs = [torch.empty_like(o) for o in self.outputs]
        _copy_all(outs, self.outputs)
        return outs


class GpuModule:
    """The Triton module of one coil graph; `run(inputs)` returns its outputs (CUDA tensors).
    With options["cuda_graphs"], each input signature's calls replay one CUDA graph
    (CudaGraphCall), captured at its first call.

    A graph with size symbols (torch.compile's dynamic shapes) gets one size-generic module
    (docs/dynamic-shapes.md, "GPU"): a call at sizes its guards refuse (a size of 0 or 1) runs
    on a variant generated with those sizes bound (coil_runtime.dynamic), cached like any
    module."""

    def __init__(self, graph, options):
        self.path = module_path(graph, options)
        self.module = load_module(self.path)
        self.call = self.module.call
        if hasattr(self.module, "SIZE_SYMBOLS"):
            from coil_runtime import dynamic

            def make_variant(bound):
                opts = dict(options or {})
                opts["sizes"] = {**opts.get("sizes", {}), **bound}
                return load_module(module_path(graph, opts))
            self.sized = dynamic.SizeGenericModule(self.module, make_variant)
            self.call = self.sized
        self.cuda_graphs = bool((options or {}).get("cuda_graphs", False))
        # Per input signature (shape, dtype, device of each input): the addresses of its first
        # call, then its CudaGraphCall (captured at the second call, when the addresses that
        # stayed tell the live inputs).
        self.first_ptrs = {}
        self.graphs = {}

    def _call(self, args):
        if not self.cuda_graphs:
            return list(self.call(args))
        key = tuple((tuple(t.shape), t.dtype, t.device) for t in args)
        graph = self.graphs.get(key)
        if graph is not None and graph.matches(args):
            return graph(args)
        ptrs = [t.data_ptr() for t in args]
        if graph is None and key not in self.first_ptrs:
            self.first_ptrs[key] = ptrs
            return list(self.call(args))
        if graph is None:
            live = [p == q for p, q in zip(ptrs, self.first_ptrs[key])]
        else:  # a live input moved: it is copied from now on
            live = [lv and p == q for lv, p, q in zip(graph.live, ptrs, graph.ptrs)]
        graph = self.graphs[key] = CudaGraphCall(self.call, args, live)
        return graph(args)

    def run(self, inputs):
        import torch
        # The module was generated for contiguous inputs (its check_input says so); a
        # non-contiguous one is copied once, as coil's CPU path does.
        args = [t if t.is_contiguous() else t.contiguous() for t in inputs]
        device = args[0].device if args else None
        if device is not None and device.index not in (None, torch.cuda.current_device()):
            with torch.cuda.device(device):
                return self._call(args)
        return self._call(args)
