"""coil as a PyTorch backend: aten-level FX graphs in, coil-compiled CPU kernels out.

    import coil.torch
    compiled = coil.torch.compile(model)          # torch 1.13 (functorch) and 2.x
    torch.compile(model, backend="coil")          # torch 2.x, after `import coil.torch`

Forward and backward graphs both go through coil (AOTAutograd: functorch's aot_module /
aot_function on 1.13, torch._dynamo's aot_autograd on 2.x), with torch's decompositions of the
backward ops coil does not lower itself (lowering.DECOMPOSITIONS). docs/torch.md has the
supported ops (`python -m coil.torch --ops`), what falls back to eager and how to debug.
"""

import contextlib

import torch

from .fx_compile import compile_fx
from .lowering import DECOMPOSITIONS, supported_ops

__all__ = ["compile", "compile_fx", "backend", "supported_ops"]


def _compilers(options):
    try:
        from functorch.compile import make_boxed_func
    except ImportError:  # torch 2.x
        from torch._functorch.aot_autograd import make_boxed_func

    def compiler(gm, example_inputs):
        return make_boxed_func(compile_fx(gm, example_inputs, options))
    return compiler


def math_attention(args, options=None):
    """The context graphs are traced in. By default a no-op: F.scaled_dot_product_attention
    reaches coil as the fused op torch picks (`_scaled_dot_product_flash_attention_for_cpu` on
    the CPU, `_scaled_dot_product_flash_attention` / `_efficient_attention` /
    `_cudnn_attention` on CUDA, and their backward), each a row of lowering_sdpa.py (coil's
    attention op; the backward written out). With the option sdpa_math=True a CUDA graph is
    traced with torch's math path instead (matmuls and a softmax, fused by coil as the GPT
    block's attention), as before those rows existed. A no-op on torch without sdpa (1.13)."""
    if not (options or {}).get("sdpa_math"):
        return contextlib.nullcontext()
    from torch.utils._pytree import tree_flatten
    if not any(isinstance(t, torch.Tensor) and t.is_cuda for t in tree_flatten(args)[0]):
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.MATH)
    except ImportError:
        pass
    legacy = getattr(torch.backends.cuda, "sdp_kernel", None)
    if legacy is not None:
        return legacy(enable_flash=False, enable_math=True, enable_mem_efficient=False)
    return contextlib.nullcontext()


class _Traced(torch.nn.Module):
    """An aot_module whose calls run under math_attention (it traces at its first call)."""

    def __init__(self, compiled, options=None):
        super().__init__()
        self.compiled = compiled
        self.options = options

    def forward(self, *args, **kwargs):
        with math_attention((args, kwargs), self.options):
            return self.compiled(*args, **kwargs)


def compile(model_or_fn, options=None):
    """`model_or_fn` with its forward and backward graphs compiled by coil (through
    AOTAutograd, which needs no Dynamo: it works on torch 1.13). `options` are coil's compile
    options (coil.compile), e.g. {"autotune": False}. Returns a module for a module, a function
    for a function; the graphs are traced and compiled at the first call."""
    try:
        from functorch.compile import aot_function, aot_module
    except ImportError:
        from torch._functorch.aot_autograd import aot_function, aot_module
    compiler = _compilers(options)
    kwargs = dict(fw_compiler=compiler, bw_compiler=compiler, decompositions=DECOMPOSITIONS)
    has_sdpa = hasattr(torch.nn.functional, "scaled_dot_product_attention")
    if isinstance(model_or_fn, torch.nn.Module):
        compiled = aot_module(model_or_fn, **kwargs)
        return _Traced(compiled, options) if has_sdpa else compiled
    compiled = aot_function(model_or_fn, **kwargs)
    if not has_sdpa:
        return compiled

    def call(*args, **kwargs):
        with math_attention((args, kwargs), options):
            return compiled(*args, **kwargs)
    return call


def options_for_mode(options, mode):
    """coil's compile options for torch.compile's `mode` (see backend)."""
    opts = dict(options or {})
    if mode not in (None, "default", "reduce-overhead", "max-autotune",
                    "max-autotune-no-cudagraphs"):
        raise ValueError(f"torch.compile mode {mode!r}: coil knows default, reduce-overhead, "
                         "max-autotune, max-autotune-no-cudagraphs")
    opts.setdefault("mode", "max-autotune" if mode and mode.startswith("max-autotune")
                    else "default")
    if mode == "reduce-overhead":  # as Inductor: each CUDA call replays one CUDA graph
        opts.setdefault("cuda_graphs", True)
    return opts


def backend(gm, example_inputs, options=None, mode=None):
    """The torch.compile backend (torch 2.x): torch.compile(model, backend="coil",
    options={...}). `mode` is torch.compile's: "max-autotune" and "max-autotune-no-cudagraphs"
    compile with coil's option mode="max-autotune" (every matmul candidate timed on its shape);
    "default" and "reduce-overhead" with coil's default mode (cached decisions and heuristics,
    little timing), and "reduce-overhead" replays each CUDA call as one CUDA graph
    (options={"cuda_graphs": True}; cuda.CudaGraphCall). Explicit options win."""
    from torch._dynamo.backends.common import aot_autograd
    opts = options_for_mode(options, mode)
    compiler = _compilers(opts)
    # (AOTAutograd traces forward and backward here)
    with math_attention(example_inputs, opts):
        return aot_autograd(fw_compiler=compiler, bw_compiler=compiler,
                            decompositions=DECOMPOSITIONS)(gm, example_inputs)


def _register():
    try:
        from torch._dynamo import register_backend
    except ImportError:  # torch 1.13: no Dynamo; coil.torch.compile works without it
        return
    try:
        register_backend(name="coil")(backend)
    except Exception:  # already registered (the entry point, or a second import)
        pass


_register()
