"""The generated flash-attention backward kernels (attention_lse and attention_grad wrt q, k and
v, and grad_kv, k's and v's from one loop: src/codegen/triton/triton_attention_backward.cpp), executed on the CPU (tl_emulator.py runs
their @triton.jit bodies with torch tensors) through the modules' own call() (fake triton),
under every config of their lists, against torch autograd of the written-out attention in
float64: lse, dq, dk, dv (and the forward's y, which the gradients read).

Modules are generated here through coil's C API (coil.Graph.generate_gpu_module), one per group
of cases, each case a training step's graph: y = attention, l = attention_lse, dq, dk, dv =
attention_grad. A row that sees no key (every key masked, causal with Tq > Tk) has lse -inf, a
NaN y, dq 0 and adds nothing to dk and dv. The GPU runs the same cases compiled by Triton
(tests/gpu/test_attention.py, group `backward`).
"""

import importlib.util
import math
import os

import pytest
import torch

import tl_emulator
from coil_runtime import heuristics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "triton")


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "tests", "gpu", file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Inputs, the backward reference and comparisons, and the graphs: the GPU suite's own.
SUITE = _load("gpu_test_attention_bw", "test_attention.py")
PREPARE = _load("gpu_prepare_attention_bw", "prepare_attention.py")


def _case(tq, tk, d, dtype="f32", causal=False, b=1, h=2, hkv=None, dv=None, mask=None,
          scale=None):
    return {"tq": tq, "tk": tk, "d": d, "dv": dv or d, "dtype": dtype, "causal": causal,
            "b": b, "h": h, "hkv": hkv or h, "mask": mask, "scale": scale}


GROUPS = {
    "lengths": [
        _case(33, 100, 64, causal=True, h=4, hkv=2),      # Tq < Tk, 2:1 GQA
        _case(100, 33, 16, causal=True, h=4, hkv=1),      # Tq > Tk: 67 rows see no key, 4:1
        _case(7, 1, 80, dv=48),                           # D = 80 padded, Dv != D
        _case(1, 7, 16, b=2),
        _case(64, 64, 64, causal=True, scale=0.3),        # lengths every block divides
    ],
    "masks": [
        _case(7, 33, 80, dv=48, mask=("bool", [1, 1, 7, 33], "rows_masked")),
        _case(33, 100, 16, b=2, causal=True, mask=("f32", [2, 1, 1, 100], "random")),
        _case(100, 7, 64, h=4, hkv=2, mask=("bool", [100, 7], "random")),
    ],
    "empty": [
        _case(7, 0, 16),                                  # no key: lse -inf, dq 0, y 0
        _case(0, 7, 16, h=4, hkv=2),                      # no query: dk, dv 0
    ],
    "bf16": [
        _case(100, 33, 80, "bf16", causal=True, h=4, hkv=2, dv=64),
        _case(33, 100, 64, "bf16", mask=("f32", [1, 2, 33, 100], "random")),
    ],
}


def _module(fake, tmp_path, name, cases, **options):
    import coil
    text = PREPARE.backward_graph_text(cases)
    src, _ = coil.Graph.parse(text, f"<{name}>").generate_gpu_module(**options)
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    return tl_emulator.emulate_module(fake, str(path), f"emu_bw_{name}", kinds={"attention"}), src


def _deltas(cases):
    """The delta kernels (rowsum(dO * out) before each gradient of k) of the cases: one where
    some (key, query) pair exists."""
    return ["delta" for c in cases if c["tq"] and c["tk"]]


def _inputs(cases, seed):
    inputs, refs = [], []
    for i, c in enumerate(cases):
        args = SUITE.make_backward_inputs(c, seed + i, device="cpu")
        inputs += args
        refs.append(SUITE.backward_reference(c, args))
    return inputs, refs


