"""Helpers generated modules call (check_input, empty_strided), plus module loading and .npy I/O.

`check_input` and `empty_strided` run on every call of a generated module: their fast paths are
one comparison chain and one allocation. Errors take the slow path, which re-checks precisely
and raises a ValueError naming the input.
"""

import hashlib
import importlib.util
import os
import sys

import torch

# ---------------------------------------------------------------------------------------------
# Inputs


_cpu_ok = False  # tests without a GPU accept CPU tensors (allow_cpu_for_tests)


def allow_cpu_for_tests(enabled):
    global _cpu_ok
    _cpu_ok = bool(enabled)


def input_dim(t, name, dim, rank):
    """Size `dim` of input `t` (a size-generic module binds its sizes ks0, ... from these), or
    the ValueError check_input would raise for a tensor of another rank or type."""
    shape = getattr(t, "shape", None)
    if shape is None or len(shape) != rank:
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"input '{name}': expected a torch.Tensor, got {type(t).__name__}")
        raise ValueError(f"input '{name}': expected {rank} dims, got shape {tuple(shape)}")
    return int(shape[dim])


class SizeGuardError(ValueError):
    """A size-generic module called at sizes its code does not serve (a size of 0 or 1, an
    index past int32): the caller compiles a module for those sizes (coil_runtime.dynamic)."""

    def __init__(self, sizes, guard):
        self.sizes, self.guard = dict(sizes), guard
        at = ", ".join(f"{k}={v}" for k, v in self.sizes.items())
        super().__init__(f"size guard {guard} fails at {at}: this size-generic module does not "
                         "serve these sizes; compile them bound (CompileOptions::sizes)")


def guard_sizes(sizes, guards):
    """Raises SizeGuardError for the first (holds, text) of `guards` that does not hold;
    `sizes`: {graph symbol: value}, for the message."""
    for ok, text in guards:
        if not ok:
            raise SizeGuardError(sizes, text)


def check_input(t, name, shape, stride, dtype):
    """Raises ValueError unless `t` is a CUDA tensor with this shape, strides and dtype."""
    try:
        if (t.shape == shape and t.dtype == dtype and (t.is_cuda or _cpu_ok) and
                t.stride() == stride):
            return
    except AttributeError:
        pass
    _check_input_slow(t, name, tuple(shape), tuple(stride), dtype)


def _check_input_slow(t, name, shape, stride, dtype):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"input '{name}': expected a torch.Tensor, got {type(t).__name__}")
    if t.device.type != "cuda" and not _cpu_ok:
        raise ValueError(f"input '{name}': expected a CUDA tensor, got one on {t.device}; "
                         f"pass {name}.cuda()")
    if t.dtype != dtype:
        raise ValueError(f"input '{name}': expected dtype {dtype}, got {t.dtype}")
    if tuple(t.shape) != shape:
        raise ValueError(f"input '{name}': expected shape {shape}, got {tuple(t.shape)}")
    got = t.stride()
    if t.numel() == 0:
        return  # an empty tensor has no element whose address could be wrong
    # Strides of dims of size 0 or 1 never matter (torch's own contiguity rule).
    if any(g != s for g, s, n in zip(got, stride, shape) if n > 1):
        raise ValueError(f"input '{name}': expected strides {stride}, got {tuple(got)} "
                         f"(the module was compiled for that layout; pass {name}.contiguous() "
                         f"if the expected strides are contiguous)")


# ---------------------------------------------------------------------------------------------
# Outputs and buffers

_alloc = None
_poison = os.environ.get("COIL_POISON_OUTPUTS", "") not in ("", "0")


def _resolve_alloc():
    """Inductor's fast allocator (torch._C._dynamo.guards._empty_strided_cuda) if present."""
    global _alloc
    try:
        from torch._C._dynamo.guards import _empty_strided_cuda as fast
        fast((2,), (1,), torch.float32)  # the signature this module calls it with
        _alloc = fast
    except Exception:  # absent, or another signature: the public API
        _alloc = lambda size, stride, dtype: torch.empty_strided(  # noqa: E731
            size, stride, dtype=dtype, device="cuda")


def empty_strided(size, stride, dtype):
    """An uninitialized CUDA tensor (on the current device) with these sizes and strides."""
    if _alloc is None:
        _resolve_alloc()
    t = _alloc(size, stride, dtype)
    if _poison:
        poison_(t)
    return t


