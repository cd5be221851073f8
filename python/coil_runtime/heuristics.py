"""Kernel decorators for generated Triton modules, and the autotuner they return.

A generated module writes

    @heuristics.pointwise(size_hints={'x': 4194304}, name='triton_poi_fused_add_0', kernel_hash='..')
    @triton.jit
    def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr): ...

    triton_poi_fused_add_0.run(arg0_1, buf0, 4194304)

The decorator returns a `CoilAutotuner`. Its `run(*args)` takes the kernel's non-constexpr
arguments (pointers, then numels) positionally, and:

1. computes a cheap specialization key from the call (the integer arguments, and whether each
   tensor's address is 16-byte aligned: what Triton specializes on);
2. on a key seen before, calls the cached launcher: one Python function that calls the compiled
   kernel's C launcher (`CompiledKernel.run`) with a precomputed grid, the way Inductor's
   CachingAutotuner launches (no JIT binder, no grid lambda, no kwargs);
3. on a new key, picks the config for the numels' size bucket (autotune.py: benchmark once, then
   cached in memory and on disk), compiles it through the JITFunction for these arguments, and
   builds the launcher.

COIL_TRITON_LAUNCHER=jit (or `set_launch_mode("jit")`) launches through `fn[grid](...)` instead:
the slower, always-working fallback, also used automatically when the direct path fails.

Autotune modes (`autotune_policy`): a module compiled with `coil compile --mode max-autotune`
says so in a global, `COIL_AUTOTUNE_MODE = 'max-autotune'`, which each decorator reads from the
decorated function's globals (absent: 'default'). $COIL_TRITON_AUTOTUNE, when set, wins over
the module: '1' is the default mode, 'max' max-autotune, '0' no tuning at all.

- default: Inductor's default config lists; a matmul template takes cuBLAS (its extern
  choices) without compiling a Triton config, unless the disk cache holds a measurement showing
  a template config faster for this kernel or for its mm shape bucket; kernels with a few
  configs time them briefly (autotune.BENCH_QUICK).
- max-autotune: the wider lists, and every template config is compiled (in parallel) and timed
  against the extern choices; the winners also go to the mm-bucket cache default mode reads.
- none: the first config of each list, never timed.
"""

import inspect
import os
import sys
from concurrent.futures.process import BrokenProcessPool

from . import autotune, configs as cfgs, precompile
from .logs import log, warn

# Numel parameter names of generated kernels, by size-hint prefix.
_NUMEL_NAMES = {"x": "xnumel", "y": "ynumel", "z": "znumel", "r0_": "r0_numel", "r1_": "r1_numel"}

_launch_mode = os.environ.get("COIL_TRITON_LAUNCHER", "direct")


def set_launch_mode(mode):
    """'direct' (default) or 'jit'; applies to launchers built after the call."""
    global _launch_mode
    if mode not in ("direct", "jit"):
        raise ValueError(f"launch mode must be 'direct' or 'jit', not {mode!r}")
    _launch_mode = mode


# The modes a module may declare (coil's CompileOptions::mode), and what the environment
# variable's values mean. The policy names are what CoilAutotuner.mode holds.
MODULE_MODES = ("default", "max-autotune")
ENV_MODES = {"0": "none", "1": "default", "max": "max-autotune"}
# The config lists (configs.py's `mode` argument) of each policy.
LIST_MODES = {"none": "0", "default": "1", "max-autotune": "max"}


def module_autotune_mode(fn):
    """The COIL_AUTOTUNE_MODE global of the module that defines `fn` (a JITFunction: its
    Python function's globals), 'default' when absent. An unknown value is an error."""
    py = getattr(fn, "fn", fn)
    scope = getattr(py, "__globals__", None)
    if scope is None:
        scope = getattr(fn, "__globals__", None) or {}
    mode = scope.get("COIL_AUTOTUNE_MODE", "default")
    if mode not in MODULE_MODES:
        where = scope.get("__file__") or scope.get("__name__") or "the module"
        raise ValueError(f"COIL_AUTOTUNE_MODE = {mode!r} in {where}: expected one of "
                         f"{', '.join(repr(m) for m in MODULE_MODES)}")
    return mode


def autotune_policy(fn=None):
    """'default', 'max-autotune' or 'none' for the kernel `fn`: $COIL_TRITON_AUTOTUNE if set
    (it wins), else the module's COIL_AUTOTUNE_MODE."""
    module = module_autotune_mode(fn) if fn is not None else "default"
    env = os.environ.get("COIL_TRITON_AUTOTUNE", "").strip()
    if not env:
        return module
    if env not in ENV_MODES:
        raise ValueError(f"COIL_TRITON_AUTOTUNE={env!r}: expected 1 (default mode), max "
                         f"(max-autotune) or 0 (no tuning)")
    return ENV_MODES[env]


def autotune_mode(fn=None):
    """The config-list mode ('0', '1', 'max') of autotune_policy(fn)."""
    return LIST_MODES[autotune_policy(fn)]


