"""A stand-in for the parts of triton that coil_runtime and generated modules touch, so the
runtime's import, config and launch paths can be tested without a GPU.

`install()` puts fake `triton`, `triton.language`, `triton.language.extra(.libdevice)`,
`triton.testing`, `triton.knobs` and `triton.backends.nvidia.compiler` modules into sys.modules. `@triton.jit` returns a
FakeJITFunction; its `warmup` "compiles" a FakeCompiledKernel whose `run` (the C launcher's
signature in Triton >= 3.3) records every launch in `LAUNCHES`.

`install(preload=True)` adds what the compile process pool needs (Triton 3.x's
`JITFunction.preload`, `knobs.runtime.jit_cache_hook`, `triton.runtime.driver`): a "disk
cache" directory ($FAKE_TRITON_CACHE) that `preload` writes one file per specialization to,
with the compiling process's pid, and that `warmup` reports hits of in `COMPILES`.
"""

import dataclasses
import hashlib
import inspect
import json
import os
import sys
import threading
import types

LAUNCHES = []   # (kernel name, grid, stream, kernel args, constexprs, num_warps) per launch
COMPILES = []   # (kernel name, constexprs, num_warps, alignment of tensor args) per compile
COMPILE_THREADS = []  # the name of the thread each compile ran in
JIT_LAUNCHES = []
SPILLS = {}     # kernel name -> {frozenset(constexpr items): n_spills}
FAIL = {}       # kernel name -> set of frozenset(constexpr items) that fail to compile
REJECT_CONSTEXPR_ARGS = False  # the fake C launcher takes only non-constexpr args (old Triton)
# kernel name, or the FakeJITFunction itself (modules whose kernels share a name) -> fn(runtime
# args): computes what the kernel would (dry runs)
EMULATORS = {}
OPTIONS = []    # (kernel name, compile options) per compile and per JIT launch
# Compile options Triton's JIT takes as keyword arguments beside the constexprs (CUDAOptions'
# fields that coil_runtime passes); a fake of triton.backends.nvidia.compiler lists them.
OPTION_NAMES = ("enable_fp_fusion", "enable_reflect_ftz")


def _split_options(kwargs):
    options = {k: kwargs.pop(k) for k in OPTION_NAMES if k in kwargs}
    return kwargs, options


def reset():
    for lst in (LAUNCHES, COMPILES, COMPILE_THREADS, JIT_LAUNCHES, OPTIONS):
        lst.clear()
    SPILLS.clear()
    FAIL.clear()
    EMULATORS.clear()
    global REJECT_CONSTEXPR_ARGS
    REJECT_CONSTEXPR_ARGS = False


class constexpr:  # noqa: N801 (triton's spelling)
    pass


class FakeCompiledKernel:
    def __init__(self, jit, consts, num_warps, num_stages, aligned):
        self.jit, self.consts, self.num_warps, self.aligned = jit, consts, num_warps, aligned
        self.function = object()
        self.packed_metadata = ("packed", num_warps, num_stages)
        self.metadata = types.SimpleNamespace(shared=0, num_warps=num_warps)
        self.n_regs = 40
        self.n_spills = SPILLS.get(jit.__name__, {}).get(frozenset(consts.items()), 0)
        self.initialized = False

    def _init_handles(self):
        self.initialized = True

    def run(self, gx, gy, gz, stream, function, metadata, launch_metadata, enter, exit_, *args):
        assert function is self.function and metadata is self.packed_metadata
        n_runtime = len(self.jit.arg_names) - len(self.jit.constexprs)
        expected = n_runtime if REJECT_CONSTEXPR_ARGS else len(self.jit.arg_names)
        if len(args) != expected:
            raise TypeError(f"launcher takes {expected} kernel args, got {len(args)}")
        runtime_args = [a for i, a in enumerate(args)
                        if REJECT_CONSTEXPR_ARGS or i not in self.jit.constexprs]
        consts = {} if REJECT_CONSTEXPR_ARGS else {
            self.jit.arg_names[i]: args[i] for i in self.jit.constexprs}
        LAUNCHES.append((self.jit.__name__, (gx, gy, gz), stream, runtime_args, consts,
                         self.num_warps))
        emulator = EMULATORS.get(self.jit, EMULATORS.get(self.jit.__name__))
        if emulator is not None:
            emulator(*runtime_args)


