"""Dry runs of the GPU scripts (tests/gpu/test_ops.py, bench/gpu/bench_gpu.py) on the CPU.

The GPU run is one device call, so its scripts' plumbing is tested here: the fake triton's
kernels are given emulators (torch code computing what each sample kernel computes), CPU
tensors stand in for CUDA ones, and test_ops runs the hand-written sample module both as its
`runtime_sample` case and as a generated case with inputs, expected outputs and a rejection
check. The benchmark's report formatting is checked on synthetic results.
"""

import importlib.util
import json
import os

import pytest
import torch

from coil_runtime import runtime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SAMPLE = os.path.join(HERE, "sample_module.py")


def load_script(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sample_emulators():
    def poi0(x, out, n):
        out.copy_(x * 0.5 + 1)

    def per1(s, out, xn, rn):
        out.copy_(torch.softmax(s, -1))

    def poi2(a, b, out, yn, xn):
        out.copy_(a.t() + b)

    def red3(s, out, xn, rn):
        out.copy_(s.sum(0))
    return {"triton_poi_fused_add_mul_0": poi0, "triton_per_fused__softmax_1": per1,
            "triton_poi_fused_add_t_2": poi2, "triton_red_fused_sum_3": red3}


@pytest.fixture
def fake_cuda(fake_gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a, **k: "Fake GPU")
    monkeypatch.setattr(torch.Tensor, "cuda", lambda self, *a, **k: self)
    fake_gpu.EMULATORS.update(sample_emulators())
    return fake_gpu


def write_generated_case(gen):
    """The sample module as a generated case: module.py, inputs, expected, case.json."""
    d = gen / "sample_case"
    (d / "inputs").mkdir(parents=True)
    (d / "expected").mkdir()
    (d / "module.py").write_text(open(SAMPLE).read())
    g = torch.Generator().manual_seed(1)
    shapes = {"x": (4096, 1024), "s": (4096, 1000), "a": (1024, 768), "b": (768, 1024)}
    inputs = {n: torch.randn(s, generator=g) for n, s in shapes.items()}
    mod = runtime.load_module(SAMPLE, name="sample_for_expected")
    for n, t in inputs.items():
        runtime.write_npy(d / "inputs" / f"{n}.npy", t)
    for k, t in enumerate(mod.reference(*inputs.values())):
        runtime.write_npy(d / "expected" / f"out{k}.npy", t)
    info = {"name": "sample_case", "status": "ok", "tolerance": {"rtol": 1e-4, "atol": 1e-3},
            "checks": ["noncontig x"],
            "inputs": [{"name": n, "dtype": "f32", "shape": list(s), "file": f"inputs/{n}.npy"}
                       for n, s in shapes.items()],
            "outputs": [{"name": f"out{k}", "file": f"expected/out{k}.npy"} for k in range(4)]}
    (d / "case.json").write_text(json.dumps(info))
    skipped = gen / "not_compiled"
    skipped.mkdir()
    (skipped / "case.json").write_text(json.dumps(
        {"name": "not_compiled", "status": "compile-failed", "compile_log": "coil: error: x\n",
         "inputs": [], "outputs": [], "tolerance": {}, "checks": []}))
    (gen / "MANIFEST.json").write_text(json.dumps({"coil": "abc123", "generated_at": "now",
                                                   "cases": {}, "bench": {}}))


# A dry run emulates a machine without a GPU. Where torch has CUDA, initializing it imports the
# real triton, which the fake one in sys.modules breaks ("triton.__spec__ is None"); there the
# real suite (tests/gpu/test_ops.py, step 3 of tests/gpu/run.sh) runs instead.
@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="a GPU machine runs the real test_ops.py instead of the dry run")
def test_test_ops_dry_run(fake_cuda, monkeypatch, tmp_path, capsys):
    gen = tmp_path / "generated"
    write_generated_case(gen)
    monkeypatch.setenv("COIL_GPU_GENERATED", str(gen))
    test_ops = load_script(os.path.join(ROOT, "tests", "gpu", "test_ops.py"), "test_ops_dry")
    report = tmp_path / "gpu_tests.txt"
    rc = test_ops.main(["--report", str(report)])
    out = capsys.readouterr().out
    text = report.read_text()
    assert rc == 0, out
    assert "PASS runtime_sample" in text and "PASS sample_case" in text
    assert "SKIP not_compiled" in text and "compile-failed: coil: error: x" in text
    assert "2 passed, 0 failed, 1 skipped of 3" in text
    # Every config was run: 1 autotuned round + 6 forced rounds (the widest list has 6).
    state = json.loads((tmp_path / "gpu_tests.json").read_text())
    assert {r["name"]: r["rounds"] for r in state["results"]}["sample_case"] == 7
    assert "kernel triton_poi_fused_add_t_2: 6 configs, launch ['direct']" in text

    # A kernel that writes nothing fails (the outputs were poisoned), naming the output.
    fake_cuda.EMULATORS["triton_red_fused_sum_3"] = lambda *a: None
    rc = test_ops.main(["--cases", "sample_case", "--no-every-config"])
    out = capsys.readouterr().out
    assert rc == 1 and "output out3: 1000 of 1000 elements differ" in out


