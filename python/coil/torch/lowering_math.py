"""Rows of the aten table for elementwise math coil has no op for (inverse trigonometric and
hyperbolic functions, atan2, log2/log10/exp2, the gamma family, ...), and small composites
(lerp, xlog1py, entr, deg2rad, aminmax, count_nonzero, dist, smooth_l1_loss, cross, ...).
Imported by lowering.py, which holds the table and the conventions.

Exactness: every function is computed in f64 (coil's f64 exp, log, sin, cos, sqrt, ... are
libm's) by a formula that is exact in real arithmetic and stable in floating point (no
cancellation where the result is small), then rounded to the result's dtype. Where a formula is
only accurate to well beyond f32 but not to the last bits of f64 (the gamma family's series),
the row takes results of f32, f16 and bf16 only; f64 results fall back to eager. Special values
(infinities, NaN, signed zeros, poles, out-of-domain arguments) are handled explicitly as torch
does.
"""

import math

import torch

from .. import DTypeName
from .lowering import Unsupported, Value, lowers, meta_of, _operand, _out_dtype, _compute_dtype


class X:
    """A coil value in expressions: X + X, X * 2.0, x.lt(0), X.where(c, a, b), x.fn("exp")."""

    def __init__(self, L, v, dt):
        self.L, self.v, self.dt = L, Value(v), dt

    def _c(self, o):
        if isinstance(o, X):
            return o.v
        return Value(self.L.full(float(o), self.dt))

    def _b(self, name, o, swap=False):
        a, b = self.v, self._c(o)
        if swap:
            a, b = b, a
        return X(self.L, self.L.op(name, [a, b]), self.dt)

    def __add__(self, o): return self._b("add", o)
    def __radd__(self, o): return self._b("add", o, True)
    def __sub__(self, o): return self._b("sub", o)
    def __rsub__(self, o): return self._b("sub", o, True)
    def __mul__(self, o): return self._b("mul", o)
    def __rmul__(self, o): return self._b("mul", o, True)
    def __truediv__(self, o): return self._b("div", o)
    def __rtruediv__(self, o): return self._b("div", o, True)
    def __neg__(self): return self.fn("neg")
    def __pow__(self, o): return self._b("pow", o)
    def __rpow__(self, o): return self._b("pow", o, True)

    def _cmp(self, name, o):
        return X(self.L, self.L.op(name, [self.v, self._c(o)]), torch.bool)

    def lt(self, o): return self._cmp("lt", o)
    def le(self, o): return self._cmp("le", o)
    def gt(self, o): return self._cmp("gt", o)
    def ge(self, o): return self._cmp("ge", o)
    def eq(self, o): return self._cmp("eq", o)
    def ne(self, o): return self._cmp("ne", o)

    def __and__(self, o): return X(self.L, self.L.op("logical_and", [self.v, o.v]), torch.bool)
    def __or__(self, o): return X(self.L, self.L.op("logical_or", [self.v, o.v]), torch.bool)
    def __invert__(self): return X(self.L, self.L.op("logical_not", [self.v]), torch.bool)

    def fn(self, name, attrs=None):
        return X(self.L, self.L.op(name, [self.v], attrs or {}), self.dt)

    def isnan(self):
        return X(self.L, self.L.op("isnan", [self.v]), torch.bool)

    def isinf(self):
        return self.fn("abs").eq(math.inf)

    def signbit(self):
        """x < 0, -0.0 included."""
        return self.lt(0) | (self.eq(0) & self.fn("reciprocal").lt(0))

    def cast(self, dt):
        return X(self.L, self.L.cast(self.v, dt), dt)

    @staticmethod
    def where(c, a, b, dt=None):
        L = c.L
        if dt is None:
            dt = a.dt if isinstance(a, X) else b.dt if isinstance(b, X) else torch.float64
        av = a.v if isinstance(a, X) else Value(L.full(float(a), dt))
        bv = b.v if isinstance(b, X) else Value(L.full(float(b), dt))
        return X(L, L.op("where", [c.v, av, bv]), dt)


def _float_out(node, f64_ok=True):
    dt = _out_dtype(node)
    if not dt.is_floating_point:
        raise Unsupported(f"{node.target} with a {dt} result")
    if dt == torch.float64 and not f64_ok:
        raise Unsupported(f"{node.target} in f64 (coil computes it in f64 to f32 accuracy; "
                          "f64 results stay in eager)")
    return dt


def _arg64(L, v, node):
    """An argument (value or Python number) as an f64 X."""
    if isinstance(v, Value):
        return X(L, L.cast(v, torch.float64), torch.float64)
    if isinstance(v, (bool, int, float)):
        return X(L, L.full(float(v), torch.float64), torch.float64)
    raise Unsupported(f"{node.target}: operand {v!r}")


def _elementwise(names, fn, f64_ok=True, nargs=1):
    """Registers fn(x: X f64, ...) -> X f64 for the aten and prims overloads in `names`; the
    result is rounded to the node's dtype."""
    def row(L, node, args, kwargs):
        dt = _float_out(node, f64_ok)
        xs = [_arg64(L, a, node) for a in args[:nargs]]
        return Value(fn(*xs).cast(dt).v)
    lowers(*names)(row)
    return row


def _both(name, aten_overloads=("default",)):
    return [f"aten.{name}.{o}" for o in aten_overloads] + [f"prims.{name}.default"]


# ---- inverse trigonometric and hyperbolic functions ------------------------------------------

_T3P8 = 2.41421356237309504880  # tan(3 pi / 8)
_MOREBITS = 6.123233995736765886130e-17  # pi/2 - PIO2 in doubles
_ATAN_P = [-8.750608600031904122785e-1, -1.615753718733365076637e1, -7.500855792314704667340e1,
           -1.228866684490136173410e2, -6.485021904942025371773e1]
_ATAN_Q = [2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2,
           4.853903996359136964868e2, 1.945506571482613964425e2]


def _polevl(x, coeffs, leading_one=False):
    """coeffs[0] x^n + ... + coeffs[n] (with a leading 1 x^(n+1) term when leading_one)."""
    acc = None
    for c in coeffs:
        if acc is None:
            acc = (x + c) if leading_one else (x * 0.0 + c)
        else:
            acc = acc * x + c
    return acc


def atan(x):
    """Cephes' atan (double precision): reduction to |x| <= 0.66, a rational approximation."""
    a = x.fn("abs")
    big = a.gt(_T3P8)
    mid = a.gt(0.66) & ~big
    r = X.where(big, -1.0 / a, X.where(mid, (a - 1.0) / (a + 1.0), a))
    z = r * r
    p = _polevl(z, _ATAN_P) / _polevl(z, _ATAN_Q, leading_one=True)
    z = r * (z * p) + r
    base = X.where(big, math.pi / 2 + _MOREBITS, X.where(mid, math.pi / 4 + 0.5 * _MOREBITS, 0.0))
    y = base + z
    return X.where(x.lt(0), -y, X.where(x.eq(0), x, y))


def asin(x):
    # x / sqrt(1 - x^2), with (1 - x)(1 + x): no cancellation near |x| = 1
    return atan(x / ((1.0 - x) * (1.0 + x)).fn("sqrt"))


def acos(x):
    return 2.0 * atan(((1.0 - x) / (1.0 + x)).fn("sqrt"))


def atan2(y, x):
    """std::atan2: the quadrant from the signs (signed zeros included), both-infinite and
    both-zero cases explicit."""
    ay, ax = y.fn("abs"), x.fn("abs")
    t = atan(ay / ax)
    t = X.where(ay.eq(0) & ax.eq(0), 0.0, t)
    t = X.where(ay.isinf() & ax.isinf(), math.pi / 4, t)
    angle = X.where(x.signbit(), math.pi - t, t)
    return X.where(y.signbit(), -angle, angle)


