"""Size-generic Triton modules (tests/golden/triton_dynamic/*.py) without a GPU: their call()
at many sizes through the fake triton (the host code: sizes bound from the inputs, guards,
allocations, the numels and size arguments of each launch), the flash-attention kernel with
symbolic Tq and Tk executed by tl_emulator.py against the float64 reference at every size, and
coil_runtime.dynamic's variants for the sizes a module's guards refuse. The GPU runs the same
modules compiled by Triton (tests/gpu/run_triton_dynamic.sh)."""

import os

import pytest
import torch

import tl_emulator
from coil_runtime import dynamic, heuristics, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "triton_dynamic")
SIZES = [2, 3, 7, 16, 17, 1000, 1023, 4097]


def _load(name, tag):
    return runtime.load_module(os.path.join(GOLDEN, name + ".py"), name=f"dyn_{name}_{tag}")


def _launches(fake, start):
    """{kernel: the runtime args of its last launch} since `start` (autotuning launches each
    config first)."""
    return {name: tuple(args) for name, _, _, args, _, _ in fake.LAUNCHES[start:]}


@pytest.mark.parametrize("n", SIZES)
def test_pointwise_and_reductions_bind_sizes_from_inputs(fake_gpu, n):
    mod = _load("pointwise_reductions", n)
    t = 5
    x, g, s = torch.randn(n, t, 64), torch.randn(64), torch.randn(n, t)
    start = len(fake_gpu.LAUNCHES)
    b, p, m = mod.call([x, g, s])
    assert (tuple(b.shape), tuple(p.shape), tuple(m.shape)) == ((n, t, 64), (n, t), (n, t))
    launches = _launches(fake_gpu, start)
    assert sorted(launches) == ["triton_per_fused_mul_gelu_sum_0", "triton_red_fused_softmax_1"]
    # pointers, then the size arguments (ks1 for the softmax's row stride), then the numels
    assert launches["triton_per_fused_mul_gelu_sum_0"][4:] == (n * t, 64)
    assert launches["triton_red_fused_softmax_1"][2:] == (t, n, t)


def test_a_size_of_one_is_refused_by_the_guard(fake_gpu):
    mod = _load("pointwise_reductions", "guard")
    start = len(fake_gpu.LAUNCHES)
    with pytest.raises(runtime.SizeGuardError, match=r"ks1 >= 2 fails at n=4, t=1") as e:
        mod.call([torch.randn(4, 1, 64), torch.randn(64), torch.randn(4, 1)])
    assert e.value.sizes == {"n": 4, "t": 1}
    assert len(fake_gpu.LAUNCHES) == start  # nothing ran


def test_inputs_that_disagree_on_a_size_are_an_error(fake_gpu):
    mod = _load("pointwise_reductions", "mismatch")
    with pytest.raises(ValueError, match=r"input 's': expected shape \(4, 5\), got \(4, 6\)"):
        mod.call([torch.randn(4, 5, 64), torch.randn(64), torch.randn(4, 6)])
    with pytest.raises(ValueError, match=r"input 'x': expected 3 dims, got shape \(4, 5\)"):
        mod.call([torch.randn(4, 5), torch.randn(64), torch.randn(4, 5)])


def test_int32_guard(fake_gpu):
    mod = _load("layer_norm_rows", "int32")
    # 1024 * 2^21 elements pass int32 indexing: the guard is checked before any allocation
    big = torch.empty_strided((2 ** 21 + 1, 1024), (1024, 1))
    with pytest.raises(runtime.SizeGuardError, match=r"1024\*ks0 <= 2147483647"):
        mod.call([big, torch.randn(1024), torch.randn(1024)])


@pytest.mark.parametrize("n", SIZES)
def test_matmul_epilogue_views_follow_the_size(fake_gpu, n):
    mod = _load("matmul_epilogue", n)
    x, w, b = torch.randn(n, 256), torch.randn(256, 128), torch.randn(128)
    start = len(fake_gpu.LAUNCHES)
    (y,) = mod.call([x, w, b])
    assert tuple(y.shape) == (n, 128)
    (args,) = _launches(fake_gpu, start).values()
    assert args[3:] == (128 * n,)


