"""Rows of the aten table for torch.fft (imported by lowering.py): aten._fft_r2c, _fft_c2c and
_fft_c2r, what every torch.fft function becomes when traced (with the casts, slices, pads and
conjugations around them: lowering_complex.py, which this module imports and which holds the
complex-as-float-pairs convention).

Each transformed dim is a dense DFT: one matmul of the data (moved to the last dim, a complex
value's (re, im) pairs flattened with it) with a constant matrix computed in f64 by numpy for
that size, so a transform over dims of sizes n1..nk costs sum(ni) multiply-adds per output
element instead of an FFT's sum(log ni); sizes above _MAX_N stay in eager rather than building
huge constants. Everything computes in f64 and rounds once at the end (as lowering_linalg.py
does), so results differ from eager's (pocketfft, in the input's precision) by eager's own
rounding.

torch's conventions, followed here:
  - normalization is an int (torch's fft_norm_mode): 0 none, 1 1/sqrt(N), 2 1/N, N the
    product of the signal sizes of the transformed dims (the output sizes for c2r);
  - _fft_r2c(x, dim, normalization, onesided): a forward (e^{-i}) transform of a real value;
    onesided keeps n // 2 + 1 outputs of dim[-1]; the other dims are c2c transforms;
  - _fft_c2c(x, dim, normalization, forward): e^{-i} when forward, e^{+i} otherwise;
  - _fft_c2r(x, dim, normalization, last_dim_size): inverse c2c transforms of dim[:-1], then
    the real inverse of the Hermitian half-spectrum along dim[-1] (output size last_dim_size):
    x[j] = sum_k w_k Re(X[k] e^{+2 pi i jk/n}), w_k = 1 for k = 0 and k = n / 2, else 2; so the
    imaginary parts of X[0] and X[n/2] are ignored, as pocketfft ignores them.
"""

import numpy as np
import torch

from .lowering import Unsupported, Value, meta_of
from .lowering_nn import shape, reshape
from .lowering_complex import ComplexPair, is_complex, lowers_complex, real_dtype, to_pair
from . import lowering_strided  # noqa: F401  (as_strided, which torch.stft frames with)

_MAX_N = 512  # largest transformed size (its c2c matrix is [2n, 2n] f64: 8 MiB at 512)


def _angles(rows, cols, n):
    """(cos, sin) of 2 pi (j k mod n) / n for j < rows, k < cols, in f64, exact at the
    multiples of a quarter turn (so the sine of k = 0 and k = n / 2 is exactly 0)."""
    j = np.arange(rows, dtype=np.int64)[:, None]
    k = np.arange(cols, dtype=np.int64)[None, :]
    r = (j * k) % n
    t = 2.0 * np.pi * r / n
    c, s = np.cos(t), np.sin(t)
    for quarter, (cv, sv) in enumerate([(1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0)]):
        at = 4 * r == quarter * n
        c[at], s[at] = cv, sv
    return c, s


def _c2c_matrix(n, sign, scale):
    """[2n, 2n]: (re, im) pairs of x times it are the pairs of sum_j x[j] e^{sign 2 pi i jk/n}."""
    c, s = _angles(n, n, n)
    m = np.empty((2 * n, 2 * n))
    m[0::2, 0::2], m[0::2, 1::2] = c, sign * s
    m[1::2, 0::2], m[1::2, 1::2] = -sign * s, c
    return m * scale


def _r2c_matrix(n, cols, scale):
    """[n, 2 cols]: real x times it are the pairs of the forward transform's first cols."""
    c, s = _angles(n, cols, n)
    m = np.empty((n, 2 * cols))
    m[:, 0::2], m[:, 1::2] = c, -s
    return m * scale