def _check_every_config(mod, cases, seed, label):
    tuners = [t for t in heuristics.autotuners_of(mod) if t.kind == "attention"]
    assert tuners
    inputs, refs = _inputs(cases, seed)
    problems = []
    rounds = max(len(t.configs) for t in tuners)
    for r in range(rounds):
        for t in tuners:
            t.select(r)
        outs = mod.call(list(inputs))
        assert len(outs) == 5 * len(cases)
        for i, c in enumerate(cases):
            for name, got, want in zip(SUITE.BACKWARD_OUTPUTS, outs[5 * i:5 * i + 5], refs[i]):
                why = SUITE.compare_backward(name, got, want, c["dtype"])
                if why:
                    problems.append(f"{label} #{i} ({SUITE.describe(c)}) {name}, config #{r}: "
                                    f"{why}")
    assert not problems, "\n".join(problems[:10])
    return rounds


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_backward_kernels_match_autograd(fake_gpu, tmp_path, group):
    cases = GROUPS[group]
    mod, src = _module(fake_gpu, tmp_path, group, cases)
    # Every case is the templates' (nothing written out): 3 flash kernels per case, the forward
    # storing the logsumexp too (attention_lse shares its kernel), dK's storing dV, after the
    # delta kernel where some (key, query) pair exists.
    kinds = sorted(t.attention_kernel for t in heuristics.autotuners_of(mod))
    assert kinds == sorted(["forward", "grad_q", "grad_kv"] * len(cases) + _deltas(cases)), kinds
    assert src.count("triton_tem_fused_attention_attention_lse_") >= len(cases)
    assert "matmul" not in src
    rounds = _check_every_config(mod, cases, 100 * len(group), group)
    assert rounds >= 2  # more than one config was run


@pytest.mark.parametrize("group", ["lengths", "bf16"])
def test_kernels_of_one_node_each_match_autograd(fake_gpu, tmp_path, group):
    """Without fusion each node has its own kernel: attention_lse, and dK and dV apart."""
    cases = GROUPS[group]
    mod, src = _module(fake_gpu, tmp_path, group + "_apart", cases, fusion=False)
    kinds = sorted(t.attention_kernel for t in heuristics.autotuners_of(mod))
    assert kinds == sorted(["forward", "lse", "grad_q", "grad_k", "grad_v"] * len(cases) +
                           _deltas(cases)), kinds
    _check_every_config(mod, cases, 7 * len(group), group + " apart")


GOLDEN_CASES = {
    "attention_backward": [_case(64, 64, 32, b=2, h=4, hkv=2, causal=True,
                                 mask=("bool", [2, 1, 1, 64], "first_key_masked"))],
    "attention_backward_bf16": [_case(100, 300, 80, "bf16", causal=True, h=8, hkv=2, dv=64,
                                      scale=0.125)],
}


@pytest.mark.parametrize("golden", sorted(GOLDEN_CASES))
def test_golden_backward_kernels_match_autograd(fake_gpu, golden):
    mod = tl_emulator.emulate_module(fake_gpu, os.path.join(GOLDEN, golden + ".py"),
                                     "emu_bw_" + golden, kinds={"attention"})
    _check_every_config(mod, GOLDEN_CASES[golden], 11, golden)


def test_a_wrong_kernel_fails(fake_gpu, tmp_path):
    """The check can fail: the golden dq kernel without its scale is wrong, and so is a delta
    kernel that lets the NaN out of a row that sees no key reach dk."""
    src = open(os.path.join(GOLDEN, "attention_backward.py")).read()
    scaled = "(dq * 0.17677669529663687)"
    assert scaled in src
    path = tmp_path / "broken_scale.py"
    path.write_text(src.replace(scaled, "(dq)"))
    mod = tl_emulator.emulate_module(fake_gpu, str(path), "emu_bw_broken_scale",
                                     kinds={"attention"})
    with pytest.raises(AssertionError, match=r"dq, config #0: max abs err"):
        _check_every_config(mod, GOLDEN_CASES["attention_backward"], 11, "broken")
    line = '    delta = tl.where(lse == float("-inf"), 0.0, delta)\n'
    assert line in src
    path = tmp_path / "broken_delta.py"
    path.write_text(src.replace(line, ""))
    mod = tl_emulator.emulate_module(fake_gpu, str(path), "emu_bw_broken_delta",
                                     kinds={"attention"})
    with pytest.raises(AssertionError, match=r"dk, config #0: NaN"):
        _check_every_config(mod, GOLDEN_CASES["attention_backward"], 11, "broken")


