"""Comparing outputs with expected values, with docs/numerics.md's tolerances.

`|actual - expected| <= atol + rtol * |expected|`, NaN equal to NaN, infinities exact, integers
and bools exact. Shapes and dtypes must match.
"""

import numpy as np
import torch

# docs/numerics.md, "Tolerances".
TOLERANCES = {
    torch.float64: (1e-9, 1e-12),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
}


def default_tolerance(dtype):
    """(rtol, atol) for a dtype; (0, 0) for integers and bool."""
    return TOLERANCES.get(dtype, (0.0, 0.0))


def as_float64(t):
    """A tensor's values as a float64 numpy array (integers exactly, up to 2^53)."""
    t = t.detach()
    if t.dtype in (torch.float16, torch.bfloat16):
        t = t.float()
    return t.cpu().numpy().astype(np.float64)


def compare(actual, expected, rtol=None, atol=None):
    """Compares two tensors (any device). Returns a dict: ok, max_abs, max_rel, bad (count),
    first_bad (index tuple or None), message."""
    res = {"ok": False, "max_abs": 0.0, "max_rel": 0.0, "bad": 0, "first_bad": None,
           "message": ""}
    if tuple(actual.shape) != tuple(expected.shape):
        res["message"] = f"shape {tuple(actual.shape)} != expected {tuple(expected.shape)}"
        return res
    if actual.dtype != expected.dtype:
        res["message"] = f"dtype {actual.dtype} != expected {expected.dtype}"
        return res
    d_rtol, d_atol = default_tolerance(expected.dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    a, e = as_float64(actual), as_float64(expected)
    if a.size == 0:
        res["ok"] = True
        return res
    both_nan = np.isnan(a) & np.isnan(e)
    inf = np.isinf(e) | np.isinf(a)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(a - e)
        finite = ~(both_nan | inf)
        ok = np.where(finite, diff <= atol + rtol * np.abs(e), False)
    ok |= both_nan
    ok |= inf & (a == e)
    fin = finite & ~np.isnan(diff)
    if fin.any():
        res["max_abs"] = float(diff[fin].max())
        res["max_rel"] = float((diff[fin] / np.maximum(np.abs(e[fin]), 1e-30)).max())
    bad = ~ok
    res["bad"] = int(bad.sum())
    res["ok"] = res["bad"] == 0
    if not res["ok"]:
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        res["first_bad"] = idx
        res["message"] = (f"{res['bad']} of {a.size} elements differ (rtol {rtol:g}, atol "
                          f"{atol:g}); first at {idx}: got {a[idx]!r}, expected {e[idx]!r}")
    return res


def relative_error(actual, expected):
    """||actual - expected|| / ||expected|| over finite elements (METHOD.md's check)."""
    a, e = as_float64(actual), as_float64(expected)
    m = np.isfinite(a) & np.isfinite(e)
    denom = np.linalg.norm(e[m])
    return float(np.linalg.norm((a - e)[m]) / denom) if denom > 0 else float(
        np.linalg.norm((a - e)[m]))
