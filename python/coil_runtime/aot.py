"""Ahead-of-time export of a generated GPU module (`coil export MODEL --device cuda -o DIR`, run
where a GPU is): its Triton kernels as cubins and its calls as a launch plan, which coil's C++
runtime (src/runtime/gpu_export.h) loads and launches through the CUDA driver API with no Python,
torch or Triton (docs/deploy.md, "GPU ahead of time").

    python -m coil_runtime.aot DIR/module.py --out DIR

How: the module runs once on its sample inputs (module.get_args()), which autotunes every kernel
and compiles it; then once more while every kernel launch is recorded: the chosen config's
CompiledKernel (its cubin, function name, warps, shared memory), the grid, and each argument
as (buffer, byte offset) or a scalar of the kernel's signature type. Buffers are the inputs, the
outputs, the graph's constants (module globals: their bytes go to weights.bin) and the
intermediates the module allocates (runtime.empty_strided; all are kept alive while recording,
so no address is reused). Written to DIR: gpu_manifest.json, kernels/<name>.cubin, weights.bin,
and sample_inputs.bin / sample_outputs.bin (the Python path's outputs, which the C++ runner
compares with).

Plain products (the module's torch.mm / torch.matmul into a buffer; f32, bf16 or f16) are
recorded as cuBLAS GEMMs (operands as buffer, offset, strides; batch dims collapsed; the dtype
and the cuBLAS math mode torch's settings give: TF32 for f32, reduced-precision reductions for
bf16/f16), which the C++ runtime calls through cuBLAS loaded with dlopen (cublasSgemm, or
cublasGemmEx as torch does for bf16/f16). Convolutions (the module's
torch.nn.functional.conv2d) are recorded with their buffers, shapes, the input's strides,
stride, padding, dilation, groups, dtype and whether cuDNN may use TF32; their outputs, which
torch allocates, become buffers of their own; the C++ runtime runs them through cuDNN's legacy
API. What a launch plan cannot express is refused with a message naming it: other library calls
(the matmul templates' cuBLAS/cuBLASLt extern choices are left out of autotuning here, so a
template takes a Triton config; an asymmetric padding's F.pad before a conv), matmuls and
convolutions of other dtypes, outputs that are not buffers of their own, and kernels that need
global scratch memory.
"""

import argparse
import contextlib
import json
import os
import sys

FORMAT = "coil-gpu-export-v1"


class Unsupported(Exception):
    pass


def _refuse(what):
    def f(*a, **k):
        raise Unsupported(f"{what}: a library call a GPU export cannot launch (it launches "
                          "Triton kernels, cuBLAS products and cuDNN convolutions)")
    return f


def _storage_span(t):
    """(base address, bytes) of a tensor's storage (torch 1.13 has no untyped_storage)."""
    st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    nbytes = st.nbytes() if hasattr(st, "nbytes") else st.size() * t.element_size()
    return st.data_ptr(), nbytes


def _pair(v, what):
    if isinstance(v, int):
        return [v, v]
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(isinstance(i, int) for i in v):
        return [int(v[0]), int(v[1])]
    raise Unsupported(f"a conv2d {what} of {v!r} (two ints expected)")


def _flag(obj, name, default):
    """torch.backends' flag, or `default` where this torch has none (its modules raise
    AssertionError, not AttributeError, for an unknown name)."""
    if obj is None:
        return default
    try:
        return getattr(obj, name)
    except (AttributeError, AssertionError, KeyError):
        return default


def cublas_math(torch, dtype):
    """The cuBLAS math mode torch's gemm sets for `dtype` now (aten/src/ATen/cuda/CUDABlas.cpp;
    cublas_api.h values): f32 CUBLAS_TF32_TENSOR_OP_MATH (3) when TF32 is allowed, else
    CUBLAS_DEFAULT_MATH (0); bf16/f16 CUBLAS_DEFAULT_MATH, with
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION (16) when reduced-precision reductions are
    not allowed."""
    mm = torch.backends.cuda.matmul
    if dtype == torch.float32:
        prec = _flag(mm, "fp32_precision", None)
        conv = _flag(torch.backends.cudnn, "conv", None)
        if prec is not None and _flag(conv, "fp32_precision", None) is not None:
            return 3 if prec == "tf32" else 0  # the API runtime.fp32_precision sets
        return 3 if _flag(mm, "allow_tf32", False) else 0
    name = ("allow_bf16_reduced_precision_reduction" if dtype == torch.bfloat16
            else "allow_fp16_reduced_precision_reduction")
    return 0 if bool(_flag(mm, name, True)) else 16  # an older torch: always allowed


