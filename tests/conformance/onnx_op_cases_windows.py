"""onnx_op_cases.py's families "pool3d" (3-D MaxPool and AveragePool) and "integer"
(MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv). The expected outputs come from numpy
loops written from the ONNX spec (pool_ref; checked against torch's pools where torch has the
same padding), and from exact int64 / float64 products for the integer ops."""
import itertools

import numpy as np
import torch
import torch.nn.functional as F

from onnx_op_cases import write

rng = np.random.default_rng(2027)
f32 = np.float32
CASES = {}


def case(family):
    def reg(fn):
        CASES.setdefault(family, []).append(fn)
        return fn
    return reg


# ---- pools -----------------------------------------------------------------------------------
def pool_out_size(size, k, s, pb, pe, dil, ceil):
    """torch's (and ONNX Runtime's) output size: in ceil mode the last window must start inside
    the input or the left padding."""
    num = size + pb + pe - (dil * (k - 1) + 1)
    o = (num + (s - 1 if ceil else 0)) // s + 1
    if ceil and (o - 1) * s >= size + pb:
        o -= 1
    return o


def pool_ref(x, is_max, kernel, strides, pads, dil, ceil, include_pad):
    """The pool of x [N, C, *spatial] straight from the definition: per output position the taps
    start + j * dilation of each dim; max over the taps inside the input (-inf if none); the
    average divides their sum by their count, or with include_pad by the count of taps inside the
    padded input (torch's window clipped to the padded size)."""
    dims = len(kernel)
    sp = x.shape[2:]
    outs = [pool_out_size(sp[d], kernel[d], strides[d], pads[d], pads[dims + d], dil[d], ceil)
            for d in range(dims)]
    y = np.zeros(x.shape[:2] + tuple(outs), np.float64)
    xd = x.astype(np.float64)
    for o in itertools.product(*[range(v) for v in outs]):
        inside, padded = [], 1
        for d in range(dims):
            start = o[d] * strides[d] - pads[d]
            taps = [start + j * dil[d] for j in range(kernel[d])]
            inside.append([t for t in taps if 0 <= t < sp[d]])
            padded *= len([t for t in taps if t < sp[d] + pads[dims + d]])
        sel = (slice(None), slice(None)) + o
        if any(not v for v in inside):
            y[sel] = -np.inf if is_max else 0.0
            continue
        w = xd[(slice(None), slice(None)) + np.ix_(*inside)].reshape(x.shape[0], x.shape[1], -1)
        if is_max:
            y[sel] = w.max(axis=2)
        else:
            count = padded if include_pad else w.shape[2]
            y[sel] = w.sum(axis=2) / count
    return y


def same_pads(sizes, kernel, strides, dil, upper):
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dil):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begin.append(small if upper else large)
        end.append(large if upper else small)
    return begin + end