def device_shared_memory():
    """Shared memory a block may opt in to on the current GPU (the template configs' limit);
    configs.MM_SHARED_MEMORY (Hopper's) without a GPU."""
    global _shared_memory
    if _shared_memory is None:
        _shared_memory = cfgs.MM_SHARED_MEMORY
        try:
            import torch
            if torch.cuda.is_available():
                props = torch.cuda.get_device_properties(torch.cuda.current_device())
                value = getattr(props, "shared_memory_per_block_optin", None)
                if value:
                    _shared_memory = int(value)
        except Exception:  # noqa: BLE001 (no usable GPU: the default stands)
            pass
    return _shared_memory


_shared_memory = None


def _hint_name(hint, allowed):
    """'INNER', 'ReductionHint.INNER' or an enum member -> 'INNER'."""
    if hint is None or hint is False:
        return "DEFAULT"
    name = str(getattr(hint, "name", hint)).split(".")[-1].upper()
    if name not in allowed:
        raise ValueError(f"unknown hint {hint!r}; expected one of {allowed}")
    return name


# ---------------------------------------------------------------------------------------------
# Decorators


# A size-generic kernel's symbolic numels (`dynamic`, printed by coil next to their nominal
# hint of 1024 a size) get a second config list, fitted as if they were this large: the config
# chosen per size bucket then comes from both (an elementwise kernel over 64M elements with the
# blocks fitted to 1024 ran 25% slower on the H200 than its size-specialized twin).
DYNAMIC_LARGE_NUMEL = 1 << 20


def _fitted(fit, size_hints, dynamic, mode):
    """fit(size_hints, mode), and for `dynamic` numels also fit() at DYNAMIC_LARGE_NUMEL, the
    configs of both in order without repeats."""
    out = list(fit(size_hints, mode))
    unknown = [d for d in dynamic if d not in size_hints]
    if unknown:
        raise ValueError(f"dynamic numels {unknown} are not among size_hints {sorted(size_hints)}")
    if dynamic:
        large = {k: max(v, DYNAMIC_LARGE_NUMEL) if k in dynamic else v
                 for k, v in size_hints.items()}
        out += [c for c in fit(large, mode) if c not in out]
    return out


def pointwise(size_hints, tile_hint=None, name=None, kernel_hash=None, min_elem_per_thread=0,
              dynamic=(), **meta):
    """1-D (size_hints {'x'}), 2-D tiles ({'y', 'x'}) or 3-D pointwise kernels."""
    tile = None if tile_hint is None else _hint_name(tile_hint, cfgs.TILE_HINTS)
    return _decorator("pointwise", size_hints, lambda mode: _fitted(
        lambda h, m: cfgs.pointwise_configs(h, tile, min_elem_per_thread, mode=m), size_hints,
        dynamic, mode), name, kernel_hash, meta)


def persistent_reduction(size_hints, reduction_hint="DEFAULT", name=None, kernel_hash=None,
                         dynamic=(), **meta):
    """One program reduces whole rows: XBLOCK from the table, R0_BLOCK = next_pow2(r0_numel)."""
    hint = _hint_name(reduction_hint, cfgs.REDUCTION_HINTS)
    return _decorator("persistent_reduction", size_hints, lambda mode: _fitted(
        lambda h, m: cfgs.persistent_reduction_configs(h, hint, mode=m), size_hints, dynamic,
        mode), name, kernel_hash, meta)


def reduction(size_hints, reduction_hint="DEFAULT", name=None, kernel_hash=None, dynamic=(),
              **meta):
    """Looped reductions: (XBLOCK, R0_BLOCK) from Inductor's table for the hint."""
    hint = _hint_name(reduction_hint, cfgs.REDUCTION_HINTS)
    num_load, num_reduction = int(meta.get("num_load", 0)), int(meta.get("num_reduction", 0))
    return _decorator("reduction", size_hints, lambda mode: _fitted(
        lambda h, m: cfgs.reduction_configs(h, hint, num_load=num_load,
                                            num_reduction=num_reduction, mode=m),
        size_hints, dynamic, mode), name, kernel_hash, meta)


def template(mm, dtype="float32", name=None, kernel_hash=None, **meta):
    """A matmul template with its fused epilogue (triton_tem): mm = {'m', 'n', 'k', 'batch'}.
    The configs are Inductor's mm list fitted to the problem (those that cannot fit the GPU's
    shared memory or registers left out) plus the extern choices (the module's `extern_<n>`,
    attached with `attach_externs`). Which are timed depends on the mode (module doc)."""
    mm = {k: int(mm.get(k, 1)) for k in ("m", "n", "k", "batch")}

    def wrap(fn):
        mode = autotune_policy(fn)
        configs = cfgs.mm_configs(mm, dtype, mode=LIST_MODES[mode],
                                  shared_memory=device_shared_memory())
        return TemplateAutotuner(fn, mm, dtype, configs, name=name, kernel_hash=kernel_hash,
                                 meta=meta, mode=mode)
    return wrap