def asinh(x):
    a = x.fn("abs")
    small = (a + a * a / (1.0 + (1.0 + a * a).fn("sqrt"))).fn("log1p")
    r = X.where(a.gt(1e150), a.fn("log") + math.log(2.0), small)
    return X.where(x.lt(0), -r, X.where(x.eq(0), x, r))


def acosh(x):
    t = x - 1.0
    small = (t + (t * (t + 2.0)).fn("sqrt")).fn("log1p")
    r = X.where(x.gt(1e150), x.fn("log") + math.log(2.0), small)
    return X.where(x.lt(1.0), math.nan, r)


def atanh(x):
    return 0.5 * (2.0 * x / (1.0 - x)).fn("log1p")


def sinh(x):
    a = x.fn("abs")
    e = a.fn("expm1")
    small = 0.5 * (e + e / (e + 1.0))
    h = (0.5 * a).fn("exp")
    r = X.where(a.gt(20.0), (0.5 * h) * h, small)
    return X.where(x.lt(0), -r, X.where(x.eq(0), x, r))


def cosh(x):
    a = x.fn("abs")
    e = a.fn("exp")
    h = (0.5 * a).fn("exp")
    return X.where(a.gt(20.0), (0.5 * h) * h, 0.5 * (e + 1.0 / e))


def tan(x):
    return x.fn("sin") / x.fn("cos")


_elementwise(_both("atan"), atan)
_elementwise(_both("asin"), asin)
_elementwise(_both("acos"), acos)
_elementwise(_both("asinh"), asinh)
_elementwise(_both("acosh"), acosh)
_elementwise(_both("atanh"), atanh)
_elementwise(_both("sinh"), sinh)
_elementwise(_both("cosh"), cosh)
_elementwise(_both("tan"), tan)
_elementwise(["aten.atan2.default", "prims.atan2.default"], atan2, nargs=2)
_elementwise(["aten.arctan2.default"], atan2, nargs=2)


# ---- logarithms and exponentials -------------------------------------------------------------

def log2(x):
    return x.fn("log") * (1.0 / math.log(2.0))


def log10(x):
    return x.fn("log") * (1.0 / math.log(10.0))


def exp2(x):
    return 2.0 ** x


_elementwise(_both("log2"), log2, f64_ok=False)
_elementwise(_both("log10"), log10, f64_ok=False)
_elementwise(_both("exp2"), exp2)


def _xlog1py(x, y):
    r = x * y.fn("log1p")
    return X.where(y.isnan(), y, X.where(x.eq(0), 0.0, r))


_elementwise(["aten.special_xlog1py.default", "aten.special_xlog1py.self_scalar",
              "aten.special_xlog1py.other_scalar"], _xlog1py, nargs=2)


def _entr(x):
    r = -x * x.fn("log")
    r = X.where(x.eq(0), 0.0, r)
    r = X.where(x.lt(0), -math.inf, r)
    return X.where(x.isnan(), x, r)


_elementwise(["aten.special_entr.default"], _entr)


def _logaddexp2(a, b):
    m = X.where(a.gt(b), a, b)
    m = X.where(a.isnan(), a, X.where(b.isnan(), b, m))
    d = (a - b).fn("abs")
    r = m + (2.0 ** (-d)).fn("log1p") * (1.0 / math.log(2.0))
    return X.where(a.eq(b) & a.isinf(), a, r)


_elementwise(["aten.logaddexp2.default"], _logaddexp2, nargs=2)


def _deg_rad(factor):
    def row(L, node, args, kwargs):
        dt = _float_out(node)
        x = X(L, L.cast(args[0], dt), dt)
        return Value((x * factor).v)
    return row


lowers("aten.deg2rad.default")(_deg_rad(math.pi / 180.0))
lowers("aten.rad2deg.default")(_deg_rad(180.0 / math.pi))


@lowers("aten.isfinite.default", "prims.isfinite.default")
def _isfinite(L, node, args, kwargs):
    dt = meta_of(node.args[0])[1]
    if not dt.is_floating_point:
        return Value(L.full(1, torch.bool, meta_of(node)[0]))
    x = X(L, args[0], dt)
    return Value((~(x.isnan() | x.isinf())).v)


@lowers("prims.maximum_value.default", "prims.minimum_value.default")
def _extreme_value(L, node, args, kwargs):
    dt = args[0]
    info = torch.finfo(dt) if dt.is_floating_point else torch.iinfo(dt)
    v = info.max if "maximum" in str(node.target) else info.min
    if not dt.is_floating_point and abs(v) >= 2 ** 53:
        raise Unsupported(f"{node.target} of {dt} (a constant beyond f64's integers)")
    return Value(L.full(v, dt))


@lowers("aten.lerp.Scalar", "aten.lerp.Tensor")
def _lerp(L, node, args, kwargs):
    """torch's lerp: start + w * (end - start) for |w| < 0.5, end - (end - start) * (1 - w)
    otherwise (computed in the result's dtype, as torch does)."""
    dt = _out_dtype(node)
    if not dt.is_floating_point:
        raise Unsupported("lerp of integers")
    s = X(L, _operand(L, args[0], dt), dt)
    e = X(L, _operand(L, args[1], dt), dt)
    w = X(L, _operand(L, args[2], dt), dt)
    d = e - s
    r = X.where(w.fn("abs").lt(0.5), s + w * d, e - d * (1.0 - w))
    return Value(L.op("expand", [r.v], {"shape": list(meta_of(node)[0])}))


# ---- the gamma family (f32 and narrower: computed in f64) ------------------------------------

_LANCZOS_G = 7.0
_LANCZOS = [0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
            -176.61502916214059, 12.507343278686905, -0.13857109526572012,
            9.9843695780195716e-6, 1.5056327351493116e-7]


def _abs_sinpi(x):
    """|sin(pi x)|, with x reduced to [-0.5, 0.5] first (exact in f64)."""
    r = x - x.fn("round")
    return (math.pi * r).fn("sin").fn("abs")


def _lgamma_pos(z):
    """log Gamma(z) for z >= 0.5 (Lanczos, g = 7, 9 terms: ~1e-15 relative)."""
    zm = z - 1.0
    s = zm * 0.0 + _LANCZOS[0]
    for i in range(1, len(_LANCZOS)):
        s = s + _LANCZOS[i] / (zm + float(i))
    t = zm + (_LANCZOS_G + 0.5)
    return 0.5 * math.log(2 * math.pi) + (zm + 0.5) * t.fn("log") - t + s.fn("log")


def lgamma(x):
    """log|Gamma(x)|: Lanczos for x >= 0.5, the reflection formula below; +inf at the poles
    (0 and the negative integers) and at +-inf, NaN for NaN. Near 1 and 2 (lgamma's zeros) the
    absolute error is ~1e-15, below an f32 ulp of the result there."""
    refl = x.lt(0.5)
    xr = X.where(refl, 1.0 - x, x)
    lg = _lgamma_pos(xr)
    r = X.where(refl, math.log(math.pi) - _abs_sinpi(x).fn("log") - lg, lg)
    pole = x.le(0) & x.eq(x.fn("floor"))
    r = X.where(pole | x.isinf(), math.inf, r)
    r = X.where(x.eq(1.0) | x.eq(2.0), 0.0, r)  # lgamma's zeros, exactly
    return X.where(x.isnan(), x, r)


_elementwise(_both("lgamma"), lgamma, f64_ok=False)