def test_bench_table_formats_every_field(fake_gpu):
    bench = load_script(os.path.join(ROOT, "bench", "gpu", "bench_gpu.py"), "bench_dry")
    kernels = {"triton_poi_fused_add_mul_0": {"chosen": ["XBLOCK=1024, num_warps=4, num_stages=1"]}}
    results = [
        {"id": "a", "workload": "x*0.5+1, 64M f32", "eager_ms": 0.26, "inductor_ms": 0.13,
         "coil_ms": 0.125, "coil_gbps": 4100.0, "coil_copy_frac": 0.96, "coil_correct": True,
         "speedup_vs_inductor": 1.04, "speedup_vs_inductor_ref": 1.05, "kernels": kernels},
        {"id": "c", "workload": "softmax", "eager_ms": 0.14, "inductor_ms": 0.13,
         "coil": "no module"},
        {"id": "g", "workload": "relu(x@W+b)", "eager_ms": 0.4, "inductor_ms": 0.35,
         "coil_ms": 0.36, "eager_tflops": 600.0, "coil_tflops": 700.0,
         "cublas_mm_tflops": 720.0, "coil_correct": False},
        {"id": "f", "workload": "x.t()+y", "error": "RuntimeError: boom"},
        {"id": "overhead", "eager_us": 8.0, "inductor_us": 50.0, "coil_us": 15.0,
         "coil_launch": ["direct"], "coil_kernel_run_us": 4.0, "coil_jit_launcher_us": 30.0},
    ]
    text = bench.table(results, 4272.0)
    assert "copy bandwidth 4272 GB/s" in text
    assert "(a)   x*0.5+1, 64M f32" in text and "96%" in text and "XBLOCK=1024" in text
    assert "(f)   ERROR RuntimeError: boom" in text and "NO" in text
    assert "coil 15.0 (launch ['direct'])" in text and "cuBLAS mm alone 720" in text


BENCH_MODULE = '''
import torch
import triton
import triton.language as tl
from coil_runtime import heuristics, runtime


@heuristics.pointwise(size_hints={'x': NUMEL_HINT}, name='KERNEL', kernel_hash='KERNEL-hash')
@triton.jit
def KERNEL(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    pass


def call(args):
    arg0_1, = args
    args.clear()
    runtime.check_input(arg0_1, 'x', SHAPE, STRIDE, torch.float32)
    buf0 = runtime.empty_strided(SHAPE, STRIDE, torch.float32)
    KERNEL.run(arg0_1, buf0, NUMEL)
    return (buf0,)
'''


def write_bench_module(gen, wid, kernel, shape):
    numel = 1
    for s in shape:
        numel *= s
    stride = tuple(int(torch.empty(shape).stride(i)) for i in range(len(shape)))
    src = (BENCH_MODULE.replace("KERNEL", kernel).replace("NUMEL_HINT", str(1 << (numel - 1).bit_length()))
           .replace("SHAPE", repr(tuple(shape))).replace("STRIDE", repr(stride))
           .replace("NUMEL", str(numel)))
    (gen / f"bench_{wid}").mkdir(parents=True)
    (gen / f"bench_{wid}" / "module.py").write_text(src)


