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


def _call_signature(args, kwargs):
    """What a trace of AOTAutograd depends on: the structure of the arguments, each tensor's
    shape, dtype, device and requires_grad, each other leaf's value, and the grad mode."""
    if not kwargs and all(isinstance(a, torch.Tensor) for a in args):  # the usual call, fast
        return (torch.is_grad_enabled(), len(args)) + tuple(
            (a.shape, a.dtype, a.device, a.requires_grad) for a in args)
    from torch.utils._pytree import tree_flatten
    flat, spec = tree_flatten((args, kwargs))
    key = [torch.is_grad_enabled(), str(spec)]
    for a in flat:
        if isinstance(a, torch.Tensor):
            key.append((tuple(a.shape), a.dtype, a.device, a.requires_grad))
        else:
            key.append((type(a).__name__, repr(a)))
    return tuple(key)


class _PerSignature:
    """functorch's aot_function / aot_module (torch 1.13, and torch 2.x's) trace at their first
    call and reuse that trace for every later call, with no guard: a call with another shape
    reached the compiled model and failed (`input in0: expected f32[2048, 2048], got f32[64]`),
    a module first called under no_grad had no backward later, and one first called in
    training mode kept its batch statistics after eval(). One trace per call signature
    (_call_signature, and `state()`), the most recent MAX_SIGNATURES kept; each call runs
    under math_attention.

    A call that traces: torch 1.13's AOTAutograd runs the function for real while it traces
    (to collect metadata, and make_fx on real tensors), so in-place writes happened more than
    once in that call: a BatchNorm in training mode updated its running statistics three times
    (eval() later read them), `x.add_(1)` added 2. When the tracing call wrote a tensor
    argument or one of `held()` (a module's buffers), those tensors and the RNG state go back
    to what they were and the call runs again on its trace: one write, as eager."""

    MAX_SIGNATURES = 64

    def __init__(self, make, options, state=None, held=None):
        import collections
        self.make, self.options = make, options
        self.state = state  # a callable: what else the trace depends on (a module's mode)
        self.held = held  # a callable: tensors the function may write besides its arguments
        self.traces = collections.OrderedDict()

    def _key(self, args, kwargs):
        key = _call_signature(args, kwargs)
        return key if self.state is None else (self.state(),) + key

    def _run(self, fn, args, kwargs):
        with math_attention((args, kwargs), self.options):
            return fn(*args, **kwargs)

    def __call__(self, *args, **kwargs):
        key = self._key(args, kwargs)
        fn = self.traces.get(key)
        if fn is not None:
            self.traces.move_to_end(key)
            return self._run(fn, args, kwargs)
        while len(self.traces) >= self.MAX_SIGNATURES:
            self.traces.popitem(last=False)
        fn = self.traces[key] = self.make()
        from torch.utils._pytree import tree_flatten
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        tensors += list(self.held()) if self.held is not None else []
        # (inference tensors have no version counter; what is written under inference_mode
        # is not checked)
        tensors = [t for t in tensors if not (hasattr(t, "is_inference") and t.is_inference())]
        versions = [t._version for t in tensors]
        saved = [t.detach().clone() for t in tensors]
        rng = torch.get_rng_state()
        cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        out = self._run(fn, args, kwargs)
        if all(t._version == v for t, v in zip(tensors, versions)):
            return out
        with torch.no_grad():
            for t, s, v in zip(tensors, saved, versions):
                if t._version == v:
                    continue
                try:
                    t.copy_(s)
                except RuntimeError:  # an expanded view: its memory is its base's, restored
                    pass
        torch.set_rng_state(rng)
        if cuda_rng is not None:
            torch.cuda.set_rng_state_all(cuda_rng)
        return self._run(fn, args, kwargs)


class _Traced(torch.nn.Module):
    """A module whose calls go through aot_module, one trace per call signature and training
    mode (the module's `training`: a trace in training mode has BatchNorm's batch statistics
    and dropout; after eval() the same call reused it), its buffers restored after a tracing
    call that wrote them (_PerSignature); the original module is its submodule (parameters(),
    state_dict(), train() and eval() reach it)."""

    def __init__(self, module, make, options=None):
        super().__init__()
        self.orig_module = module
        self.per_signature = _PerSignature(make, options, state=lambda: module.training,
                                           held=module.buffers)

    def forward(self, *args, **kwargs):
        return self.per_signature(*args, **kwargs)


def compile(model_or_fn, options=None):
    """`model_or_fn` with its forward and backward graphs compiled by coil (through
    AOTAutograd, which needs no Dynamo: it works on torch 1.13). `options` are coil's compile
    options (coil.compile), e.g. {"autotune": False}. Returns a module for a module, a function
    for a function; the graphs are traced and compiled at the first call, and again at a call
    with other shapes, dtypes, devices, requires_grad or grad mode (_PerSignature)."""
    try:
        from functorch.compile import aot_function, aot_module
    except ImportError:
        from torch._functorch.aot_autograd import aot_function, aot_module
    compiler = _compilers(options)
    kwargs = dict(fw_compiler=compiler, bw_compiler=compiler, decompositions=DECOMPOSITIONS)
    if isinstance(model_or_fn, torch.nn.Module):
        return _Traced(model_or_fn, lambda: aot_module(model_or_fn, **kwargs), options)
    per_signature = _PerSignature(lambda: aot_function(model_or_fn, **kwargs), options)

    def call(*args, **kwargs):
        return per_signature(*args, **kwargs)
    call.per_signature = per_signature
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