def attention(shape, causal=False, dtype="float32", name=None, kernel_hash=None,
              kernel="forward", splits=1, packed_heads=1, **meta):
    """A flash-attention template (triton_tem, src/codegen/triton/triton_attention.h): shape =
    {'batch', 'heads', 'kv_heads', 'q_len', 'kv_len', 'head_dim', 'value_dim'}, baked into the
    kernel; `kernel` is 'forward' or one of the backward's (triton_attention_backward.h):
    'lse', 'grad_q', 'grad_k', 'grad_v', 'grad_kv' (dK and dV from one loop), 'delta' (rowsum(dO
    * out) before the gradient of k's kernel), or the split decoding path's
    (triton_attention_decode.h): 'decode_partial' (a grid dimension of `splits` chunks of keys)
    and 'decode_combine'. `packed_heads` G > 1 (forward, decode_partial): a program per (batch,
    kv head) whose tile's rows are its G query heads' Tq rows (triton_attention_decode.h).
    The configs are configs.attention_configs fitted to the shape and
    kernel; every mode but 'none' times them (there is no library choice), per size bucket like
    the other kernels.

    A size-generic module's kernel takes its sizes as arguments (ks0, ...): a symbolic entry is
    their expression as a string ('ks1'), evaluated per call from the launch's arguments; the
    config list is fitted to the nominal shape (each size 1024, as the C++ side's
    kTritonNominalSize)."""
    exprs = {k: v for k, v in shape.items() if isinstance(v, str)}
    nominal = {k: eval(v, {"__builtins__": {}}, _Nominal()) if k in exprs else v
               for k, v in shape.items()}
    shape = {k: int(nominal[k]) for k in cfgs.ATTENTION_SHAPE_KEYS}

    def wrap(fn):
        mode = autotune_policy(fn)
        configs = cfgs.attention_configs(shape, dtype, mode=LIST_MODES[mode],
                                         shared_memory=device_shared_memory(), kernel=kernel,
                                         packed_heads=packed_heads)
        return AttentionAutotuner(fn, shape, bool(causal), dtype, configs, name=name,
                                  kernel_hash=kernel_hash, meta=meta, mode=mode,
                                  shape_exprs=exprs, kernel=kernel, splits=splits,
                                  packed_heads=packed_heads)
    return wrap


class _Nominal(dict):
    """Every size symbol at the nominal size (a size-generic kernel's config list)."""

    def __missing__(self, key):
        return 1024


def _decorator(kind, size_hints, make_configs, name, kernel_hash, meta):
    """The decorator: the mode is known only once the function (and so its module) is."""
    def wrap(fn):
        mode = autotune_policy(fn)
        return CoilAutotuner(fn, kind, size_hints, make_configs(LIST_MODES[mode]), name=name,
                             kernel_hash=kernel_hash, meta=meta, mode=mode)
    return wrap


def autotuners_of(module):
    """The CoilAutotuner objects among a loaded module's globals (tests, benchmarks)."""
    return [v for v in vars(module).values() if isinstance(v, CoilAutotuner)]


# ---------------------------------------------------------------------------------------------
# Signature


def kernel_signature(fn):
    """(arg_names, constexpr_names) of a JITFunction (or anything wrapping a Python function)."""
    names = getattr(fn, "arg_names", None)
    constexpr_idx = getattr(fn, "constexprs", None)
    if names is not None and constexpr_idx is not None:
        names = list(names)
        return names, [names[i] for i in constexpr_idx]
    py = getattr(fn, "fn", fn)
    params = list(inspect.signature(py).parameters.values())
    names = [p.name for p in params]
    constexprs = [p.name for p in params
                  if "constexpr" in str(p.annotation) or p.name.endswith("BLOCK")]
    return names, constexprs


def _triton_version():
    import triton
    parts = []
    for piece in triton.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def ieee_compile_options():
    """Triton compile options that keep f32 arithmetic as the CPU backend's (docs/numerics.md,
    "Triton"): no FMA contraction (`enable_fp_fusion`, like `-ffp-contract=off`) and no
    flush-to-zero in libdevice (`enable_reflect_ftz`). Triton's defaults turn both on; with
    contraction, `x * y - s` of a product already stored as `s` is not 0 (log_softmax of one
    element gave sign 1, `log(abs(g) + g)` gave NaN). Only the options this Triton knows."""
    wanted = {"enable_fp_fusion": False, "enable_reflect_ftz": False}
    try:
        from triton.backends.nvidia.compiler import CUDAOptions
        known = CUDAOptions.__dataclass_fields__
    except (ImportError, AttributeError):
        known = {"enable_fp_fusion"}
    return {k: v for k, v in wanted.items() if k in known}