@case("pool3d")
def pool3d(out):
    # (shape, kernel, strides, pads (begin d h w, end d h w), dilations, ceil, auto_pad)
    configs = [
        ((1, 1, 4, 4, 4), (2, 2, 2), (1, 1, 1), (0, 0, 0, 0, 0, 0), (1, 1, 1), 0, None),
        ((2, 3, 5, 7, 6), (2, 3, 2), (1, 2, 1), (1, 1, 0, 1, 1, 0), (1, 1, 1), 0, None),
        ((1, 2, 7, 5, 9), (3, 1, 2), (2, 2, 3), (1, 0, 1, 1, 0, 1), (1, 1, 1), 1, None),
        ((2, 2, 6, 5, 5), (3, 3, 3), (2, 2, 2), (0, 1, 1, 1, 0, 1), (1, 1, 1), 1, None),   # asymmetric
        ((1, 3, 5, 6, 7), (2, 2, 3), (3, 2, 2), (1, 0, 2, 0, 1, 1), (1, 1, 1), 0, None),   # over half
        ((1, 2, 8, 7, 6), (2, 3, 2), (1, 1, 2), (0, 0, 0, 0, 0, 0), (2, 1, 2), 0, None),   # dilated
        ((1, 2, 9, 8, 7), (3, 2, 2), (2, 3, 1), (1, 1, 0, 1, 0, 1), (2, 2, 1), 1, None),
        ((2, 1, 5, 6, 7), (3, 2, 4), (2, 2, 3), None, (1, 1, 1), 0, "SAME_UPPER"),
        ((1, 2, 6, 5, 4), (2, 3, 3), (1, 2, 2), None, (1, 1, 1), 0, "SAME_LOWER"),
        ((1, 2, 5, 5, 5), (3, 2, 2), (2, 2, 1), None, (1, 1, 1), 0, "VALID"),
    ]
    k = 0
    for shape, kernel, strides, pads, dil, ceil, auto_pad in configs:
        x = rng.standard_normal(shape).astype(f32)
        eff = pads
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            eff = same_pads(shape[2:], kernel, strides, dil, auto_pad == "SAME_UPPER")
        elif auto_pad == "VALID":
            eff = (0,) * 6
        for op, include in [("MaxPool", 0), ("AveragePool", 0), ("AveragePool", 1)]:
            if op == "AveragePool" and dil != (1, 1, 1):
                continue  # opset-19 AveragePool only
            y = pool_ref(x, op == "MaxPool", kernel, strides, eff, dil, ceil, include)
            # Where torch pads alike (symmetric, at most half the kernel), it must agree.
            sym = eff[:3] == eff[3:] and all(p <= kk // 2 for p, kk in zip(eff[:3], kernel))
            if sym:
                xt = torch.from_numpy(x).double()
                if op == "MaxPool":
                    t = F.max_pool3d(xt, kernel, strides, eff[:3], dil, bool(ceil))
                else:
                    t = F.avg_pool3d(xt, kernel, strides, eff[:3], bool(ceil), bool(include))
                assert np.allclose(t.numpy(), y), (op, shape, kernel)
            attrs = {"kernel_shape": list(kernel), "strides": list(strides), "ceil_mode": ceil}
            if auto_pad:
                attrs["auto_pad"] = auto_pad
            else:
                attrs["pads"] = list(pads)
            if op == "MaxPool":
                attrs["dilations"] = list(dil)
            else:
                attrs["count_include_pad"] = include
            write(out, f"pool3d_{k}_{op}_{include}", op, [("x", x)], [("y", y.astype(f32))], attrs,
                  opset=12 if op == "MaxPool" else 11)
        k += 1
    # 2-D in ceil mode with explicit (asymmetric) padding: a last window that would start in the
    # right padding is dropped, as with the op's own padding.
    for shape, kernel, strides, pads in [((1, 2, 7, 6), (3, 2), (2, 2), (0, 0, 2, 1)),
                                         ((2, 1, 5, 8), (2, 3), (3, 2), (0, 1, 1, 2))]:
        x = rng.standard_normal(shape).astype(f32)
        for op, include in [("MaxPool", 0), ("AveragePool", 0), ("AveragePool", 1)]:
            y = pool_ref(x, op == "MaxPool", kernel, strides, pads, (1, 1), 1, include)
            attrs = {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
                     "ceil_mode": 1}
            if op == "AveragePool":
                attrs["count_include_pad"] = include
            write(out, f"pool2d_ceil_{k}_{op}_{include}", op, [("x", x)], [("y", y.astype(f32))],
                  attrs, opset=12 if op == "MaxPool" else 11)
        k += 1
    # 8-bit max pools: padding is the dtype's lowest value, which never wins.
    for dt, lo, hi in [(np.uint8, 0, 256), (np.int8, -128, 128)]:
        x = rng.integers(lo, hi, (1, 2, 5, 4, 6)).astype(dt)
        kernel, strides, pads = (2, 3, 2), (2, 1, 2), (1, 1, 0, 0, 1, 1)
        y = pool_ref(x, True, kernel, strides, pads, (1, 1, 1), 1, 0).astype(dt)
        write(out, f"pool3d_{np.dtype(dt).name}", "MaxPool", [("x", x)], [("y", y)],
              {"kernel_shape": list(kernel), "strides": list(strides), "pads": list(pads),
               "ceil_mode": 1}, opset=12)


# ---- integer products ------------------------------------------------------------------------
def ints(dt, shape):
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max + 1, shape).astype(dt)