def _digamma_pos(x, shift=10):
    """psi(x) for x > 0: the recurrence up to x + shift, then the asymptotic series."""
    acc = x * 0.0
    for k in range(shift):
        acc = acc + 1.0 / (x + float(k))
    z = x + float(shift)
    iz2 = 1.0 / (z * z)
    # B_2k / (2k z^2k): 1/12, -1/120, 1/252, -1/240, 1/132, -691/32760, 1/12
    series = iz2 * (1.0 / 12 - iz2 * (1.0 / 120 - iz2 * (1.0 / 252 - iz2 * (
        1.0 / 240 - iz2 * (1.0 / 132 - iz2 * (691.0 / 32760 - iz2 * (1.0 / 12)))))))
    return z.fn("log") - 0.5 / z - series - acc


def digamma(x):
    """torch's digamma: -inf at 0 (either sign, as torch), NaN at the negative integers and
    -inf, +inf at +inf; the reflection formula psi(1 - x) - pi / tan(pi x) below 0."""
    neg = x.lt(0)
    xr = X.where(neg, 1.0 - x, x)
    p = _digamma_pos(X.where(xr.lt(1e-300), 1.0, xr))
    r0 = x - x.fn("round")  # pi / tan(pi x) with x reduced to [-0.5, 0.5]
    refl = p - math.pi / tan(math.pi * r0)
    r = X.where(neg, refl, p)
    r = X.where(x.eq(0), X.where(x.signbit(), math.inf, -math.inf, x.dt), r)
    r = X.where(neg & x.eq(x.fn("floor")), math.nan, r)
    r = X.where(x.eq(math.inf), math.inf, r)
    return X.where(x.isnan(), x, r)


_elementwise(_both("digamma"), digamma, f64_ok=False)


def _hurwitz_pos(s_int, q, shift=12, terms=10):
    """zeta(s, q) for an integer s >= 2 and q > 0: sum_{k < shift} (q + k)^-s plus
    Euler-Maclaurin at w = q + shift (Bernoulli terms up to B_2terms)."""
    acc = q * 0.0
    for k in range(shift):
        acc = acc + (q + float(k)) ** float(-s_int)
    w = q + float(shift)
    wms = w ** float(-s_int)
    acc = acc + wms * w / float(s_int - 1) + 0.5 * wms
    bern = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510,
            43867 / 798, -174611 / 330]
    fact, poch = 1.0, 1.0
    term_pow = wms / w  # w^(-s-1)
    for j in range(1, terms + 1):
        # B_2j / (2j)! * s (s+1) ... (s+2j-2) * w^(-s-2j+1)
        fact *= (2 * j - 1) * (2 * j)
        poch_j = 1.0
        for m in range(2 * j - 1):
            poch_j *= s_int + m
        acc = acc + term_pow * (bern[j - 1] * poch_j / fact)
        term_pow = term_pow / (w * w)
    del poch
    return acc


def _cot_derivative(n, x):
    """d^n/dx^n cot(pi x) for n = 1..4, as a polynomial in c = cot(pi x) (x reduced)."""
    r0 = x - x.fn("round")
    c = 1.0 / tan(math.pi * r0)
    c2 = c * c
    p = math.pi
    if n == 1:
        return -p * (1.0 + c2)
    if n == 2:
        return 2 * p ** 2 * c * (1.0 + c2)
    if n == 3:
        return -2 * p ** 3 * (1.0 + c2) * (1.0 + 3.0 * c2)
    if n == 4:
        return 8 * p ** 4 * c * (1.0 + c2) * (2.0 + 3.0 * c2)
    raise Unsupported(f"polygamma of order {n} below 0 (coil reflects orders 1-4)")


def polygamma(n, x):
    """psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for x >= 0.5 (Hurwitz zeta: a shifted sum and
    Euler-Maclaurin); below, the reflection formula
    psi^(n)(1 - x) + (-1)^(n+1) psi^(n)(x) = (-1)^n pi d^n/dx^n cot(pi x). The poles
    (0, -1, ...) are set by the row: +inf for odd n, -inf for even n, as torch's zeta gives."""
    sign = 1.0 if n % 2 == 1 else -1.0
    fact = float(math.factorial(n))
    neg = x.lt(0.5)
    xr = X.where(neg, 1.0 - x, x)
    pos = sign * fact * _hurwitz_pos(n + 1, xr)
    # psi^(n)(1 - x) + (-1)^(n+1) psi^(n)(x) = (-1)^n pi d^n cot(pi x)
    # => psi^(n)(x) = (-1)^(n+1) [(-1)^n pi D - psi^(n)(1 - x)]
    refl = (-1.0) ** (n + 1) * ((-1.0) ** n * math.pi * _cot_derivative(n, x) - pos)
    r = X.where(neg, refl, pos)
    return r


@lowers("aten.polygamma.default", "aten.special_polygamma.default")
def _polygamma(L, node, args, kwargs):
    n, x = args[0], args[1]
    if not isinstance(n, int) or n < 0:
        raise Unsupported("polygamma with a tensor or negative order")
    dt = _float_out(node, f64_ok=False)
    xv = _arg64(L, x, node)
    if n == 0:
        r = digamma(xv)
    else:
        if n > 4:
            raise Unsupported(f"polygamma of order {n} (coil lowers orders 0-4)")
        r = polygamma(n, xv)
        pole = xv.le(0) & xv.eq(xv.fn("floor"))
        r = X.where(pole, math.inf if n % 2 == 1 else -math.inf, r)
        r = X.where(xv.eq(math.inf), 0.0, r)
        r = X.where(xv.eq(-math.inf), math.nan, r)
        r = X.where(xv.isnan(), xv, r)
    return Value(r.cast(dt).v)


@lowers("aten.mvlgamma.default", "aten.special_multigammaln.default")
def _mvlgamma(L, node, args, kwargs):
    x, p = args[0], int(args[1])
    dt = _float_out(node, f64_ok=False)
    xv = _arg64(L, x, node)
    acc = xv * 0.0 + (p * (p - 1) / 4.0) * math.log(math.pi)
    for j in range(p):
        acc = acc + lgamma(xv - j / 2.0)
    return Value(acc.cast(dt).v)


# ---- small composites ------------------------------------------------------------------------

@lowers("aten.aminmax.default")
def _aminmax(L, node, args, kwargs):
    x = args[0]
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    keepdim = bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))
    attrs = {"keepdim": keepdim}
    if dim is not None:
        attrs["axes"] = [int(dim)]
    if L.rank(x) == 0:
        return (x, x)
    if 0 in _shape(L, x):
        raise Unsupported("aminmax of an empty tensor")
    return (Value(L.op("min", [x], attrs)), Value(L.op("max", [x], attrs)))


@lowers("aten.max.default", "aten.min.default", "prims.amax.default", "prims.amin.default")
def _max_all(L, node, args, kwargs):
    x = args[0]
    target = str(node.target)
    which = "max" if ("max" in target) else "min"
    attrs = {"keepdim": False}
    if target.startswith("prims."):
        dims = args[1] if len(args) > 1 else kwargs.get("dims")
        if dims is not None:
            if len(dims) == 0:
                return x
            attrs["axes"] = [int(d) for d in dims]
    if L.rank(x) == 0:
        return x
    if 0 in _shape(L, x):
        raise Unsupported(f"{target} of an empty tensor")
    return Value(L.op(which, [x], attrs))


@lowers("prims.prod.default")
def _prims_prod(L, node, args, kwargs):
    x, dims = args[0], args[1]
    x = L.cast(x, _out_dtype(node))
    if dims is not None and len(dims) == 0:
        return x
    attrs = {"keepdim": False}
    if dims is not None:
        attrs["axes"] = [int(d) for d in dims]
    return Value(L.op("prod", [x], attrs))


@lowers("aten.count_nonzero.default", "aten.count_nonzero.dim_IntList")
def _count_nonzero(L, node, args, kwargs):
    x = args[0]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    if isinstance(dims, int):
        dims = [dims]
    nz = L.cast(Value(L.op("ne", [x, Value(L.full(0, meta_of(node.args[0])[1]))])),
                torch.int64)
    attrs = {"keepdim": False}
    if dims:
        attrs["axes"] = [int(d) for d in dims]
    return Value(L.op("sum", [nz], attrs))


