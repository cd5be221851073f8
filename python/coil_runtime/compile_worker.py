"""The worker side of the compile process pool (precompile.process_pool).

A worker compiles one kernel specialization into Triton's disk cache and returns; the main
process then compiles the same specialization itself, which is a cache hit (a file read and a
module load, a few ms). Processes, not threads, because Triton's front end (the AST walk that
emits TTIR) is Python and holds the GIL: threads overlap only its C++ passes and ptxas.

What a task carries is what Triton's JIT would compile (`specialization_data`, the JSON that
Triton's own jit_cache_hook receives and `JITFunction.preload` accepts), the generated
module's name and path (the worker imports it once, to get the same JITFunction source), the
GPU target and the TRITON_* environment (both are part of Triton's cache key).

A worker never touches the GPU: it is forked from a server that never initialized CUDA, and
the driver it installs answers only what compiling needs (device 0 and the parent's target).
"""

import os
import sys

_modules = {}    # module name -> generated module, imported once per worker
_target = None   # the (backend, arch, warp_size) the installed driver reports
_env_applied = None


class _TargetOnlyDriver:
    """The part of Triton's active driver that JITFunction.preload and triton.compile ask for:
    the current device (for the JIT's per-device cache) and the target to compile for."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target

    @staticmethod
    def is_active():
        return True


def _use_target(target):
    global _target
    if _target == target:
        return
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    driver.set_active(_TargetOnlyDriver(GPUTarget(*target)))
    _target = target


def _apply_env(env):
    """Makes this worker's TRITON_* variables the parent's (they are part of the cache key)."""
    global _env_applied
    items = tuple(sorted(env.items()))
    if items == _env_applied:
        return
    for k in [k for k in os.environ if k.startswith("TRITON_") and k not in env]:
        del os.environ[k]
    os.environ.update(env)
    _env_applied = items


def _module(name, path):
    module = _modules.get(name)
    if module is None:
        from . import runtime
        module = sys.modules.get(name)
        if module is None or os.path.abspath(getattr(module, "__file__", "")) != path:
            module = runtime.load_module(path, name=name, precompile=False)
        _modules[name] = module
    return module


def compile_kernel(module_name, path, kernel_name, specialization_data, target, env):
    """Compiles one specialization of `kernel_name` (a CoilAutotuner or a JITFunction of the
    module) into Triton's disk cache; returns None (the caller loads it from there)."""
    _apply_env(env)
    _use_target(target)
    obj = getattr(_module(module_name, path), kernel_name)
    jit = obj if hasattr(obj, "preload") else obj.fn
    jit.preload(specialization_data)