def requant(acc, a_scale, b_scale, y_scale, y_zp):
    """QuantizeLinear of acc * a_scale * b_scale, in f32 in that order (as the mapping), rounding
    half to even, saturated to y_zp's dtype."""
    real = (acc.astype(f32) * a_scale.astype(f32)) * b_scale.astype(f32)
    q = np.rint(real / y_scale.astype(f32)) + y_zp.astype(f32)
    info = np.iinfo(y_zp.dtype)
    return np.clip(q, info.min, info.max).astype(y_zp.dtype)


def conv_ref(x, w, stride, pads, dil, group):
    """The exact integer convolution (float64 sums of products below 2^53), as int64. 1-D as 2-D."""
    one_d = x.ndim == 3
    xt, wt = torch.from_numpy(x.astype(np.float64)), torch.from_numpy(w.astype(np.float64))
    if one_d:
        xt, wt = xt.unsqueeze(-1), wt.unsqueeze(-1)
        stride, dil = list(stride) + [1], list(dil) + [1]
        pads = [pads[0], 0, pads[1], 0]
    xt = F.pad(xt, (pads[1], pads[3], pads[0], pads[2]))
    y = F.conv2d(xt, wt, None, stride, 0, dil, group)
    if one_d:
        y = y.squeeze(-1)
    return np.rint(y.numpy()).astype(np.int64)