@lowers("aten.zero.default")
def _zero(L, node, args, kwargs):
    shp, dt = meta_of(node)
    return Value(L.full(0, dt, shp))


@lowers("aten.dist.default")
def _dist(L, node, args, kwargs):
    """||a - b||_p: p = 0 (count of nonzeros), inf, -inf, or a positive p."""
    dt = _out_dtype(node)
    if not dt.is_floating_point:
        raise Unsupported("dist of integers")
    p = args[2] if len(args) > 2 else kwargs.get("p", 2)
    if isinstance(p, Value):
        raise Unsupported("dist with a tensor p")
    p = float(p)
    d = X(L, L.op("sub", [L.cast(args[0], dt), L.cast(args[1], dt)]), dt).fn("abs")
    if d.L.rank(d.v) == 0:
        d = X(L, L.op("reshape", [d.v], {"shape": [1]}), dt)
    if p == math.inf:
        return Value(L.op("max", [d.v], {"keepdim": False}))
    if p == -math.inf:
        return Value(L.op("min", [d.v], {"keepdim": False}))
    if p == 0:
        nz = X(L, L.cast(d.ne(0).v, dt), dt)
        return Value(L.op("sum", [nz.v], {"keepdim": False}))
    if p < 0:
        raise Unsupported("dist with a negative p")
    if p == 1:
        return Value(L.op("sum", [d.v], {"keepdim": False}))
    if p == 2:
        s = X(L, L.op("sum", [(d * d).v], {"keepdim": False}), dt)
        return Value(s.fn("sqrt").v)
    s = X(L, L.op("sum", [(d ** p).v], {"keepdim": False}), dt)
    return Value((s ** (1.0 / p)).v)


@lowers("aten.smooth_l1_loss.default")
def _smooth_l1_loss(L, node, args, kwargs):
    x, y = args[0], args[1]
    reduction = args[2] if len(args) > 2 else kwargs.get("reduction", 1)
    beta = float(args[3] if len(args) > 3 else kwargs.get("beta", 1.0))
    dt = _out_dtype(node)
    d = X(L, L.op("sub", [L.cast(x, dt), L.cast(y, dt)]), dt).fn("abs")
    if beta == 0:
        loss = d
    else:
        loss = X.where(d.lt(beta), 0.5 * d * d / beta, d - 0.5 * beta)
    if reduction == 0:
        return loss.v
    op = "mean" if reduction == 1 else "sum"
    return Value(L.op(op, [loss.v], {"keepdim": False}))


@lowers("aten.linalg_cross.default")
def _cross(L, node, args, kwargs):
    a, b = args[0], args[1]
    dim = int(args[2] if len(args) > 2 else kwargs.get("dim", -1))
    shp, dt = meta_of(node)
    rank = len(shp)
    dim %= rank
    a = Value(L.op("expand", [L.cast(a, dt)], {"shape": list(shp)}))
    b = Value(L.op("expand", [L.cast(b, dt)], {"shape": list(shp)}))

    def comp(v, i):
        return X(L, L.op("slice", [v], {"dim": dim, "start": i, "end": i + 1}), dt)
    a0, a1, a2 = (comp(a, i) for i in range(3))
    b0, b1, b2 = (comp(b, i) for i in range(3))
    parts = [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0]
    return Value(L.op("concat", [p.v for p in parts], {"dim": dim}))


def _shape(L, v):
    return L.shape(v)


# ---- integer division (prims.div truncates integers) -----------------------------------------

def int_trunc_div(L, a, b, dt):
    """a / b rounded toward zero, for integer a, b of dtype dt: the f64 quotient, truncated,
    then corrected with the exact integer remainder (twice: an i64 beyond 2^53 is rounded in
    f64). Division by zero: torch raises; here the result is unspecified."""
    a64 = X(L, L.cast(a, torch.float64), torch.float64)
    b64 = X(L, L.cast(b, torch.float64), torch.float64)
    q = (a64 / b64)
    q = X.where(q.lt(0), q.fn("ceil"), q.fn("floor"))
    q = X(L, L.cast(X.where(q.isnan() | q.isinf(), 0.0, q).v, torch.int64), torch.int64)
    ai = X(L, L.cast(a, torch.int64), torch.int64)
    bi = X(L, L.cast(b, torch.int64), torch.int64)
    if dt == torch.int64:
        for _ in range(2):
            r = ai - q * bi
            r64 = X(L, L.cast(r.v, torch.float64), torch.float64)
            dq = r64 / b64
            dq = X.where(dq.lt(0), dq.fn("ceil"), dq.fn("floor"))
            dq = X.where(dq.isnan() | dq.isinf(), 0.0, dq)
            q = q + X(L, L.cast(dq.v, torch.int64), torch.int64)
    # the remainder must have a's sign (or be 0) and be smaller than |b|
    r = ai - q * bi
    sab = X.where(ai.lt(0).ne(bi.lt(0)), -1.0, 1.0, torch.int64)
    wrong_sign = r.ne(0) & (r.lt(0).ne(ai.lt(0)))
    too_big = r.fn("abs").ge(bi.fn("abs")) & bi.ne(0)
    q = X.where(wrong_sign, q - sab, X.where(too_big, q + sab, q))
    return Value(L.cast(q.v, dt))


@lowers("aten.nan_to_num.default")
def _nan_to_num(L, node, args, kwargs):
    x = args[0]
    dt = _out_dtype(node)
    if not dt.is_floating_point:
        return x
    get = lambda i, k: args[i] if len(args) > i else kwargs.get(k)
    nan, posinf, neginf = get(1, "nan"), get(2, "posinf"), get(3, "neginf")
    info = torch.finfo(dt)
    nan = 0.0 if nan is None else float(nan)
    posinf = info.max if posinf is None else float(posinf)
    neginf = info.min if neginf is None else float(neginf)
    v = X(L, x, dt)
    r = X.where(v.isnan(), nan, X.where(v.eq(math.inf), posinf, X.where(
        v.eq(-math.inf), neginf, v)))
    return Value(r.v)


# ---- the error function family and Bessel I0/I1 (f32 and narrower: computed in f64) ---------

_SQRT_PI = math.sqrt(math.pi)


def _erfc_cf(a):
    """The continued fraction K(a) = a + (1/2)/(a + (2/2)/(a + ...)), erfc(a) = exp(-a^2) /
    (sqrt(pi) K(a)) for a >= 2 (50 terms: converged to ~1e-16 there)."""
    t = a
    for n in range(50, 0, -1):
        t = a + (n / 2.0) / t
    return t


def erfc(x):
    a = x.fn("abs")
    ac = X.where(a.lt(2.0), 2.0, a)  # the continued fraction's argument (>= 2)
    big = (-(ac * ac)).fn("exp") / (_SQRT_PI * _erfc_cf(ac))
    pos = X.where(a.lt(2.0), 1.0 - a.fn("erf"), big)  # erfc(|x|)
    r = X.where(x.lt(0), 2.0 - pos, pos)
    r = X.where(x.eq(math.inf), 0.0, X.where(x.eq(-math.inf), 2.0, r))
    return X.where(x.isnan(), x, r)


def erfcx(x):
    """exp(x^2) erfc(x): 1 / (sqrt(pi) K(x)) for x >= 2, exp(x^2) erfc(x) below."""
    ac = X.where(x.lt(2.0), 2.0, x)
    big = 1.0 / (_SQRT_PI * _erfc_cf(ac))
    xs = X.where(x.lt(2.0), x, 0.0)
    small = (xs * xs).fn("exp") * erfc(xs)
    r = X.where(x.lt(2.0), small, big)
    r = X.where(x.eq(math.inf), 0.0, X.where(x.eq(-math.inf), math.inf, r))
    return X.where(x.isnan(), x, r)


