"""ctypes bindings of coil's C ABI (include/coil/coil_c.h) and where the library is found.

The library, libcoil_c.so, is looked up in this order (the first that exists wins):
  1. $COIL_LIBRARY: the library file itself, or a directory that holds it;
  2. <repository>/build/lib/libcoil_c.so: the README's build, when this package is the
     source tree's python/coil (the usual case: PYTHONPATH=python);
  3. <package>/../../lib/libcoil_c.so: an unpacked device bundle (scripts/device_bundle.sh),
     whose python/ sits beside lib/;
  4. the dynamic loader's own search (LD_LIBRARY_PATH, the system's directories).
One library serves every Python version: nothing here is compiled per interpreter.
"""

import ctypes
import os
import threading

ABI_VERSION = 1  # COIL_C_ABI_VERSION of the header this file binds

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIB_NAME = "libcoil_c.so"


class Error(Exception):
    """A bad graph, option or tensor (the CLI's exit code 2)."""


class UnsupportedError(Error):
    """Valid, but coil cannot do it yet (exit code 3): an op, dtype or feature."""


class InternalError(Exception):
    """A bug in coil (exit code 4). Please report it with the message."""


_STATUS_ERRORS = {2: Error, 3: UnsupportedError, 4: InternalError}


def candidate_paths():
    """Where the library is looked for, in order (see the module docstring)."""
    paths = []
    env = os.environ.get("COIL_LIBRARY", "")
    if env:
        paths.append(os.path.join(env, _LIB_NAME) if os.path.isdir(env) else env)
    paths.append(os.path.normpath(os.path.join(_HERE, "..", "..", "build", "lib", _LIB_NAME)))
    paths.append(os.path.normpath(os.path.join(_HERE, "..", "..", "lib", _LIB_NAME)))
    return paths


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_char_p), ("ndim", ctypes.c_int32),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64))]


_lib = None
_lib_path = None
_lock = threading.Lock()


def _declare(lib):
    c_int32_p = ctypes.POINTER(ctypes.c_int32)
    graph_pp = ctypes.POINTER(ctypes.c_void_p)
    char_pp = ctypes.POINTER(ctypes.c_char_p)
    sigs = {
        "coil_abi_version": (ctypes.c_int32, []),
        "coil_version": (ctypes.c_char_p, []),
        "coil_last_error": (ctypes.c_char_p, []),
        "coil_free_string": (None, [ctypes.c_void_p]),
        "coil_graph_new": (ctypes.c_int, [graph_pp]),
        "coil_graph_parse": (ctypes.c_int, [ctypes.c_char_p, ctypes.c_char_p, graph_pp]),
        "coil_graph_import_onnx": (ctypes.c_int, [ctypes.c_char_p, graph_pp]),
        "coil_graph_to_text": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]),
        "coil_graph_add_input": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p,
                                                c_int32_p]),
        "coil_graph_add_node": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, c_int32_p,
                                               ctypes.c_int32, ctypes.c_char_p, ctypes.c_char_p,
                                               c_int32_p]),
        "coil_graph_add_constant": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                                   ctypes.POINTER(_Tensor), c_int32_p]),
        "coil_graph_add_output": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32,
                                                 ctypes.c_char_p]),
        "coil_graph_value_type": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32,
                                                 ctypes.POINTER(ctypes.c_void_p)]),
        "coil_graph_free": (None, [ctypes.c_void_p]),
        "coil_compile": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, graph_pp]),
        "coil_generate_gpu_module": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p,
                                                    ctypes.POINTER(ctypes.c_void_p),
                                                    ctypes.POINTER(ctypes.c_void_p)]),
        "coil_model_free": (None, [ctypes.c_void_p]),
        "coil_model_num_inputs": (ctypes.c_int32, [ctypes.c_void_p]),
        "coil_model_num_outputs": (ctypes.c_int32, [ctypes.c_void_p]),
        "coil_model_value_info": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32,
                                                 char_pp, char_pp, c_int32_p,
                                                 ctypes.POINTER(ctypes.POINTER(ctypes.c_int64))]),
        "coil_model_output_shape": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_Tensor),
                                                   ctypes.c_int32, ctypes.c_int32, c_int32_p,
                                                   ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]),
        "coil_model_output_shapes": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_Tensor),
                                                    ctypes.c_int32, c_int32_p, ctypes.c_int32,
                                                    ctypes.POINTER(ctypes.c_int64),
                                                    ctypes.c_int32]),
        "coil_model_report_json": (ctypes.c_char_p, [ctypes.c_void_p]),
        "coil_model_run": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(_Tensor), ctypes.c_int32,
                                          ctypes.POINTER(_Tensor), ctypes.c_int32]),
        "coil_set_num_threads": (ctypes.c_int, [ctypes.c_int32]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


def lib():
    """The loaded library (loaded once per process)."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path in candidate_paths() + [_LIB_NAME]:
            if os.sep in path and not os.path.exists(path):
                tried.append(f"{path} (no such file)")
                continue
            try:
                loaded = ctypes.CDLL(path)
            except OSError as e:
                tried.append(f"{path} ({e})")
                continue
            _declare(loaded)
            version = loaded.coil_abi_version()
            if version != ABI_VERSION:
                raise ImportError(f"{path}: coil C ABI version {version}, this package binds "
                                  f"version {ABI_VERSION}; rebuild coil or point COIL_LIBRARY "
                                  "at a matching libcoil_c.so")
            _lib, _lib_path = loaded, path
            return _lib
        raise ImportError("coil: cannot find libcoil_c.so; build coil (bash scripts/setup.sh) or "
                          "set COIL_LIBRARY to the library or its directory. Tried:\n  " +
                          "\n  ".join(tried))


def library_path():
    lib()
    return _lib_path


def check(status):
    """Raises the Python error of a failed call, with coil's message."""
    if status == 0:
        return
    msg = lib().coil_last_error().decode("utf-8", "replace")
    raise _STATUS_ERRORS.get(status, InternalError)(msg)


def take_string(ptr):
    """A coil-allocated char* as str, freed."""
    if not ptr:
        return ""
    try:
        return ctypes.cast(ptr, ctypes.c_char_p).value.decode("utf-8")
    finally:
        lib().coil_free_string(ptr)


def tensor_struct(data_ptr, dtype, shape, strides):
    """A coil_tensor and the arrays it points into (keep both alive during the call)."""
    n = len(shape)
    shape_arr = (ctypes.c_int64 * max(n, 1))(*shape)
    strides_arr = (ctypes.c_int64 * max(n, 1))(*strides)
    t = _Tensor(ctypes.c_void_p(data_ptr), dtype.encode(), n, shape_arr, strides_arr)
    return t, (shape_arr, strides_arr)