@case("integer")
def integer(out):
    u8, i8 = np.uint8, np.int8
    # MatMulInteger: (A shape, B shape, dtypes, zero point shapes: None, "t" (one element),
    # "row"/"col" (1-D), "nd" (MatMulInteger's N-D form)), B constant or not.
    k = 0
    for sa, sb, (da, db), (za, zb), const_b in [
        ((4, 3), (3, 2), (u8, u8), ("t", "t"), False),
        ((5, 7), (7, 3), (u8, i8), ("row", "col"), False),
        ((2, 5, 7), (7, 4), (i8, u8), ("t", "col"), True),
        ((2, 1, 3, 6), (4, 6, 2), (u8, u8), ("nd", "nd"), False),
        ((7,), (7, 3), (i8, i8), (None, "col"), False),
        ((3, 9), (9,), (u8, i8), ("row", None), False),
        ((3, 600), (600, 5), (u8, i8), ("t", "t"), True),    # 255 * sum|b - zp| < 2^24: one product
        ((3, 700), (700, 4), (u8, u8), ("t", "t"), False),   # 700 * 255^2 > 2^24: chunks of K
        ((2, 1300), (1300, 3), (i8, u8), (None, "col"), False),
    ]:
        a, b = ints(da, sa), ints(db, sb)
        if const_b:  # small weights: the import's bound from B's values allows one f32 product
            b = rng.integers(-20, 21, sb).astype(db)
        M = sa[-2] if len(sa) > 1 else 1
        N = sb[-1] if len(sb) > 1 else 1
        zshape = {"t": (1,), "row": (M,), "col": (N,)}
        azp = bzp = None
        if za:
            azp = ints(da, zshape.get(za) or sa[:-1] + (1,))
        if zb:
            bzp = ints(db, zshape.get(zb) or sb[:-2] + (1, sb[-1]))
            if const_b:
                bzp = rng.integers(-10, 11, bzp.shape).astype(db)
        az = 0 if azp is None else (azp.reshape(M, 1) if za == "row" else azp).astype(np.int64)
        bz = 0 if bzp is None else bzp.astype(np.int64)
        y = np.matmul(a.astype(np.int64) - az, b.astype(np.int64) - bz).astype(np.int32)
        ins = [("A", a)] + ([] if const_b else [("B", b)])
        consts = [("B", b)] if const_b else []
        names = ["A", "B", "a_zp" if za else "", "b_zp" if zb else ""]
        if za:
            ins.append(("a_zp", azp))
        if zb:
            (consts if const_b else ins).append(("b_zp", bzp))
        while not names[-1]:
            names.pop()
        write(out, f"matmulinteger_{k}", ("MatMulInteger", names), ins, [("Y", y)],
              opset=10, const_inputs=consts)
        k += 1
    # QLinearMatMul: per-tensor and per-row / per-column scales and zero points.
    k = 0
    # per: scales and zero points per row of A (and of the result) and per column of B; "rows":
    # per row only, B 1-D (the result's rows are its last dim).
    for sa, sb, (da, db, dy), per in [
        ((2, 4), (4, 3), (u8, u8, u8), False),
        ((3, 5, 6), (6, 4), (i8, i8, i8), False),
        ((5, 7), (7, 3), (u8, i8, u8), True),
        ((2, 4, 9), (2, 9, 5), (i8, u8, i8), True),
        ((5, 7), (7,), (u8, u8, u8), "rows"),
    ]:
        a, b = ints(da, sa), ints(db, sb)
        M, N = sa[-2], sb[-1]
        cols = per is True
        a_s = rng.uniform(0.01, 0.05, (M,) if per else ()).astype(f32)
        b_s = rng.uniform(0.01, 0.05, (N,) if cols else ()).astype(f32)
        y_s = rng.uniform(0.5, 2.0, (M,) if per else ()).astype(f32)
        a_z = ints(da, (M,) if per else ())
        b_z = ints(db, (N,) if cols else ())
        y_z = ints(dy, (M,) if per else ())
        row = (lambda v: v.reshape(M, 1)) if per else (lambda v: v)
        yrow = row if len(sb) > 1 else (lambda v: v)
        acc = np.matmul(a.astype(np.int64) - row(a_z).astype(np.int64), b.astype(np.int64) - b_z)
        y = requant(acc, yrow(a_s), b_s, yrow(y_s), yrow(y_z))
        ins = [("a", a), ("a_scale", a_s), ("a_zp", a_z), ("b", b), ("b_scale", b_s), ("b_zp", b_z),
               ("y_scale", y_s), ("y_zp", y_z)]
        write(out, f"qlinearmatmul_{k}", "QLinearMatMul", ins, [("y", y)], opset=10)
        k += 1
    # ConvInteger and QLinearConv: strides, pads (asymmetric too), dilations, groups, 1-D, a
    # per-channel weight zero point and scale, a bias.
    k = 0
    for xs, ws, group, stride, pads, dil, (dx, dw, dy), per in [
        ((1, 1, 5, 5), (1, 1, 3, 3), 1, (1, 1), (0, 0, 0, 0), (1, 1), (u8, u8, u8), False),
        ((2, 3, 7, 6), (4, 3, 3, 2), 1, (2, 1), (1, 0, 1, 1), (1, 1), (u8, i8, u8), True),
        ((1, 4, 6, 7), (6, 2, 2, 3), 2, (1, 2), (1, 1, 1, 1), (2, 1), (i8, i8, i8), True),
        ((2, 2, 9), (3, 2, 4), 1, (2,), (2, 1), (1,), (u8, u8, i8), False),
        ((1, 16, 9, 9), (8, 16, 4, 4), 1, (1, 1), (2, 1, 1, 2), (1, 1), (u8, i8, u8), True),  # K 256
    ]:
        x, w = ints(dx, xs), ints(dw, ws)
        M = ws[0]
        x_z = ints(dx, ())
        w_z = ints(dw, (M,) if per else ())
        wz = w_z.reshape((M,) + (1,) * (len(ws) - 1)) if per else w_z
        acc = conv_ref(x.astype(np.int64) - x_z, w.astype(np.int64) - wz, list(stride), list(pads),
                       list(dil), group)
        attrs = {"strides": list(stride), "pads": list(pads), "dilations": list(dil), "group": group}
        write(out, f"convinteger_{k}", "ConvInteger",
              [("x", x), ("w", w), ("x_zp", x_z), ("w_zp", w_z)], [("y", acc.astype(np.int32))],
              attrs, opset=10)
        x_s = np.array(rng.uniform(0.01, 0.05), f32)
        w_s = rng.uniform(0.01, 0.05, (M,) if per else ()).astype(f32)
        y_s = np.array(rng.uniform(1.0, 4.0), f32)
        y_z = ints(dy, ())
        bias = rng.integers(-3000, 3000, (M,)).astype(np.int32)
        chan = (M,) + (1,) * (len(xs) - 2)
        acc_b = acc + bias.reshape(chan)
        y = requant(acc_b, x_s, w_s.reshape(chan) if per else w_s, y_s, y_z)
        ins = [("x", x), ("x_scale", x_s), ("x_zp", x_z), ("w", w), ("w_scale", w_s), ("w_zp", w_z),
               ("y_scale", y_s), ("y_zp", y_z), ("B", bias)]
        write(out, f"qlinearconv_{k}", "QLinearConv", ins, [("y", y)], attrs, opset=10)
        k += 1