# ---------------------------------------------------------------------------------------------
# Gathers at run-time indices

_index_checks = {}  # device -> its flag buffer
_sync_index_checks = os.environ.get("COIL_SYNC_INDEX_CHECKS", "") not in ("", "0") or \
    os.environ.get("CUDA_LAUNCH_BLOCKING", "") == "1"


def index_check(like):
    """The flag buffer of gathers at run-time indices on `like`'s device (a tensor, or None for
    the current CUDA device): [1, -1, 0, 0] while every index was in range. A kernel that finds
    one out of range stores 0, the gather's site, the index and the dim's size, and reads the
    clamped index (no lane reads out of bounds); check_indices raises it."""
    device = like.device if isinstance(like, torch.Tensor) else torch.device(
        "cuda", torch.cuda.current_device())
    flag = _index_checks.get(device)
    if flag is None:
        flag = torch.tensor([1, -1, 0, 0], dtype=torch.int64, device=device)
        _index_checks[device] = flag
    return flag


def index_error_message(what, index, size):
    """As the C++ kernels' run checks word it (support/run_check.h)."""
    return (f"{what}: index {index} is out of range for a dim of size {size} "
            f"(valid: {-size} to {size - 1})")


def check_indices(flag, sites):
    """Raises the index out of range that a gather of this call found; `sites`: {site: (what,
    dim size at the sizes generated at)}; the message gives the size the kernel saw. On the CPU (tests) and with COIL_SYNC_INDEX_CHECKS=1 or CUDA_LAUNCH_BLOCKING=1:
    an IndexError naming the op, the index and the size, read back at once. Otherwise on CUDA
    without synchronizing: torch._assert_async, so that an index out of range is a device-side
    assert at the next synchronization, as in torch's own CUDA gathers (embedding, index)."""
    # (a CUDA graph being captured cannot read back: its replays assert on the device)
    if flag.device.type == "cuda" and (not _sync_index_checks or
                                       torch.cuda.is_current_stream_capturing()):
        try:
            torch._assert_async(flag[0], "coil: a gather's index is out of range (rerun with "
                                "COIL_SYNC_INDEX_CHECKS=1 for which one)")
        except TypeError:  # torch 1.x: no message
            torch._assert_async(flag[0])
        return
    ok, site, index, size = (int(v) for v in flag.tolist())
    if ok:
        return
    flag.copy_(torch.tensor([1, -1, 0, 0], dtype=torch.int64))  # the next call starts clean
    what, _ = sites.get(site, ("a gather", None))
    raise IndexError(index_error_message(what, index, size))


def wrap_rows(index, size, what):
    """index_add's row indices (generated wrappers call it before torch.index_add): a negative
    one counts from the end, once. One still out of range is, on the CPU (tests) and with
    COIL_SYNC_INDEX_CHECKS=1 or CUDA_LAUNCH_BLOCKING=1, an IndexError in check_indices' words
    naming `what` (the op and its node); otherwise on CUDA nothing is read back and
    torch.index_add's own device-side assert catches it at the next synchronization."""
    wrapped = index.where(index >= 0, index + size)
    if index.device.type == "cuda" and (not _sync_index_checks or
                                        torch.cuda.is_current_stream_capturing()):
        return wrapped
    bad = (wrapped < 0) | (wrapped >= size)
    if bool(bad.any()):
        raise IndexError(index_error_message(what, int(index[bad][0]), size))
    return wrapped


def set_poison(enabled):
    """Fill every buffer empty_strided returns with NaN (or a sentinel for integers), so a test
    sees elements a kernel never wrote. Also COIL_POISON_OUTPUTS=1."""
    global _poison
    _poison = bool(enabled)


def poison_(t):
    if t.dtype.is_floating_point:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    elif t.dtype == torch.uint8:
        t.fill_(0xA5)
    elif t.dtype == torch.int8:
        t.fill_(-91)
    elif str(t.dtype) in ("torch.uint16", "torch.uint32", "torch.uint64"):  # torch 2.3 and later
        t.fill_(0x5A5A)  # a negative fill does not convert to an unsigned type
    elif t.dtype == torch.int16:
        t.fill_(-0x5A5A)
    else:
        t.fill_(-0x5A5A5A5A)
    return t


