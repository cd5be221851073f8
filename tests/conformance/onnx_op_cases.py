"""Writes ONNX test cases for one op family in the layout of ONNX's backend tests
(<out>/<case>/model.onnx, test_data_set_0/input_<i>.pb, output_<i>.pb), the expected outputs
computed by torch or by straightforward numpy loops written from the ONNX spec (not by coil).
Odd shapes, negative and repeated indices, every reduction and mode the mapping handles.
Used by onnx_op_cases_test.cpp:  python3 onnx_op_cases.py OUT_DIR FAMILY"""
import itertools
import os
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper, TensorProto

rng = np.random.default_rng(27)
f32 = np.float32
CASES = {}


def case(family):
    def reg(fn):
        CASES.setdefault(family, []).append(fn)
        return fn
    return reg


def write(out, name, op, inputs, outputs, attrs=None, opset=17, const_inputs=(), domain=""):
    """inputs: [(name, array)]; const_inputs: [(name, array)] become initializers; outputs: [(name, array)].
    domain: the node's domain, imported at version 1 (ai.onnx.preview.training) beside `opset`."""
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    names = [n for n, _ in inputs]
    node_in = [n for n in names]
    for n, _ in const_inputs:
        node_in.append(n)
    if isinstance(op, tuple):  # (op, the node's input names): "" for an omitted input
        op, node_in = op
    node = helper.make_node(op, node_in, [n for n, _ in outputs], domain=domain or None, **(attrs or {}))
    vi = lambda n, a: helper.make_tensor_value_info(n, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(a.dtype)], a.shape)
    g = helper.make_graph([node], name, [vi(n, a) for n, a in inputs], [vi(n, a) for n, a in outputs],
                          initializer=[numpy_helper.from_array(a, n) for n, a in const_inputs])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    m = helper.make_model(g, opset_imports=imports)
    m.ir_version = 8
    onnx.save(m, os.path.join(d, "model.onnx"))
    for k, (_, a) in enumerate(inputs):
        with open(os.path.join(d, "test_data_set_0", f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())
    for k, (_, a) in enumerate(outputs):
        with open(os.path.join(d, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())


def randn(*shape):
    return rng.standard_normal(shape).astype(f32)


# ---- losses (torch's nll_loss / cross_entropy) ------------------------------------------------
@case("losses")
def losses(out):
    shapes = [(3, 5), (1, 1), (2, 3, 2, 5)]
    k = 0
    for shape, reduction, weighted, ii in itertools.product(shapes, ["none", "sum", "mean"],
                                                            [False, True], [None, -1]):
        n, c = shape[0], shape[1]
        x = randn(*shape)
        t = rng.integers(0, c, (n,) + shape[2:]).astype(np.int64)
        if ii is not None and t.size > 1:
            t.flat[rng.integers(0, t.size)] = ii  # an ignored entry (also out of range: -1)
        w = rng.uniform(0.2, 2.0, c).astype(f32)
        attrs = {"reduction": reduction}
        if ii is not None:
            attrs["ignore_index"] = ii
        kw = {"reduction": reduction, "ignore_index": -100 if ii is None else ii}
        if weighted:
            kw["weight"] = torch.from_numpy(w).double()
        xt, tt = torch.from_numpy(x).double(), torch.from_numpy(t)
        if (ii == -1) and reduction != "none" and (t != -1).sum() == 0:
            continue
        logp = F.log_softmax(xt, 1)
        nll = F.nll_loss(logp, tt, **kw).numpy().astype(f32)
        ins = [("x", x), ("t", t)] + ([("w", w)] if weighted else [])
        write(out, f"nll_{k}", "NegativeLogLikelihoodLoss", [("x", logp.numpy().astype(f32))] + ins[1:],
              [("loss", nll)], attrs, opset=13)
        write(out, f"sce_{k}", "SoftmaxCrossEntropyLoss", ins, [("loss", nll), ("logp", logp.numpy().astype(f32))],
              attrs, opset=13)
        k += 1


# ---- Resize against torch's interpolate ------------------------------------------------------
@case("resize")
def resize(out):
    k = 0
    for (h, w), (oh, ow) in [((3, 5), (7, 4)), ((1, 1), (3, 2)), ((8, 6), (3, 3)), ((4, 4), (8, 8)),
                             ((5, 7), (5, 14)), ((2, 3), (6, 9))]:
        x = randn(2, 3, h, w)
        xt = torch.from_numpy(x).double()
        sizes = np.array([2, 3, oh, ow], dtype=np.int64)
        variants = [
            ("nearest", {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
             lambda: F.interpolate(xt, size=(oh, ow), mode="nearest")),
            ("nearest_exact", {"mode": "nearest", "coordinate_transformation_mode": "half_pixel",
                               "nearest_mode": "round_prefer_ceil"},
             lambda: F.interpolate(xt, size=(oh, ow), mode="nearest-exact")),
            ("bilinear", {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
             lambda: F.interpolate(xt, size=(oh, ow), mode="bilinear", align_corners=False)),
            ("bilinear_ac", {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
             lambda: F.interpolate(xt, size=(oh, ow), mode="bilinear", align_corners=True)),
            ("bicubic", {"mode": "cubic", "coordinate_transformation_mode": "pytorch_half_pixel"},
             lambda: F.interpolate(xt, size=(oh, ow), mode="bicubic", align_corners=False)),
            ("bicubic_ac", {"mode": "cubic", "coordinate_transformation_mode": "align_corners"},
             lambda: F.interpolate(xt, size=(oh, ow), mode="bicubic", align_corners=True)),
        ]
        for name, attrs, ref in variants:
            if name == "bilinear" and min(oh, ow) == 1:
                continue
            y = ref().numpy().astype(f32)
            write(out, f"resize_{name}_{k}", "Resize", [("x", x)], [("y", y)], attrs, opset=13,
                  const_inputs=[("roi", np.zeros(0, f32)), ("scales", np.zeros(0, f32)), ("sizes", sizes)])
        k += 1
    # Integer scale factors given as scales (torch's Upsample export), 1-D linear, uint8 nearest.
    x = randn(1, 2, 3, 4)
    for mode, tmode in [("nearest", "nearest"), ("linear", "bilinear")]:
        attrs = {"mode": mode, "coordinate_transformation_mode": "asymmetric" if mode == "nearest" else "half_pixel"}
        if mode == "nearest":
            attrs["nearest_mode"] = "floor"
        y = F.interpolate(torch.from_numpy(x), scale_factor=(2, 3), mode=tmode).numpy()
        write(out, f"resize_scales_{mode}", "Resize", [("x", x)], [("y", y)], attrs, opset=13,
              const_inputs=[("roi", np.zeros(0, f32)), ("scales", np.array([1, 1, 2, 3], f32))])
    x1 = randn(2, 3, 5)
    y1 = F.interpolate(torch.from_numpy(x1).double(), size=9, mode="linear").numpy().astype(f32)
    write(out, "resize_linear_1d", "Resize", [("x", x1)], [("y", y1)], {"mode": "linear"}, opset=13,
          const_inputs=[("roi", np.zeros(0, f32)), ("scales", np.zeros(0, f32)),
                        ("sizes", np.array([2, 3, 9], np.int64))])
    xu = rng.integers(0, 255, (1, 1, 3, 3)).astype(np.uint8)
    yu = F.interpolate(torch.from_numpy(xu.astype(f32)), size=(5, 7), mode="nearest").numpy().astype(np.uint8)
    write(out, "resize_nearest_uint8", "Resize", [("x", xu)], [("y", yu)],
          {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, opset=13,
          const_inputs=[("roi", np.zeros(0, f32)), ("scales", np.zeros(0, f32)),
                        ("sizes", np.array([1, 1, 5, 7], np.int64))])


# ---- ConvTranspose against torch -------------------------------------------------------------
@case("conv_transpose")
def conv_transpose(out):
    k = 0
    for (n, cin, h, w), (cout, g), (kh, kw), stride, pad, opad, dil, bias in [
        ((1, 1, 3, 3), (1, 1), (3, 3), (1, 1), (0, 0), (0, 0), (1, 1), False),
        ((2, 4, 5, 3), (6, 2), (3, 2), (2, 3), (1, 0), (1, 2), (1, 1), True),
        ((1, 3, 4, 4), (2, 1), (4, 4), (2, 2), (1, 1), (0, 0), (1, 1), True),
        ((2, 6, 3, 5), (6, 3), (3, 3), (1, 2), (2, 1), (0, 1), (2, 1), False),
        ((1, 2, 1, 1), (5, 1), (2, 3), (3, 1), (0, 0), (2, 0), (1, 2), True),
        ((1, 4, 6, 2), (4, 4), (1, 1), (2, 2), (0, 0), (1, 1), (1, 1), True),
    ]:
        x = randn(n, cin, h, w)
        wt = randn(cin, cout // g, kh, kw)
        b = randn(cout)
        y = F.conv_transpose2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(),
                               torch.from_numpy(b).double() if bias else None, stride, pad, opad, g, dil)
        attrs = {"strides": list(stride), "pads": [pad[0], pad[1], pad[0], pad[1]], "output_padding": list(opad),
                 "dilations": list(dil), "group": g}
        ins = [("x", x), ("w", wt)] + ([("b", b)] if bias else [])
        write(out, f"convt_{k}", "ConvTranspose", ins, [("y", y.numpy().astype(f32))], attrs, opset=11)
        # The same output through output_shape (pads generated: the extra one at the start).
        oshape = list(y.shape[2:])
        full = [stride[i] * (x.shape[2 + i] - 1) + opad[i] + (wt.shape[2 + i] - 1) * dil[i] + 1 for i in range(2)]
        tp = [full[i] - oshape[i] for i in range(2)]
        begin = [t - t // 2 for t in tp]
        y2 = F.conv_transpose2d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(),
                                torch.from_numpy(b).double() if bias else None, stride, 0, opad, g, dil)
        y2 = y2[:, :, begin[0]:begin[0] + oshape[0], begin[1]:begin[1] + oshape[1]]
        a2 = {"strides": list(stride), "output_padding": list(opad), "dilations": list(dil), "group": g,
              "output_shape": oshape}
        write(out, f"convt_oshape_{k}", "ConvTranspose", ins, [("y", y2.numpy().astype(f32))], a2, opset=11)
        k += 1
    x = randn(2, 3, 7)
    wt = randn(3, 4, 3)
    y = F.conv_transpose1d(torch.from_numpy(x).double(), torch.from_numpy(wt).double(), None, 2, 1, 1)
    write(out, "convt_1d", "ConvTranspose", [("x", x), ("w", wt)], [("y", y.numpy().astype(f32))],
          {"strides": [2], "pads": [1, 1], "output_padding": [1]}, opset=11)


# ---- gathers and scatters: numpy loops from the spec -----------------------------------------
def gather_elements_ref(data, idx, axis):
    out = np.zeros(idx.shape, data.dtype)
    for pos in np.ndindex(idx.shape):
        p = list(pos)
        i = idx[pos]
        p[axis] = i + data.shape[axis] if i < 0 else i
        out[pos] = data[tuple(p)]
    return out


def scatter_elements_ref(data, idx, upd, axis, reduction):
    out = data.copy()
    for pos in np.ndindex(idx.shape):
        p = list(pos)
        i = idx[pos]
        p[axis] = i + data.shape[axis] if i < 0 else i
        p = tuple(p)
        out[p] = {"none": lambda a, b: b, "add": lambda a, b: a + b, "mul": lambda a, b: a * b,
                  "max": max, "min": min}[reduction](out[p], upd[pos])
    return out


@case("scatter")
def scatter(out):
    k = 0
    for dshape, axis, ishape in [((3, 4), 0, (5, 4)), ((3, 4), 1, (3, 6)), ((2, 3, 4), -1, (2, 2, 3)),
                                 ((5,), 0, (7,)), ((2, 5, 3), 1, (1, 4, 3)), ((1, 1), 0, (1, 1))]:
        ax = axis % len(dshape)
        for dtype in [f32, np.int32]:
            data = (randn(*dshape) * 10).astype(dtype)
            idx = rng.integers(-dshape[ax], dshape[ax], ishape).astype(np.int64)
            ge = gather_elements_ref(data, idx, ax)
            write(out, f"gather_elements_{k}", "GatherElements", [("d", data), ("i", idx)], [("y", ge)],
                  {"axis": axis}, opset=13)
            upd = (randn(*ishape) * 10).astype(dtype)
            for red in ["none", "add", "mul", "max", "min"]:
                i2 = idx
                if red == "none":  # unique indices along the axis per line (duplicates are undefined)
                    line = [min(ishape[d], dshape[d]) for d in range(len(dshape))]
                    line[ax] = dshape[ax]
                    i2 = np.argsort(rng.random(line), axis=ax)
                    i2 = np.take(i2, np.arange(min(ishape[ax], dshape[ax])), axis=ax).astype(np.int64)
                    i2 = np.where(rng.random(i2.shape) < 0.5, i2 - dshape[ax], i2)
                    u2 = upd[tuple(slice(0, s) for s in i2.shape)]
                else:
                    u2 = upd
                y = scatter_elements_ref(data, i2, u2, ax, red)
                write(out, f"scatter_elements_{red}_{k}", "ScatterElements", [("d", data), ("i", i2), ("u", u2)],
                      [("y", y)], {"axis": axis, "reduction": red} if red != "none" else {"axis": axis}, opset=16)
            k += 1
    # ScatterND and GatherND
    k = 0
    for dshape, ishape in [((4, 5, 3), (6, 2)), ((4, 5, 3), (2, 3, 3)), ((7,), (4, 1)), ((3, 4), (5, 1)),
                           ((2, 3, 4), (2,))]:
        data = randn(*dshape)
        kk = ishape[-1]
        idx = np.stack([rng.integers(-dshape[j], dshape[j], ishape[:-1]) for j in range(kk)], -1).astype(np.int64)
        g = np.zeros(ishape[:-1] + dshape[kk:], f32)
        for pos in np.ndindex(ishape[:-1]):
            g[pos] = data[tuple(int(v) for v in idx[pos])]
        write(out, f"gather_nd_{k}", "GatherND", [("d", data), ("i", idx)], [("y", g)], opset=13)
        upd = randn(*(ishape[:-1] + dshape[kk:]))
        for red in ["add", "mul", "max", "min"]:
            y = data.copy()
            for pos in np.ndindex(ishape[:-1]):
                p = tuple(int(v) % dshape[j] for j, v in enumerate(idx[pos]))
                y[p] = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[red](y[p], upd[pos])
            write(out, f"scatter_nd_{red}_{k}", "ScatterND", [("d", data), ("i", idx), ("u", upd)], [("y", y)],
                  {"reduction": red}, opset=16)
        k += 1
    # GatherND with batch_dims = 1, int32 data
    data = rng.integers(-50, 50, (3, 4, 5)).astype(np.int32)
    idx = np.stack([rng.integers(-4, 4, (3, 2)), rng.integers(0, 5, (3, 2))], -1).astype(np.int64)
    g = np.array([[data[b][tuple(idx[b, j])] for j in range(2)] for b in range(3)], np.int32)
    write(out, "gather_nd_batch", "GatherND", [("d", data), ("i", idx)], [("y", g)], {"batch_dims": 1}, opset=13)
    # ScatterND without reduction, unique rows
    data = randn(5, 3)
    idx = np.array([[3], [-5], [2]], np.int64)
    upd = randn(3, 3)
    y = data.copy()
    y[[3, 0, 2]] = upd
    write(out, "scatter_nd_none", "ScatterND", [("d", data), ("i", idx), ("u", upd)], [("y", y)], opset=13)


# ---- CumSum, TopK, windows, LRN, DepthToSpace, ReverseSequence, MaxUnpool -----------------------
@case("misc")
def misc(out):
    k = 0
    for shape, axis in [((5,), 0), ((3, 4), 1), ((3, 4), -2), ((2, 1, 6), 2), ((1, 1), 0)]:
        for dtype in [f32, np.int32]:
            x = (randn(*shape) * 5).astype(dtype)
            for exclusive, reverse in itertools.product([0, 1], [0, 1]):
                v = np.flip(x, axis) if reverse else x
                c = np.cumsum(v, axis=axis, dtype=np.float64)
                if exclusive:
                    c = c - v
                y = (np.flip(c, axis) if reverse else c).astype(dtype)
                write(out, f"cumsum_{k}", "CumSum", [("x", x)], [("y", y)],
                      {"exclusive": exclusive, "reverse": reverse}, opset=14,
                      const_inputs=[("axis", np.array(axis, np.int64))])
                k += 1
    k = 0
    for shape, axis, kk in [((7,), 0, 3), ((3, 6), 1, 6), ((4, 5), 0, 2), ((2, 3, 5), -1, 1), ((3, 9), 1, 0)]:
        for largest in [1, 0]:
            x = rng.integers(0, 4, shape).astype(f32)  # many ties: the lower index first
            order = np.argsort(-x if largest else x, axis=axis, kind="stable")
            idx = np.take(order, np.arange(kk), axis=axis).astype(np.int64)
            val = np.take_along_axis(x, idx, axis)
            write(out, f"topk_{k}", "TopK", [("x", x)], [("v", val), ("i", idx)], {"axis": axis, "largest": largest},
                  opset=11, const_inputs=[("k", np.array([kk], np.int64))])
            k += 1
    for op, coeffs in [("HannWindow", (0.5, 0.5, 0)), ("HammingWindow", (25 / 46, 21 / 46, 0)),
                       ("BlackmanWindow", (0.42, 0.5, 0.08))]:
        for size in [1, 2, 7, 16]:
            for periodic in [1, 0]:
                nn = size if periodic else size - 1
                i = np.arange(size, dtype=np.float64)
                ph = 2 * np.pi * i / nn if nn > 0 else 0 * i
                y = (coeffs[0] - coeffs[1] * np.cos(ph) + coeffs[2] * np.cos(2 * ph)).astype(f32)
                write(out, f"{op}_{size}_{periodic}", op, [], [("y", y)], {"periodic": periodic}, opset=17,
                      const_inputs=[("size", np.array(size, np.int64))])
    for op, fn, lo, hi in [("Asinh", np.arcsinh, -30, 30), ("Acosh", np.arccosh, 1, 40),
                           ("Atanh", np.arctanh, -1, 1), ("Atan", np.arctan, -60, 60),
                           ("Asin", np.arcsin, -1, 1), ("Acos", np.arccos, -1, 1)]:
        x = np.concatenate([rng.uniform(lo, hi, 40), np.array(
            {"Asinh": [0, -0.0, 1e-6, -1e-4, 3e4, -1e9, 1e30], "Acosh": [1, 1 + 1e-6, 1.5, 1e5, 1e9, 1e30, 0.5],
             "Atanh": [0, 1e-6, -1e-4, 0.999, -0.9999, 1, -1],
             "Atan": [0, -0.0, 1e-30, 0.66, 0.6600001, 2.4142135, 2.4142137, -1e9, np.inf, -np.inf],
             "Asin": [0, 1e-7, -1, 1, 0.9999999, -0.99, 1.5],
             "Acos": [0, 1e-7, -1, 1, 0.9999999, -0.9999999, -1.5]}[op])]).astype(f32)
        with np.errstate(all="ignore"):  # NaN and inf outside the domain, as ONNX
            y64 = fn(x.astype(np.float64))
        write(out, f"{op}_values", op, [("x", x)], [("y", y64.astype(f32))], opset=13)
        write(out, f"{op}_values_f64", op, [("x", x.astype(np.float64))], [("y", y64)], opset=13)
    for shape, size in [((2, 5, 3, 2), 3), ((1, 4, 2), 2), ((2, 3, 1, 1), 5), ((1, 1, 2, 2), 1)]:
        x = randn(*shape)
        c = shape[1]
        sq = np.zeros_like(x, dtype=np.float64)
        for ch in range(c):
            lo, hi = max(0, ch - (size - 1) // 2), min(c - 1, ch + (size - 1 + 1) // 2)
            sq[:, ch] = (x[:, lo:hi + 1].astype(np.float64) ** 2).sum(1)
        y = (x / (2.0 + 1e-2 / size * sq) ** 0.6).astype(f32)
        write(out, f"lrn_{size}_{len(shape)}", "LRN", [("x", x)], [("y", y)],
              {"size": size, "alpha": 1e-2, "beta": 0.6, "bias": 2.0}, opset=13)
    for shape, b in [((1, 8, 2, 3), 2), ((2, 9, 1, 2), 3), ((1, 4, 3, 3), 1)]:
        x = randn(*shape)
        n_, c, h, w = shape
        for mode in ["DCR", "CRD"]:
            if mode == "DCR":
                y = x.reshape(n_, b, b, c // b // b, h, w).transpose(0, 3, 4, 1, 5, 2)
            else:
                y = x.reshape(n_, c // b // b, b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
            y = y.reshape(n_, c // b // b, h * b, w * b)
            write(out, f"d2s_{mode}_{b}", "DepthToSpace", [("x", x)], [("y", y)], {"blocksize": b, "mode": mode},
                  opset=13)
            if mode == "DCR":  # SpaceToDepth inverts DCR
                write(out, f"s2d_{b}", "SpaceToDepth", [("x", y)], [("y", x)], {"blocksize": b}, opset=13)
    for shape, time_axis, lens in [((5, 3, 2), 0, [5, 1, 3]), ((3, 6), 1, [6, 0, 2])]:
        x = randn(*shape)
        y = x.copy()
        for bi, ln in enumerate(lens):
            if time_axis == 0:
                y[:ln, bi] = x[:ln, bi][::-1]
            else:
                y[bi, :ln] = x[bi, :ln][::-1]
        write(out, f"reverse_sequence_{time_axis}", "ReverseSequence", [("x", x), ("l", np.array(lens, np.int64))],
              [("y", y)], {"time_axis": time_axis, "batch_axis": 1 - time_axis}, opset=10)
    # Shapes the pooling covers exactly: a larger output_shape pads (ONNX's test data), while
    # torch's max_unpool2d(output_size) indexes the larger plane.
    for shape, kern, stride in [((2, 3, 4, 6), 2, 2), ((1, 2, 5, 5), 3, 2), ((2, 1, 6, 4), 2, 1)]:
        x = torch.from_numpy(randn(*shape))
        p, ind = F.max_pool2d(x, kern, stride, return_indices=True)
        y = F.max_unpool2d(p, ind, kern, stride, output_size=x.shape[2:])
        plane = x.shape[2] * x.shape[3]
        onnx_ind = ind + torch.arange(shape[0] * shape[1]).reshape(shape[0], shape[1], 1, 1) * plane
        write(out, f"max_unpool_{kern}_{stride}_{shape[2]}", "MaxUnpool", [("x", p.numpy()), ("i", onnx_ind.numpy())],
              [("y", y.numpy())], {"kernel_shape": [kern, kern], "strides": [stride, stride]}, opset=11,
              const_inputs=[("s", np.array(shape, np.int64))])


# ---- Einsum against numpy ------------------------------------------------------------------
@case("einsum")
def einsum(out):
    k = 0
    for eq, shapes, dtype in [
        ("ij,jk->ik", [(3, 4), (4, 5)], f32), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 1)], f32),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)], f32), ("ii->i", [(4, 4)], f32), ("ii", [(3, 3)], f32),
        ("ij->", [(3, 5)], f32), ("i,i", [(6,), (6,)], f32), ("ij,kj->ik", [(3, 4), (5, 4)], f32),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)], f32), ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)], f32),
        ("ij,jk", [(2, 3), (3, 4)], np.int32), ("ij,ij->ij", [(3, 4), (3, 4)], np.int32), ("i,j->ij", [(3,), (4,)], f32),
        ("bii->bi", [(2, 3, 3)], f32), ("ji", [(3, 4)], f32), ("...i->...", [(2, 3, 4)], f32),
        ("iij,jk->ik", [(3, 3, 2), (2, 4)], f32)]:
        ins = [(f"x{i}", (randn(*s) * 3).astype(dtype)) for i, s in enumerate(shapes)]
        y = np.einsum(eq, *[a.astype(np.float64) for _, a in ins]).astype(dtype)
        write(out, f"einsum_{k}", "Einsum", ins, [("y", np.asarray(y))], {"equation": eq}, opset=12)
        k += 1