@case("integer")
def bitshift(out):
    """BitShift of uint8: shifts of 0 to 10 (8 and more give 0), broadcast operands; of uint16,
    uint32 and uint64 over their whole range."""
    for k, (sx, sy) in enumerate([((3, 4), (3, 4)), ((2, 3, 5), (5,)), ((4, 1), (1, 6)), ((), (7,))]):
        x = rng.integers(0, 256, sx).astype(np.uint8)
        y = rng.integers(0, 11, sy).astype(np.uint8)
        xi, yi = x.astype(np.int64), np.minimum(y.astype(np.int64), 8)
        for d, ref in [("LEFT", (xi << yi) & 255), ("RIGHT", xi >> yi)]:
            write(out, f"bitshift_{k}_{d}", "BitShift", [("x", x), ("y", y)],
                  [("z", np.asarray(ref).astype(np.uint8))], {"direction": d}, opset=11)
    # uint16/32/64: values over the whole range (u64 beyond 2^53 and 2^63, where f64 alone is
    # not exact), every shift from 0 to the width + 2 (the width and more give 0).
    for t in (np.uint16, np.uint32, np.uint64):
        bits = np.iinfo(t).bits
        x = np.concatenate([rng.integers(0, np.iinfo(t).max, 40, dtype=t, endpoint=True),
                            np.array([np.iinfo(t).max, 1, 0, np.iinfo(t).max - 1], dtype=t)])
        y = (np.arange(x.size) % (bits + 3)).astype(t)
        for d in ("LEFT", "RIGHT"):
            ref = [0 if int(b) >= bits else
                   ((int(a) << int(b)) % (1 << bits) if d == "LEFT" else int(a) >> int(b))
                   for a, b in zip(x, y)]
            write(out, f"bitshift_{t.__name__}_{d}", "BitShift", [("x", x), ("y", y)],
                  [("z", np.array(ref, dtype=t))], {"direction": d}, opset=11)


def argmax_ref(x, kernel, strides, pads, dil, ceil, storage_order):
    """MaxPool's Y and Indices of a 2-D x from the definition: the first maximum in the window's
    scan order (h, then w; a later tap replaces it only when greater, as ONNX Runtime), its flat
    index into x, row-major or (storage_order 1) column-major over H and W."""
    N, C, H, W = x.shape
    outs = [pool_out_size(x.shape[2 + d], kernel[d], strides[d], pads[d], pads[2 + d], dil[d], ceil)
            for d in range(2)]
    y = np.zeros((N, C, *outs), x.dtype)
    idx = np.zeros((N, C, *outs), np.int64)
    for n, c, oh, ow in itertools.product(range(N), range(C), range(outs[0]), range(outs[1])):
        best, where = None, -1
        for i, j in itertools.product(range(kernel[0]), range(kernel[1])):
            h = oh * strides[0] + i * dil[0] - pads[0]
            w = ow * strides[1] + j * dil[1] - pads[1]
            if 0 <= h < H and 0 <= w < W and (best is None or x[n, c, h, w] > best):
                best = x[n, c, h, w]
                local = h * W + w if storage_order == 0 else w * H + h
                where = (n * C + c) * H * W + local
        y[n, c, oh, ow], idx[n, c, oh, ow] = best, where
    return y, idx


