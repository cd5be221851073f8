"""Makes coil_runtime (python/) and the test helpers (python/tests/) importable, and provides a
`fake_gpu` fixture: a fake triton, CPU tensors accepted as "device" tensors, a fixed stream and
device name, and a private autotune cache directory."""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    import torch

    import fake_triton
    from coil_runtime import autotune, heuristics, logs, runtime

    saved = {k: v for k, v in sys.modules.items() if k == "triton" or k.startswith("triton.")}
    fake_triton.install()
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("COIL_TRITON_AUTOTUNE", raising=False)
    # Serial compiles (deterministic order of the fake's records); test_modes.py sets a pool.
    monkeypatch.setenv("COIL_COMPILE_THREADS", "1")
    monkeypatch.setattr(heuristics, "_raw_stream_getter", lambda: (lambda device: 1234))
    monkeypatch.setattr(heuristics, "_device_index", lambda args: 0)
    monkeypatch.setattr(heuristics, "_launch_mode", "direct")
    monkeypatch.setattr(autotune, "device_name", lambda args: "Fake GPU")
    monkeypatch.setattr(runtime, "_alloc",
                        lambda size, stride, dtype: torch.empty_strided(size, stride, dtype=dtype))
    runtime.allow_cpu_for_tests(True)
    old_logs = logs.set_channels("autotune")
    yield fake_triton
    logs._channels = old_logs
    runtime.allow_cpu_for_tests(False)
    runtime.set_poison(False)
    autotune.set_benchmarker(None)
    for k in [k for k in sys.modules if k == "triton" or k.startswith("triton.")]:
        del sys.modules[k]
    sys.modules.update(saved)