def cudnn_tf32(torch):
    """Whether cuDNN convolutions may use TF32 now (runtime.fp32_precision sets it per call)."""
    prec = _flag(_flag(torch.backends.cudnn, "conv", None), "fp32_precision", None)
    if prec is not None:
        return prec == "tf32"
    return bool(torch.backends.cudnn.allow_tf32)


_LIBRARY_DTYPES = ("f32", "bf16", "f16")


def _dtype_name(torch, dtype):
    names = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16",
             torch.float64: "f64", torch.int64: "i64", torch.int32: "i32", torch.int16: "i16",
             torch.int8: "i8", torch.uint8: "u8", torch.bool: "bool"}
    for t, name in (("uint16", "u16"), ("uint32", "u32"), ("uint64", "u64")):
        if hasattr(torch, t):  # torch 2.3 and later
            names[getattr(torch, t)] = name
    if dtype not in names:
        raise Unsupported(f"dtype {dtype}")
    return names[dtype]


class _Recorder:
    def __init__(self, torch, module, inputs):
        self.torch = torch
        self.buffers = []  # dicts, each with "tensor" while recording
        self.by_kind = {}
        self.kernels = {}  # CompiledKernel id -> index
        self.kernel_list = []
        self.launches = []
        for i, t in enumerate(inputs):
            self._add("input", t, index=i)
        for name, v in sorted(vars(module).items()):
            if isinstance(v, torch.Tensor) and v.is_cuda:
                self._add("constant", v, name=name)

    def _add(self, kind, t, **extra):
        base, nbytes = _storage_span(t)
        b = dict(kind=kind, base=base, bytes=nbytes, tensor=t, **extra)
        self.buffers.append(b)
        return b

    def alloc(self, t):
        self._add("temp", t)
        return t

    def locate(self, ptr):
        for i, b in enumerate(self.buffers):
            if b["base"] <= ptr < b["base"] + max(b["bytes"], 1):
                return i, ptr - b["base"]
        raise Unsupported(f"a kernel argument at {ptr:#x} lies in no buffer the module "
                          "allocated or was given")

    def operand(self, t):
        """A matmul operand (or output) as buffer, byte offset and, for its last two dims, the
        element strides; its batch dims collapsed into one count and stride."""
        if _dtype_name(self.torch, t.dtype) not in _LIBRARY_DTYPES:
            raise Unsupported(f"a {t.dtype} matmul through cuBLAS (f32, bf16 or f16 in a GPU "
                              "export)")
        b, off = self.locate(t.data_ptr())
        sizes, strides = list(t.shape), list(t.stride())
        batch, bstride = 1, 0
        dims = [(n, st) for n, st in zip(sizes[:-2], strides[:-2]) if n != 1]
        for i, (n, st) in enumerate(dims):
            if i > 0 and dims[i - 1][1] != st * n:
                raise Unsupported("a batched matmul whose batch dims do not collapse into one")
            batch *= n
        if dims:
            bstride = dims[-1][1]
        return {"buffer": b, "offset": off, "rows": sizes[-2], "cols": sizes[-1],
                "row_stride": strides[-2], "col_stride": strides[-1], "batch": batch,
                "batch_stride": bstride}

    def gemm(self, a, b, out):
        if not (a.dtype == b.dtype == out.dtype):
            raise Unsupported(f"a matmul of {a.dtype} and {b.dtype} into {out.dtype} (one dtype "
                              "for cuBLAS)")
        self.launches.append({"gemm": {"a": self.operand(a), "b": self.operand(b),
                                       "out": self.operand(out),
                                       "dtype": _dtype_name(self.torch, out.dtype),
                                       "math": cublas_math(self.torch, out.dtype)}})

    def _ref(self, t):
        b, off = self.locate(t.data_ptr())
        return {"buffer": b, "offset": off}

    def conv(self, x, w, bias, stride, padding, dilation, groups, out):
        """A conv2d the module called, `out` (torch's new tensor) registered as a buffer first."""
        torch = self.torch
        dt = _dtype_name(torch, x.dtype)
        if dt not in _LIBRARY_DTYPES:
            raise Unsupported(f"a {x.dtype} conv2d through cuDNN (f32, bf16 or f16 in a GPU "
                              "export)")
        for t, what in ((w, "weight"), (bias, "bias"), (out, "output")):
            if t is not None and t.dtype != x.dtype:
                raise Unsupported(f"a conv2d of a {x.dtype} input with a {t.dtype} {what}")
        if x.dim() != 4 or w.dim() != 4:
            raise Unsupported(f"a conv2d of a {x.dim()}-D input (4-D NCHW only)")
        if not w.is_contiguous():
            raise Unsupported("a conv2d whose weight is not contiguous")
        if bias is not None and (bias.dim() != 1 or not bias.is_contiguous()):
            raise Unsupported("a conv2d whose bias is not a contiguous vector")
        if not out.is_contiguous():
            raise Unsupported("a conv2d whose output is not contiguous NCHW (channels-last input)")
        if isinstance(padding, str):
            raise Unsupported(f"a conv2d with padding '{padding}'")
        self.alloc(out)
        entry = {"x": self._ref(x), "w": self._ref(w), "out": self._ref(out),
                 "x_shape": list(x.shape), "x_strides": list(x.stride()),
                 "w_shape": list(w.shape), "out_shape": list(out.shape),
                 "stride": _pair(stride, "stride"), "padding": _pair(padding, "padding"),
                 "dilation": _pair(dilation, "dilation"), "groups": int(groups), "dtype": dt,
                 "tf32": cudnn_tf32(torch)}
        if bias is not None:
            entry["bias"] = self._ref(bias)
        self.launches.append({"conv": entry})

    def launch(self, tuner, args, config, grid, kernel, consts):
        key = id(kernel)
        if key not in self.kernels:
            self.kernels[key] = len(self.kernel_list)
            self.kernel_list.append((tuner, kernel))
        sig = kernel.src.signature
        names = list(sig.keys()) if isinstance(sig, dict) else list(tuner.arg_names)
        values = {}
        for n, a in zip(tuner.runtime_names, args):
            values[n] = a
        values.update(consts)
        constants = getattr(kernel.src, "constants", {}) or {}
        const_names = set()
        for k in constants:  # keys: names, or (index,) tuples in Triton >= 3.2
            if isinstance(k, tuple) and len(k) == 1 and isinstance(k[0], int):
                const_names.add(names[k[0]])
            elif isinstance(k, str):
                const_names.add(k)
        out = []
        for n in names:
            ty = sig[n] if isinstance(sig, dict) else None
            if ty == "constexpr" or n in const_names or n in consts:
                continue
            v = values[n]
            if hasattr(v, "data_ptr"):
                b, off = self.locate(v.data_ptr())
                out.append({"buffer": b, "offset": off})
            else:
                if ty is None or ty.startswith("*"):
                    raise Unsupported(f"{tuner.name}: argument {n} has type {ty}")
                out.append({"type": ty, "value": v})
        self.launches.append({"kernel": self.kernels[key], "grid": list(grid), "args": out})