@pytest.mark.parametrize("n", SIZES)
def test_a_bias_relu_epilogue_is_fused_into_the_library_call(fake_gpu, n):
    """Size-generic (no matmul template): relu(x @ w + b) is one torch._addmm_activation
    (cuBLASLt's fused epilogue) into the output, no kernel launched."""
    mod = _load("matmul_bias_relu", n)
    assert "torch._addmm_activation(arg2_1, arg0_1, arg1_1, out=out0)" in open(
        os.path.join(GOLDEN, "matmul_bias_relu.py")).read()
    g = torch.Generator().manual_seed(n)
    x, w, b = (torch.randn(n, 256, generator=g), torch.randn(256, 128, generator=g),
               torch.randn(128, generator=g))
    start = len(fake_gpu.LAUNCHES)
    (y,) = mod.call([x, w, b])
    assert len(fake_gpu.LAUNCHES) == start
    _close(y, torch.relu(x.double() @ w.double() + b.double()), f"bias relu n={n}")


def _emulate(fake, mod, source, kinds=("attention",)):
    tl_emulator.emulate_kernels(fake, mod, source, kinds)


def _attention_reference(q, k, v):
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) / q.shape[-1] ** 0.5
    tq, tk = q.shape[2], k.shape[2]
    i, j = torch.arange(tq)[:, None], torch.arange(tk)[None, :]
    s = s.masked_fill(j > i + tk - tq, float("-inf"))  # causal, bottom-right
    return torch.softmax(s, -1) @ v


# (Tq, Tk): decoding (short queries, growing keys), prefill (equal), and more queries than keys
# (rows that see no key give NaN, as the reference).
ATTENTION_SIZES = [(2, 2), (2, 3), (2, 17), (3, 7), (7, 16), (16, 16), (17, 33), (2, 130),
                   (33, 17)]


def _check_attention(fake_gpu, path, name):
    mod = runtime.load_module(path, name=name)
    _emulate(fake_gpu, mod, open(path).read())
    (tuner,) = heuristics.autotuners_of(mod)
    assert tuner.shape_exprs  # q_len and kv_len are read from the launch
    g = torch.Generator().manual_seed(0)
    problems = []
    for tq, tk in ATTENTION_SIZES:
        q = torch.randn(2, 4, tq, 64, generator=g)
        k, v = torch.randn(2, 2, tk, 64, generator=g), torch.randn(2, 2, tk, 64, generator=g)
        for r in (0, len(tuner.configs) - 1):
            tuner.select(r)
            (y,) = mod.call([q, k, v])
            want = _attention_reference(q, k, v)
            nan = torch.isnan(want)
            if not torch.equal(torch.isnan(y), nan):
                problems.append(f"Tq={tq} Tk={tk} config {r}: NaN rows differ")
                continue
            err = (y.double() - want)[~nan].abs().max().item() if (~nan).any() else 0.0
            if err > 1e-4:
                problems.append(f"Tq={tq} Tk={tk} config {r}: max abs err {err:.2e}")
    assert not problems, "\n".join(problems)


def test_attention_with_symbolic_lengths_computes_every_size(fake_gpu):
    _check_attention(fake_gpu, os.path.join(GOLDEN, "attention_decode.py"), "dyn_attention_emu")


def test_a_kernel_that_reads_the_wrong_length_fails(fake_gpu, tmp_path):
    """The check can fail: the kernel with Tk read from the query length."""
    src = open(os.path.join(GOLDEN, "attention_decode.py")).read()
    assert "    TK = ks1\n" in src
    path = tmp_path / "broken.py"
    path.write_text(src.replace("    TK = ks1\n", "    TK = ks0\n"))
    # Wrong values where Tk > Tq, and a read past the cache where Tq > Tk (the emulator's
    # bounds check).
    with pytest.raises((AssertionError, IndexError)):
        _check_attention(fake_gpu, str(path), "dyn_attention_broken")


