"""The torch frontend's tests (python/coil/torch) need coil's package on sys.path and the built
libcoil_c.so (found as python/coil/_capi.py says: build/lib, or COIL_LIBRARY)."""

import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