@case("pool3d")
def maxpool_indices(out):
    """MaxPool's Indices output: ties (small integers as floats), padding, ceil mode, strides,
    dilations, both storage orders, uint8, and a 1-D window (W of 1)."""
    for k, (shape, kernel, strides, pads, dil, ceil, dt) in enumerate([
            ((1, 1, 5, 5), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 0, f32),
            ((2, 3, 6, 7), (2, 3), (2, 2), (0, 1, 1, 1), (1, 1), 1, f32),
            ((1, 2, 7, 6), (3, 2), (2, 1), (1, 0, 1, 1), (2, 2), 0, f32),
            ((2, 2, 5, 4), (2, 2), (1, 2), (1, 1, 0, 0), (1, 1), 1, np.uint8),
            ((1, 2, 9, 1), (3, 1), (2, 1), (1, 0, 1, 0), (1, 1), 0, f32)]):
        x = rng.integers(0, 4, shape).astype(dt)
        for order in (0, 1):
            y, idx = argmax_ref(x, kernel, strides, pads, dil, ceil, order)
            one_d = shape[3] == 1 and kernel[1] == 1
            xin, yo, io = (x[..., 0], y[..., 0], idx) if one_d else (x, y, idx)
            attrs = {"kernel_shape": list(kernel[:1] if one_d else kernel),
                     "strides": list(strides[:1] if one_d else strides),
                     "pads": [pads[0], pads[2]] if one_d else list(pads),
                     "dilations": list(dil[:1] if one_d else dil), "ceil_mode": ceil,
                     "storage_order": order}
            if one_d:
                io = idx[..., 0]  # W is 1: the flat index is the same in both orders
            write(out, f"maxpool_indices_{k}_{order}", "MaxPool", [("x", xin)],
                  [("y", yo), ("i", io)], attrs, opset=12)


# ---- MelWeightMatrix: ONNX's reference (onnx/backend/test/case/node/melweightmatrix.py) ------
def mel_ref(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz):
    num_spectrogram_bins = dft_length // 2 + 1
    frequency_bins = np.arange(0, num_mel_bins + 2)
    low_frequency_mel = 2595 * np.log10(1 + lower_edge_hertz / 700)
    high_frequency_mel = 2595 * np.log10(1 + upper_edge_hertz / 700)
    mel_step = (high_frequency_mel - low_frequency_mel) / frequency_bins.shape[0]
    frequency_bins = frequency_bins * mel_step + low_frequency_mel
    frequency_bins = 700 * (np.power(10, (frequency_bins / 2595)) - 1)
    frequency_bins = ((dft_length + 1) * frequency_bins) // sample_rate
    frequency_bins = frequency_bins.astype(int)
    output = np.zeros((num_spectrogram_bins, num_mel_bins))
    for i in range(num_mel_bins):
        left, center, right = frequency_bins[i], frequency_bins[i + 1], frequency_bins[i + 2]
        if center == left:
            output[center, i] = 1
        else:
            for j in range(left, center + 1):
                output[j, i] = float(j - left) / float(center - left)
        if right > center:
            for j in range(center, right):
                output[j, i] = float(right - j) / float(right - center)
    return output.astype(f32)


@case("integer")
def mel_weight_matrix(out):
    """MelWeightMatrix (its scalar inputs are bound as constants by the runner)."""
    for k, (bins, dft, rate, lo, hi) in enumerate([(8, 16, 8192, 0.0, 4096.0),
                                                   (10, 64, 16000, 20.0, 8000.0),
                                                   (5, 33, 22050, 300.5, 9000.0)]):
        args = [np.int32(bins), np.int32(dft), np.int32(rate), np.float32(lo), np.float32(hi)]
        names = ["num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz"]
        write(out, f"melweightmatrix_{k}", "MelWeightMatrix",
              [(nm, np.array(a)) for nm, a in zip(names, args)], [("output", mel_ref(*args))],
              opset=17)


