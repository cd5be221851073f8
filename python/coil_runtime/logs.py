"""COIL_LOGS channels for the Python runtime, printed like the C++ side: `[coil:NAME] message`.

`COIL_LOGS` is a comma-separated list (`autotune`, `launch`, ... or `all`); it is read once, at
the first query, and `set_channels` overrides it (tests).
"""

import os
import sys

_channels = None  # set of enabled channel names, or {"all"}


def _parse(spec):
    return {item.strip() for item in (spec or "").split(",") if item.strip()}


def set_channels(spec):
    """Replaces the enabled channels (a COIL_LOGS-style string); returns the old set."""
    global _channels
    old = _channels
    _channels = _parse(spec)
    return old


def enabled(channel):
    global _channels
    if _channels is None:
        _channels = _parse(os.environ.get("COIL_LOGS", ""))
    return "all" in _channels or channel in _channels


def log(channel, message):
    """Prints one message (possibly several lines) on stderr if the channel is enabled."""
    if not enabled(channel):
        return
    for line in str(message).splitlines() or [""]:
        sys.stderr.write(f"[coil:{channel}] {line}\n")
    sys.stderr.flush()


def warn(message):
    sys.stderr.write(f"coil: warning: {message}\n")
    sys.stderr.flush()