def log_ndtr(x):
    """log(Phi(x)): -t^2 + log(erfcx(t) / 2) with t = -x / sqrt(2) for x < -1 (no underflow),
    log1p(-erfc(x / sqrt(2)) / 2) above (as torch)."""
    t = x * (-1.0 / math.sqrt(2.0))
    low = -(t * t) + (erfcx(X.where(x.lt(-1.0), t, 1.0)) * 0.5).fn("log")
    high = (erfc(x * (1.0 / math.sqrt(2.0))) * -0.5).fn("log1p")
    r = X.where(x.lt(-1.0), low, high)
    r = X.where(x.eq(-math.inf), -math.inf, r)
    return X.where(x.isnan(), x, r)


def _ndtr(x):
    return 0.5 * erfc(x * (-1.0 / math.sqrt(2.0)))


_ACKLAM_A = [-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00]
_ACKLAM_B = [-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
             6.680131188771972e+01, -1.328068155288572e+01]
_ACKLAM_C = [-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00]
_ACKLAM_D = [7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
             3.754408661907416e+00]


def _acklam(p):
    """Acklam's rational approximation of the normal quantile (~1e-9 relative), the start of
    the Newton steps below."""
    plow = 0.02425
    q = p - 0.5
    r = q * q
    central = (_polevl(r, _ACKLAM_A) * q) / (_polevl(r, _ACKLAM_B) * r + 1.0)
    pl = X.where(p.lt(plow), p, plow)
    ql = (-2.0 * pl.fn("log")).fn("sqrt")
    lower = _polevl(ql, _ACKLAM_C) / (_polevl(ql, _ACKLAM_D) * ql + 1.0)
    pu = X.where(p.gt(1 - plow), 1.0 - p, plow)
    qu = (-2.0 * pu.fn("log")).fn("sqrt")
    upper = -_polevl(qu, _ACKLAM_C) / (_polevl(qu, _ACKLAM_D) * qu + 1.0)
    return X.where(p.lt(plow), lower, X.where(p.gt(1 - plow), upper, central))


def ndtri(p):
    """The normal quantile: Acklam's start, then three Newton steps on the tail probability
    (the smaller of p, 1 - p, through the accurate erfc): full f64 accuracy."""
    x = _acklam(X.where(p.le(0) | p.ge(1) | p.isnan(), 0.5, p))
    lowside = p.lt(0.5)
    for _ in range(3):
        # f(x) = Phi(x) - p on the lower side, (1 - Phi(x)) - (1 - p) on the upper side
        phi_low = _ndtr(x)
        phi_up = 0.5 * erfc(x * (1.0 / math.sqrt(2.0)))
        f = X.where(lowside, phi_low - p, (1.0 - p) - phi_up)
        dens = (-0.5 * x * x).fn("exp") * (1.0 / math.sqrt(2 * math.pi))
        x = x - f / dens
    r = X.where(p.eq(0), -math.inf, X.where(p.eq(1), math.inf, x))
    r = X.where(p.lt(0) | p.gt(1), math.nan, r)
    return X.where(p.isnan(), p, r)


def erfinv(y):
    """The inverse error function: x = ndtri((y + 1) / 2) / sqrt(2) as a start, then Newton
    steps on erf(x) - y (|y| < 0.5) or on erfc(|x|) - (1 - |y|) (exact in f64 for f32 y)."""
    a = y.fn("abs")
    p = X.where(a.ge(1) | a.isnan(), 0.75, (a + 1.0) * 0.5)
    x = ndtri(p) * (1.0 / math.sqrt(2.0))
    for _ in range(2):
        f = X.where(a.lt(0.5), x.fn("erf") - a, (1.0 - a) - erfc(x))
        dens = (2.0 / _SQRT_PI) * (-(x * x)).fn("exp")
        x = x - f / dens
    r = X.where(a.eq(1), math.inf, X.where(a.gt(1), math.nan, x))
    r = X.where(y.lt(0), -r, X.where(y.eq(0), y, r))
    return X.where(y.isnan(), y, r)


_elementwise(_both("erfc"), erfc, f64_ok=False)
_elementwise(["aten.special_erfcx.default"], erfcx, f64_ok=False)
_elementwise(["aten.special_log_ndtr.default"], log_ndtr, f64_ok=False)
_elementwise(["aten.special_ndtri.default", "prims.ndtri.default"], ndtri, f64_ok=False)
_elementwise(["aten.erfinv.default", "prims.erf_inv.default"], erfinv, f64_ok=False)


def _bessel_i(nu, x, scaled):
    """I_nu(|x|) (nu = 0, 1), times exp(-|x|) when scaled: the power series (all terms
    positive: no cancellation) below 40, the asymptotic series above."""
    a = x.fn("abs")
    small_a = X.where(a.lt(40.0), a, 0.0)
    z = small_a * small_a * 0.25
    term = small_a * 0.0 + 1.0
    if nu == 1:
        term = small_a * 0.5
    total = term
    for k in range(1, 121):
        term = term * z / float(k * (k + nu))
        total = total + term
    if scaled:
        total = total * (-small_a).fn("exp")
    big_a = X.where(a.lt(40.0), 40.0, a)
    mu = 4.0 * nu * nu
    series = big_a * 0.0 + 1.0
    c = 1.0
    inv = 1.0 / big_a
    p = big_a * 0.0 + 1.0
    for k in range(1, 16):
        c *= -(mu - (2 * k - 1) ** 2) / (k * 8.0)
        p = p * inv
        series = series + p * c
    pref = 1.0 / (2 * math.pi * big_a).fn("sqrt")
    big = pref * series if scaled else (0.5 * big_a).fn("exp") * pref * series * (
        0.5 * big_a).fn("exp")
    r = X.where(a.lt(40.0), total, big)
    if nu == 1:
        r = X.where(x.lt(0), -r, r)
    if scaled:
        r = X.where(a.eq(math.inf), 0.0, r)
    else:
        r = X.where(a.eq(math.inf), X.where(x.lt(0), -math.inf, math.inf) if nu == 1
                    else math.inf, r)
    return X.where(x.isnan(), x, r)


_elementwise(["aten.i0.default", "prims.bessel_i0.default", "aten.special_i0.default"],
             lambda x: _bessel_i(0, x, False), f64_ok=False)
_elementwise(["aten.special_i0e.default", "prims.bessel_i0e.default"],
             lambda x: _bessel_i(0, x, True), f64_ok=False)
_elementwise(["aten.special_i1.default", "prims.bessel_i1.default"],
             lambda x: _bessel_i(1, x, False), f64_ok=False)
_elementwise(["aten.special_i1e.default", "prims.bessel_i1e.default"],
             lambda x: _bessel_i(1, x, True), f64_ok=False)


# ---- Hurwitz zeta (f32 and narrower: computed in f64) ----------------------------------------

_ZETA_A = [12.0, -720.0, 30240.0, -1209600.0, 47900160.0, -1.8924375803183791606e9,
           7.47242496e10, -2.950130727918164224e12, 1.1646782814350067249e14,
           -4.5979787224074726105e15, 1.8152105401943546773e17, -7.1661652561756670113e18]


