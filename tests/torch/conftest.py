"""The torch frontend's tests (python/coil/torch) need coil's package on sys.path and the built
libcoil_c.so (found as python/coil/_capi.py says: build/lib, or COIL_LIBRARY)."""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))


def record_fallbacks(monkeypatch):
    """Records every op coil.torch leaves to eager (fx_compile._log_fallback), still logging it;
    returns the list the records go to."""
    from coil.torch import fx_compile
    seen = []
    real = fx_compile._log_fallback

    def record(what, reason):
        seen.append(f"{what}: {reason}")
        real(what, reason)
    monkeypatch.setattr(fx_compile, "_log_fallback", record)
    return seen