def _raw_stream_getter():
    """torch's fast current-stream query (Inductor's get_raw_stream), else the public API."""
    import torch
    fast = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if fast is not None:
        return fast
    return lambda device: torch.cuda.current_stream(device).cuda_stream


def _launch_hooks():
    """Triton's launch enter/exit hooks (profilers): knobs in Triton >= 3.4, else class attrs."""
    try:
        from triton import knobs
        return knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook
    except ImportError:
        from triton.compiler import CompiledKernel
        return (getattr(CompiledKernel, "launch_enter_hook", None),
                getattr(CompiledKernel, "launch_exit_hook", None))


def _hook_active(hook):
    """Whether a launch hook does anything: Triton >= 3.5 keeps a HookChain object there even
    when nothing is registered (its `calls` list is then empty)."""
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return len(calls) > 0 if calls is not None else True


def _device_index(args):
    """The CUDA device of the first tensor argument (else the current device)."""
    for a in args:
        device = getattr(a, "device", None)
        if device is not None and device.type == "cuda" and device.index is not None:
            return device.index
    import torch
    return torch.cuda.current_device()


_allocator_set = False


def _ensure_triton_allocator():
    """Kernels that need global scratch memory ask Triton's allocator (set once, via torch)."""
    global _allocator_set
    if _allocator_set:
        return
    _allocator_set = True
    import torch
    import triton
    if hasattr(triton, "set_allocator"):
        triton.set_allocator(
            lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device="cuda"))


# ---------------------------------------------------------------------------------------------
# The autotuner


