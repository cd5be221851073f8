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
It imports only the module's imports, constant assignments and `@triton.jit` functions (with
their decorators), at their own lines of the module's file (`load_kernels`): a generated
module's top level also moves its weights to the GPU, which would create a CUDA context in
every worker. After the compile it builds the kernel's C launcher (Triton compiles one with
gcc per argument signature, 0.3-0.4 s each, into the same disk cache), so that the main
process only loads it.
"""

import ast
import importlib.util
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


def _is_jit(decorator):
    """`@triton.jit`, `@jit`, or either called with options."""
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    return (isinstance(decorator, ast.Attribute) and decorator.attr == "jit") or (
        isinstance(decorator, ast.Name) and decorator.id == "jit")


def _kept(node):
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, ast.Assign):  # COIL_AUTOTUNE_MODE = '...', other literals
        return isinstance(node.value, ast.Constant)
    return isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list)


def load_kernels(path, name):
    """The module at `path` with only its imports, literal assignments and Triton kernels run
    (see the module doc), registered as sys.modules[name]. The code keeps its file and line
    numbers, so that Triton reads each kernel's source from the file as in the main process."""
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    tree.body = [node for node in tree.body if _kept(node)]
    code = compile(tree, path, "exec")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        exec(code, module.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _module(name, path):
    module = _modules.get(name)
    if module is None:
        module = sys.modules.get(name)
        if module is None or os.path.abspath(getattr(module, "__file__", "")) != path:
            from . import configs, heuristics
            if heuristics._shared_memory is None:  # no GPU query for the templates' lists
                heuristics._shared_memory = configs.MM_SHARED_MEMORY
            try:
                module = load_kernels(path, name)
            except Exception:  # noqa: BLE001 (e.g. a kernel that needs more of its module)
                from . import runtime
                module = runtime.load_module(path, name=name, precompile=False)
        _modules[name] = module
    return module


def warm(module_name, path, target, env):
    """A worker's first task when the pool is warmed (precompile.warm_process_pool): what each
    compile would do first (the environment, the target, the module's kernels, Triton's nvidia
    backend and its libcuda lookup), done before the first compile is asked for."""
    _apply_env(env)
    _use_target(target)
    _module(module_name, path)
    try:
        from triton.backends.nvidia import driver
        driver.library_dirs()
    except Exception:  # noqa: BLE001 (another Triton, another backend)
        pass
    return os.getpid()


def build_launcher(kernel):
    """Builds (or finds in Triton's disk cache) the C launcher of a CompiledKernel, as its
    _init_handles would in the main process, without loading the binary. Best effort: the
    main process builds what is missing."""
    src, metadata = getattr(kernel, "src", None), getattr(kernel, "metadata", None)
    if src is None or metadata is None:
        return False
    try:
        from triton.backends.nvidia.driver import CudaLauncher
        CudaLauncher(src, metadata)
    except Exception:  # noqa: BLE001 (another Triton, another backend)
        return False
    return True


def compile_kernel(module_name, path, kernel_name, specialization_data, target, env):
    """Compiles one specialization of `kernel_name` (a CoilAutotuner or a JITFunction of the
    module) into Triton's disk cache, with its launcher; returns None (the caller loads it
    from there)."""
    _apply_env(env)
    _use_target(target)
    obj = getattr(_module(module_name, path), kernel_name)
    jit = obj if hasattr(obj, "preload") else obj.fn
    kernel = jit.preload(specialization_data)
    build_launcher(kernel)
