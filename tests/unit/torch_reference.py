#!/usr/bin/env python3
"""PyTorch eager results for the reference interpreter's cross-check (reference_test.cpp).

Usage: torch_reference.py DIR

DIR/manifest.json lists the cases: [{"op": "add", "attrs": {...}, "inputs": 2}, ...].
Case i reads DIR/c{i}_in{k}.npy and writes DIR/c{i}_out.npy with torch's result, computed in
the inputs' own dtypes (as eager PyTorch runs them). bf16 arrays travel as raw 2-byte voids
('|V2'), as coil's npy writer stores them.
"""
import json
import sys

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {
    "bool": torch.bool, "u8": torch.uint8, "i8": torch.int8, "i32": torch.int32,
    "i64": torch.int64, "f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32,
    "f64": torch.float64, "i16": torch.int16,
}


def load(path):
    a = np.load(path)
    if a.dtype.kind == "V" and a.dtype.itemsize == 2:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def save(path, t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        np.save(path, t.view(torch.int16).numpy().view("V2"))
    else:
        np.save(path, t.numpy())


def axes_of(attrs, x):
    return list(attrs["axes"]) if "axes" in attrs else list(range(x.dim()))


def reduce_prod(x, axes, keepdim):
    for a in sorted((a % max(x.dim(), 1) for a in axes), reverse=True):
        x = torch.prod(x, dim=a, keepdim=keepdim)
    return x


def rms_norm(x, w, dims, eps):
    # torch 1.13 has no rms_norm: the formula, computed in the input's dtype (f32 math for
    # f16/bf16, as eager kernels do).
    compute = torch.float32 if x.dtype in (torch.float16, torch.bfloat16) else x.dtype
    xc = x.to(compute)
    dim = list(range(x.dim() - dims, x.dim()))
    y = xc * torch.rsqrt(torch.mean(xc * xc, dim=dim, keepdim=True) + eps)
    if w is not None:
        y = y * w.to(compute)
    return y.to(x.dtype)


def pair(v):
    return tuple(v) if isinstance(v, list) else v


def pool2d(op, attrs, x):
    # coil pools the last two dims of any rank >= 3; torch takes [C, H, W] or [N, C, H, W].
    lead, hw = x.shape[:-2], x.shape[-2:]
    x4 = x.reshape(1, -1, *hw)
    kernel = pair(attrs["kernel"])
    stride = pair(attrs.get("stride", attrs["kernel"]))
    padding = pair(attrs.get("padding", 0))
    ceil_mode = attrs.get("ceil_mode", False)
    if op == "max_pool2d":
        y = F.max_pool2d(x4, kernel, stride, padding, pair(attrs.get("dilation", 1)),
                         ceil_mode=ceil_mode)
    else:
        y = F.avg_pool2d(x4, kernel, stride, padding, ceil_mode=ceil_mode,
                         count_include_pad=attrs.get("count_include_pad", True))
    return y.reshape(*lead, *y.shape[-2:])


UNARY = {
    "abs": torch.abs, "neg": torch.neg, "exp": torch.exp, "log": torch.log,
    "log1p": torch.log1p, "expm1": torch.expm1, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "reciprocal": torch.reciprocal, "relu": torch.relu, "sigmoid": torch.sigmoid,
    "tanh": torch.tanh, "erf": torch.erf, "silu": F.silu, "sin": torch.sin, "cos": torch.cos,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "sign": torch.sign,
    "logical_not": torch.logical_not, "isnan": torch.isnan,
}

BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "fmod": torch.fmod, "eq": torch.eq,
    "ne": torch.ne, "lt": torch.lt, "le": torch.le, "gt": torch.gt, "ge": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or,
}


