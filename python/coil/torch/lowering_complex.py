"""Complex values in the aten table, as float pairs (imported by lowering_fft.py).

coil has no complex dtype. A complex32 (complex64, complex128) tensor of shape S is lowered as
an f16 (f32, f64) coil value of shape S + [2]: (real, imaginary) in the last dim, torch's own memory layout
(`torch.view_as_real`). Such values are ComplexPair instances (a Value subclass), so that
nothing treats the pair as real data by accident:
  - fx_compile refuses (Unsupported: the node runs in eager) a complex value reaching a row
    that is not marked `complex_ok`, and _supported leaves such nodes out of coil's partitions;
  - the rows below that take complex values are marked `complex_ok`; the view rows of
    lowering.py (reshape, permute, slice, cat, ...) are wrapped so that a complex operand gets
    its dims renumbered around the pair dim, and a real one goes to the original row;
  - graph inputs and outputs cross the boundary as `torch.view_as_real` /
    `torch.view_as_complex` (zero-copy; fx_compile.CoilGraphCallable).

Rows here: view_as_real, view_as_complex, real, imag, complex, polar, the conjugations
(_conj, conj_physical, resolve_conj, ...), abs of a complex value, casts to and from complex,
multiplication of a complex value by a real scalar, and the views.
"""

import torch
from torch.utils._pytree import tree_flatten

from .lowering import ROWS, Unsupported, Value, copies_across_devices, lowers, meta_of
from .lowering_nn import shape, coil_dt, zeros, reshape, slice_, concat, _pad

# torch's complex dtypes coil lowers, and the real dtype of their pairs
REAL_OF = {torch.complex32: torch.float16, torch.complex64: torch.float32,
           torch.complex128: torch.float64}


class ComplexPair(Value):
    """A complex value lowered as a real coil value with a trailing dim of 2 (re, im)."""


def is_complex(v):
    return isinstance(v, ComplexPair)


def any_complex(args, kwargs=None):
    return any(is_complex(v) for v in tree_flatten((list(args), dict(kwargs or {})))[0])


def real_dtype(dtype):
    """The real dtype of a complex dtype's pairs."""
    if dtype not in REAL_OF:
        raise Unsupported(f"complex dtype {dtype} (coil lowers complex32, complex64 and "
                          "complex128 as float pairs)")
    return REAL_OF[dtype]


def complex_ok(fn):
    """Marks a row as taking ComplexPair operands (fx_compile checks the mark)."""
    fn.complex_ok = True
    return fn


def lowers_complex(*names):
    def register(fn):
        return lowers(*names)(complex_ok(fn))
    return register


def _op(L, name, *inputs, **attrs):
    return Value(L.op(name, list(inputs), attrs))


def re_im(L, p):
    """(real part, imaginary part) of a pair value, each of the complex shape."""
    s = list(shape(L, p))
    return tuple(reshape(L, slice_(L, p, len(s) - 1, i, i + 1), s[:-1]) for i in (0, 1))


def make_pair(L, re, im):
    """The pair of two real values of the same shape and dtype."""
    s = list(shape(L, re))
    return ComplexPair(concat(L, [reshape(L, re, s + [1]), reshape(L, im, s + [1])], len(s)))


def to_pair(L, v, real_dt):
    """A real or complex value as a pair of `real_dt` (a real value gets a zero imaginary part,
    as torch's cast to complex)."""
    if is_complex(v):
        return ComplexPair(L.cast(v, real_dt))
    v = Value(L.cast(v, real_dt))
    return make_pair(L, v, zeros(L, coil_dt(L, v), shape(L, v)))


def crank(L, p):
    """The complex rank of a pair (its coil rank less the pair dim)."""
    return L.rank(p) - 1


def _dim(d, rank):
    d = int(d)
    if not -max(rank, 1) <= d < max(rank, 1):
        raise Unsupported(f"dim {d} of a rank-{rank} complex value")
    return d % max(rank, 1)


# ---- the boundary between complex and real -------------------------------------------------

@lowers_complex("aten.view_as_real.default")
def _view_as_real(L, node, args, kwargs):
    if not is_complex(args[0]):
        raise Unsupported("view_as_real of a real value")
    return Value(int(args[0]))


@lowers_complex("aten.view_as_complex.default")
def _view_as_complex(L, node, args, kwargs):
    x = args[0]
    if is_complex(x) or shape(L, x)[-1:] != (2,):
        raise Unsupported("view_as_complex of a value whose last dim is not 2")
    return ComplexPair(int(x))


@lowers_complex("aten.real.default", "aten.imag.default")
def _real_imag(L, node, args, kwargs):
    x = args[0]
    if not is_complex(x):
        if "imag" in str(node.target):
            raise Unsupported("imag of a real value (torch raises)")
        return x
    return re_im(L, x)[0 if "real" in str(node.target) else 1]


@lowers_complex("aten.complex.default")
def _complex(L, node, args, kwargs):
    out_shape, dt = meta_of(node)
    rdt = real_dtype(dt)
    re, im = (_op(L, "expand", Value(L.cast(v, rdt)), shape=list(out_shape)) for v in args[:2])
    return make_pair(L, re, im)