class CoilAutotuner:
    """A generated Triton kernel with its configs, its chosen config per size bucket and its
    cached launchers. `run(*args)` is the only call generated code makes."""

    def __init__(self, fn, kind, size_hints, configs, name=None, kernel_hash=None, meta=None,
                 mode="default"):
        self.fn = fn
        self.kind = kind
        self.mode = mode  # 'default', 'max-autotune' or 'none' (autotune_policy)
        self.size_hints = cfgs.normalize_size_hints(size_hints)
        self.configs = list(configs)
        self.name = name or getattr(fn, "__name__", None) or getattr(
            getattr(fn, "fn", None), "__name__", "triton_kernel")
        self.kernel_hash = kernel_hash
        self.meta = dict(meta or {})
        self.arg_names, self.constexpr_names = kernel_signature(fn)
        self.runtime_names = [n for n in self.arg_names if n not in self.constexpr_names]
        self.numel_pos = {}
        for prefix in self.size_hints:
            pname = _NUMEL_NAMES[prefix]
            if pname not in self.runtime_names and prefix == "r0_" and "rnumel" in self.runtime_names:
                pname = "rnumel"
            if pname not in self.runtime_names:
                raise TypeError(f"{self.name}: size_hints has '{prefix}' but the kernel has no "
                                f"'{pname}' parameter (parameters: {self.arg_names})")
            self.numel_pos[prefix] = self.runtime_names.index(pname)
        for c in self.configs:
            self._constexpr_values(c, {"r0_": 1})  # validates block names against the signature
        # Args benchmarking must not modify: outputs, cloned during autotuning. Inductor's names
        # say which they are; without them every pointer is cloned.
        self.mutated_pos = [i for i, n in enumerate(self.runtime_names)
                            if n.startswith(("out_ptr", "in_out_ptr"))]
        if not any(n.startswith(("in_ptr", "out_ptr", "in_out_ptr")) for n in self.runtime_names):
            numels = set(self.numel_pos.values())
            self.mutated_pos = [i for i in range(len(self.runtime_names)) if i not in numels]
        self.chosen = {}          # size bucket -> Config (autotuned, cached, or the only one)
        self.forced = None        # Config forced by select() (tests)
        self.timings = {}         # size bucket -> autotune rows, or "cache hit" (for reports)
        self.reasons = {}         # size bucket -> why its config was chosen (for reports)
        self._compiles = {}       # (config key, specialization) -> Future of a CompiledKernel
        self.binary_info = {}     # Config key -> {"n_regs", "n_spills", "shared"}
        self.launch_modes = set() # 'direct' / 'jit': what the launchers built so far use
        self._launchers = {}      # specialization key -> launcher(args, stream)
        self._key = self._first_key

    def __repr__(self):
        return f"<CoilAutotuner {self.name} {self.kind} {len(self.configs)} configs>"

    # -- the hot path ---------------------------------------------------------------------------

    def run(self, *args, stream=None):
        """Launches the kernel on the current CUDA stream (or `stream`, a raw cudaStream_t)."""
        try:
            key = self._key(args)
        except Exception:  # an unexpected argument type: the generic (slower) key
            key = self._generic_key(args)
        launcher = self._launchers.get(key)
        if launcher is None:
            if precompile.active() is not None:  # the first call's compile pass: no launch
                self._discover(args)
                return
            launcher = self._prepare(args, key)
        launcher(args, stream)

    # -- specialization keys --------------------------------------------------------------------

    @staticmethod
    def _generic_key(args):
        parts = ["generic"]  # never equal to a key of the specialized key function
        for a in args:
            if hasattr(a, "data_ptr"):
                parts.append(("T", a.data_ptr() % 16 == 0))
            else:
                parts.append(a)
        return tuple(parts)

    def _first_key(self, args):
        """Builds a specialized key function for this argument layout (exec'd: one tuple of the
        ints plus a bitmask of tensor alignments), installs it, and returns its key."""
        if len(args) != len(self.runtime_names):  # _prepare reports the error
            return self._generic_key(args)
        ints, bits = [], []
        for i, a in enumerate(args):
            if hasattr(a, "data_ptr"):
                bits.append(f"((a[{i}].data_ptr() & 15) == 0) << {len(bits)}")
            else:
                ints.append(f"a[{i}]")
        mask = " | ".join(bits) or "0"
        src = (f"def key(a):\n"
               f"    if len(a) != {len(args)}:\n"
               f"        raise IndexError\n"
               f"    return ({', '.join(ints + [mask])},)\n")
        scope = {}
        exec(src, scope)
        self._key = scope["key"]
        return self._key(args)

    # -- choosing and building a launcher -------------------------------------------------------

    def numels_of(self, args):
        return {p: int(args[i]) for p, i in self.numel_pos.items()}

    def _constexpr_values(self, config, numels):
        """The constexpr arguments for a config: its blocks, plus R0_BLOCK for persistent
        reductions (next_pow2 of r0_numel). Checks them against the kernel's signature."""
        values = {}
        for k, v in config.kwargs.items():
            if k in self.constexpr_names:
                values[k] = v
            elif not (k == "XBLOCK" and v == 1):  # no XBLOCK parameter: only XBLOCK=1 is valid
                raise TypeError(f"{self.name}: config {config} sets {k}, which is not a constexpr "
                                f"parameter of the kernel ({self.constexpr_names})")
        if self.kind == "persistent_reduction" and "R0_BLOCK" in self.constexpr_names:
            values["R0_BLOCK"] = cfgs.next_power_of_2(numels.get("r0_", 1))
        missing = [n for n in self.constexpr_names if n not in values]
        if missing:
            raise TypeError(f"{self.name}: no value for constexpr parameter(s) {missing} in "
                            f"config {config}")
        return values

    def select(self, index):
        """Forces configs[index] for all later calls (None: back to autotuning). Tests use this
        to run every config."""
        self.forced = None if index is None else self.configs[min(index, len(self.configs) - 1)]
        self._launchers.clear()

    def config_for(self, args):
        """The config for these arguments: forced, already chosen for the size bucket, the only
        one, or autotuned now (benchmarks, cached on disk)."""
        if self.forced is not None:
            return self.forced
        numels = self.numels_of(args)
        bucket = autotune.size_bucket(numels)
        cfg = self.chosen.get(bucket)
        if cfg is None:
            cfg = autotune.choose_config(self, args, numels, bucket)
            self.chosen[bucket] = cfg
        return cfg

    def grid_for(self, config, numels):
        return cfgs.grid_for(config, numels)

    def _prepare(self, args, key):
        if len(args) != len(self.runtime_names):
            raise TypeError(f"{self.name}.run takes {len(self.runtime_names)} arguments "
                            f"({', '.join(self.runtime_names)}), got {len(args)}")
        cfg = self.config_for(args)
        launcher = self.make_launcher(cfg, args)
        self._launchers[key] = launcher
        return launcher

    # -- compiling: in the pool when there is one --------------------------------------------

    def _discover(self, args):
        """The compile pass (precompile.discover): submits the compiles of the configs the
        choice for these arguments may need, once per specialization."""
        if len(args) != len(self.runtime_names):
            return  # the real call reports it
        submitted = 0
        for config in autotune.candidates(self, args)[0]:
            submitted += self._discover_config(config, args)
        precompile.note(submitted)

    def _discover_config(self, config, args):
        try:
            if 0 in self.grid_for(config, self.numels_of(args)):
                return 0  # nothing to launch, nothing to compile
        except ValueError:
            return 0  # the real call reports it
        return int(self.compile_async(config, args) is not None)

    def _compile_key(self, config, args):
        return (config.key(), self._generic_key(args))

    def compile_async(self, config, args):
        """Starts compiling `config` for these arguments in the compile pool (or, in the first
        call's compile pass, has it started when the pass ends: precompile.defer); returns its
        Future (the same one for a repeat), or None when compiles are serial."""
        key = self._compile_key(config, args)
        future = self._compiles.get(key)
        if future is None:
            if precompile.compile_threads() <= 1:
                return None
            precompile.prepare_triton()
            # In the first call's compile pass with COIL_COMPILE_POOL=auto: submitted when the
            # pass ends, to the pool its number of configs picks.
            future = precompile.defer(self, config, args)
            if future is None and precompile.pool_kind() == "process":
                future = self._compile_in_process(config, args)
            if future is None:
                future = precompile.pool().submit(self._compile_now, config, args)
            self._compiles[key] = future
        return future

    def _compile_in_process(self, config, args):
        """Submits `config` for these arguments to the process pool (precompile's doc); its
        Future's result is None: compile() then loads the kernel from Triton's disk cache.
        None when the JIT would compile nothing or the pool cannot take it."""
        name = getattr(getattr(self.fn, "fn", None), "__module__", None)
        module = sys.modules.get(name or "")
        path = getattr(module, "__file__", None)
        if path is None or getattr(module, self.name, None) is not self:
            return None  # not a module the worker can import
        numels = self.numels_of(args)
        consts = self._constexpr_values(config, numels)
        try:
            data = precompile.specialization_of(lambda: self.fn.warmup(
                *args, grid=(1,), num_warps=config.num_warps, num_stages=config.num_stages,
                **ieee_compile_options(), **consts))
        except Exception:  # noqa: BLE001 (compile() compiles it here and reports errors)
            return None
        if data is None:
            return None
        try:
            return precompile.submit_compile(module.__name__, os.path.abspath(path), self.name,
                                             data)
        except (BrokenProcessPool, OSError, ValueError) as e:
            precompile.process_pool_failed(e)
            return None

    def compile(self, config, args):
        """The CompiledKernel of `config` for these arguments: the pool's, if it compiled (or is
        compiling) it, else compiled now. Compile errors raise here."""
        key = self._compile_key(config, args)
        future = self._compiles.get(key)
        if future is not None:
            try:
                kernel = future.result()
                if kernel is not None:
                    return kernel
                # compiled by a worker process: the compile below is a disk cache hit
            except BrokenProcessPool as e:
                precompile.process_pool_failed(e)
                del self._compiles[key]
            except Exception:  # noqa: BLE001
                # Once more in this thread, so that a failure of the threaded compile itself is
                # never final (a config that cannot compile fails again, with its own error).
                del self._compiles[key]
        return self._compile_now(config, args)

    def _compile_now(self, config, args):
        """Compiles `config` for these arguments through the JITFunction (Triton's own cache
        makes repeats cheap) and loads it. Returns the CompiledKernel."""
        numels = self.numels_of(args)
        consts = self._constexpr_values(config, numels)
        kernel = self.fn.warmup(*args, grid=(1,), num_warps=config.num_warps,
                                num_stages=config.num_stages, **ieee_compile_options(),
                                **consts)
        if hasattr(kernel, "result"):  # an asynchronous compile
            kernel = kernel.result()
        if hasattr(kernel, "_init_handles"):
            kernel._init_handles()  # loads the binary: n_regs / n_spills become known
        self.binary_info[config.key()] = {
            "n_regs": getattr(kernel, "n_regs", None),
            "n_spills": getattr(kernel, "n_spills", None),
            "shared": getattr(getattr(kernel, "metadata", None), "shared", None),
        }
        return kernel

    def make_launcher(self, config, args):
        """A launcher(args, stream) for this config and these arguments' specialization."""
        numels = self.numels_of(args)
        grid = self.grid_for(config, numels)
        if 0 in grid:
            return lambda a, stream: None  # nothing to compute
        if _launch_mode == "direct":
            try:
                kernel = self.compile(config, args)  # compile errors propagate...
            except (AttributeError, TypeError) as e:  # ...API differences fall back
                kernel = None
                warn(f"{self.name}: cannot compile through JITFunction.warmup "
                     f"({type(e).__name__}: {e}); using the JIT launcher")
            if kernel is not None:
                try:
                    return self._direct_launcher(config, args, grid, kernel)
                except Exception as e:  # an API difference: fall back to the JIT path
                    warn(f"{self.name}: direct launch unavailable ({type(e).__name__}: {e}); "
                         f"using the JIT launcher")
        return self._jit_launcher(config, numels, grid)

    def _jit_launcher(self, config, numels, grid):
        consts = self._constexpr_values(config, numels)
        jit_run = self.fn[grid]
        warps, stages = config.num_warps, config.num_stages
        options = ieee_compile_options()
        self.launch_modes.add("jit")

        def launch(args, stream):
            jit_run(*args, num_warps=warps, num_stages=stages, **options, **consts)
        return launch

    def _direct_launcher(self, config, args, grid, kernel):
        """Inductor-style launcher: exec'd code calling CompiledKernel.run directly."""
        _ensure_triton_allocator()
        enter_hook, exit_hook = _launch_hooks()
        if _hook_active(enter_hook):
            raise RuntimeError("a launch hook is installed (profiler): it needs launch metadata")
        numels = self.numels_of(args)
        consts = self._constexpr_values(config, numels)
        scope = {
            "runner": kernel.run,
            "function": kernel.function,
            "metadata": (kernel.packed_metadata if getattr(kernel, "packed_metadata", None)
                         is not None else kernel.metadata),
            "get_stream": _raw_stream_getter(),
            "dev": _device_index(args),
        }
        # Triton >= 3.3 launchers take every declared argument, constexprs included (and ignore
        # those); older ones take only the others.
        with_constexprs = _triton_version() >= (3, 3)
        call = []
        for name in self.arg_names:
            if name in consts:
                if with_constexprs:
                    scope[f"c_{name}"] = consts[name]
                    call.append(f"c_{name}")
            else:
                call.append(f"a[{self.runtime_names.index(name)}]")
        src = (f"def launch(a, stream):\n"
               f"    if stream is None:\n"
               f"        stream = get_stream(dev)\n"
               f"    runner({grid[0]}, {grid[1]}, {grid[2]}, stream, function, metadata, None, "
               f"None, None, {', '.join(call)})\n")
        exec(src, scope)
        launch = scope["launch"]
        log("launch", f"{self.name}: direct launcher, grid {grid}, {config}\n{src}")
        return _FirstLaunchProbe(self, launch, config, numels, grid)