@case("pool3d")
def conv3d(out):
    """3-D Conv (a sum of 2-D convolutions over the depth taps) against torch's conv3d: strides,
    dilations, groups, asymmetric pads (explicit zeros before torch's symmetric conv), auto_pad,
    a bias; and a 3-D ConvInteger (exact float64 products)."""
    for k, (xs, ws, group, stride, pads, dil, bias, auto_pad) in enumerate([
            ((1, 2, 5, 6, 7), (3, 2, 2, 3, 2), 1, (1, 1, 1), (0, 0, 0, 0, 0, 0), (1, 1, 1), True, None),
            ((2, 4, 7, 5, 6), (6, 2, 3, 2, 3), 2, (2, 1, 2), (1, 0, 2, 2, 1, 0), (1, 2, 1), False, None),
            ((1, 3, 6, 6, 5), (2, 3, 2, 2, 2), 1, (1, 2, 1), (1, 1, 1, 0, 1, 1), (2, 1, 1), True, None),
            ((1, 2, 5, 7, 6), (4, 2, 3, 3, 2), 1, (2, 2, 1), None, (1, 1, 1), True, "SAME_UPPER")]):
        x = rng.standard_normal(xs).astype(f32)
        w = rng.standard_normal(ws).astype(f32)
        b = rng.standard_normal(ws[0]).astype(f32)
        eff = pads
        if auto_pad:
            eff = same_pads(xs[2:], ws[2:], stride, dil, auto_pad == "SAME_UPPER")
        xt = F.pad(torch.from_numpy(x).double(), (eff[2], eff[5], eff[1], eff[4], eff[0], eff[3]))
        y = F.conv3d(xt, torch.from_numpy(w).double(), torch.from_numpy(b).double() if bias else None,
                     stride, 0, dil, group).numpy().astype(f32)
        attrs = {"strides": list(stride), "dilations": list(dil), "group": group}
        if auto_pad:
            attrs["auto_pad"] = auto_pad
        else:
            attrs["pads"] = list(pads)
        ins = [("x", x), ("w", w)] + ([("b", b)] if bias else [])
        write(out, f"conv3d_{k}", "Conv", ins, [("y", y)], attrs, opset=11)
    x, w = ints(np.uint8, (1, 2, 4, 5, 5)), ints(np.int8, (3, 2, 2, 3, 2))
    xz, wz = ints(np.uint8, ()), ints(np.int8, ())
    xt = torch.from_numpy(x.astype(np.float64) - float(xz))
    wt = torch.from_numpy(w.astype(np.float64) - float(wz))
    y = np.rint(F.conv3d(F.pad(xt, (1, 0, 1, 1, 1, 0)), wt).numpy()).astype(np.int32)
    write(out, "convinteger_3d", "ConvInteger", [("x", x), ("w", w), ("xz", xz), ("wz", wz)],
          [("y", y)], {"pads": [1, 1, 1, 0, 1, 0]}, opset=10)


@case("pool3d")
def conv_transpose3d(out):
    """3-D ConvTranspose (a 3-D convolution of the zero-interleaved input) against torch's
    conv_transpose3d: strides, pads, output_padding, groups, dilations, a bias."""
    for k, (xs, cout, g, ks, stride, pad, opad, dil, bias) in enumerate([
            ((1, 2, 3, 4, 3), 3, 1, (2, 3, 2), (1, 1, 1), (0, 0, 0), (0, 0, 0), (1, 1, 1), True),
            ((2, 4, 3, 2, 4), 6, 2, (3, 2, 2), (2, 3, 1), (1, 0, 1), (1, 2, 0), (1, 1, 2), False),
            ((1, 3, 2, 3, 3), 2, 1, (2, 2, 3), (2, 1, 2), (0, 1, 1), (0, 0, 1), (2, 1, 1), True)]):
        x = rng.standard_normal(xs).astype(f32)
        w = rng.standard_normal((xs[1], cout // g) + ks).astype(f32)
        b = rng.standard_normal(cout).astype(f32)
        y = F.conv_transpose3d(torch.from_numpy(x).double(), torch.from_numpy(w).double(),
                               torch.from_numpy(b).double() if bias else None, stride, pad, opad,
                               g, dil).numpy().astype(f32)
        attrs = {"strides": list(stride), "pads": list(pad) + list(pad),
                 "output_padding": list(opad), "dilations": list(dil), "group": g}
        ins = [("x", x), ("w", w)] + ([("b", b)] if bias else [])
        write(out, f"convtranspose3d_{k}", "ConvTranspose", ins, [("y", y)], attrs, opset=11)