# ---- Attention (opset 23) against numpy loops written from the spec ----------------------------
def attention_ref(q, k, v, mask=None, past_k=None, past_v=None, causal=False, scale=None, qh=None,
                  kvh=None, softcap=0.0):
    """ONNX Attention in float64 (onnx/defs/nn/defs.cpp, opset 23): returns Y, present_key,
    present_value, and the scaled scores and the softmax (qk_matmul_output modes 0 and 3)."""
    three = q.ndim == 3
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    if three:
        split = lambda a, h: a.reshape(a.shape[0], a.shape[1], h, -1).transpose(0, 2, 1, 3)
        q, k, v = split(q, qh), split(k, kvh), split(v, kvh)
    if past_k is not None:
        k = np.concatenate([past_k.astype(np.float64), k], 2)
        v = np.concatenate([past_v.astype(np.float64), v], 2)
    present_k, present_v = k, v
    past = 0 if past_k is None else past_k.shape[2]
    b, h, tq, d = q.shape
    tk = k.shape[2]
    scale = 1 / np.sqrt(d) if scale is None else scale
    kx, vx = np.repeat(k, h // k.shape[1], axis=1), np.repeat(v, h // v.shape[1], axis=1)
    s = np.einsum("bhqd,bhkd->bhqk", q, kx) * scale
    qk = s.copy()
    if softcap:
        s = softcap * np.tanh(s / softcap)
    if mask is not None:  # a mask shorter along the keys: padded with false / -inf
        pad = tk - mask.shape[-1]
        if pad:
            fill = np.zeros(mask.shape[:-1] + (pad,), mask.dtype)
            fill[...] = False if mask.dtype == np.bool_ else -np.inf
            mask = np.concatenate([mask, fill], -1)
        s = np.where(mask, s, -np.inf) if mask.dtype == np.bool_ else s + mask.astype(np.float64)
    if causal:  # query i sees keys j <= i + past
        i, j = np.arange(tq)[:, None], np.arange(tk)[None, :]
        s = np.where(j <= i + past, s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    p = e / e.sum(-1, keepdims=True)
    y = np.einsum("bhqk,bhkd->bhqd", p, vx)
    if three:
        y = y.transpose(0, 2, 1, 3).reshape(b, tq, -1)
    return y, present_k, present_v, qk, p


def write_attention(out, name, inputs, outputs, attrs, dtype=f32):
    """inputs: [(name or "", array or None)] in the op's order (optional ones ""); outputs:
    [(name or "", array)]; the node in the default domain at opset 23 (no schema check: Debian's
    onnx has none)."""
    d = os.path.join(out, name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    node = helper.make_node("Attention", [n for n, _ in inputs], [n for n, _ in outputs], **attrs)
    cast = lambda a: a if a.dtype == np.bool_ else a.astype(dtype)  # noqa: E731
    ins = [(n, cast(a)) for n, a in inputs if n]
    outs = [(n, a.astype(dtype)) for n, a in outputs if n]
    vi = lambda n, a: helper.make_tensor_value_info(  # noqa: E731
        n, onnx.mapping.NP_TYPE_TO_TENSOR_TYPE[np.dtype(a.dtype)], a.shape)
    g = helper.make_graph([node], name, [vi(n, a) for n, a in ins], [vi(n, a) for n, a in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 8
    onnx.save(m, os.path.join(d, "model.onnx"))
    for k, (_, a) in enumerate(ins):
        with open(os.path.join(d, "test_data_set_0", f"input_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())
    for k, (_, a) in enumerate(outs):
        with open(os.path.join(d, "test_data_set_0", f"output_{k}.pb"), "wb") as f:
            f.write(numpy_helper.from_array(a).SerializeToString())


@case("attention")
def attention(out):
    k = 0
    # (B, H, Hkv, Tq, Tk, D, Dv, past, 3-D, causal, mask, extra attributes, dtype)
    for b, h, hkv, tq, tk, d, dv, past, three, causal, mask, extra, dt in [
        (2, 4, 4, 7, 7, 16, 16, 0, False, False, None, {}, f32),
        (1, 4, 2, 7, 7, 16, 16, 0, False, True, None, {}, f32),           # GQA, causal square
        (2, 2, 2, 5, 9, 8, 8, 0, False, True, None, {}, f32),             # causal, Tq < Tk: top-left
        (1, 2, 2, 9, 4, 8, 8, 0, False, True, None, {}, f32),             # causal, Tq > Tk
        (2, 6, 2, 5, 11, 16, 24, 0, True, False, "float", {}, f32),       # 3-D, GQA, Dv != D
        (2, 4, 1, 6, 6, 8, 8, 0, True, True, "bool", {}, f32),            # 3-D, MQA, causal + bool
        (1, 4, 2, 8, 8, 16, 16, 0, False, False, "bool4", {}, f32),       # bool [B, 1, Tq, Tk]
        (2, 4, 2, 1, 1, 16, 16, 9, False, True, None, {}, f32),           # decoding: past 9, Tq 1
        (1, 4, 4, 3, 3, 16, 16, 5, False, True, "bool_new", {}, f32),     # past, mask of new keys
        (1, 2, 2, 3, 3, 16, 16, 4, True, False, "float", {}, f32),        # 3-D with past
        (2, 2, 2, 7, 7, 16, 16, 0, False, False, None, {"scale": 0.3}, f32),
        (1, 2, 2, 7, 9, 16, 16, 0, False, True, "float", {"softcap": 2.0}, f32),  # written out
        (1, 4, 2, 5, 6, 16, 16, 0, False, False, "float", {"qk_matmul_output_mode": 3}, f32),
        (1, 2, 2, 5, 6, 16, 16, 0, False, False, None, {"qk_matmul_output_mode": 0}, f32),
        (1, 4, 2, 7, 7, 16, 16, 0, False, True, None, {"softmax_precision": 1}, np.float16),
        (1, 2, 2, 6, 6, 16, 16, 2, False, True, "float", {}, np.float64),
    ]:
        q = randn(b, h, tq, d)
        kk = randn(b, hkv, tk, d)
        vv = randn(b, hkv, tk, dv)
        pk = randn(b, hkv, past, d) if past else None
        pv = randn(b, hkv, past, dv) if past else None
        total = tk + past
        m = None
        if mask == "float":
            m = randn(1, h, tq, total) if not three else randn(tq, total)
        elif mask in ("bool", "bool4"):
            m = rng.random((b, 1, tq, total) if mask == "bool4" else (tq, total)) > 0.3
            m[..., 0] = True  # every row sees a key
        elif mask == "bool_new":  # the new keys only: padded with false up to past + Tk
            m = rng.random((tq, tk - 1)) > 0.3
            m[..., 0] = True
        attrs = dict(extra, is_causal=int(causal))
        q_in, k_in, v_in = q, kk, vv
        if three:
            attrs.update(q_num_heads=h, kv_num_heads=hkv)
            flat = lambda a: a.transpose(0, 2, 1, 3).reshape(a.shape[0], a.shape[2], -1)  # noqa
            q_in, k_in, v_in = flat(q), flat(kk), flat(vv)
        # the reference sees what the node sees (rounded to the dtype)
        rd = lambda a: None if a is None else a if a.dtype == np.bool_ else a.astype(dt)  # noqa
        y, pk_out, pv_out, qk, p = attention_ref(
            rd(q_in), rd(k_in), rd(v_in), rd(m), rd(pk), rd(pv), causal, extra.get("scale"),
            h if three else None, hkv if three else None, extra.get("softcap", 0.0))
        ins = [("q", q_in), ("k", k_in), ("v", v_in), ("m" if m is not None else "", m),
               ("pk" if past else "", pk), ("pv" if past else "", pv)]
        while ins and not ins[-1][0]:
            ins.pop()
        outs = [("y", y), ("present_k" if past else "", pk_out), ("present_v" if past else "", pv_out)]
        if "qk_matmul_output_mode" in extra:
            outs.append(("qk", qk if extra["qk_matmul_output_mode"] == 0 else p))
        while outs and not outs[-1][0]:
            outs.pop()
        write_attention(out, f"attention_{k}", ins, outs, attrs, dt)
        k += 1


if __name__ == "__main__":
    import onnx_op_cases_windows  # the families pool3d and integer
    CASES.update(onnx_op_cases_windows.CASES)
    import onnx_op_cases_static  # the families tfidf, training, roialign, dft
    CASES.update(onnx_op_cases_static.CASES)
    out, family = sys.argv[1], sys.argv[2]
    for fn in CASES[family]:
        fn(out)
