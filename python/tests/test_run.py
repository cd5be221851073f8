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