def _zeta_pos(s, q, shift=12):
    """zeta(s, q) for s > 1, q > 0: the first `shift` terms, then Euler-Maclaurin at
    w = q + shift with Cephes' 12 Bernoulli terms (torch's zeta, without its early exits)."""
    total = q * 0.0
    for k in range(shift):
        total = total + (q + float(k)) ** (-s)
    w = q + float(shift)
    b = w ** (-s)
    total = total + b * w / (s - 1.0) + 0.5 * b  # w's own term is not in the sum
    a = s * 0.0 + 1.0
    kk = 0.0
    for i in range(12):
        a = a * (s + kk)
        b = b / w
        total = total + a * b / _ZETA_A[i]
        kk += 1.0
        a = a * (s + kk)
        b = b / w
        kk += 1.0
    return total


def zeta(s, q):
    """torch's zeta(x, q): inf at x = 1, NaN below; q <= 0: inf at the integers, NaN for a
    non-integer x, else (integer x, q < 0 not an integer) the shift to positive arguments
    zeta(x, q) = zeta(x, r) + (-1)^x (zeta(x, 1 - r) - zeta(x, 1 - q)), r = q - floor(q)
    (the sum of (q + k)^-x over the k that bring q above 0, exactly)."""
    ok_s = X.where(s.gt(1.0), s, 2.0)
    qpos = X.where(q.gt(0), q, 1.0)
    pos = _zeta_pos(ok_s, qpos)
    r = q - q.fn("floor")
    rr = X.where(r.gt(0), r, 0.5)
    one_minus_q = X.where(q.lt(0), 1.0 - q, 2.0)
    half = ok_s * 0.5
    sign = X.where(half.eq(half.fn("floor")), 1.0, -1.0)
    neg = _zeta_pos(ok_s, rr) + sign * (_zeta_pos(ok_s, 1.0 - rr) - _zeta_pos(ok_s, one_minus_q))
    out = X.where(q.gt(0), pos, neg)
    q_int = q.eq(q.fn("floor"))
    s_int = s.eq(s.fn("floor"))
    out = X.where(q.le(0) & ~q_int & ~s_int, math.nan, out)
    out = X.where(q.le(0) & q_int, math.inf, out)
    out = X.where(s.lt(1.0), math.nan, out)
    out = X.where(s.eq(1.0), math.inf, out)
    # x = inf: q^-inf (1 at q = 1, 0 above, inf below)
    out = X.where(s.eq(math.inf) & q.gt(0), X.where(q.eq(1.0), 1.0, X.where(
        q.gt(1.0), 0.0, math.inf)), out)
    return X.where(s.isnan() | q.isnan(), math.nan, out)


_elementwise(["aten.special_zeta.default", "aten.special_zeta.self_scalar",
              "aten.special_zeta.other_scalar", "prims.zeta.default"], zeta, f64_ok=False,
             nargs=2)


# ---- Chebyshev polynomials T, U, V, W and their shifted forms --------------------------------
# torch: n = int(n) (truncated); 0 for n < 0; fixed values at x = +-1 (0 and 1 when shifted);
# the three-term recurrence up to n (here unrolled for n <= 8, each n selected by a where);
# larger n: the closed forms (torch's own for |x| < 1; for |x| > 1 the hyperbolic ones, the
# same polynomial without the recurrence's rounding).

_CHEB_UNROLL = 8


def _cheb_closed(kind, x, n):
    """The closed form at x (|x| != 1) and order n (f64 values): trigonometric inside
    (-1, 1), hyperbolic outside (with the parity rule for x < -1)."""
    inside = x.fn("abs").lt(1.0)
    xi = X.where(inside, x, 0.0)
    th = acos(xi)
    if kind == "t":
        trig = (n * th).fn("cos")
    elif kind == "u":
        trig = ((n + 1.0) * th).fn("sin") / th.fn("sin")
    elif kind == "v":
        trig = ((n + 0.5) * th).fn("cos") / (0.5 * th).fn("cos")
    else:
        trig = ((n + 0.5) * th).fn("sin") / (0.5 * th).fn("sin")
    a = X.where(inside, 2.0, x.fn("abs"))
    t = acosh(a)  # a = cosh t, t > 0

    def log_cosh(z):  # log cosh z for z >= 0, no overflow
        return z + (-2.0 * z).fn("exp").fn("log1p") - math.log(2.0)

    def log_sinh(z):  # log sinh z for z > 0
        return z + (-(-2.0 * z).fn("expm1")).fn("log") - math.log(2.0)
    # value at +|x| and at -|x| (parity: T, U: (-1)^n; V(-a) = (-1)^n W(a), W(-a) = (-1)^n V(a))
    if kind == "t":
        pos = log_cosh(n * t).fn("exp")
        neg_mag = pos
    elif kind == "u":
        pos = (log_sinh((n + 1.0) * t) - log_sinh(t)).fn("exp")
        neg_mag = pos
    else:
        vv = (log_cosh((n + 0.5) * t) - log_cosh(0.5 * t)).fn("exp")
        ww = (log_sinh((n + 0.5) * t) - log_sinh(0.5 * t)).fn("exp")
        pos, neg_mag = (vv, ww) if kind == "v" else (ww, vv)
    half = n * 0.5
    odd = ~half.eq(half.fn("floor"))
    neg = X.where(odd, -neg_mag, neg_mag)
    hyper = X.where(x.gt(0), pos, neg)
    return X.where(inside, trig, hyper)


def _cheb(kind, shifted):
    if not torch.__version__.startswith("1.13"):
        # checked against torch 1.13's kernels; torch 2.11 differs on at least one value of U
        # (not yet understood): other versions stay in eager
        def refuse(x, n):
            raise Unsupported(f"Chebyshev polynomials on torch {torch.__version__} (checked "
                              "on 1.13 only)")
        return refuse

    def fn(x, n):
        ni = X.where(n.lt(0), n.fn("ceil"), n.fn("floor"))  # int64(n): truncation
        y = 2.0 * x - 1.0 if shifted else x
        # the recurrence, p_0 = 1, p_1 = (x, 2x, 2x - 1, 2x + 1), p_k = 2y p_(k-1) - p_(k-2)
        p0 = y * 0.0 + 1.0
        p1 = {"t": y, "u": y + y, "v": y + y - 1.0, "w": y + y + 1.0}[kind]
        val = X.where(ni.eq(0), p0, p1)
        a, b = p0, p1
        for k in range(2, _CHEB_UNROLL + 1):
            a, b = b, (y + y) * b - a
            val = X.where(ni.eq(float(k)), b, val)
        big = ni.gt(float(_CHEB_UNROLL))
        closed = _cheb_closed(kind, X.where(y.fn("abs").eq(1.0), 0.5, y),
                              X.where(big, ni, float(_CHEB_UNROLL + 1)))
        val = X.where(big, closed, val)
        # |y| = 1 (x = 1 or 0 when shifted): torch's fixed values
        half = ni * 0.5
        even = half.eq(half.fn("floor"))
        one = {"t": (1.0, X.where(even, 1.0, -1.0)),
               "u": (ni + 1.0, X.where(even, ni + 1.0, -(ni + 1.0))),
               "v": (1.0, X.where(even, 2.0 * ni + 1.0, -(2.0 * ni + 1.0))),
               "w": (2.0 * ni + 1.0, X.where(even, 1.0, -1.0))}[kind]
        at_one = one[0] if isinstance(one[0], X) else y * 0.0 + one[0]
        val = X.where(y.eq(1.0), at_one, X.where(y.eq(-1.0), one[1], val))
        val = X.where(ni.lt(0), 0.0, val)
        return X.where(x.isnan() | n.isnan(), math.nan, val)
    return fn


for _kind in "tuvw":
    _elementwise([f"aten.special_chebyshev_polynomial_{_kind}.default",
                  f"aten.special_chebyshev_polynomial_{_kind}.x_scalar",
                  f"aten.special_chebyshev_polynomial_{_kind}.n_scalar"],
                 _cheb(_kind, False), f64_ok=False, nargs=2)
    _elementwise([f"aten.special_shifted_chebyshev_polynomial_{_kind}.default",
                  f"aten.special_shifted_chebyshev_polynomial_{_kind}.x_scalar",
                  f"aten.special_shifted_chebyshev_polynomial_{_kind}.n_scalar"],
                 _cheb(_kind, True), f64_ok=False, nargs=2)