def test_reference_matches_the_softmax_formulas():
    """The float64 reference (autograd of the written-out attention) against the backward's
    formulas written directly, on a case with GQA, a row with no key and causal: the check is
    only as good as its reference."""
    c = _case(9, 5, 16, causal=True, h=4, hkv=2, mask=("bool", [9, 5], "rows_masked"))
    q, k, v, m, dout = SUITE.make_backward_inputs(c, 3, device="cpu")
    y, lse, dq, dk, dv = SUITE.backward_reference(c, [q, k, v, m, dout])
    q, k, v, dout = (t.double() for t in (q, k, v, dout))
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    scale = 1 / math.sqrt(16)
    s = (q @ kk.transpose(-1, -2)) * scale
    s = s.masked_fill(~m, -math.inf)
    i, j = torch.arange(9)[:, None], torch.arange(5)[None, :]
    s = s.masked_fill(j > i + (5 - 9), -math.inf)
    no_key = torch.isinf(lse) & (lse < 0)
    assert bool(no_key.any()) and bool((~no_key).any())
    p = torch.where(no_key[..., None], torch.zeros_like(s), torch.exp(s - lse[..., None]))
    out = p @ vv
    delta = torch.where(no_key, torch.zeros_like(lse), (dout * out).sum(-1))
    ds = p * (dout @ vv.transpose(-1, -2) - delta[..., None])
    torch.testing.assert_close(dq, scale * ds @ kk)
    torch.testing.assert_close(dk, (scale * ds.transpose(-1, -2) @ q).view(1, 2, 2, 5, 16).sum(2))
    torch.testing.assert_close(dv, (p.transpose(-1, -2) @ dout).view(1, 2, 2, 5, 16).sum(2))
    assert torch.isnan(y[no_key]).all() and not torch.isnan(y[~no_key]).any()


def test_views_of_a_packed_projection_are_read_in_place(fake_gpu, tmp_path):
    """q, k, v as views of one [B, T, 3, H, D] input (offsets and row strides in the kernels,
    no copy), odd T = 33, causal: the gradients of the views against autograd."""
    import coil
    text = ("input qkv: f32[1, 33, 3, 2, 16]\ninput dy: f32[1, 2, 33, 16]\n"
            "p = permute(qkv) {dims=[2, 0, 3, 1, 4]}\n" +
            "".join(f"{n}0 = slice(p) {{dim=0, start={i}, end={i + 1}}}\n"
                    f"{n} = squeeze({n}0) {{dims=[0]}}\n" for i, n in enumerate("qkv")) +
            "y = attention(q, k, v) {causal=true}\nl = attention_lse(q, k) {causal=true}\n" +
            "".join(f"d{w} = attention_grad(q, k, v, y, dy, l) {{wrt=\"{w}\", causal=true}}\n"
                    for w in "qkv") +
            "output y\noutput l\noutput dq\noutput dk\noutput dv\n")
    src, _ = coil.Graph.parse(text, "<views>").generate_gpu_module()
    # No copies: the forward (with the logsumexp), two gradient kernels (dq; dk and dv) and
    # the delta kernel.
    assert src.count("kernel='grad_") == 2 and src.count("@triton.jit") == 4
    path = tmp_path / "views.py"
    path.write_text(src)
    mod = tl_emulator.emulate_module(fake_gpu, str(path), "emu_bw_views", kinds={"attention"})
    g = torch.Generator().manual_seed(5)
    qkv, dy = torch.randn(1, 33, 3, 2, 16, generator=g), torch.randn(1, 2, 33, 16, generator=g)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    c = _case(33, 33, 16, causal=True)
    want = SUITE.backward_reference(c, [q, k, v, dy])
    tuners = heuristics.autotuners_of(mod)
    for r in range(max(len(t.configs) for t in tuners)):
        for t in tuners:
            t.select(r)
        outs = mod.call([qkv, dy])
        for name, got, w in zip(SUITE.BACKWARD_OUTPUTS, outs, want):
            assert not SUITE.compare_backward(name, got, w, "f32"), (r, name)