class _FirstLaunchProbe:
    """Wraps a new direct launcher for its first call: if the C launcher rejects the argument
    list (a Triton API difference), fall back to the JIT launcher; afterwards the plain launcher
    replaces the probe in the autotuner's cache (or, outside it, is called through it)."""

    def __init__(self, tuner, launch, config, numels, grid):
        self.tuner, self.launch, self.config, self.numels, self.grid = (
            tuner, launch, config, numels, grid)
        self.final = None

    def __call__(self, args, stream):
        if self.final is not None:
            return self.final(args, stream)
        try:
            self.launch(args, stream)
            self.final = self.launch
            self.tuner.launch_modes.add("direct")
        except TypeError as e:
            warn(f"{self.tuner.name}: direct launch failed ({e}); using the JIT launcher")
            self.final = self.tuner._jit_launcher(self.config, self.numels, self.grid)
            self.final(args, stream)
        for k, v in list(self.tuner._launchers.items()):
            if v is self:
                self.tuner._launchers[k] = self.final


class TemplateAutotuner(CoilAutotuner):
    """A matmul template kernel (`run(A, B, in_ptr..., out_ptr...)`): the Triton configs plus
    one extern config per function the module attaches (`attach_externs(extern_0, ...)`:
    torch.mm + the epilogue kernel, cuBLASLt with the epilogue fused). The autotuner times them
    all per size bucket and keeps the fastest; `COIL_LOGS=autotune` prints the table with
    TFLOP/s."""

    def __init__(self, fn, mm, dtype, configs, name=None, kernel_hash=None, meta=None,
                 mode="default"):
        self.mm = dict(mm)
        self.dtype = dtype
        self.externs = []  # set by the generated module after its extern_<n> definitions
        super().__init__(fn, "template", {}, configs, name=name, kernel_hash=kernel_hash,
                         meta=meta, mode=mode)

    def attach_externs(self, *fns):
        """The module's extern choices, in order; one extern config each replaces the
        placeholder the config list ends with (none when autotuning is off: mode '0')."""
        self.externs = list(fns)
        triton = [c for c in self.configs if not cfgs.is_extern(c)]
        if len(triton) < len(self.configs):
            triton += [cfgs.extern_config(i + 1) for i in range(len(fns))]
        self.configs = triton

    @property
    def extern(self):
        """The first extern choice (torch.mm + the epilogue kernel), or None."""
        return self.externs[0] if self.externs else None

    @extern.setter
    def extern(self, fn):  # modules generated before attach_externs existed
        self.attach_externs(fn)

    def extern_label(self, config):
        """'extern_0 (cuBLAS + epilogue kernel)' for the autotune table."""
        i = cfgs.extern_index(config)
        name = self.externs[i].__name__ if i < len(self.externs) else f"extern {i + 1}"
        what = "cuBLASLt, epilogue fused" if name.endswith("_lt") else "cuBLAS + epilogue kernel"
        return f"{name} ({what})"

    def _extern_fn(self, config):
        i = cfgs.extern_index(config)
        if i >= len(self.externs):
            raise RuntimeError(f"{self.name}: extern choice {i + 1} is not attached "
                               f"({len(self.externs)} are)")
        return self.externs[i]

    @property
    def flops(self):
        return 2 * self.mm["m"] * self.mm["n"] * self.mm["k"] * self.mm["batch"]

    def numels_of(self, args):
        return dict(self.mm)

    def grid_for(self, config, numels):
        return cfgs.mm_grid(config, numels)

    def _constexpr_values(self, config, numels):
        if cfgs.is_extern(config):
            return {}
        return super()._constexpr_values(config, numels)

    def compile(self, config, args):
        if cfgs.is_extern(config):
            self._extern_fn(config)
            self.binary_info[config.key()] = {"n_regs": None, "n_spills": None, "shared": None}
            return None
        return super().compile(config, args)

    def compile_async(self, config, args):
        return None if cfgs.is_extern(config) else super().compile_async(config, args)

    def _discover_config(self, config, args):
        """An extern choice runs (torch.mm on whatever the buffers hold), so that the compile
        pass also finds the kernels it calls (the epilogue)."""
        if cfgs.is_extern(config):
            self._extern_fn(config)(*args)
            return 0
        return super()._discover_config(config, args)

    def make_launcher(self, config, args):
        if cfgs.is_extern(config):
            extern = self._extern_fn(config)
            return lambda a, stream: extern(*a)
        return super().make_launcher(config, args)

    def choice(self):
        """'extern' or 'triton' for the (last) chosen config; None before the first call."""
        cfg = self.forced or next(iter(self.chosen.values()), None)
        if cfg is None:
            return None
        return "extern" if cfgs.is_extern(cfg) else "triton"