def _spherical_j0(x):
    r = x.fn("sin") / X.where(x.eq(0), 1.0, x)
    r = X.where(x.eq(0), 1.0, r)
    return X.where(x.isinf(), 0.0, r)


_elementwise(["aten.special_spherical_bessel_j0.default", "prims.spherical_bessel_j0.default"],
             _spherical_j0)
_elementwise(["aten.special_modified_bessel_i0.default"], lambda x: _bessel_i(0, x, False),
             f64_ok=False)
_elementwise(["aten.special_modified_bessel_i1.default"], lambda x: _bessel_i(1, x, False),
             f64_ok=False)


@lowers("aten.frexp.Tensor")
def _frexp(L, node, args, kwargs):
    """(mantissa in [0.5, 1), exponent): x = m 2^e, exactly (f64; a division by a power of 2);
    0, inf and NaN give themselves and exponent 0 (std::frexp)."""
    x = args[0]
    dt = meta_of(node.args[0])[1]
    if not dt.is_floating_point:
        raise Unsupported("frexp of integers")
    v = X(L, L.cast(x, torch.float64), torch.float64)
    a = v.fn("abs")
    special = a.eq(0) | a.isinf() | a.isnan()
    a1 = X.where(special, 1.0, a)
    e = (a1.fn("log") * (1.0 / math.log(2.0))).fn("floor") + 1.0
    e = X.where((2.0 ** (e - 1.0)).gt(a1), e - 1.0, e)
    e = X.where((2.0 ** e).le(a1), e + 1.0, e)
    m = X.where(special, v, v / (2.0 ** e))
    e = X.where(special, 0.0, e)
    return (Value(L.cast(m.v, dt)), Value(L.cast(e.v, torch.int32)))


@lowers("aten._trilinear.default")
def _trilinear(L, node, args, kwargs):
    """sum over sumdim of i1 * i2 * i3, each unsqueezed at its expand dims (in increasing
    order), as aten's _trilinear defines it."""
    i1, i2, i3 = args[0], args[1], args[2]
    e1, e2, e3, sumdim = (list(a) for a in args[3:7])
    shp, dt = meta_of(node)
    total = L.rank(i1) + len(e1)
    vs = [i1, i2, i3]
    for d in range(total):
        for j, e in enumerate((e1, e2, e3)):
            if d in e:
                vs[j] = Value(L.op("unsqueeze", [vs[j]], {"dim": d}))
    prod = Value(L.op("mul", [Value(L.op("mul", [vs[0], vs[1]])), vs[2]]))
    if sumdim:
        prod = Value(L.op("sum", [prod], {"axes": sorted(sumdim), "keepdim": False}))
    return Value(L.op("reshape", [L.cast(prod, dt)], {"shape": list(shp)}))


@lowers("aten.multi_margin_loss.default")
def _multi_margin_loss(L, node, args, kwargs):
    """torch's: per row, sum over the classes j != y of max(0, margin - x[y] + x[j])^p (times
    weight[y]), over the number of classes; then the reduction."""
    x, target = args[0], args[1]
    get = lambda i, k, d: args[i] if len(args) > i else kwargs.get(k, d)
    p, margin, weight, reduction = get(2, "p", 1), get(3, "margin", 1), get(4, "weight", None), \
        get(5, "reduction", 1)
    dt = _float_out(node)
    if p not in (1, 2):
        raise Unsupported(f"multi_margin_loss with p={p}")
    xs = list(_shape(L, x))
    if len(xs) <= 1:
        x = Value(L.op("reshape", [x], {"shape": [1, xs[0] if xs else 1]}))
        target = Value(L.op("reshape", [target], {"shape": [1]}))
    n, c = _shape(L, x)
    if n == 0 or c == 0:
        raise Unsupported("multi_margin_loss of an empty input")
    t = Value(L.op("reshape", [L.cast(target, torch.int64)], {"shape": [n, 1]}))
    xv = X(L, L.cast(x, dt), dt)
    # x[i, y_i]: a flat gather
    flat = Value(L.op("reshape", [xv.v], {"shape": [n * c]}))
    rows = Value(L.op("iota", [], {"size": n, "step": c, "dtype": DTypeName("i64")}))
    lin = Value(L.op("add", [Value(L.op("reshape", [rows], {"shape": [n, 1]})), t]))
    xy = X(L, L.op("gather", [flat, lin], {"axis": 0}), dt)  # [n, 1]
    z = margin - xy + xv
    h = z if p == 1 else z * z
    j = Value(L.op("reshape", [Value(L.op("iota", [], {"size": c, "dtype": DTypeName("i64")}))],
                   {"shape": [1, c]}))
    keep = X(L, L.op("ne", [j, t]), torch.bool) & z.gt(0)
    h = X.where(keep, h, 0.0)
    if weight is not None:
        wy = X(L, L.op("gather", [L.cast(weight, dt), t], {"axis": 0}), dt)  # [n, 1]
        h = h * wy
    per = X(L, L.op("sum", [h.v], {"axes": [1], "keepdim": False}), dt) / float(c)
    if reduction == 0:
        return Value(L.op("reshape", [per.v], {"shape": list(meta_of(node)[0])}))
    op = "mean" if reduction == 1 else "sum"
    return Value(L.op(op, [per.v], {"keepdim": False}))


@lowers("aten.multilabel_margin_loss_forward.default")
def _multilabel_margin_loss(L, node, args, kwargs):
    """(loss, is_target): the targets of a row are its entries before the first -1; the loss
    sums max(0, 1 - (x[y] - x[j])) over those y and the classes j that are not targets, over
    the number of classes."""
    x, target, reduction = args[0], args[1], args[2]
    dt = meta_of(node.args[0])[1]
    if not dt.is_floating_point:
        raise Unsupported("multilabel_margin_loss of integers")
    xs = list(_shape(L, x))
    if len(xs) <= 1:
        c0 = xs[0] if xs else 1
        x = Value(L.op("reshape", [x], {"shape": [1, c0]}))
        target = Value(L.op("reshape", [target], {"shape": [1, c0]}))
    n, c = _shape(L, x)
    if n == 0 or c == 0:
        raise Unsupported("multilabel_margin_loss of an empty input")
    from .lowering_scatter import _scan
    t = L.cast(target, torch.int64)
    stop = L.cast(Value(L.op("eq", [t, Value(L.full(-1, torch.int64))])), torch.int64)
    valid = Value(L.op("eq", [_scan(L, stop, 1, "sum"), Value(L.full(0, torch.int64))]))  # [n, c]
    tk = Value(L.op("unsqueeze", [t], {"dim": 2}))  # [n, k, 1]
    j = Value(L.op("reshape", [Value(L.op("iota", [], {"size": c, "dtype": DTypeName("i64")}))],
                   {"shape": [1, 1, c]}))
    hit = Value(L.op("logical_and", [Value(L.op("eq", [tk, j])),
                                     Value(L.op("unsqueeze", [valid], {"dim": 2}))]))  # [n,k,c]
    is_t = Value(L.op("gt", [Value(L.op("max", [L.cast(hit, torch.int32)], {"axes": [1]})),
                             Value(L.full(0, torch.int32))]))  # [n, c]
    xv = L.cast(x, dt)
    flat = Value(L.op("reshape", [xv], {"shape": [n * c]}))
    rows = Value(L.op("iota", [], {"size": n, "step": c, "dtype": DTypeName("i64")}))
    tc = Value(L.op("clamp", [t], {"min": 0.0, "max": float(c - 1)}))
    lin = Value(L.op("add", [Value(L.op("reshape", [rows], {"shape": [n, 1]})), tc]))
    xy = X(L, L.op("unsqueeze", [Value(L.op("gather", [flat, lin], {"axis": 0}))], {"dim": 2}),
           dt)  # [n, k, 1]
    xj = X(L, L.op("unsqueeze", [xv], {"dim": 1}), dt)  # [n, 1, c]
    z = 1.0 - (xy - xj)
    use = X(L, L.op("unsqueeze", [valid], {"dim": 2}), torch.bool) & ~X(
        L, L.op("unsqueeze", [is_t], {"dim": 1}), torch.bool) & z.gt(0)
    h = X.where(use, z, 0.0)
    per = X(L, L.op("sum", [h.v], {"axes": [1, 2], "keepdim": False}), dt) / float(c)
    shapes = [list(v.shape) for v in node.meta["val"]] if isinstance(
        node.meta.get("val"), (tuple, list)) else [list(v.shape) for v in node.meta["tensor_meta"]]
    if reduction == 0:
        loss = Value(L.op("reshape", [per.v], {"shape": shapes[0]}))
    else:
        loss = Value(L.op("mean" if reduction == 1 else "sum", [per.v], {"keepdim": False}))
    ist = Value(L.op("reshape", [L.cast(is_t, dt)], {"shape": shapes[1]}))
    return (loss, ist)