def test_size_generic_module_takes_the_lengths_at_run_time(fake_gpu, tmp_path):
    """Tq and Tk left unbound: one module whose kernels take them as arguments (ks0, ks1; every
    block masked), run at several lengths against autograd."""
    import coil
    text = ("input q: f32[1, 4, s0, 16]\ninput k: f32[1, 2, s1, 16]\ninput v: f32[1, 2, s1, 16]\n"
            "input dy: f32[1, 4, s0, 16]\ny = attention(q, k, v) {causal=true}\n"
            "l = attention_lse(q, k) {causal=true}\n" +
            "".join(f"d{w} = attention_grad(q, k, v, y, dy, l) {{wrt=\"{w}\", causal=true}}\n"
                    for w in "qkv") +
            "output y\noutput l\noutput dq\noutput dk\noutput dv\n")
    src, _ = coil.Graph.parse(text, "<generic>").generate_gpu_module()
    assert "'q_len': 'ks0', 'kv_len': 'ks1'" in src and src.count("kernel='") == 3
    path = tmp_path / "generic.py"
    path.write_text(src)
    mod = tl_emulator.emulate_module(fake_gpu, str(path), "emu_bw_generic", kinds={"attention"})
    for i, (tq, tk) in enumerate(((7, 33), (33, 7), (16, 100))):
        c = _case(tq, tk, 16, causal=True, h=4, hkv=2)
        args = SUITE.make_backward_inputs(c, 40 + i, device="cpu")
        want = SUITE.backward_reference(c, args)
        for name, got, w in zip(SUITE.BACKWARD_OUTPUTS, mod.call(list(args)), want):
            assert not SUITE.compare_backward(name, got, w, "f32"), (tq, tk, name)


def test_logsumexp_alone(fake_gpu, tmp_path):
    """attention_lse without a forward over the same scores (the bridge computes it again when a
    graph saved none; another causal flag or scale than the forward's) keeps its own kernel:
    causal (Tq > Tk: rows that see no key, -inf) and not, 2:1 grouped-query heads, odd lengths,
    against torch.logsumexp in float64 under every config."""
    import coil
    text = ("input q: f32[2, 4, 37, 24]\ninput k: f32[2, 2, 29, 24]\n"
            "a = attention_lse(q, k) {causal=true}\nb = attention_lse(q, k) {scale=0.3}\n"
            "output a\noutput b\n")
    src, _ = coil.Graph.parse(text, "<lse>").generate_gpu_module()
    assert src.count("kernel='lse'") == 2
    path = tmp_path / "lse.py"
    path.write_text(src)
    mod = tl_emulator.emulate_module(fake_gpu, str(path), "emu_lse_alone", kinds={"attention"})
    g = torch.Generator().manual_seed(11)
    q, k = torch.randn(2, 4, 37, 24, generator=g), torch.randn(2, 2, 29, 24, generator=g)
    s = q.double() @ k.double().repeat_interleave(2, dim=1).transpose(-1, -2)
    causal = torch.ones(37, 29, dtype=torch.bool).tril(29 - 37)  # bottom-right aligned
    want = [torch.logsumexp((s * 24 ** -0.5).masked_fill(~causal, float("-inf")), -1),
            torch.logsumexp(s * 0.3, -1)]
    tuners = heuristics.autotuners_of(mod)
    for r in range(max(len(t.configs) for t in tuners)):
        for t in tuners:
            t.select(r)
        for got, w in zip(mod.call([q, k]), want):
            assert torch.equal(torch.isinf(got), torch.isinf(w)), r
            fin = ~torch.isinf(w)
            assert torch.allclose(got.double()[fin], w[fin], rtol=1e-5, atol=1e-5), r
