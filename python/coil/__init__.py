"""coil from Python: build or parse a graph, compile it, run it on torch tensors or numpy arrays.

    import coil
    g = coil.Graph()
    x = g.input("x", "f32[4, 1024]")
    g.output(g.node("gelu", [x]), "y")
    model = coil.compile(g)
    (y,) = model(torch.randn(4, 1024))

Everything goes through coil's C ABI (include/coil/coil_c.h) in libcoil_c.so, loaded with
ctypes (coil._capi says where it is looked for; COIL_LIBRARY points elsewhere). The torch
frontend and the torch.compile backend are in coil.torch (docs/torch.md).
"""

import ctypes
import json
import threading

from . import _capi
from ._capi import Error, InternalError, UnsupportedError, library_path

__all__ = ["Graph", "Model", "compile", "Error", "UnsupportedError", "InternalError",
           "library_path", "version", "set_num_threads"]


def version():
    """coil's version line ("coil 0.1.0 (commit ..., Release build)")."""
    return _capi.lib().coil_version().decode()


def set_num_threads(n):
    """OpenMP threads of compiled CPU kernels in this process."""
    _capi.check(_capi.lib().coil_set_num_threads(int(n)))


class Graph:
    """A coil graph under construction (coil::Graph through the C ABI). Values are ints."""

    def __init__(self, _handle=None):
        self._lib = _capi.lib()
        if _handle is None:
            h = ctypes.c_void_p()
            _capi.check(self._lib.coil_graph_new(ctypes.byref(h)))
            _handle = h
        self._h = _handle
        self._keep = []  # constants' buffers are copied by coil; nothing else to keep

    @classmethod
    def parse(cls, text, source_name="<text>"):
        h = ctypes.c_void_p()
        _capi.check(_capi.lib().coil_graph_parse(text.encode(), source_name.encode(),
                                                 ctypes.byref(h)))
        return cls(h)

    @classmethod
    def import_onnx(cls, path):
        h = ctypes.c_void_p()
        _capi.check(_capi.lib().coil_graph_import_onnx(str(path).encode(), ctypes.byref(h)))
        return cls(h)

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            self._lib.coil_graph_free(h)
            self._h = None

    def input(self, name, type_text):
        """A graph input: `type_text` as in the text format, e.g. "f32[s0, 128]"."""
        out = ctypes.c_int32()
        _capi.check(self._lib.coil_graph_add_input(self._h, name.encode(), type_text.encode(),
                                                   ctypes.byref(out)))
        return out.value

    def node(self, op, inputs, attrs="", name=None):
        """Op `op` on values `inputs`; `attrs` in the text format's syntax ("{axes=[1]}") or a
        dict of Python values (see format_attrs)."""
        if isinstance(attrs, dict):
            attrs = format_attrs(attrs)
        arr = (ctypes.c_int32 * max(len(inputs), 1))(*inputs)
        out = ctypes.c_int32()
        _capi.check(self._lib.coil_graph_add_node(
            self._h, op.encode(), arr, len(inputs), attrs.encode() if attrs else None,
            name.encode() if name else None, ctypes.byref(out)))
        return out.value

    def constant(self, name, array):
        """A constant copied from a torch tensor or numpy array (CPU memory)."""
        data_ptr, dtype, shape, strides, keep = _host_view(array)
        t, arrays = _capi.tensor_struct(data_ptr, dtype, shape, strides)
        out = ctypes.c_int32()
        _capi.check(self._lib.coil_graph_add_constant(self._h, name.encode(), ctypes.byref(t),
                                                      ctypes.byref(out)))
        del keep, arrays
        return out.value

    def output(self, value, name=None):
        _capi.check(self._lib.coil_graph_add_output(self._h, int(value),
                                                    name.encode() if name else None))

    def type_of(self, value):
        """The inferred type of a value, e.g. "f32[4, s0]"."""
        p = ctypes.c_void_p()
        _capi.check(self._lib.coil_graph_value_type(self._h, int(value), ctypes.byref(p)))
        return _capi.take_string(p)

    def to_text(self):
        p = ctypes.c_void_p()
        _capi.check(self._lib.coil_graph_to_text(self._h, ctypes.byref(p)))
        return _capi.take_string(p)

    def generate_gpu_module(self, **options):
        """(module.py source, report dict) of the Triton module for this graph."""
        options.setdefault("device", "cuda")
        src, rep = ctypes.c_void_p(), ctypes.c_void_p()
        _capi.check(self._lib.coil_generate_gpu_module(self._h, json.dumps(options).encode(),
                                                       ctypes.byref(src), ctypes.byref(rep)))
        return _capi.take_string(src), json.loads(_capi.take_string(rep) or "{}")