def test_attention_grid_follows_the_query_length(fake_gpu):
    mod = _load("attention_decode", "grid")
    (tuner,) = heuristics.autotuners_of(mod)
    tuner.select(0)
    block_m = tuner.configs[0].kwargs["BLOCK_M"]
    for tq in (2, 300):
        start = len(fake_gpu.LAUNCHES)
        mod.call([torch.randn(2, 4, tq, 64), torch.randn(2, 2, 5, 64), torch.randn(2, 2, 5, 64)])
        _, grid, _, args, _, _ = fake_gpu.LAUNCHES[-1]
        assert tuple(grid[:2]) == (-(-tq // block_m), 8)
        assert tuple(args[4:]) == (tq, 5)


def test_size_generic_module_makes_a_variant_per_bound_size(fake_gpu):
    made = []

    def make_variant(bound):
        made.append(bound)
        return _load("decode_step", f"variant{len(made)}")  # stands in for a bound module

    class Bound:  # what a module compiled with t bound to 1 would do: no guard on t
        def __init__(self, bound):
            self.bound = bound

        def call(self, args):
            return ("variant", self.bound)

    m = dynamic.SizeGenericModule(_load("decode_step", "generic"),
                                  lambda bound: made.append(bound) or Bound(bound))
    x, wq, wo = torch.randn(1, 1, 256), torch.randn(256, 256), torch.randn(256, 256)
    for t in (1, 2, 3, 1, 7, 1000):
        cache = [torch.randn(1, 4, t, 64), torch.randn(1, 4, t, 64)]
        out = m([x, wq, wo] + cache)
        if t == 1:
            assert out == ("variant", {"t": 1})
        else:
            assert tuple(out[0].shape) == (1, 1, 256)
    assert made == [{"t": 1}]
    assert m.stats() == {"modules": 2, "calls": {"generic": 4, "t=1": 2}}


# The pointwise and reduction kernels executed (tl_emulator.py) at sizes around the blocks'
# multiples, under their first and last configs, against torch in float64.
EMULATED_SIZES = [2, 3, 7, 16, 17, 100]
KINDS = ("pointwise", "reduction", "persistent_reduction")


def _emulated(fake, path, tag):
    mod = runtime.load_module(path, name=f"dyn_{os.path.basename(path)[:-3]}_{tag}")
    _emulate(fake, mod, open(path).read(), KINDS)
    return mod, heuristics.autotuners_of(mod)


def _close(got, want, what):
    err = (got.double() - want).abs().max().item()
    assert err < 1e-4 * max(1.0, want.abs().max().item()), f"{what}: max abs err {err:.2e}"


def _check_pointwise_reductions(fake, path, tag):
    mod, tuners = _emulated(fake, path, tag)
    g = torch.Generator().manual_seed(1)
    for n, t in [(n, t) for n in EMULATED_SIZES for t in (2, 3, 17, 100)][::3]:
        x, w, s = (torch.randn(n, t, 64, generator=g), torch.randn(64, generator=g),
                   torch.randn(n, t, generator=g))
        xd, wd, sd = x.double(), w.double(), s.double()
        for r in (0, -1):
            for tuner in tuners:
                tuner.select(r % len(tuner.configs))
            b, p, m = mod.call([x, w, s])
            _close(b, torch.nn.functional.gelu(xd * wd), f"gelu n={n} t={t}")
            _close(p, torch.softmax(sd, -1), f"softmax n={n} t={t}")
            _close(m, xd.sum(-1), f"sum n={n} t={t}")


def test_pointwise_and_reductions_compute_every_size(fake_gpu):
    _check_pointwise_reductions(fake_gpu, os.path.join(GOLDEN, "pointwise_reductions.py"), "emu")


def test_layer_norm_and_matmul_epilogue_compute_every_size(fake_gpu):
    ln, ln_tuners = _emulated(fake_gpu, os.path.join(GOLDEN, "layer_norm_rows.py"), "emu")
    mm, mm_tuners = _emulated(fake_gpu, os.path.join(GOLDEN, "matmul_epilogue.py"), "emu")
    g = torch.Generator().manual_seed(2)
    for n in EMULATED_SIZES:
        x, w, b = (torch.randn(n, 1024, generator=g), torch.randn(1024, generator=g),
                   torch.randn(1024, generator=g))
        (y,) = ln.call([x, w, b])
        want = torch.nn.functional.layer_norm(x.double(), (1024,), w.double(), b.double())
        _close(y, want, f"layer_norm n={n}")
        x, w, b = (torch.randn(n, 256, generator=g), torch.randn(256, 128, generator=g),
                   torch.randn(128, generator=g))
        (y,) = mm.call([x, w, b])
        want = torch.nn.functional.gelu(x.double() @ w.double() + b.double())
        _close(y, want, f"matmul n={n}")


def test_tiled_transpose_and_split_column_sum_compute_every_size(fake_gpu):
    """The 2-D tiled transpose and the column sum split into chunks of ceil(n / chunks) rows
    (two kernels), as a bound size would get them, at sizes around and below the chunk count."""
    path = os.path.join(GOLDEN, "transpose_column_sum.py")
    source = open(path).read()
    assert "ynumel" in source and "part0" in source
    mod, tuners = _emulated(fake_gpu, path, "emu")
    g = torch.Generator().manual_seed(3)
    for n in EMULATED_SIZES + [63, 64, 65, 129]:
        x, y = torch.randn(n, 64, generator=g), torch.randn(64, n, generator=g)
        for r in (0, -1):
            for tuner in tuners:
                tuner.select(r % len(tuner.configs))
            a, s = mod.call([x, y])
            _close(a, x.double().t() + y.double(), f"transpose n={n}")
            _close(s, x.double().sum(0), f"column sum n={n}")


def test_a_kernel_with_a_wrong_row_stride_fails(fake_gpu, tmp_path):
    """The check can fail: the softmax's last pass reading row x // 2 instead of row x."""
    src = open(os.path.join(GOLDEN, "pointwise_reductions.py")).read()
    load = "tmp16 = tl.load(in_ptr0 + (r0_0 + ks1*x0)"
    assert load in src
    path = tmp_path / "pointwise_reductions.py"
    path.write_text(src.replace(load, "tmp16 = tl.load(in_ptr0 + (r0_0 + ks1*(x0 // 2))"))
    with pytest.raises(AssertionError, match="softmax n="):
        _check_pointwise_reductions(fake_gpu, str(path), "broken")


GENERATED = os.path.join(ROOT, "tests", "gpu", "generated", "dynamic", "manifest.json")


@pytest.mark.skipif(not os.path.exists(GENERATED),
                    reason="tests/gpu/prepare_triton_dynamic.py has not run")
def test_gpu_script_dry_run():
    """The device script (tests/gpu/test_triton_dynamic.py) on the prepared modules, emulated:
    its plumbing (variants, the reference, the report), sizes up to 100."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "gpu",
                                                     "test_triton_dynamic.py"), "--emulate"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "ok: 0 size(s) failed" in r.stdout


def test_the_torch_bridge_gpu_module_runs_every_size_with_one_generic_module(fake_gpu,
                                                                            monkeypatch):
    """coil.torch's GpuModule (what torch.compile's symbolic CUDA graphs become): one generated
    size-generic module, one more generated for the size of 1 its guard refuses, each cached."""
    try:
        import coil
        from coil.torch import cuda
        coil.library_path()
    except Exception as e:  # noqa: BLE001 (the library is not built)
        pytest.skip(f"coil's library: {e}")
    monkeypatch.setattr(cuda, "stats", {"generated": 0, "cached": 0, "graphs_captured": 0})
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # (CPU tensors here)
    g = coil.Graph.parse("input x: f32[n, 64]\ninput b: f32[64]\ny = add(x, b)\noutput y\n")
    m = cuda.GpuModule(g, {"cuda_graphs": False})
    assert "SIZE_SYMBOLS = {'ks0': 'n'}" in open(m.path).read()
    for n in (3, 1, 1000, 1, 2):
        (y,) = m.run([torch.randn(n, 64), torch.randn(64)])
        assert tuple(y.shape) == (n, 64)
    assert cuda.stats["generated"] == 2
    assert m.sized.stats() == {"modules": 2, "calls": {"generic": 3, "n=1": 2}}
    again = cuda.GpuModule(g, {})
    again.run([torch.randn(1, 64), torch.randn(64)])
    assert cuda.stats == {"generated": 2, "cached": 2, "graphs_captured": 0}
