"""onnx_op_cases.py's families "tfidf" (TfIdfVectorizer), "training" (Adagrad, Adam, Momentum of
ai.onnx.preview.training), "roialign" (RoiAlign) and "dft" (DFT, STFT). The expected outputs come
from numpy loops written from the ONNX spec (and, for the optimizers, ONNX's own formulas from
its backend test cases), independent of coil's decompositions."""
import numpy as np

from onnx_op_cases import write

rng = np.random.default_rng(2028)
f32 = np.float32
CASES = {}
TRAINING = "ai.onnx.preview.training"


def case(family):
    def reg(fn):
        CASES.setdefault(family, []).append(fn)
        return fn
    return reg


# ---- TfIdfVectorizer ---------------------------------------------------------------------------
def tfidf_ref(x, mode, min_n, max_n, max_skip, pool, counts, indexes, weights=None):
    """Per row: every n-gram of length min_n..max_n with skips 0..max_skip (unigrams once) that
    is in the pool adds 1 at its output index; then TF, IDF or TFIDF weighting."""
    table = {}
    k = 0
    for lvl, start in enumerate(counts):
        n = lvl + 1
        end = counts[lvl + 1] if lvl + 1 < len(counts) else len(pool)
        for j in range(start, end, n):
            table[tuple(pool[j:j + n])] = indexes[k]
            k += 1
    size = max(indexes) + 1
    rows = x.reshape(-1, x.shape[-1]) if x.ndim == 2 else x.reshape(1, -1)
    y = np.zeros((rows.shape[0], size), np.float64)
    for r, row in enumerate(rows):
        for n in range(min_n, max_n + 1):
            for s in range(0, (max_skip if n > 1 else 0) + 1):
                for i in range(len(row) - (n - 1) * (s + 1)):
                    g = tuple(int(row[i + t * (s + 1)]) for t in range(n))
                    if g in table:
                        y[r, table[g]] += 1
    w = np.ones(size) if weights is None else np.asarray(weights, np.float64)
    if mode == "IDF":
        y = (y > 0) * w
    elif mode == "TFIDF":
        y = y * w
    y = y.astype(f32)
    return y if x.ndim == 2 else y[0]


@case("tfidf")
def tfidf(out):
    pool = [2, 3, 5, 4, 5, 6, 7, 8, 6, 7, 3, 3, 3]  # 4 unigrams, 3 bigrams, 1 trigram
    counts = [0, 4, 10]
    k = 0
    for shape, mode, (mn, mx), skip, dt, perm, weights in [
        ((12,), "TF", (1, 3), 2, np.int64, False, None),
        ((3, 7), "TF", (2, 2), 1, np.int32, True, None),
        ((2, 9), "IDF", (1, 2), 3, np.int64, False, None),
        ((2, 9), "IDF", (1, 3), 0, np.int32, True, "w"),
        ((5,), "TFIDF", (2, 3), 4, np.int32, False, "w"),
        ((4, 11), "TFIDF", (1, 1), 5, np.int64, True, None),
        ((1, 3), "TF", (3, 3), 2, np.int64, False, None),  # too short for skips > 0
    ]:
        x = rng.integers(2, 9, shape).astype(dt)
        x.ravel()[:3] = 3  # a trigram that is in the pool
        idx = list(range(8))
        if perm:  # ngram_indexes that permute and leave a gap (output 9 positions)
            idx = [int(v) for v in rng.permutation(9)[:8]]
        size = max(idx) + 1
        w = [float(v) for v in rng.uniform(0.5, 2.0, size).astype(f32)] if weights else None
        attrs = dict(mode=mode, min_gram_length=mn, max_gram_length=mx, max_skip_count=skip,
                     pool_int64s=pool, ngram_counts=counts, ngram_indexes=idx)
        if w:
            attrs["weights"] = w
        y = tfidf_ref(x, mode, mn, mx, skip, pool, counts, idx, w)
        write(out, f"tfidf_{k}", "TfIdfVectorizer", [("X", x)], [("Y", y)], attrs, opset=9)
        k += 1