def format_attrs(attrs):
    """A dict of attributes in the text format's syntax: ints, floats, bools, strings, lists
    of ints; a dtype as coil.DTypeName("f32")."""
    def value(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, DTypeName):
            return str(v)
        if isinstance(v, int):
            return str(v)
        if isinstance(v, float):
            if v != v:
                return "nan"
            if v in (float("inf"), float("-inf")):
                return "inf" if v > 0 else "-inf"
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(value(e) for e in v) + "]"
        raise TypeError(f"attribute value {v!r} of type {type(v).__name__}")
    return "{" + ", ".join(f"{k}={value(v)}" for k, v in attrs.items()) + "}"


class DTypeName(str):
    """A dtype attribute value (printed bare: dtype=f32)."""


_NP_TO_COIL = {"bool": "bool", "uint8": "u8", "int8": "i8", "int32": "i32", "int64": "i64",
               "float16": "f16", "float32": "f32", "float64": "f64", "int16": "i16",
               "uint16": "u16", "uint32": "u32", "uint64": "u64"}
# torch.uint16/32/64 exist from torch 2.3 on; keyed by name, so an older torch just lacks them.
_TORCH_TO_COIL = {"torch.bool": "bool", "torch.uint8": "u8", "torch.int8": "i8",
                  "torch.int32": "i32", "torch.int64": "i64", "torch.float16": "f16",
                  "torch.bfloat16": "bf16", "torch.float32": "f32", "torch.float64": "f64",
                  "torch.int16": "i16", "torch.uint16": "u16", "torch.uint32": "u32",
                  "torch.uint64": "u64"}
_ITEMSIZE = {"bool": 1, "u8": 1, "i8": 1, "i32": 4, "i64": 8, "f16": 2, "bf16": 2, "f32": 4,
             "f64": 8, "i16": 2, "u16": 2, "u32": 4, "u64": 8}


def coil_dtype(dtype):
    """coil's name of a torch or numpy dtype ("f32")."""
    key = str(dtype)
    if key in _TORCH_TO_COIL:
        return _TORCH_TO_COIL[key]
    name = getattr(dtype, "name", key)
    if name in _NP_TO_COIL:
        return _NP_TO_COIL[name]
    raise UnsupportedError(f"dtype {dtype}: coil has no such dtype (it has "
                           f"{', '.join(_ITEMSIZE)})")


