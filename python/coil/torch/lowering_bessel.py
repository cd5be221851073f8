"""Rows for the Bessel functions of integer order 0 and 1 that torch has no decomposition for:
J0, J1, Y0, Y1 (special.bessel_j0/j1/y0/y1) and K0, K1 with their scaled forms exp(x) K
(special.modified_bessel_k0/k1, special.scaled_modified_bessel_k0/k1), and the Airy function
Ai (through K_{1/3} for x > 2, its Maclaurin series on [-8, 2], DLMF 9.7.9 below). I0/I1 are
in lowering_math.py.

Each is a fixed-length evaluation in f64, rounded to f32 (f64 results stay in eager, as for
the other special functions: coil's series are accurate to about 1e-12, not to f64's last bit):
  - J and Y below |x| = 12: the power series of DLMF 10.2.2 and 10.8.1 (45 terms; the largest
    term near x = 12 is about 4e3, so cancellation costs 4 of f64's 16 digits);
  - J and Y from 12: Hankel's asymptotic expansion (DLMF 10.17.3), whose error is about
    exp(-2x) < 1e-10 there;
  - K up to 2: the series of DLMF 10.31.1 (the I part grows at most to I0(2) = 2.3);
  - K from 2 to 25: K_nu(x) = int_0^inf exp(-x cosh t) cosh(nu t) dt by the trapezoidal rule
    (step 0.1 to t = 4.5: the integrand is analytic and decays doubly exponentially, so the
    rule's error is below exp(-2 pi^2 / (25 * 0.01)) and the tail below exp(-2 * 44));
  - K from 25: the asymptotic expansion of DLMF 10.40.2 (error about exp(-2x)).
Coefficients are computed here from those formulas, not copied from a table."""

import math

from .lowering_math import X, _elementwise

_EULER = 0.57721566406649015329


def _psi(m):
    """digamma at a positive integer m: H_{m-1} - gamma."""
    return -_EULER + sum(1.0 / j for j in range(1, m))


def _series_coeffs(n, terms, with_psi):
    """c_k = 1 / (k! (n+k)!) or (psi(k+1) + psi(n+k+1)) / (k! (n+k)!), k = 0..terms-1."""
    out = []
    for k in range(terms):
        d = math.factorial(k) * math.factorial(n + k)
        if with_psi:
            out.append((_psi(k + 1) + _psi(n + k + 1)) / d)
        else:
            out.append(1.0 / d)
    return out


def _horner(w, coeffs):
    r = w * 0.0 + coeffs[-1]
    for c in reversed(coeffs[:-1]):
        r = r * w + c
    return r


def _asym_coeffs(nu, terms):
    """a_k(nu) = prod_{j=1..k} (4 nu^2 - (2j-1)^2) / (k! 8^k) (DLMF 10.17.1)."""
    mu = 4.0 * nu * nu
    out, a = [1.0], 1.0
    for k in range(1, terms):
        a *= (mu - (2 * k - 1) ** 2) / (k * 8.0)
        out.append(a)
    return out


_SMALL_JY = 12.0
_JY_TERMS = 45
_ASYM_TERMS = 24


def _jy_small(n, x, want_y):
    """J_n(x) or Y_n(x) for 0 < x < 12 (x is already clamped there)."""
    h = x * 0.5
    w = -(h * h)
    hn = h if n == 1 else h * 0.0 + 1.0
    j = hn * _horner(w, _series_coeffs(n, _JY_TERMS, False))
    if not want_y:
        return j
    s = hn * _horner(w, _series_coeffs(n, _JY_TERMS, True))
    y = (2.0 / math.pi) * h.fn("log") * j - s * (1.0 / math.pi)
    if n == 1:
        y = y - (2.0 / math.pi) / x
    return y