# ---- optimizers (ONNX's formulas from onnx/backend/test/case/node/{adagrad,adam,momentum}.py) ---
def adagrad_ref(r, t, x, g, h, norm, eps, decay):
    r_ = r / (1 + t * decay)
    g_ = norm * x + g
    h_new = h + g_ * g_
    return x - r_ * g_ / (np.sqrt(h_new) + eps), h_new


def adam_ref(r, t, x, g, v, h, norm, post, alpha, beta, eps):
    g_ = norm * x + g
    v_new = alpha * v + (1 - alpha) * g_
    h_new = beta * h + (1 - beta) * (g_ * g_)
    r_ = r * np.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
    return (1 - post) * (x - r_ * (v_new / (np.sqrt(h_new) + eps))), v_new, h_new


def momentum_ref(r, t, x, g, v, norm, alpha, beta, nesterov):
    g_ = norm * x + g
    b = beta if t > 0 else 1
    v_new = alpha * v + b * g_
    return (x - r * (g_ + alpha * v_new) if nesterov else x - r * v_new), v_new


@case("training")
def training(out):
    shapes = [[(3, 5)], [(7,), (2, 3, 4)], [(1,), (), (5, 1)]]
    k = 0
    for shp in shapes:
        for t in (0, 3):
            for dt in (f32, np.float64) if k % 3 == 0 else (f32,):
                n = len(shp)
                r = np.array(0.05 + 0.01 * k, dtype=f32)
                tt = np.array(t, dtype=np.int64)
                xs = [rng.standard_normal(s).astype(dt) for s in shp]
                gs = [rng.standard_normal(s).astype(dt) for s in shp]
                vs = [rng.standard_normal(s).astype(dt) for s in shp]
                hs = [rng.uniform(0.1, 2, s).astype(dt) for s in shp]
                rd, xd = float(r), [a.astype(np.float64) for a in xs]
                gd, vd, hd = ([a.astype(np.float64) for a in l] for l in (gs, vs, hs))
                named = lambda p, arrs: [(f"{p}{i}", a) for i, a in enumerate(arrs)]
                cast = lambda arrs: [np.asarray(a).astype(dt) for a in arrs]
                # Adagrad
                res = [adagrad_ref(rd, t, xd[i], gd[i], hd[i], 0.01, 1e-5, 0.1) for i in range(n)]
                write(out, f"adagrad_{k}", "Adagrad",
                      [("R", r), ("T", tt)] + named("X", xs) + named("G", gs) + named("H", hs),
                      named("Xn", cast([a for a, _ in res])) + named("Hn", cast([b for _, b in res])),
                      dict(norm_coefficient=0.01, epsilon=1e-5, decay_factor=0.1), domain=TRAINING)
                # Adam (post-update decay in half the cases; default epsilon in the other half)
                post = 0.02 if k % 2 else 0.0
                attrs = dict(alpha=0.8, beta=0.9, norm_coefficient=0.005)
                eps = float(f32(1e-6))
                if post:
                    attrs.update(norm_coefficient_post=post, epsilon=1e-3)
                    eps = 1e-3
                res = [adam_ref(rd, t, xd[i], gd[i], vd[i], hd[i], 0.005, post, 0.8, 0.9, eps)
                       for i in range(n)]
                write(out, f"adam_{k}", "Adam",
                      [("R", r), ("T", tt)] + named("X", xs) + named("G", gs) + named("V", vs)
                      + named("H", hs),
                      named("Xn", cast([a[0] for a in res])) + named("Vn", cast([a[1] for a in res]))
                      + named("Hn", cast([a[2] for a in res])), attrs, domain=TRAINING)
                # Momentum, both modes
                for mode in ("standard", "nesterov"):
                    res = [momentum_ref(rd, t, xd[i], gd[i], vd[i], 0.02, 0.9, 0.7,
                                        mode == "nesterov") for i in range(n)]
                    write(out, f"momentum_{mode}_{k}", "Momentum",
                          [("R", r), ("T", tt)] + named("X", xs) + named("G", gs) + named("V", vs),
                          named("Xn", cast([a for a, _ in res])) + named("Vn", cast([b for _, b in res])),
                          dict(alpha=0.9, beta=0.7, norm_coefficient=0.02, mode=mode), domain=TRAINING)
                k += 1