@lowers("aten.histc.default")
def _histc(L, node, args, kwargs):
    """torch 1.13's histc (linear bins, no local search): bin = int((x - lo) / (hi - lo) * bins)
    in the input's dtype (the order matters on bin edges: checked against 1.13; other torch
    versions stay in eager until checked), the last edge in the last bin, values outside [lo, hi] (and NaN) dropped;
    lo = hi = 0: the data's min and max; equal edges widen by 0.5 each side (all values then
    fall in the middle bin). Counts by one-hot comparisons."""
    x = args[0]
    get = lambda i, k, d: args[i] if len(args) > i else kwargs.get(k, d)
    bins, lo, hi = int(get(1, "bins", 100)), float(get(2, "min", 0)), float(get(3, "max", 0))
    shp, dt = meta_of(node)
    if not torch.__version__.startswith("1.13"):
        raise Unsupported(f"histc on torch {torch.__version__} (its bin formula is checked on "
                          "1.13 only)")
    if not dt.is_floating_point:
        raise Unsupported("histc of integers")
    n = 1
    for e in _shape(L, x):
        n *= e
    if n == 0:
        return Value(L.full(0, dt, shp))
    v = X(L, L.op("reshape", [L.cast(x, dt)], {"shape": [n]}), dt)
    if lo == hi:
        left = X(L, L.op("min", [v.v], {"keepdim": False}), dt)
        right = X(L, L.op("max", [v.v], {"keepdim": False}), dt)
        same = left.eq(right)
        left, right = X.where(same, left - 0.5, left), X.where(same, right + 0.5, right)
    else:
        left = X(L, L.full(lo, dt), dt)
        right = X(L, L.full(hi, dt), dt)
    valid = v.ge(left) & v.le(right)
    pos = ((v - left) / (right - left)) * float(bins)
    pos = X(L, L.cast(X.where(valid, pos, 0.0).v, torch.int64), torch.int64)
    pos = X.where(pos.eq(float(bins)), float(bins - 1), pos)
    j = Value(L.op("reshape", [Value(L.op("iota", [], {"size": bins,
                                                      "dtype": DTypeName("i64")}))],
                   {"shape": [1, bins]}))
    hit = Value(L.op("logical_and", [Value(L.op("eq", [
        Value(L.op("reshape", [pos.v], {"shape": [n, 1]})), j])),
        Value(L.op("reshape", [valid.v], {"shape": [n, 1]}))]))
    return Value(L.op("sum", [L.cast(hit, dt)], {"axes": [0], "keepdim": False}))


@lowers("aten.isin.Tensor_Tensor", "aten.isin.Tensor_Scalar", "aten.isin.Scalar_Tensor")
def _isin(L, node, args, kwargs):
    """elements == any of test_elements (one comparison each): exact; invert negates."""
    e, t = args[0], args[1]
    invert = bool(kwargs.get("invert", args[3] if len(args) > 3 else False))
    shp, _ = meta_of(node)
    dt = torch.promote_types(*[meta_of(a)[1] if isinstance(a, torch.fx.Node) else
                               torch.tensor(a).dtype for a in node.args[:2]])
    ev = Value(L.cast(e, dt)) if isinstance(e, Value) else Value(L.full(e, dt))
    tv = Value(L.cast(t, dt)) if isinstance(t, Value) else Value(L.full(t, dt))
    n = 1
    for s in _shape(L, tv):
        n *= s
    if n == 0:
        return Value(L.full(1 if invert else 0, torch.bool, shp))
    tf = Value(L.op("reshape", [tv], {"shape": [1] * len(shp) + [n]}))
    eu = Value(L.op("unsqueeze", [Value(L.op("reshape", [ev], {"shape": list(shp)}))],
                    {"dim": len(shp)}))
    hit = Value(L.op("max", [L.cast(Value(L.op("eq", [eu, tf])), torch.int32)],
                     {"axes": [len(shp)], "keepdim": False}))
    r = Value(L.op("gt", [hit, Value(L.full(0, torch.int32))]))
    return Value(L.op("logical_not", [r])) if invert else r


@lowers("aten.angle.default")
def _angle(L, node, args, kwargs):
    """The angle of a real number: pi below 0, 0 otherwise, NaN for NaN."""
    dt = _float_out(node)
    x = X(L, L.cast(args[0], dt), dt)
    r = X.where(x.lt(0), math.pi, 0.0, dt)
    return Value(X.where(x.isnan(), x, r).v)


def _nextafter(x, y):
    """std::nextafter for f32 values (in f64): x itself where x == y, NaN with NaN, the
    smallest denormal from 0, else |x| plus or minus its f32 ulp (2^(e - 23) in [2^e, 2^(e+1)),
    2^(e - 24) below a power of 2, 2^-149 among denormals)."""
    a = x.fn("abs")
    a1 = X.where(a.eq(0) | a.isinf() | a.isnan(), 1.0, a)
    e = (a1.fn("log") * (1.0 / math.log(2.0))).fn("floor")
    e = X.where((2.0 ** e).gt(a1), e - 1.0, e)
    e = X.where((2.0 ** (e + 1.0)).le(a1), e + 1.0, e)
    e = X.where(e.lt(-126.0), -126.0, e)
    up = 2.0 ** (e - 23.0)
    down = X.where(a1.eq(2.0 ** e) & e.gt(-126.0), 2.0 ** (e - 24.0), up)
    away = y.gt(x).eq(x.gt(0))  # moving away from 0
    mag = X.where(away, a + up, a - down)
    r = X.where(x.lt(0), -mag, mag)
    tiny = 2.0 ** -149
    r = X.where(x.eq(0), X.where(y.gt(0), tiny, -tiny), r)
    fmax = float(torch.finfo(torch.float32).max)
    r = X.where(x.isinf(), X.where(x.gt(0), fmax, -fmax), r)
    r = X.where(x.eq(y), y, r)
    return X.where(x.isnan() | y.isnan(), math.nan, r)


@lowers("aten.nextafter.default", "prims.nextafter.default")
def _nextafter_row(L, node, args, kwargs):
    dt = _out_dtype(node)
    if dt != torch.float32:
        raise Unsupported(f"nextafter in {dt} (coil steps f32 ulps)")
    x, y = _arg64(L, args[0], node), _arg64(L, args[1], node)
    return Value(_nextafter(x, y).cast(dt).v)
