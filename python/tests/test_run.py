"""coil_runtime.run (what `coil run|check|bench --device cuda` spawn) on the CPU: the hand-written
sample module with the fake triton's emulators, CPU tensors standing in for CUDA ones."""

import json
import os

import pytest
import torch

from coil_runtime import run, runtime
from test_gpu_scripts import SAMPLE, fake_cuda  # noqa: F401  (fixture)


@pytest.fixture
def sample_inputs(tmp_path):
    g = torch.Generator().manual_seed(3)
    shapes = {"x": (4096, 1024), "s": (4096, 1000), "a": (1024, 768), "b": (768, 1024)}
    specs, tensors = [], []
    for n, s in shapes.items():
        t = torch.randn(s, generator=g)
        runtime.write_npy(tmp_path / f"{n}.npy", t)
        specs.append(f"{n}={tmp_path / f'{n}.npy'}")
        tensors.append(t)
    return specs, tensors


@pytest.fixture
def cuda_ok(fake_cuda, monkeypatch):  # noqa: F811
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    return fake_cuda


def test_json_bench_writes_outputs_and_one_json_line(cuda_ok, sample_inputs, tmp_path, capsys,
                                                    monkeypatch):
    specs, tensors = sample_inputs
    timed, time_calls = [], run._time_calls
    monkeypatch.setattr(run, "_time_calls",
                        lambda call, runs, sync: (timed.append(runs), time_calls(call, runs, sync))[1])
    rc = run.main([SAMPLE, "--inputs", *specs, "--outputs-dir", str(tmp_path / "out"),
                   "--bench", "3", "--warmup", "2", "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    lines = out.strip().splitlines()
    assert len(lines) == 1, out  # only the JSON line on stdout
    j = json.loads(lines[0])
    assert j["runs"] == 3 and j["warmup"] == 2 and j["device"] == "Fake GPU"
    assert 0 <= j["min_ms"] <= j["median_ms"] <= j["max_ms"] and j["mean_ms"] > 0
    assert j["first_call_ms"] > 0 and "synchronized" in j["timer"]
    assert timed == [2, 3]  # warm-up, then timed calls
    assert [o["name"] for o in j["outputs"]] == ["out0", "out1", "out2", "out3"]
    assert j["outputs"][1] == {"name": "out1", "dtype": "float32", "shape": [4096, 1000],
                               "file": os.path.join(str(tmp_path / "out"), "out1.npy")}
    mod = runtime.load_module(SAMPLE, name="sample_for_run_test")
    for o, want in zip(j["outputs"], mod.reference(*tensors)):
        assert torch.allclose(runtime.read_npy(o["file"]), want, rtol=1e-4, atol=1e-3)


def test_json_without_bench_has_no_timings(cuda_ok, sample_inputs, capsys):
    specs, _ = sample_inputs
    assert run.main([SAMPLE, "--inputs", *specs, "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert "median_ms" not in j and j["outputs"][0]["file"] is None


def test_text_mode_is_unchanged(cuda_ok, sample_inputs, tmp_path, capsys):
    specs, _ = sample_inputs
    assert run.main([SAMPLE, "--inputs", *specs, "--outputs-dir", str(tmp_path), "--bench",
                     "2"]) == 0
    out = capsys.readouterr().out
    assert f"out3: float32[1000] -> {tmp_path / 'out3.npy'}" in out
    assert "median " in out and "ms over 2 calls (host timer, synchronized each call)" in out


def test_errors_exit_2(cuda_ok, sample_inputs, monkeypatch, capsys):
    specs, _ = sample_inputs
    assert run.main([SAMPLE, "--inputs", *specs[1:2], *specs[:1], "--json"]) == 2
    assert "input 0 is 's' but the module expects" in capsys.readouterr().err
    assert run.main([SAMPLE, "--inputs", *specs, "--bench", "-1"]) == 2
    assert "must not be negative" in capsys.readouterr().err
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run.main([SAMPLE, "--inputs", *specs, "--json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no CUDA device (torch ") and "is_available() is False" in err


class _FakeEvent:
    """torch.cuda.Event on the CPU: the host clock at record()."""

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        import time
        self.t = time.perf_counter()

    def elapsed_time(self, end):  # ms, as CUDA events give it
        return (end.t - self.t) * 1e3


def test_profile_times_each_triton_launch(cuda_ok, sample_inputs, tmp_path, capsys, monkeypatch):
    """--profile: one row per Triton launcher of the module in launch order, shares that add up
    to 1, the whole call at least each kernel, and a Chrome trace of every launch."""
    specs, _ = sample_inputs
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    trace = tmp_path / "trace.json"
    rc = run.main([SAMPLE, "--inputs", *specs, "--bench", "3", "--profile", "--trace",
                   str(trace), "--json"])
    out = capsys.readouterr().out
    assert rc == 0, out
    j = json.loads(out.strip().splitlines()[-1])
    names = [k["name"] for k in j["kernels"]]
    src = open(SAMPLE).read()
    assert names and all(n.startswith("triton_") and f"{n}.run(" in src for n in names)
    assert abs(sum(k["share"] for k in j["kernels"]) - 1) < 1e-9
    # Each call holds each of its launches, so its median is at least every kernel's median
    # (not the sum of the kernels' medians: those come from different calls).
    assert j["profile_call_median_us"] >= max(k["median_us"] for k in j["kernels"])
    events = json.loads(trace.read_text())["traceEvents"]
    assert len(events) == 3 * sum(k["launches_per_call"] for k in j["kernels"])
    assert [e["name"] for e in events[: len(names)]] == names
    # The launchers are restored: a second profile sees the same kernels.
    mod_run = run.main([SAMPLE, "--inputs", *specs, "--bench", "1", "--profile", "--json"])
    assert mod_run == 0
    assert [k["name"] for k in json.loads(capsys.readouterr().out.strip().splitlines()[-1])
            ["kernels"]] == names


def test_profile_needs_bench(cuda_ok, sample_inputs, capsys):
    specs, _ = sample_inputs
    assert run.main([SAMPLE, "--inputs", *specs, "--profile"]) == 2
    assert "--profile needs --bench" in capsys.readouterr().err