def test_bench_dry_run(fake_cuda, monkeypatch, tmp_path, capsys):
    """bench_gpu.main end to end on small CPU tensors: emulated kernels, a fake do_bench."""
    import functools
    bench = load_script(os.path.join(ROOT, "bench", "gpu", "bench_gpu.py"), "bench_dry_run")
    gen = tmp_path / "generated"
    write_bench_module(gen, "a", "triton_poi_fused_add_mul_0", (1000,))
    write_bench_module(gen, "overhead", "triton_poi_fused_add_0", (64, 256))
    fake_cuda.EMULATORS["triton_poi_fused_add_mul_0"] = lambda x, out, n: out.copy_(x * 0.5 + 1)
    fake_cuda.EMULATORS["triton_poi_fused_add_0"] = lambda x, out, n: out.copy_(x + 1)
    monkeypatch.setattr(bench, "GENERATED", str(gen))
    monkeypatch.setattr(bench, "randn", lambda *s, dtype=torch.float32: torch.randn(*s).to(dtype))
    monkeypatch.setattr(bench, "do_bench", lambda fn, **kw: (fn(), 0.01)[1])
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: 4000.0)
    monkeypatch.setattr(bench, "host_overhead", functools.partial(bench.host_overhead, calls=50))
    monkeypatch.setattr(bench.torch, "compile", lambda fn, **kw: fn, raising=False)
    monkeypatch.setattr(bench.torch.cuda, "get_device_properties",
                        lambda i: type("P", (), {"multi_processor_count": 132})())
    monkeypatch.setattr(bench, "WORKLOADS", [
        ("a", "x*0.5+1 small", lambda: [bench.randn(1000)], lambda x: x * 0.5 + 1),
        ("g", "relu(x@W+b) small", lambda: [bench.randn(8, 16), bench.randn(16, 4),
                                            bench.randn(4)],
         lambda x, w, b: torch.relu(x @ w + b)),
        ("c", "broken", lambda: [bench.randn(4)], lambda x: 1 / 0),
    ])
    out_json = tmp_path / "gpu_bench.json"
    assert bench.main(["--json", str(out_json)]) == 0
    doc = json.loads(out_json.read_text())
    res = {r["id"]: r for r in doc["results"]}
    assert res["a"]["coil_correct"] is True and res["a"]["coil_ms"] == 0.01
    assert res["a"]["kernels"]["triton_poi_fused_add_mul_0"]["launch"] == ["direct"]
    assert res["a"]["speedup_vs_inductor_ref"] == pytest.approx(0.1307 / 0.01)
    assert res["a"]["bytes"] == 8000
    assert "no module" in res["g"]["coil"] and res["g"]["cublas_mm_tflops"] > 0
    assert "ZeroDivisionError" in res["c"]["error"]
    ov = res["overhead"]
    assert ov["coil_launch"] == ["direct"] and ov["coil_us"] > 0 and ov["coil_kernel_run_us"] > 0
    assert ov["coil_jit_launcher_us"] > 0
    assert "(a)   x*0.5+1 small" in doc["table"] and "host overhead" in doc["table"]
    assert "(c)   ERROR ZeroDivisionError" in doc["table"]


GENERATED = os.path.join(ROOT, "tests", "gpu", "generated")


def generated_cases():
    if not os.path.isdir(GENERATED):
        return []
    return sorted(d for d in os.listdir(GENERATED)
                  if os.path.exists(os.path.join(GENERATED, d, "module.py")) and
                  os.path.exists(os.path.join(GENERATED, d, "case.json")))


@pytest.mark.skipif(not generated_cases(), reason="no generated modules (tests/gpu/prepare.sh)")
def test_generated_modules_follow_the_contract(fake_cuda, tmp_path):
    """Every module `coil compile --device cuda` wrote for the GPU suite imports with this
    runtime (decorators, signatures, configs) and its call() launches every kernel with the
    arguments its signature declares. The fake kernels compute nothing; the modules' CUDA
    placements are rewritten to the CPU."""
    from coil_runtime import heuristics
    launched = 0
    for case in generated_cases():
        d = os.path.join(GENERATED, case)
        src = open(os.path.join(d, "module.py")).read()
        src = src.replace("device='cuda'", "device='cpu'").replace(".to('cuda')", ".to('cpu')")
        path = tmp_path / f"{case}.py"
        path.write_text(src)
        mod = runtime.load_module(str(path), name=f"contract_{case}")
        tuners = heuristics.autotuners_of(mod)
        info = json.load(open(os.path.join(d, "case.json")))
        inputs = [runtime.read_npy(os.path.join(d, i["file"])) for i in info["inputs"]]
        before = len(fake_cuda.LAUNCHES)
        outs = mod.call(list(inputs))
        assert len(outs) == len(info["outputs"]), case
        for o, e in zip(outs, info["outputs"]):
            want = runtime.read_npy(os.path.join(d, e["file"]))
            assert tuple(o.shape) == tuple(want.shape) and o.dtype == want.dtype, (case, e)
        names = {la[0] for la in fake_cuda.LAUNCHES[before:]}
        # Each kernel launched, but a template whose choice is its extern (cuBLAS, default mode)
        expected = {t.name for t in tuners
                    if not (t.kind == "template" and t.choice() == "extern")}
        assert names == expected, case
        for t in tuners:
            for la in fake_cuda.LAUNCHES[before:]:
                if la[0] == t.name:
                    assert len(la[3]) == len(t.runtime_names)
                    assert all(g >= 1 for g in la[1])
        launched += len(tuners)
    assert launched > 0