@contextlib.contextmanager
def recording_library_calls(torch, rec):
    """While active, the module's library calls are made and recorded in `rec`: plain products
    (torch.mm / torch.matmul(a, b, out=) on buffer views: cuBLAS, which the C++ runtime calls
    itself) and convolutions (torch.nn.functional.conv2d: cuDNN, likewise)."""
    real_mm, real_matmul = torch.mm, torch.matmul
    real_conv = torch.nn.functional.conv2d

    def recording(real):
        def call(a, b, *, out=None):
            if out is None:
                raise Unsupported("a matmul without an output buffer")
            rec.gemm(a, b, out)
            return real(a, b, out=out)
        return call

    def recording_conv(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
        y = real_conv(x, w, bias, stride=stride, padding=padding, dilation=dilation,
                      groups=groups)
        rec.conv(x, w, bias, stride, padding, dilation, groups, y)
        return y

    torch.mm, torch.matmul = recording(real_mm), recording(real_matmul)
    torch.nn.functional.conv2d = recording_conv
    try:
        yield
    finally:
        torch.mm, torch.matmul = real_mm, real_matmul
        torch.nn.functional.conv2d = real_conv


def export(module_path, out_dir):
    import torch
    from . import configs as cfgs
    from . import heuristics, runtime

    if not torch.cuda.is_available():
        raise Unsupported("no CUDA device: a GPU export runs where the GPU is")
    mod = runtime.load_module(module_path, precompile=False)
    # Matmul templates: Triton configs only (a cuBLAS extern has no launch plan).
    for t in heuristics.autotuners_of(mod):
        if getattr(t, "externs", None):
            t.configs = [c for c in t.configs if not cfgs.is_extern(c)]
            t.externs = []
            t.chosen.clear()
            t._launchers.clear()
    refused = {}
    for owner, name in [(torch, "bmm"), (torch, "addmm"), (torch, "baddbmm"),
                        (torch, "_addmm_activation"), (torch.nn.functional, "pad")]:
        refused[(owner, name)] = getattr(owner, name)
    inputs = mod.get_args()
    try:
        for (owner, name) in refused:
            what = f"{owner.__name__}.{name}"
            if name == "pad":
                what += " (a conv2d's asymmetric padding, which cuDNN has not)"
            setattr(owner, name, _refuse(what))
        mod.call(list(inputs))  # autotunes and compiles
        torch.cuda.synchronize()
        rec = _Recorder(torch, mod, inputs)
        real_alloc = runtime._alloc if runtime._alloc is not None else None
        if real_alloc is None:
            runtime._resolve_alloc()
            real_alloc = runtime._alloc
        runtime._alloc = lambda size, stride, dtype: rec.alloc(real_alloc(size, stride, dtype))
        real_run = heuristics.CoilAutotuner.run

        def recording_run(self, *args, stream=None):
            config = self.config_for(args)
            if cfgs.is_extern(config):
                raise Unsupported(f"{self.name}: its chosen config is a library call")
            numels = self.numels_of(args)
            grid = self.grid_for(config, numels)
            if 0 in grid:
                return
            kernel = self.compile(config, args)
            rec.launch(self, args, config, grid, kernel, self._constexpr_values(config, numels))
            real_run(self, *args, stream=stream)

        heuristics.CoilAutotuner.run = recording_run
        try:
            with recording_library_calls(torch, rec):
                outs = list(mod.call(list(inputs)))
        finally:
            heuristics.CoilAutotuner.run = real_run
            runtime._alloc = real_alloc
        torch.cuda.synchronize()
    finally:
        for (owner, name), fn in refused.items():
            setattr(owner, name, fn)
    for j, o in enumerate(outs):
        b, off = rec.locate(o.data_ptr())
        buf = rec.buffers[b]
        if buf["kind"] != "temp" or off != 0 or not o.is_contiguous():
            raise Unsupported(f"output {j} is not a buffer of its own (a view of an input, a "
                              "constant or another buffer)")
        buf["kind"], buf["index"] = "output", j

    os.makedirs(os.path.join(out_dir, "kernels"), exist_ok=True)
    weights = bytearray()
    buffers = []
    for b in rec.buffers:
        entry = {"kind": b["kind"], "bytes": b["bytes"]}
        if "index" in b:
            entry["index"] = b["index"]
        if b["kind"] == "constant":
            while len(weights) % 256:
                weights.append(0)
            entry["offset"] = len(weights)
            entry["name"] = b["name"]
            raw = b["tensor"].untyped_storage().cpu()
            weights += bytes(raw)
        buffers.append(entry)
    kernels = []
    for tuner, k in rec.kernel_list:
        md = k.metadata
        cubin = k.asm["cubin"]
        file = f"kernels/{tuner.name}.cubin"
        with open(os.path.join(out_dir, file), "wb") as f:
            f.write(cubin)
        kernels.append({"name": tuner.name, "cubin": file, "function": md.name,
                        "num_warps": md.num_warps, "num_ctas": getattr(md, "num_ctas", 1),
                        "shared": md.shared,
                        "global_scratch_size": getattr(md, "global_scratch_size", 0) or 0,
                        "profile_scratch_size": getattr(md, "profile_scratch_size", 0) or 0})
        if kernels[-1]["num_ctas"] != 1:
            raise Unsupported(f"{tuner.name}: {md.num_ctas} CTAs per cluster")
        if kernels[-1]["global_scratch_size"]:
            raise Unsupported(f"{tuner.name}: needs {md.global_scratch_size} bytes of global "
                              "scratch memory")

    def spec(name, t):
        return {"name": name, "dtype": _dtype_name(torch, t.dtype), "shape": list(t.shape)}
    in_names = list(getattr(mod, "INPUT_NAMES", [f"input{i}" for i in range(len(inputs))]))
    out_names = list(getattr(mod, "OUTPUT_NAMES", [f"out{j}" for j in range(len(outs))]))
    samples_in = b"".join(bytes(t.contiguous().untyped_storage().cpu()) for t in inputs)
    samples_out = b"".join(bytes(t.contiguous().untyped_storage().cpu()) for t in outs)
    manifest = {
        "format": FORMAT,
        "device": torch.cuda.get_device_name(),
        "capability": list(torch.cuda.get_device_capability()),
        "inputs": [spec(n, t) for n, t in zip(in_names, inputs)],
        "outputs": [spec(n, t) for n, t in zip(out_names, outs)],
        "buffers": buffers,
        "kernels": kernels,
        "launches": rec.launches,
        "weights_bytes": len(weights),
    }
    with open(os.path.join(out_dir, "weights.bin"), "wb") as f:
        f.write(weights)
    with open(os.path.join(out_dir, "sample_inputs.bin"), "wb") as f:
        f.write(samples_in)
    with open(os.path.join(out_dir, "sample_outputs.bin"), "wb") as f:
        f.write(samples_out)
    with open(os.path.join(out_dir, "gpu_manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("module")
    p.add_argument("--out", required=True)
    a = p.parse_args(argv)
    try:
        m = export(a.module, a.out)
    except Unsupported as e:
        print(f"error: GPU export: {e}", file=sys.stderr)
        return 3
    print(json.dumps({"kernels": len(m["kernels"]), "launches": len(m["launches"]),
                      "buffers": len(m["buffers"]), "weights_bytes": m["weights_bytes"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