@lowers_complex("aten.polar.default")
def _polar(L, node, args, kwargs):
    """abs * (cos(angle), sin(angle)), computed in f64 and rounded once (torch computes in the
    dtype; the f64 result is within its rounding)."""
    out_shape, dt = meta_of(node)
    rdt = real_dtype(dt)
    a, t = (_op(L, "expand", Value(L.cast(v, torch.float64)), shape=list(out_shape))
            for v in args[:2])
    re = _op(L, "mul", a, _op(L, "cos", t))
    im = _op(L, "mul", a, _op(L, "sin", t))
    return make_pair(L, Value(L.cast(re, rdt)), Value(L.cast(im, rdt)))


@lowers_complex("aten._conj.default", "aten.conj.default", "aten.conj_physical.default",
                "aten._conj_physical.default")
def _conj(L, node, args, kwargs):
    """The conjugate's values (a lazy conjugation in torch is materialized here: coil's values
    are never views)."""
    x = args[0]
    if not is_complex(x):
        return x
    re, im = re_im(L, x)
    return make_pair(L, re, _op(L, "neg", im))


@lowers_complex("aten.resolve_conj.default", "aten.resolve_neg.default")
def _resolve(L, node, args, kwargs):
    return args[0]  # the values are already what the lazy bits say


# ---- wrapped rows: complex operands here, real ones to the original row ----------------------

def _wrap(names, complex_row, need_output=False):
    """Registers, for each name, a row that calls `complex_row` when an operand is complex (or,
    with need_output, when the node's result is complex) and the existing row otherwise."""
    for name in names:
        base = ROWS.get(name)
        if base is None:  # (an overload this torch lacks)
            continue

        def row(L, node, args, kwargs, base=base):
            out_complex = need_output and _node_complex(node)
            if any_complex(args, kwargs) or out_complex:
                return complex_row(L, node, args, kwargs)
            return base(L, node, args, kwargs)
        row.__name__ = f"complex_or_{base.__name__}"
        for attr, value in vars(base).items():  # (opaque_ok, ...)
            setattr(row, attr, value)
        ROWS[name] = complex_ok(row)


def _node_complex(node):
    try:
        return meta_of(node)[1].is_complex
    except Unsupported:
        return False


def _c_reshape(L, node, args, kwargs):
    return ComplexPair(reshape(L, args[0], list(meta_of(node)[0]) + [2]))


def _c_expand(L, node, args, kwargs):
    return ComplexPair(_op(L, "expand", args[0], shape=list(meta_of(node)[0]) + [2]))


def _c_permute(L, node, args, kwargs):
    r = crank(L, args[0])
    return ComplexPair(_op(L, "permute", args[0], dims=[_dim(d, r) for d in args[1]] + [r]))


def _c_transpose(L, node, args, kwargs):
    r = crank(L, args[0])
    if str(node.target) == "aten.t.default":
        d0, d1 = (0, 1) if r >= 2 else (0, 0)
    else:
        d0, d1 = _dim(args[1], r), _dim(args[2], r)
    if d0 == d1:
        return args[0]
    return ComplexPair(_op(L, "transpose", args[0], dim0=d0, dim1=d1))


def _c_unsqueeze(L, node, args, kwargs):
    r = crank(L, args[0])
    d = int(args[1])
    d = d + r + 1 if d < 0 else d
    return ComplexPair(_op(L, "unsqueeze", args[0], dim=d))


def _c_slice(L, node, args, kwargs):
    r = crank(L, args[0])
    dim = _dim(args[1] if len(args) > 1 else 0, r)
    start = args[2] if len(args) > 2 else None
    end = args[3] if len(args) > 3 else None
    step = args[4] if len(args) > 4 else 1
    if end is not None and end >= 2**62:
        end = None
    return ComplexPair(slice_(L, args[0], dim, int(start or 0), end, int(step)))


def _c_select(L, node, args, kwargs):
    r = crank(L, args[0])
    dim, index = _dim(args[1], r), int(args[2])
    index = index % shape(L, args[0])[dim]
    s = slice_(L, args[0], dim, index, index + 1)
    return ComplexPair(reshape(L, s, list(meta_of(node)[0]) + [2]))


def _c_cat(L, node, args, kwargs):
    out_shape, dt = meta_of(node)
    rdt = real_dtype(dt)
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    parts = [to_pair(L, v, rdt) for v in args[0]]
    parts = [p for p in parts if shape(L, p) != (0, 2)]  # (torch skips empty 1-D operands)
    return ComplexPair(concat(L, parts, _dim(dim, len(out_shape))))