# ---- RoiAlign (ONNX Runtime's RoiAlign, which ONNX's reference follows, as loops) --------------
def roialign_ref(x, rois, bidx, mode, oh, ow, ratio, scale, half_pixel):
    n, c, h, w = x.shape
    y = np.zeros((len(rois), c, oh, ow), np.float64)
    off = 0.5 if half_pixel else 0.0
    for r, roi in enumerate(rois.astype(np.float64)):
        sw, sh, ew, eh = roi * scale - off
        rw, rh = ew - sw, eh - sh
        if not half_pixel:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bh, bw = rh / oh, rw / ow
        img = x[bidx[r]].astype(np.float64)
        for ph in range(oh):
            for pw in range(ow):
                acc = None
                for iy in range(ratio):
                    for ix in range(ratio):
                        yy = sh + ph * bh + (iy + 0.5) * bh / ratio
                        xx = sw + pw * bw + (ix + 0.5) * bw / ratio
                        if yy < -1.0 or yy > h or xx < -1.0 or xx > w:
                            taps = [(0, 0, 0.0)] * 4
                        else:
                            yy, xx = max(yy, 0.0), max(xx, 0.0)
                            yl, xl = int(yy), int(xx)
                            if yl >= h - 1:
                                yl = yh = h - 1
                                yy = float(yl)
                            else:
                                yh = yl + 1
                            if xl >= w - 1:
                                xl = xh = w - 1
                                xx = float(xl)
                            else:
                                xh = xl + 1
                            ly, lx = yy - yl, xx - xl
                            hy, hx = 1 - ly, 1 - lx
                            taps = [(yl, xl, hy * hx), (yl, xh, hy * lx), (yh, xl, ly * hx),
                                    (yh, xh, ly * lx)]
                        vals = np.stack([wt * img[:, a, b] for a, b, wt in taps])
                        if mode == "avg":
                            v = vals.sum(0)
                            acc = v if acc is None else acc + v
                        else:
                            v = vals.max(0)
                            acc = v if acc is None else np.maximum(acc, v)
                y[r, :, ph, pw] = acc / (ratio * ratio) if mode == "avg" else acc
    return y.astype(x.dtype)


@case("roialign")
def roialign(out):
    k = 0
    for (n, c, h, w), nr, mode, (oh, ow), ratio, scale, ctm, opset in [
        ((1, 2, 10, 10), 3, "avg", (5, 5), 2, 1.0, "half_pixel", 16),
        ((2, 3, 7, 9), 4, "avg", (3, 4), 3, 0.5, "output_half_pixel", 16),
        ((2, 1, 6, 5), 5, "max", (2, 3), 2, 1.0, "half_pixel", 16),
        ((3, 2, 8, 6), 4, "max", (4, 2), 1, 0.25, "output_half_pixel", 16),
        ((1, 3, 5, 11), 2, "avg", (1, 1), 4, 1.0, None, 10),
        ((2, 2, 9, 4), 3, "max", (3, 3), 2, 1.0, None, 10),
    ]:
        x = rng.standard_normal((n, c, h, w)).astype(f32)
        hs, ws = h / scale, w / scale
        p = np.stack([rng.uniform(-0.2 * ws, 0.9 * ws, nr), rng.uniform(-0.2 * hs, 0.9 * hs, nr)], 1)
        size = np.stack([rng.uniform(0.2 * ws, 0.8 * ws, nr), rng.uniform(0.2 * hs, 0.8 * hs, nr)], 1)
        rois = np.concatenate([p, p + size], 1).astype(f32)
        rois[0] = [0, 0, ws - 1, hs - 1]  # the whole image: taps at the last row and column
        if nr > 3:
            rois[3] = [ws * 1.5, 1, ws * 1.6, 2]  # entirely outside: every sample weighs 0
        bidx = rng.integers(0, n, nr).astype(np.int64)
        attrs = dict(mode=mode, output_height=oh, output_width=ow, sampling_ratio=ratio,
                     spatial_scale=scale)
        half = ctm == "half_pixel"
        if ctm:
            attrs["coordinate_transformation_mode"] = ctm
        y = roialign_ref(x, rois, bidx, mode, oh, ow, ratio, scale, half)
        write(out, f"roialign_{k}", "RoiAlign", [("X", x), ("rois", rois), ("batch_indices", bidx)],
              [("Y", y)], attrs, opset=opset)
        k += 1