def test_bench_size_generic_dry_run(fake_cuda, monkeypatch, tmp_path):
    """bench_gpu.main --size-generic (issue 20) on emulated kernels: each workload's generic
    and specialized modules on the same inputs, each checked against eager; a wrong one is
    reported and fails the run, a missing module is named."""
    bench = load_script(os.path.join(ROOT, "bench", "gpu", "bench_gpu.py"), "bench_generic_dry")
    gen = tmp_path / "generated"
    write_bench_module(gen, "a", "triton_poi_fused_add_mul_0", (1000,))
    write_bench_module(gen, "a_generic", "triton_poi_fused_add_mul_g0", (1000,))
    write_bench_module(gen, "b", "triton_poi_fused_add_mul_1", (1000,))
    write_bench_module(gen, "b_generic", "triton_poi_fused_add_mul_g1", (1000,))
    write_bench_module(gen, "c", "triton_poi_fused_add_mul_2", (1000,))  # no generic twin
    fake_cuda.EMULATORS["triton_poi_fused_add_mul_0"] = lambda x, out, n: out.copy_(x * 0.5 + 1)
    fake_cuda.EMULATORS["triton_poi_fused_add_mul_g0"] = lambda x, out, n: out.copy_(x * 0.5 + 1)
    fake_cuda.EMULATORS["triton_poi_fused_add_mul_1"] = lambda x, out, n: out.copy_(x * 0.5 + 1)
    fake_cuda.EMULATORS["triton_poi_fused_add_mul_g1"] = lambda x, out, n: out.copy_(x * 0.5)
    fake_cuda.EMULATORS["triton_poi_fused_add_mul_2"] = lambda x, out, n: out.copy_(x)
    times = iter([0.010, 0.011] * 20)
    monkeypatch.setattr(bench, "GENERATED", str(gen))
    monkeypatch.setattr(bench, "randn", lambda *s, dtype=torch.float32: torch.randn(*s).to(dtype))
    monkeypatch.setattr(bench, "do_bench", lambda fn, **kw: (fn(), next(times))[1])
    monkeypatch.setattr(bench, "copy_bandwidth", lambda: 4000.0)
    monkeypatch.setattr(bench.torch.cuda, "get_device_properties",
                        lambda i: type("P", (), {"multi_processor_count": 132})())
    small = lambda: [bench.randn(1000)]  # noqa: E731
    eager = lambda x: x * 0.5 + 1  # noqa: E731
    monkeypatch.setattr(bench, "WORKLOADS", [("a", "x*0.5+1 small", small, eager),
                                             ("b", "wrong generic", small, eager),
                                             ("c", "no generic", small, eager)])
    out_json = tmp_path / "gpu_bench.json"
    assert bench.main(["--size-generic", "--json", str(out_json)]) == 1  # b differs
    doc = json.loads(out_json.read_text())
    res = {r["id"]: r for r in doc["results"]}
    assert doc["mode"] == "size-generic"
    assert res["a"]["match"] is True
    assert res["a"]["specialized_ms"] == 0.010 and res["a"]["generic_ms"] == 0.011
    assert res["a"]["generic_vs_specialized"] == pytest.approx(0.1)
    assert len(res["a"]["generic_rounds_ms"]) == bench.ROUNDS + 1
    assert res["b"]["match"] is False and res["b"]["specialized_correct"] is True
    assert res["b"]["generic_correct"] is False and res["b"]["generic_rel_err_vs_eager"] > 0.1
    assert "no module" in res["c"]["error"]
    assert "+10.0%  match" in doc["table"] and "DIFFER" in doc["table"]
    assert "(c)  ERROR no module" in doc["table"]