def run(op, attrs, xs):
    if op in UNARY:
        return UNARY[op](xs[0])
    if op in BINARY:
        return BINARY[op](xs[0], xs[1])
    if op == "gelu":
        return F.gelu(xs[0], approximate=attrs.get("approximate", "none"))
    if op == "cast":
        return xs[0].to(DTYPES[attrs["dtype"]])
    if op == "clamp":
        return torch.clamp(xs[0], min=attrs.get("min"), max=attrs.get("max"))
    if op == "where":
        return torch.where(xs[0], xs[1], xs[2])
    keepdim = attrs.get("keepdim", False)
    if op in ("sum", "mean", "max", "min", "var", "prod"):
        x, axes = xs[0], axes_of(attrs, xs[0])
        if op == "sum":
            return torch.sum(x, dim=axes, keepdim=keepdim)
        if op == "mean":
            return torch.mean(x, dim=axes, keepdim=keepdim)
        if op == "max":
            return torch.amax(x, dim=axes, keepdim=keepdim)
        if op == "min":
            return torch.amin(x, dim=axes, keepdim=keepdim)
        if op == "var":
            return torch.var(x, dim=axes, correction=attrs.get("correction", 1), keepdim=keepdim)
        return reduce_prod(x, axes, keepdim)
    if op in ("argmax", "argmin"):
        fn = torch.argmax if op == "argmax" else torch.argmin
        if "axis" in attrs:
            return fn(xs[0], dim=attrs["axis"], keepdim=keepdim)
        r = fn(xs[0])
        return r.reshape([1] * xs[0].dim()) if keepdim else r
    if op == "softmax":
        return torch.softmax(xs[0], dim=attrs.get("axis", -1))
    if op == "log_softmax":
        return torch.log_softmax(xs[0], dim=attrs.get("axis", -1))
    if op == "layer_norm":
        dims = attrs.get("dims", 1)
        w = xs[1] if len(xs) > 1 else None
        b = xs[2] if len(xs) > 2 else None
        return F.layer_norm(xs[0], xs[0].shape[xs[0].dim() - dims:], w, b,
                            eps=attrs.get("eps", 1e-5))
    if op == "rms_norm":
        return rms_norm(xs[0], xs[1] if len(xs) > 1 else None, attrs.get("dims", 1),
                        attrs.get("eps", 1e-6))
    if op == "concat":
        return torch.cat(xs, dim=attrs.get("dim", 0))
    if op == "gather":
        x, idx = xs[0], xs[1].long()
        axis = attrs.get("axis", 0) % x.dim()
        idx = torch.where(idx < 0, idx + x.shape[axis], idx)
        if axis == 0 and x.dim() == 2:
            return F.embedding(idx, x)
        out = torch.index_select(x, axis, idx.reshape(-1))
        return out.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])
    if op == "matmul":
        return torch.matmul(xs[0], xs[1])
    if op == "bmm":
        return torch.bmm(xs[0], xs[1])
    if op == "linear":
        return F.linear(xs[0], xs[1], xs[2] if len(xs) > 2 else None)
    if op == "addmm":
        return torch.addmm(xs[0], xs[1], xs[2], beta=attrs.get("beta", 1.0),
                           alpha=attrs.get("alpha", 1.0))
    if op == "conv2d":
        return F.conv2d(xs[0], xs[1], xs[2] if len(xs) > 2 else None,
                        stride=pair(attrs.get("stride", 1)), padding=pair(attrs.get("padding", 0)),
                        dilation=pair(attrs.get("dilation", 1)), groups=attrs.get("groups", 1))
    if op in ("max_pool2d", "avg_pool2d"):
        return pool2d(op, attrs, xs[0])
    if op == "global_avg_pool2d":
        return torch.mean(xs[0], dim=(-2, -1), keepdim=True)
    raise ValueError(f"torch_reference.py: no torch mapping for op '{op}'")


LOW_PRECISION = (torch.float16, torch.bfloat16)


def run_eager(op, attrs, xs):
    try:
        return run(op, attrs, xs)
    except RuntimeError as e:
        if "not implemented for" not in str(e):
            raise
    # torch 1.13 lacks many CPU kernels for f16 (and a few for bf16). Eager computes those
    # types in f32 and rounds the result once (on GPU, and on CPU in later versions): do that.
    low = [x.dtype for x in xs if x.dtype in LOW_PRECISION]
    r = run(op, attrs, [x.float() if x.dtype in LOW_PRECISION else x for x in xs])
    return r.to(low[0]) if low and r.is_floating_point() else r


def main():
    out_dir = sys.argv[1]
    with open(f"{out_dir}/manifest.json") as f:
        cases = json.load(f)
    for i, case in enumerate(cases):
        xs = [load(f"{out_dir}/c{i}_in{k}.npy") for k in range(case["inputs"])]
        r = run_eager(case["op"], case.get("attrs", {}), xs)
        save(f"{out_dir}/c{i}_out.npy", r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