class FakeJITFunction:
    def __init__(self, fn):
        self.fn = fn
        self.__name__ = fn.__name__
        params = list(inspect.signature(fn).parameters.values())
        self.arg_names = [p.name for p in params]
        self.constexprs = [i for i, p in enumerate(params) if p.annotation is constexpr]

    def warmup(self, *args, grid, num_warps=4, num_stages=3, **consts):
        assert grid is not None
        consts, options = _split_options(consts)
        aligned = tuple(a.data_ptr() % 16 == 0 for a in args if hasattr(a, "data_ptr"))
        data = _specialization_data(self.__name__, consts, num_warps, num_stages, aligned)
        hook = getattr(sys.modules["triton.knobs"].runtime, "jit_cache_hook", None)
        if hook is not None and hook(key=data, compile={"specialization_data": data}):
            return None  # the hook skipped the compile (Triton's contract)
        OPTIONS.append((self.__name__, options))
        key = frozenset(consts.items())
        if key in FAIL.get(self.__name__, set()):
            raise RuntimeError("PTXASError: fake compile failure")
        hit = _disk_cache_path(data)
        COMPILES.append((self.__name__, dict(consts), num_warps, aligned) +
                        ((("disk cache hit", open(hit).read()),) if hit and os.path.exists(hit)
                         else ()))
        COMPILE_THREADS.append(threading.current_thread().name)
        return FakeCompiledKernel(self, dict(consts), num_warps, num_stages, aligned)

    def preload(self, specialization_data):
        """Triton's preload: compiles what the data names into the disk cache (a worker)."""
        entry = json.loads(specialization_data)
        assert entry["name"] == self.__name__, (entry["name"], self.__name__)
        assert sys.modules["triton.runtime"].driver.active.get_current_target() is not None
        if frozenset(entry["consts"].items()) in FAIL.get(self.__name__, set()):
            raise RuntimeError("PTXASError: fake compile failure")
        with open(_disk_cache_path(specialization_data), "w") as f:
            f.write(str(os.getpid()))

    def __getitem__(self, grid):
        def launch(*args, num_warps=4, num_stages=3, **consts):
            consts, options = _split_options(consts)
            OPTIONS.append((self.__name__, options))
            JIT_LAUNCHES.append((self.__name__, tuple(grid), list(args), dict(consts), num_warps))
            emulator = EMULATORS.get(self, EMULATORS.get(self.__name__))
            if emulator is not None:
                emulator(*args)
        return launch


def _specialization_data(name, consts, num_warps, num_stages, aligned):
    return json.dumps({"name": name, "consts": consts, "num_warps": num_warps,
                       "num_stages": num_stages, "aligned": aligned}, sort_keys=True)


def _disk_cache_path(data):
    root = os.environ.get("FAKE_TRITON_CACHE")
    if not root:
        return None
    return os.path.join(root, hashlib.sha256(data.encode()).hexdigest()[:16])


class _Driver:
    def __init__(self):
        self.active = self

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def set_active(self, driver):
        self.active = driver


@dataclasses.dataclass(frozen=True)
class GPUTarget:
    backend: str
    arch: int
    warp_size: int


def _jit(fn=None, **kwargs):
    if fn is None:
        return lambda f: FakeJITFunction(f)
    return FakeJITFunction(fn)


def install(version="3.6.0", preload=False):
    """Registers the fake modules (replacing any real triton in sys.modules); `preload`: with
    what the compile process pool needs (the module doc)."""
    triton = types.ModuleType("triton")
    triton.__version__ = version
    triton.jit = _jit
    triton.set_allocator = lambda fn: None
    language = types.ModuleType("triton.language")
    language.constexpr = constexpr
    extra = types.ModuleType("triton.language.extra")
    libdevice = types.ModuleType("triton.language.extra.libdevice")
    extra.libdevice = libdevice
    language.extra = extra
    testing = types.ModuleType("triton.testing")
    testing.do_bench = lambda fn, **kw: (fn(), 1.0)[1]
    knobs = types.ModuleType("triton.knobs")
    knobs.runtime = types.SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None)
    triton.language, triton.testing, triton.knobs = language, testing, knobs
    backends = types.ModuleType("triton.backends")
    nvidia = types.ModuleType("triton.backends.nvidia")
    compiler = types.ModuleType("triton.backends.nvidia.compiler")
    compiler.CUDAOptions = dataclasses.make_dataclass(
        "CUDAOptions", [(n, bool, dataclasses.field(default=True)) for n in OPTION_NAMES])
    backends.nvidia, nvidia.compiler = nvidia, compiler
    runtime = types.ModuleType("triton.runtime")
    jit = types.ModuleType("triton.runtime.jit")
    backend_compiler = types.ModuleType("triton.backends.compiler")
    backend_compiler.GPUTarget = GPUTarget
    extra_modules = {}
    if preload:
        knobs.runtime.jit_cache_hook = None
        runtime.driver = _Driver()
        jit.JITFunction = FakeJITFunction
        runtime.jit, triton.runtime, backends.compiler = jit, runtime, backend_compiler
        extra_modules = {"triton.runtime": runtime, "triton.runtime.jit": jit,
                         "triton.backends.compiler": backend_compiler}
    for name, mod in {**extra_modules, "triton": triton, "triton.language": language,
                      "triton.language.extra": extra,
                      "triton.language.extra.libdevice": libdevice,
                      "triton.testing": testing, "triton.knobs": knobs,
                      "triton.backends": backends, "triton.backends.nvidia": nvidia,
                      "triton.backends.nvidia.compiler": compiler}.items():
        sys.modules[name] = mod
    reset()
    return triton