# ---------------------------------------------------------------------------------------------
# The fp32 precision of library calls (coil's --precision; src/codegen/precision.h)


class _Fp32Precision:
    """`with runtime.fp32_precision('highest'):` around a generated module's cuBLAS/cuDNN call:
    TF32 off ('highest') or on ('high') for cuBLAS matmuls and cuDNN convolutions during the
    call, the caller's settings restored after it. Without it, torch's defaults decide: cuDNN
    convolutions allow TF32 by default, so an f32 conv2d would lose ~3 decimal digits on an
    Ampere-or-later GPU while coil's CPU code and Triton kernels compute in IEEE fp32.

    torch >= 2.9 has per-backend `fp32_precision` flags and refuses a mix of them with the
    legacy `allow_tf32` flags, so each torch gets the API it has: never both."""

    def __init__(self, mode):
        if mode not in ("highest", "high"):
            raise ValueError(f"fp32 precision '{mode}': expected 'highest' or 'high'")
        self.tf32 = mode == "high"
        self.saved = None

    @staticmethod
    def _new_api():
        global _new_precision_api
        if _new_precision_api is None:  # (asked once: an extern's call is a hot path)
            conv = getattr(torch.backends.cudnn, "conv", None)
            _new_precision_api = conv is not None and hasattr(conv, "fp32_precision")
        return _new_precision_api

    def __enter__(self):
        # Only what differs is set, and only that is restored: where the caller's settings are
        # already the module's (the usual case), entering reads two flags and exiting nothing.
        if self._new_api():
            want = "tf32" if self.tf32 else "ieee"
            mm, conv = torch.backends.cuda.matmul, torch.backends.cudnn.conv
            mm_was, conv_was = mm.fp32_precision, conv.fp32_precision
            self.saved = ("new", mm_was if mm_was != want else None,
                          conv_was if conv_was != want else None)
            if mm_was != want:
                mm.fp32_precision = want
            if conv_was != want:
                conv.fp32_precision = want
        else:
            mm, dnn = torch.backends.cuda.matmul, torch.backends.cudnn
            self.saved = ("legacy", mm.allow_tf32, dnn.allow_tf32)
            mm.allow_tf32 = self.tf32
            dnn.allow_tf32 = self.tf32
        return self

    def __exit__(self, *exc):
        api, mm_saved, conv_saved = self.saved
        if api == "new":
            if mm_saved is not None:
                torch.backends.cuda.matmul.fp32_precision = mm_saved
            if conv_saved is not None:
                torch.backends.cudnn.conv.fp32_precision = conv_saved
        else:
            torch.backends.cuda.matmul.allow_tf32 = mm_saved
            torch.backends.cudnn.allow_tf32 = conv_saved
        return False


_new_precision_api = None


def fp32_precision(mode):
    """The context a generated module's library calls run in (see _Fp32Precision)."""
    return _Fp32Precision(mode)


# ---------------------------------------------------------------------------------------------
# Modules


def load_module(path, name=None, precompile=True):
    """Imports a generated module.py from its path (registered in sys.modules, so that Triton
    can read the kernels' source). Each path gets its own module name unless one is given.
    With `precompile` (the default), the module's first call() starts compiling all its kernels
    in parallel before it runs (coil_runtime.precompile)."""
    path = os.path.abspath(path)
    if name is None:
        digest = hashlib.sha256(path.encode()).hexdigest()[:12]
        name = f"coil_generated_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    if precompile:
        from . import precompile as pre
        pre.wrap_first_call(module)
    return module


# ---------------------------------------------------------------------------------------------
# .npy files (coil writes bf16 as numpy's 2-byte void type '|V2')


def read_npy(path):
    """A .npy file as a CPU torch tensor; '|V2' arrays are bf16."""
    import numpy as np
    a = np.load(path, allow_pickle=False).copy(order="C")  # (not ascontiguousarray: keeps 0-d)
    if a.dtype.kind == "V" and a.dtype.itemsize == 2:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def write_npy(path, t):
    """Writes a tensor as .npy (bf16 as '|V2', like coil)."""
    import numpy as np
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        a = t.view(torch.int16).numpy().view(np.dtype("V2"))
    else:
        a = t.numpy()
    np.save(path, a, allow_pickle=False)