def _jy_large(n, x, want_y):
    """Hankel's expansion for x >= 12 (x is already clamped there)."""
    a = _asym_coeffs(n, _ASYM_TERMS)
    inv2 = 1.0 / (x * x)
    p = _horner(inv2, [a[k] * (-1) ** (k // 2) for k in range(0, _ASYM_TERMS, 2)])
    q = _horner(inv2, [a[k] * (-1) ** (k // 2) for k in range(1, _ASYM_TERMS, 2)]) / x
    chi = x - (0.5 * n + 0.25) * math.pi
    c, s = chi.fn("cos"), chi.fn("sin")
    amp = (2.0 / math.pi / x).fn("sqrt")
    return amp * (p * s + q * c) if want_y else amp * (p * c - q * s)


def _bessel_jy(n, want_y):
    def f(x):
        a = x.fn("abs")
        small = a.lt(_SMALL_JY)
        xs = X.where(small, a, 1.0)
        xl = X.where(small, _SMALL_JY, a)
        r = X.where(small, _jy_small(n, xs, want_y), _jy_large(n, xl, want_y))
        if want_y:
            # Y: -inf at 0, NaN below (as torch)
            r = X.where(x.eq(0), -math.inf, X.where(x.lt(0), math.nan, r))
        elif n == 1:
            r = X.where(x.lt(0), -r, r)  # J1 is odd, J0 even
        return X.where(x.isnan(), x, r)
    return f


_SMALL_K = 2.0
_MID_K = 25.0
_K_STEP = 0.1
_K_NODES = 46  # t = 0, 0.1, ..., 4.5


def _k_small(n, x):
    """K_n(x) for 0 < x <= 2 (DLMF 10.31.1)."""
    h = x * 0.5
    w = h * h
    hn = h if n == 1 else h * 0.0 + 1.0
    i = hn * _horner(w, _series_coeffs(n, 30, False))
    s = hn * _horner(w, _series_coeffs(n, 30, True))
    if n == 0:
        return -(h.fn("log")) * i + s * 0.5
    return 1.0 / x + h.fn("log") * i - s * 0.5


def _k_mid_scaled(n, x):
    """exp(x) K_n(x) for 2 <= x <= 25: the trapezoidal rule on exp(-x (cosh t - 1)) cosh(n t)."""
    total = x * 0.0 + 0.5  # t = 0 counts half (the integrand is even in t)
    for k in range(1, _K_NODES):
        t = k * _K_STEP
        total = total + (x * -(math.cosh(t) - 1.0)).fn("exp") * (math.cosh(n * t))
    return total * _K_STEP


def _k_large_scaled(n, x):
    """exp(x) K_n(x) for x >= 25 (DLMF 10.40.2)."""
    return (math.pi / 2.0 / x).fn("sqrt") * _horner(1.0 / x, _asym_coeffs(n, _ASYM_TERMS))


def _bessel_k(n, scaled):
    def f(x):
        small = x.le(_SMALL_K)
        large = x.gt(_MID_K)
        xs = X.where(small, x, 1.0)
        xm = X.where(small | large, _SMALL_K, x)
        xl = X.where(large, x, _MID_K)
        ks = _k_small(n, xs)
        ks = ks * xs.fn("exp") if scaled else ks
        other = X.where(large, _k_large_scaled(n, xl), _k_mid_scaled(n, xm))
        other = other if scaled else other * (-x).fn("exp")
        r = X.where(small, ks, other)
        # torch: +inf at 0, NaN below 0, 0 at +inf
        r = X.where(x.eq(0), math.inf, X.where(x.lt(0), math.nan, r))
        r = X.where(x.eq(math.inf), 0.0, r)
        return X.where(x.isnan(), x, r)
    return f


# ---- Airy Ai ---------------------------------------------------------------------------------

_AI0 = 1.0 / (3.0 ** (2.0 / 3.0) * math.gamma(2.0 / 3.0))  # Ai(0)
_AIP0 = 1.0 / (3.0 ** (1.0 / 3.0) * math.gamma(1.0 / 3.0))  # -Ai'(0)
_AIRY_SERIES_LO, _AIRY_SERIES_HI = -8.0, 2.0
_AIRY_TERMS = 40


def _airy_series(x):
    """Ai(x) = Ai(0) f(x) + Ai'(0) g(x), the Maclaurin series (DLMF 9.4.1); for -8 <= x <= 2
    the largest term is about exp((2/3) 8^1.5) = 3e6, so f64 keeps 1e-10 absolute."""
    x3 = x * x * x
    f_coeffs, g_coeffs = [1.0], [1.0]
    for k in range(1, _AIRY_TERMS):
        f_coeffs.append(f_coeffs[-1] / ((3 * k - 1) * (3 * k)))
        g_coeffs.append(g_coeffs[-1] / ((3 * k) * (3 * k + 1)))
    return _AI0 * _horner(x3, f_coeffs) - _AIP0 * x * _horner(x3, g_coeffs)


def _airy_u(k):
    """u_k = Gamma(3k + 1/2) / (54^k k! Gamma(k + 1/2)) (DLMF 9.7.2)."""
    return math.exp(math.lgamma(3 * k + 0.5) - k * math.log(54.0) - math.lgamma(k + 1)
                    - math.lgamma(k + 0.5))


def _airy_negative(x):
    """Ai(x) for x < -8: DLMF 9.7.9 with z = -x, zeta = (2/3) z^1.5 > 15 (error ~exp(-2 zeta))."""
    z = -x
    zeta = z * z.fn("sqrt") * (2.0 / 3.0)
    u = [_airy_u(k) for k in range(_ASYM_TERMS)]
    inv2 = 1.0 / (zeta * zeta)
    p = _horner(inv2, [u[k] * (-1) ** (k // 2) for k in range(0, _ASYM_TERMS, 2)])
    q = _horner(inv2, [u[k] * (-1) ** (k // 2) for k in range(1, _ASYM_TERMS, 2)]) / zeta
    chi = zeta - math.pi / 4.0
    return (p * chi.fn("cos") + q * chi.fn("sin")) / (z.fn("sqrt").fn("sqrt") *
                                                       math.sqrt(math.pi))


def _airy_positive(x):
    """Ai(x) for x > 2: sqrt(x / 3) K_{1/3}(zeta) / pi, zeta = (2/3) x^1.5 > 1.88 (DLMF 9.6.1),
    K by the trapezoidal rule up to zeta = 25, its asymptotic expansion above."""
    zeta = x * x.fn("sqrt") * (2.0 / 3.0)
    large = zeta.gt(_MID_K)
    zm = X.where(large, _SMALL_K, zeta)
    zl = X.where(large, zeta, _MID_K)
    k = X.where(large, _k_large_scaled(1.0 / 3.0, zl), _k_mid_scaled(1.0 / 3.0, zm))
    return (x * (1.0 / 3.0)).fn("sqrt") * (k * (-zeta).fn("exp")) * (1.0 / math.pi)


def airy_ai(x):
    neg = x.lt(_AIRY_SERIES_LO)
    pos = x.gt(_AIRY_SERIES_HI)
    xs = X.where(neg | pos, 0.0, x)
    xn = X.where(neg, x, 2.0 * _AIRY_SERIES_LO)
    xp = X.where(pos, x, 2.0 * _AIRY_SERIES_HI)
    r = X.where(neg, _airy_negative(xn), X.where(pos, _airy_positive(xp), _airy_series(xs)))
    # torch gives NaN at +-inf (at +inf the limit is 0; sqrt(x/3) * exp(-zeta) would be NaN
    # here too: inf * 0)
    return X.where(x.isnan() | x.isinf(), math.nan, r)


_elementwise(["aten.special_airy_ai.default"], airy_ai, f64_ok=False)
_elementwise(["aten.special_bessel_j0.default", "prims.bessel_j0.default"],
             _bessel_jy(0, False), f64_ok=False)
_elementwise(["aten.special_bessel_j1.default", "prims.bessel_j1.default"],
             _bessel_jy(1, False), f64_ok=False)
_elementwise(["aten.special_bessel_y0.default"], _bessel_jy(0, True), f64_ok=False)
_elementwise(["aten.special_bessel_y1.default"], _bessel_jy(1, True), f64_ok=False)
_elementwise(["aten.special_modified_bessel_k0.default"], _bessel_k(0, False), f64_ok=False)
_elementwise(["aten.special_modified_bessel_k1.default"], _bessel_k(1, False), f64_ok=False)
_elementwise(["aten.special_scaled_modified_bessel_k0.default"], _bessel_k(0, True),
             f64_ok=False)
_elementwise(["aten.special_scaled_modified_bessel_k1.default"], _bessel_k(1, True),
             f64_ok=False)
