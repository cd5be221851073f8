"""Compiling a module's Triton kernels in parallel (Inductor's `compile_threads`).

Two parts:

1. `pool()`: a thread pool of `compile_threads()` workers ($COIL_COMPILE_THREADS, else
   min(32, cpu count), as Inductor's default). A kernel's configs are submitted to it before any
   is timed (`CoilAutotuner.compile_async`). Threads, not processes: Triton's compile runs
   mostly outside the GIL (its MLIR and LLVM passes in C++, ptxas in a subprocess), and a
   thread shares the JITFunction whose in-memory cache the launch then hits; Inductor
   precompiles its templates in a thread pool too. COIL_COMPILE_THREADS=1 compiles serially, in
   the calling thread.

2. `discover(call, args)`: the first call of a module loaded through `runtime.load_module` runs
   `call` once in discovery mode first. Each kernel's `run` then only submits the compiles its
   config choice will need (every candidate config, for these arguments' specialization) and
   returns without launching; library calls (torch.mm, conv2d) run as usual on whatever the
   buffers hold, so the kernels inside extern choices are discovered too. The real call that
   follows finds its kernels compiling or compiled: the module's kernels compile side by side
   instead of one after another. The kernels' specializations depend only on the integer
   arguments and each tensor's alignment, which a call with the same inputs reproduces.
   COIL_PRECOMPILE=0 turns the pass off; it is skipped when compiles are serial anyway.
"""

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .logs import log, warn

_pool = None
_pool_size = None
_lock = threading.Lock()
_active = None  # the discovery pass in progress (a _Discovery), else None
_triton_ready = False


def compile_threads():
    """$COIL_COMPILE_THREADS (a positive integer), else min(32, os.cpu_count())."""
    value = os.environ.get("COIL_COMPILE_THREADS", "").strip()
    if not value:
        return max(1, min(32, os.cpu_count() or 1))
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"COIL_COMPILE_THREADS={value!r}: expected a positive number of "
                         f"compile threads (1 compiles serially)")
    return n


def pool():
    """The shared compile pool, or None when compiles are serial (one thread)."""
    global _pool, _pool_size
    n = compile_threads()
    if n <= 1:
        return None
    with _lock:
        if _pool is None or _pool_size != n:
            if _pool is not None:  # the variable changed (tests): a new pool of the new size
                _pool.shutdown(wait=False)
            _pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="coil-compile")
            _pool_size = n
        return _pool


def prepare_triton():
    """Initializes Triton's active driver in the calling (main) thread before workers compile:
    its lazy initialization is not guarded against two threads doing it at once."""
    global _triton_ready
    if _triton_ready:
        return
    _triton_ready = True
    try:
        from triton.runtime import driver
        driver.active.get_current_target()
    except Exception:  # an older Triton or the fake one: the compile reports real problems
        pass


class _Discovery:
    def __init__(self):
        self.kernels = 0   # kernels whose compiles were submitted
        self.compiles = 0  # configs submitted


def active():
    """The discovery pass in progress, or None (CoilAutotuner.run asks on a new key only)."""
    return _active


def note(configs_submitted):
    if _active is not None:
        _active.kernels += 1
        _active.compiles += configs_submitted


def discover(call, args):
    """Runs call(list(args)) in discovery mode (see the module doc); never raises: if the pass
    fails, the kernels compile one by one in the real call."""
    global _active
    if os.environ.get("COIL_PRECOMPILE", "1") == "0" or compile_threads() <= 1:
        return None
    d = _Discovery()
    _active = d
    try:
        call(list(args))
    except Exception as e:  # noqa: BLE001 (the real call reports real errors)
        warn(f"the first call's compile pass stopped ({type(e).__name__}: {e}); the remaining "
             f"kernels compile one by one")
    finally:
        _active = None
    log("autotune", f"first call: {d.compiles} configs of {d.kernels} kernels compiling on "
                    f"{compile_threads()} threads")
    return d


def wrap_first_call(module):
    """Makes the module's first `call(args)` a discovery pass plus the call; later calls are
    the module's own `call` (the global is put back)."""
    call = getattr(module, "call", None)
    if not callable(call) or getattr(call, "_coil_first_call", False):
        return

    done = []

    def first_call(args):
        if not done:  # (a caller may keep a reference to this wrapper)
            done.append(True)
            if module.__dict__.get("call") is first_call:
                module.call = call
            discover(call, args)
        return call(args)

    first_call._coil_first_call = True
    first_call.__doc__ = call.__doc__
    first_call.__wrapped__ = call
    module.call = first_call