def _c_pad(L, node, args, kwargs):
    x, pad = args[0], list(args[1])
    value = args[2] if len(args) > 2 else kwargs.get("value", 0)
    if isinstance(value, Value) or isinstance(value, complex):
        raise Unsupported("constant_pad_nd of a complex value with a tensor or complex value")
    r = crank(L, x)
    if len(pad) % 2 or len(pad) // 2 > r:
        raise Unsupported(f"constant_pad_nd with pad {pad} on a rank-{r} complex value")
    if value != 0:  # (value, 0) in each padded place: the parts padded separately
        re, im = re_im(L, x)
        return make_pair(L, _pad_all(L, re, pad, float(value)), _pad_all(L, im, pad, 0.0))
    for i in range(len(pad) // 2):
        x = _pad(L, x, r - 1 - i, int(pad[2 * i]), int(pad[2 * i + 1]), 0.0)
    return ComplexPair(x)


def _pad_all(L, x, pad, value):
    rank = L.rank(x)
    for i in range(len(pad) // 2):
        x = _pad(L, x, rank - 1 - i, int(pad[2 * i]), int(pad[2 * i + 1]), value)
    return x


def _c_flip(L, node, args, kwargs):
    from .lowering_nn import _flip
    v = args[0]
    r = crank(L, v)
    for d in args[1]:
        v = _flip(L, v, _dim(d, r))
    return ComplexPair(v)


def _c_identity(L, node, args, kwargs):
    return args[0]


def _c_abs(L, node, args, kwargs):
    """|z| = hypot(re, im): sqrt(re^2 + im^2) in f64, rounded once (f32 pairs: the squares are
    exact in f64, so this is hypot up to that rounding); an infinite part gives inf even with a
    NaN in the other, as C's hypot. complex128 stays in eager (its squares could overflow)."""
    x = args[0]
    rdt = meta_of(node)[1]
    if rdt != torch.float32:
        raise Unsupported(f"abs of a complex value into {rdt} (only complex64 is lowered)")
    re, im = (Value(L.cast(v, torch.float64)) for v in re_im(L, x))
    s = _op(L, "sqrt", _op(L, "add", _op(L, "mul", re, re), _op(L, "mul", im, im)))
    inf = zeros(L, "f64", [], float("inf"))
    any_inf = _op(L, "logical_or", _op(L, "eq", _op(L, "abs", re), inf),
                  _op(L, "eq", _op(L, "abs", im), inf))
    return Value(L.cast(_op(L, "where", any_inf, inf, s), rdt))


def _c_convert(L, node, args, kwargs):
    """A cast where the source or the result is complex: real -> complex gets a zero imaginary
    part; complex -> complex casts the pair; complex -> real keeps the real part (as torch,
    which warns)."""
    if copies_across_devices(node, kwargs.get("device")):
        raise Unsupported(f"a copy to {kwargs['device']}")
    dt = meta_of(node)[1]
    x = args[0]
    if dt.is_complex:
        return to_pair(L, x, real_dtype(dt))
    return Value(L.cast(re_im(L, x)[0], dt))


def _c_mul(L, node, args, kwargs):
    """A complex value times a real Python number or real tensor s, as torch computes it: s is
    promoted to s + 0i and multiplied out, (a s - b 0, a 0 + b s), so infinite parts give the
    same NaNs as in eager. complex x complex stays in eager."""
    a, b = args[0], args[1]
    if is_complex(b):
        a, b = b, a
    if is_complex(b) or isinstance(b, complex):
        raise Unsupported("complex multiplication of two complex values")
    dt = meta_of(node)[1]
    if not dt.is_complex:
        raise Unsupported(f"mul of a complex value into {dt}")
    rdt = real_dtype(dt)
    re, im = re_im(L, ComplexPair(L.cast(a, rdt)))
    if isinstance(b, Value):
        s = Value(L.cast(b, rdt))
    else:
        s = zeros(L, coil_dt(L, re), [], float(b))
    zero = zeros(L, coil_dt(L, re), [])
    out_re = _op(L, "sub", _op(L, "mul", re, s), _op(L, "mul", im, zero))
    out_im = _op(L, "add", _op(L, "mul", re, zero), _op(L, "mul", im, s))
    return make_pair(L, out_re, out_im)


_wrap(["aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
       "aten._reshape_alias.default", "aten.squeeze.dim", "aten.squeeze.default",
       "aten.squeeze.dims"], _c_reshape)
_wrap(["aten.expand.default"], _c_expand)
_wrap(["aten.permute.default"], _c_permute)
_wrap(["aten.transpose.int", "aten.t.default"], _c_transpose)
_wrap(["aten.unsqueeze.default"], _c_unsqueeze)
_wrap(["aten.slice.Tensor"], _c_slice)
_wrap(["aten.select.int"], _c_select)
_wrap(["aten.cat.default"], _c_cat, need_output=True)
_wrap(["aten.constant_pad_nd.default"], _c_pad)
_wrap(["aten.flip.default"], _c_flip)
_wrap(["aten.clone.default", "aten.alias.default", "aten.detach.default",
       "aten.lift_fresh_copy.default", "aten.contiguous.default"], _c_identity)
_wrap(["aten.abs.default"], _c_abs)
_wrap(["prims.convert_element_type.default", "aten._to_copy.default", "aten.to.dtype"],
      _c_convert, need_output=True)
_wrap(["aten.mul.Tensor", "aten.mul.Scalar"], _c_mul)