def _host_view(a):
    """(data pointer, coil dtype, shape, strides in elements, object to keep alive) of a CPU
    torch tensor or a numpy array, without copying."""
    if hasattr(a, "data_ptr") and hasattr(a, "stride"):  # torch.Tensor
        if a.device.type != "cpu":
            raise Error(f"a tensor on {a.device}: coil.Model runs on the CPU; --device cuda "
                        "modules run through coil_runtime")
        return a.data_ptr(), coil_dtype(a.dtype), list(a.shape), list(a.stride()), a
    import numpy as np
    a = np.asarray(a)
    dt = coil_dtype(a.dtype)
    return (a.ctypes.data, dt, list(a.shape), [s // a.itemsize for s in a.strides], a)


class Model:
    """A compiled graph (CPU). Call it with one tensor per input; it returns new outputs, or
    writes into `out=` tensors."""

    def __init__(self, handle):
        self._lib = _capi.lib()
        self._h = handle
        self.inputs = [self._info(0, i) for i in range(self._lib.coil_model_num_inputs(handle))]
        self.outputs = [self._info(1, i) for i in range(self._lib.coil_model_num_outputs(handle))]

    def __del__(self):
        h = getattr(self, "_h", None)
        if h:
            self._lib.coil_model_free(h)
            self._h = None

    def _info(self, is_output, i):
        name, dtype = ctypes.c_char_p(), ctypes.c_char_p()
        ndim = ctypes.c_int32()
        shape = ctypes.POINTER(ctypes.c_int64)()
        _capi.check(self._lib.coil_model_value_info(self._h, is_output, i, ctypes.byref(name),
                                                    ctypes.byref(dtype), ctypes.byref(ndim),
                                                    ctypes.byref(shape)))
        return (name.value.decode(), dtype.value.decode(), tuple(shape[d] for d in range(ndim.value)))

    @property
    def report(self):
        return json.loads(self._lib.coil_model_report_json(self._h).decode())

    def run_into(self, inputs, outputs):
        """Runs on `inputs`, writing `outputs` (caller-owned, the declared dtypes and shapes)."""
        keep = []

        def structs(arrays):
            arr = (_capi._Tensor * max(len(arrays), 1))()
            for i, a in enumerate(arrays):
                ptr, dt, shape, strides, owner = _host_view(a)
                t, held = _capi.tensor_struct(ptr, dt, shape, strides)
                arr[i] = t
                keep.append((owner, held, t))
            return arr

        ins = self._cached_structs(inputs, 0)
        outs = self._cached_structs(outputs, 1) if ins is not None else None
        if outs is None:
            ins, outs = structs(inputs), structs(outputs)
        _capi.check(self._lib.coil_model_run(self._h, ins, len(inputs), outs, len(outputs)))

    def _cached_structs(self, arrays, side):
        """The coil_tensor array of CPU torch tensors, per thread, rebuilt only where a tensor's
        dtype, shape or strides differ from the last call's at that position, with every data
        pointer rewritten. A call's fixed cost: a decode step's 100-odd weights keep their
        structs while its KV caches grow by one row per call. None for anything else (numpy
        arrays, another device), which takes the general path."""
        try:
            keys = [(a.dtype, a.shape, a.stride()) for a in arrays
                    if type(a).__name__ == "Tensor" and a.device.type == "cpu"]
        except AttributeError:
            return None
        if len(keys) != len(arrays):
            return None
        tls = self.__dict__.get("_tls")
        if tls is None:
            tls = self.__dict__.setdefault("_tls", threading.local())
        cache = getattr(tls, "structs", None)
        if cache is None:
            cache = tls.structs = [None, None]
        hit = cache[side]
        if hit is None or len(hit[0]) != len(keys):
            hit = cache[side] = ([None] * len(keys), (_capi._Tensor * max(len(keys), 1))(),
                                 [None] * len(keys))
        old, arr, held = hit
        for i, a in enumerate(arrays):
            if old[i] != keys[i]:
                t, h = _capi.tensor_struct(a.data_ptr(), coil_dtype(a.dtype), list(a.shape),
                                           list(a.stride()))
                arr[i] = t
                held[i] = (h, t)
                old[i] = keys[i]
            else:
                arr[i].data = a.data_ptr()
        return arr

    def output_shapes(self, inputs):
        """The output shapes at these inputs' sizes (a size-generic model's `outputs` show -1
        for a symbolic dim; this binds the symbols from the inputs)."""
        if all(d >= 0 for _, _, declared in self.outputs for d in declared):
            return [declared for _, _, declared in self.outputs]
        keep, arr = [], self._cached_structs(inputs, 0)
        if arr is None:
            arr = (_capi._Tensor * max(len(inputs), 1))()
            for i, a in enumerate(inputs):
                ptr, dt, shape, strides, owner = _host_view(a)
                arr[i], held = _capi.tensor_struct(ptr, dt, shape, strides)
                keep.append((owner, held))
        # One call binds the sizes once for every output (a decode step has one per KV cache).
        n = len(self.outputs)
        capacity = sum(len(declared) for _, _, declared in self.outputs)
        ndims = (ctypes.c_int32 * max(n, 1))()
        dims = (ctypes.c_int64 * max(capacity, 1))()
        _capi.check(self._lib.coil_model_output_shapes(self._h, arr, len(inputs), ndims, n, dims,
                                                       capacity))
        shapes, at = [], 0
        for j in range(n):
            shapes.append(tuple(dims[at:at + ndims[j]]))
            at += ndims[j]
        return shapes

    def __call__(self, *inputs):
        from ._host_memory import new_output  # (torch is imported where it is used)
        outs = [new_output(shape, _torch_dtype(dt))
                for shape, (_, dt, _) in zip(self.output_shapes(list(inputs)), self.outputs)]
        self.run_into(list(inputs), outs)
        return tuple(outs)


def _torch_dtype(name):
    import torch
    for k, v in _TORCH_TO_COIL.items():
        if v == name and hasattr(torch, k.split(".")[1]):
            return getattr(torch, k.split(".")[1])
    raise UnsupportedError(f"dtype {name}: this torch ({torch.__version__}) has no such dtype "
                           "(uint16, uint32 and uint64 came with torch 2.3)")


def compile(graph, **options):
    """Compiles `graph` (a Graph, or text in the text format) for the CPU. `options` are
    CompileOptions' fields (coil/coil.h): sizes={"s0": 128}, isa, fusion, autotune, mode
    ("default" or "max-autotune"), precision, output_dir, write_graph, debug_dir,
    store_all_intermediates, remote_cache ("redis://HOST:PORT/DB", docs/remote-cache.md). An
    unknown option is an error. A graph compiled before with the
    same options on this machine loads from the whole-graph cache (no compiler needed)."""
    if isinstance(graph, str):
        graph = Graph.parse(graph)
    h = ctypes.c_void_p()
    _capi.check(_capi.lib().coil_compile(graph._h, json.dumps(options).encode(), ctypes.byref(h)))
    return Model(h)