class AttentionAutotuner(CoilAutotuner):
    """A flash-attention kernel (`run(Q, K, V[, mask], out)`; the backward's and the split
    decoding path's take their own operands, `attention_kernel` says which): the shape is part of the kernel, so its configs
    are timed once per kernel (the size bucket is the shape's); `flops` counts the products
    (halved when causal, the usual convention) for the autotune table."""

    # Matmul-sized products per kernel, as head dims: q k^T (D), p v (Dv), dO v^T (Dv), ds k or
    # ds^T q (D), p^T dO (Dv).
    PRODUCTS = {"forward": ("head_dim", "value_dim"), "lse": ("head_dim",),
                "grad_q": ("head_dim", "value_dim", "head_dim"),
                "grad_k": ("head_dim", "value_dim", "head_dim"),
                "grad_v": ("head_dim", "value_dim"),
                "grad_kv": ("head_dim", "value_dim", "head_dim", "value_dim"), "delta": (),
                "decode_partial": ("head_dim", "value_dim"), "decode_combine": ()}

    def __init__(self, fn, shape, causal, dtype, configs, name=None, kernel_hash=None, meta=None,
                 mode="default", shape_exprs=None, kernel="forward", splits=1, packed_heads=1):
        self.shape = dict(shape)
        self.splits = int(splits)  # decode_partial's chunks of keys (its grid's z)
        # A grouped-query group's query heads in one tile's rows: a program per kv head.
        self.packed_heads = int(packed_heads)
        self.causal = causal
        self.dtype = dtype
        self.attention_kernel = kernel
        super().__init__(fn, "attention", {}, configs, name=name, kernel_hash=kernel_hash,
                         meta=meta, mode=mode)
        # Size-generic: {key: compiled expression of the size arguments}, and where they are.
        self.shape_exprs = {k: compile(v, f"<{self.name} {k}>", "eval")
                            for k, v in (shape_exprs or {}).items()}
        self.size_pos = {n: i for i, n in enumerate(self.runtime_names) if n.startswith("ks")}
        missing = {k for k, v in self.shape_exprs.items()
                   for n in v.co_names if n not in self.size_pos}
        if missing:
            raise TypeError(f"{self.name}: shape entries {sorted(missing)} name sizes the kernel "
                            f"does not take (parameters: {self.arg_names})")

    def shape_of(self, args):
        """The shape of this launch: the decorator's, symbolic entries evaluated from `args`."""
        if not self.shape_exprs:
            return self.shape
        sizes = {n: int(args[i]) for n, i in self.size_pos.items()}
        s = dict(self.shape)
        for k, code in self.shape_exprs.items():
            s[k] = int(eval(code, {"__builtins__": {}}, sizes))
        return s

    @property
    def flops(self):
        s = self.shape
        f = 2 * s["batch"] * s["heads"] * s["q_len"] * s["kv_len"] * sum(
            s[d] for d in self.PRODUCTS[self.attention_kernel])
        return f // 2 if self.causal else f

    def numels_of(self, args):
        s = self.shape_of(args)
        numels = {"q_len": s["q_len"], "kv_len": s["kv_len"],
                  "batch_heads": s["batch"] * s["heads"],
                  "head_dim": max(s["head_dim"], s["value_dim"])}
        if self.attention_kernel in ("grad_k", "grad_v", "grad_kv"):
            numels["batch_kv_heads"] = s["batch"] * s["kv_heads"]
        return numels

    def grid_for(self, config, numels):
        # From the launch's numels: a size-generic kernel's lengths change per call.
        if self.attention_kernel in ("grad_k", "grad_v", "grad_kv"):
            return cfgs.attention_grid(config, {"batch": numels["batch_kv_heads"], "kv_heads": 1,
                                                "kv_len": numels["kv_len"]},
                                       self.attention_kernel)
        return cfgs.attention_grid(config, {"batch": numels["batch_heads"], "heads": 1,
                                            "q_len": numels["q_len"], "splits": self.splits,
                                            "packed_heads": self.packed_heads},
                                   self.attention_kernel)