def _c2r_matrix(rows, n, scale):
    """[2 rows, n]: the pairs of a half spectrum X[0..rows) times it are the real inverse
    transform of size n (X[k] for k > n / 2 is not read, as pocketfft reads only n // 2 + 1)."""
    half = n // 2 + 1
    c, s = _angles(rows, n, n)
    w = np.where(np.arange(rows) == 0, 1.0, 2.0)
    if n % 2 == 0 and rows > n // 2:
        w[n // 2] = 1.0
    w[half:] = 0.0
    m = np.empty((2 * rows, n))
    m[0::2], m[1::2] = c * w[:, None], -s * w[:, None]
    return m * scale


def _constant(L, key, make):
    """A graph constant for `key`, made once per coil graph (batched OpInfo samples and
    repeated transforms of one size share it)."""
    cache = L.__dict__.setdefault("_fft_constants", {})
    if key not in cache:
        cache[key] = Value(L.g.constant(f"fft{len(cache)}", make()))
    return cache[key]


def _along(L, v, d, rank, mat, in_pair, out_pair):
    """Applies `mat` to dim d of v (complex rank `rank`; v has a trailing pair dim when
    in_pair): d moves last (before the pair), the pairs flatten into it, one matmul, and the
    dims move back."""
    perm = [i for i in range(rank) if i != d] + [d]
    full = perm + [rank] if in_pair else perm
    if full != list(range(len(full))):
        v = Value(L.op("permute", [v], {"dims": full}))
    s = list(shape(L, v))
    batch = s[:rank - 1]
    v = reshape(L, v, batch + [mat.shape[0]])
    y = Value(L.op("matmul", [v, mat.value]))
    if out_pair:
        y = reshape(L, y, batch + [mat.shape[1] // 2, 2])
    inv = [perm.index(i) for i in range(rank)] + ([rank] if out_pair else [])
    if inv != list(range(len(inv))):
        y = Value(L.op("permute", [y], {"dims": inv}))
    return y


class _Mat:
    def __init__(self, value, rows, cols):
        self.value, self.shape = value, (rows, cols)


def _mat(L, kind, n, other, sign, scale):
    make = {"c2c": lambda: _c2c_matrix(n, sign, scale),
            "r2c": lambda: _r2c_matrix(n, other, scale),
            "c2r": lambda: _c2r_matrix(other, n, scale)}[kind]
    rows, cols = {"c2c": (2 * n, 2 * n), "r2c": (n, 2 * other),
                  "c2r": (2 * other, n)}[kind]
    return _Mat(_constant(L, (kind, n, other, sign, scale), make), rows, cols)


def _scale(normalization, sizes):
    total = float(np.prod(sizes))
    if normalization == 0:
        return 1.0
    if normalization == 1:
        return 1.0 / np.sqrt(total)
    if normalization == 2:
        return 1.0 / total
    raise Unsupported(f"fft normalization {normalization!r}")


def _check(node, sizes, dims, rank):
    if not dims:
        raise Unsupported(f"{node.target} over no dims")
    dims = [int(d) % max(rank, 1) for d in dims]
    if len(set(dims)) != len(dims):
        raise Unsupported(f"{node.target} over repeated dims {dims}")
    if 0 in sizes:
        raise Unsupported(f"{node.target} of an empty tensor {list(sizes)}")
    big = [sizes[d] for d in dims if sizes[d] > _MAX_N]
    if big:
        raise Unsupported(f"{node.target} of size {big[0]} (coil's dense DFT takes sizes up "
                          f"to {_MAX_N})")
    return dims


@lowers_complex("aten._fft_r2c.default")
def _fft_r2c(L, node, args, kwargs):
    x, dims, normalization, onesided = args[:4]
    if is_complex(x):
        raise Unsupported("_fft_r2c of a complex value")
    rdt = real_dtype(meta_of(node)[1])
    rank = L.rank(x)
    sizes = shape(L, x)
    dims = _check(node, sizes, dims, rank)
    scale = _scale(normalization, [sizes[d] for d in dims])
    n = sizes[dims[-1]]
    cols = n // 2 + 1 if onesided else n
    v = Value(L.cast(x, torch.float64))
    v = _along(L, v, dims[-1], rank, _mat(L, "r2c", n, cols, -1, scale), False, True)
    for d in dims[:-1]:
        v = _along(L, v, d, rank, _mat(L, "c2c", sizes[d], 0, -1, 1.0), True, True)
    return ComplexPair(L.cast(v, rdt))


@lowers_complex("aten._fft_c2c.default")
def _fft_c2c(L, node, args, kwargs):
    x, dims, normalization, forward = args[:4]
    rdt = real_dtype(meta_of(node)[1])
    x = to_pair(L, x, torch.float64)
    rank = L.rank(x) - 1
    sizes = shape(L, x)[:-1]
    dims = _check(node, sizes, dims, rank)
    scale = _scale(normalization, [sizes[d] for d in dims])
    sign = -1 if forward else 1
    v = x
    for i, d in enumerate(dims):
        v = _along(L, v, d, rank, _mat(L, "c2c", sizes[d], 0, sign, scale if i == 0 else 1.0),
                   True, True)
    return ComplexPair(L.cast(v, rdt))


@lowers_complex("aten._fft_c2r.default")
def _fft_c2r(L, node, args, kwargs):
    x, dims, normalization, last_dim_size = args[:4]
    rdt = meta_of(node)[1]
    if rdt not in (torch.float32, torch.float64):
        raise Unsupported(f"_fft_c2r into {rdt}")
    x = to_pair(L, x, torch.float64)
    rank = L.rank(x) - 1
    sizes = list(shape(L, x)[:-1])
    dims = _check(node, sizes, dims, rank)
    n = int(last_dim_size)
    if not 1 <= n <= _MAX_N:
        raise Unsupported(f"_fft_c2r to size {n} (coil's dense DFT takes sizes 1 to {_MAX_N})")
    scale = _scale(normalization, [sizes[d] for d in dims[:-1]] + [n])
    v = x
    for d in dims[:-1]:
        v = _along(L, v, d, rank, _mat(L, "c2c", sizes[d], 0, 1, 1.0), True, True)
    v = _along(L, v, dims[-1], rank, _mat(L, "c2r", n, sizes[dims[-1]], 1, scale), True, False)
    return Value(L.cast(v, rdt))