# ---- DFT, STFT (numpy's FFTs in double) --------------------------------------------------------
def as_complex(x):
    return x[..., 0].astype(np.float64) + (1j * x[..., 1] if x.shape[-1] == 2 else 0)


def as_pairs(z, dt):
    return np.stack([z.real, z.imag], -1).astype(dt)


@case("dft")
def dft(out):
    k = 0
    for shape, axis, inverse, onesided, length, dt in [
        ((2, 7, 1), 1, 0, 0, None, f32),
        ((3, 5, 4, 2), 2, 0, 0, None, f32),
        ((3, 5, 4, 2), -3, 1, 0, None, f32),
        ((2, 9, 3, 1), 1, 0, 1, None, f32),
        ((1, 8, 2), 1, 0, 1, None, np.float64),
        ((2, 6, 1), 1, 0, 0, 4, f32),      # truncated
        ((2, 5, 3, 2), 1, 1, 0, 8, f32),   # zero-padded, inverse
        ((2, 3, 11, 1), -2, 0, 1, 13, f32),
        ((4, 1), 0, 0, 0, None, f32),      # axis 0
    ]:
        x = rng.standard_normal(shape).astype(dt)
        z = as_complex(x)
        ax = axis if axis >= 0 else axis + len(shape)
        n = length or shape[ax]
        y = np.fft.ifft(z, n=n, axis=ax) if inverse else np.fft.fft(z, n=n, axis=ax)
        if onesided:
            y = np.take(y, range(n // 2 + 1), axis=ax)
        attrs = dict(axis=axis, inverse=inverse, onesided=onesided)
        consts = [("dft_length", np.array(length, np.int64))] if length else []
        write(out, f"dft_{k}", "DFT", [("x", x)], [("y", as_pairs(y, dt))], attrs, opset=17,
              const_inputs=consts)
        k += 1


@case("dft")
def stft(out):
    k = 0
    for (b, length, c), step, frame, window, onesided in [
        ((1, 64, 1), 8, 16, False, 1),
        ((2, 50, 1), 7, 12, True, 1),
        ((2, 33, 2), 5, 9, True, 0),
        ((3, 20, 1), 3, 7, False, 0),
    ]:
        x = rng.standard_normal((b, length, c)).astype(f32)
        w = rng.uniform(0.2, 1, frame).astype(f32)
        z = as_complex(x)
        frames = (length - frame) // step + 1
        seg = np.stack([z[:, f * step:f * step + frame] for f in range(frames)], 1)
        if window:
            seg = seg * w.astype(np.float64)
        y = np.fft.fft(seg, axis=2)
        if onesided:
            y = y[:, :, :frame // 2 + 1]
        node_in = ["signal", "frame_step", "window" if window else "", "" if window else "frame_length"]
        while not node_in[-1]:
            node_in.pop()
        ins = [("signal", x)] + ([("window", w)] if window else [])
        consts = [("frame_step", np.array(step, np.int64))]
        if not window:
            consts.append(("frame_length", np.array(frame, np.int64)))
        write(out, f"stft_{k}", ("STFT", node_in), ins, [("y", as_pairs(y, f32))],
              dict(onesided=onesided), opset=17, const_inputs=consts)
        k += 1
