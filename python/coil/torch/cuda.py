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


def gpu_options(options):
    """coil's options for generate_gpu_module from coil.torch's (CPU-only ones dropped)."""
    opts = {k: v for k, v in (options or {}).items() if k not in _CPU_ONLY_OPTIONS}
    opts["device"] = "cuda"
    return opts


def cache_root():
    from coil_runtime import autotune  # the runtime's rule for coil's cache directory
    return os.path.join(autotune.cache_root(), "torch_cuda")


def module_key(graph_text, options):
    text = "\n".join([coil_version(), json.dumps(options, sort_keys=True), graph_text])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


# Statistics of this process, for tests and the comparison script: modules generated (cache
# misses) and found in the cache (hits).
stats = {"generated": 0, "cached": 0}


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


class GpuModule:
    """The Triton module of one coil graph; `run(inputs)` returns its outputs (CUDA tensors)."""

    def __init__(self, graph, options):
        self.path = module_path(graph, options)
        self.module = load_module(self.path)

    def run(self, inputs):
        import torch
        # The module was generated for contiguous inputs (its check_input says so); a
        # non-contiguous one is copied once, as coil's CPU path does.
        args = [t if t.is_contiguous() else t.contiguous() for t in inputs]
        device = args[0].device if args else None
        if device is not None and device.index not in (None, torch.cuda.current_device()):
            with torch.cuda.device(device):
                return list(self.module.call(args))
        return list(self.module.call(args))
