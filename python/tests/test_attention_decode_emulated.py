"""The split-K ("flash-decoding") path of the attention forward (src/codegen/triton/
triton_attention_decode.cpp: a partial kernel per chunk of keys, then a combine kernel),
executed on the CPU (tl_emulator.py runs the kernels' @triton.jit bodies with torch tensors)
through the modules' own call() (fake triton), under every config of both kernels' lists,
against the written-out attention in float64 (tests/gpu/test_attention.py's reference: a row
that sees no key is NaN, Tk = 0 gives zeros).

The modules are generated here through coil's C API and the split is coil's own decision: a
static Tk of 4097 keys over 4 programs (B x H = 4, Tq <= 16) splits into 16 chunks; a cache
length left symbolic always splits into 64 chunks (the program count alone decides), which is
how the short lengths (1, 7, 1000, and 0, lengths below the chunk count) reach the split
kernels. The GPU runs the `decode` group of tests/gpu/test_attention.py.
"""

import importlib.util
import os

import pytest
import torch

import tl_emulator
from coil_runtime import heuristics, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden")


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "tests", "gpu", file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Inputs, the float64 reference and the comparison, and the graphs: the GPU suite's own.
SUITE = _load("gpu_test_attention_decode", "test_attention.py")
PREPARE = _load("gpu_prepare_attention_decode", "prepare_attention.py")


def _case(tq, tk, d=64, dtype="f32", causal=False, b=1, h=4, hkv=1, dv=None, mask=None):
    return {"tq": tq, "tk": tk, "d": d, "dv": dv or d, "dtype": dtype, "causal": causal,
            "b": b, "h": h, "hkv": hkv, "mask": mask, "scale": None}


def _emulated(fake, tmp_path, name, text):
    import coil
    src, _ = coil.Graph.parse(text, f"<{name}>").generate_gpu_module()
    path = tmp_path / f"{name}.py"
    path.write_text(src)
    return tl_emulator.emulate_module(fake, str(path), f"emu_decode_{name}",
                                      kinds={"attention"}), src


def _split_tuners(mod, count):
    """The module's autotuners, checking that each of its `count` attentions was split."""
    tuners = heuristics.autotuners_of(mod)
    kinds = sorted(t.attention_kernel for t in tuners)
    assert kinds == ["decode_combine"] * count + ["decode_partial"] * count, kinds
    return tuners


def _every_config(tuners, run):
    """run(label) under each round of configs (tuner i at its config r, or its last)."""
    for r in range(max(len(t.configs) for t in tuners)):
        for t in tuners:
            t.select(r)
        run(f"config #{r}")


def _check_cases(mod, tuners, cases, seed):
    inputs, refs = [], []
    for i, c in enumerate(cases):
        args = SUITE.make_inputs(c, seed + i, device="cpu")
        inputs += args
        refs.append(SUITE.reference(c, args))
    problems = []

    def run(label):
        outs = mod.call(list(inputs))
        for i, (c, got, want) in enumerate(zip(cases, outs, refs)):
            why = SUITE.compare(got, want, c["dtype"])
            if why:
                problems.append(f"#{i} ({SUITE.describe(c)}), {label}: {why}")
    _every_config(tuners, run)
    assert not problems, "\n".join(problems[:10])


# Static lengths: Tk = 4097 (odd: TK's partial last block), 4 programs (B x H = 4, Tq <= 16):
# 16 chunks of 256 keys. GQA 4:1 everywhere but where noted; D 64 and 80 (padded to 128).
STATIC_GROUPS = {
    "f32": [
        _case(1, 4097),
        _case(3, 4097, causal=True),
        _case(16, 4097, d=80, causal=True, hkv=4),             # no GQA, padded D
        _case(3, 4097, d=80, dv=48, mask=("bool", [1, 1, 3, 4097], "random")),
    ],
    "masks_bf16": [
        _case(16, 4097, dtype="bf16", mask=("bool", [1, 4, 16, 4097], "rows_masked")),
        _case(1, 4097, dtype="bf16", causal=True, mask=("f32", [1, 1, 1, 4097], "random")),
        _case(3, 4097, d=80, dtype="bf16", causal=True, mask=("f32", [3, 4097], "random")),
    ],
}


@pytest.mark.parametrize("group", sorted(STATIC_GROUPS))
def test_split_kernels_match_the_reference(fake_gpu, tmp_path, group):
    cases = STATIC_GROUPS[group]
    mod, src = _emulated(fake_gpu, tmp_path, group, PREPARE.graph_text(cases))
    assert src.count("splits=16,") == 2 * len(cases)
    _check_cases(mod, _split_tuners(mod, len(cases)), cases, seed=100 * len(group))


def _symbolic_text(tq, d, dtype, causal, mask):
    """q [1, 4, tq, d] against a cache of t positions ([1, 1, t, d]: GQA 4:1)."""
    lines = [f"input q: {dtype}[1, 4, {tq}, {d}]", f"input k: {dtype}[1, 1, t, {d}]",
             f"input v: {dtype}[1, 1, t, {d}]"]
    args = "q, k, v"
    if mask:
        lines.append(f"input m: {mask[0]}[1, 1, {tq}, t]")
        args += ", m"
    lines += [f"y = attention({args}) {{causal={'true' if causal else 'false'}}}", "output y"]
    return "\n".join(lines) + "\n"


# Cache lengths: empty, shorter than the 64 chunks (the last chunks empty), around the blocks,
# long. 0 and 1 are below the module's size guard (runtime.guard_sizes: a size of 0 or 1 gets
# a module of its own), which the test lifts: the kernels must be right there too.
CACHE_LENGTHS = (0, 1, 2, 7, 16, 100, 1000, 4097)
SYMBOLIC = {
    "f32_q1": (1, 64, "f32", False, None),
    "bf16_q3_causal_mask": (3, 80, "bf16", True, ("f32", "random")),
    "f32_q16_causal_bool": (16, 64, "f32", True, ("bool", "rows_masked")),
}


@pytest.mark.parametrize("name", sorted(SYMBOLIC))
def test_symbolic_cache_length_at_every_length(fake_gpu, tmp_path, monkeypatch, name):
    tq, d, dtype, causal, mask = SYMBOLIC[name]
    mod, src = _emulated(fake_gpu, tmp_path, name, _symbolic_text(tq, d, dtype, causal, mask))
    assert "'kv_len': 'ks0'" in src and src.count("splits=64,") == 2
    assert "o = tl.where(TK == 0, 0.0, o)" in src
    tuners = _split_tuners(mod, 1)
    monkeypatch.setattr(runtime, "guard_sizes", lambda sizes, guards: None)
    for tk in CACHE_LENGTHS:
        c = _case(tq, tk, d=d, dtype=dtype, causal=causal,
                  mask=(mask[0], [1, 1, tq, tk], mask[1]) if mask else None)
        # The first and the last configs at every length (BLOCK_N 64 and 32: other chunks).
        args = SUITE.make_inputs(c, 7 + tk, device="cpu")
        want = SUITE.reference(c, args)
        for r in (0, len(tuners[0].configs) - 1):
            for t in tuners:
                t.select(r)
            (got,) = mod.call(list(args))
            why = SUITE.compare(got, want, dtype)
            assert not why, f"Tk={tk} config #{r}: {why}"


def test_a_size_generic_module_computes_every_config(fake_gpu, tmp_path):
    """Every config of both lists at a length past one block per chunk."""
    mod, _ = _emulated(fake_gpu, tmp_path, "generic_all",
                       _symbolic_text(3, 64, "f32", True, None))
    _check_cases(mod, _split_tuners(mod, 1), [_case(3, 2000, causal=True)], seed=5)


def test_views_of_a_packed_cache_are_read_in_place(fake_gpu, tmp_path):
    """k and v as views of one [B, T, 2, Hkv, D] cache (offsets and row strides in the partial
    kernel, no copy), causal, 3 query rows over 4097 positions."""
    text = ("input q: f32[1, 4, 3, 64]\ninput kv: f32[1, 4097, 2, 1, 64]\n"
            "p = permute(kv) {dims=[2, 0, 3, 1, 4]}\n" +
            "".join(f"{n}0 = slice(p) {{dim=0, start={i}, end={i + 1}}}\n"
                    f"{n} = squeeze({n}0) {{dims=[0]}}\n" for i, n in enumerate("kv")) +
            "y = attention(q, k, v) {causal=true}\noutput y\n")
    mod, src = _emulated(fake_gpu, tmp_path, "cache_views", text)
    assert src.count("@triton.jit") == 2  # the two split kernels, no copy of k or v
    tuners = _split_tuners(mod, 1)
    g = torch.Generator().manual_seed(9)
    q, kv = torch.randn(1, 4, 3, 64, generator=g), torch.randn(1, 4097, 2, 1, 64, generator=g)
    k, v = (kv[:, :, i].transpose(1, 2) for i in range(2))
    c = _case(3, 4097, causal=True)
    want = SUITE.reference(c, [q, k, v])

    def run(label):
        (got,) = mod.call([q, kv])
        why = SUITE.compare(got, want, "f32")
        assert not why, f"{label}: {why}"
    _every_config(tuners, run)


GOLDEN_CASES = {
    "triton/attention_decode": _case(1, 8192, d=128, dtype="bf16", h=32, hkv=8),
    "triton_dynamic/attention_decode_split": _case(1, 1500, d=128, dtype="bf16", h=8, hkv=2),
}


@pytest.mark.parametrize("golden", sorted(GOLDEN_CASES))
def test_golden_modules(fake_gpu, golden):
    path = os.path.join(GOLDEN, golden + ".py")
    mod = tl_emulator.emulate_module(fake_gpu, path, "emu_" + golden.replace("/", "_"),
                                     kinds={"attention"})
    tuners = _split_tuners(mod, 1)
    c = GOLDEN_CASES[golden]
    args = SUITE.make_inputs(c, 3, device="cpu")
    want = SUITE.reference(c, args)
    for r in (0, max(len(t.configs) for t in tuners) - 1):
        for t in tuners:
            t.select(r)
        (got,) = mod.call(list(args))
        assert not SUITE.compare(got, want, c["dtype"]), (r, SUITE.compare(got, want, "bf16"))


def _training_forward_text(c):
    """y = attention and l = attention_lse over the same q, k and mask: a training forward,
    whose logsumexp the forward's kernel stores too (sched/fusion.h), here the combine."""
    t = PREPARE.coil_type
    causal = "true" if c["causal"] else "false"
    return (f"input q: {t(c['dtype'], [c['b'], c['h'], c['tq'], c['d']])}\n"
            f"input k: {t(c['dtype'], [c['b'], c['hkv'], c['tk'], c['d']])}\n"
            f"input v: {t(c['dtype'], [c['b'], c['hkv'], c['tk'], c['dv']])}\n"
            f"input m: {t(c['mask'][0], c['mask'][1])}\n"
            f"y = attention(q, k, v, m) {{causal={causal}}}\n"
            f"l = attention_lse(q, k, m) {{causal={causal}}}\noutput y\noutput l\n")


def _check_training_forward(mod, tuners, c):
    args = SUITE.make_inputs(c, 21, device="cpu")
    dy = SUITE.make_backward_inputs(c, 21, device="cpu")[-1]
    y_want, lse_want = SUITE.backward_reference(c, args + [dy])[:2]
    assert bool(torch.isinf(lse_want).any()), "the case should have rows with no key"
    problems = []

    def run(label):
        y, lse = mod.call(list(args))
        for name, got, want in (("y", y, y_want), ("lse", lse, lse_want)):
            why = SUITE.compare_backward(name, got, want, c["dtype"])
            if why:
                problems.append(f"{name}, {label}: {why}")
    _every_config(tuners, run)
    assert not problems, "\n".join(problems[:10])


TRAINING_FORWARD = _case(16, 4097, causal=True, mask=("bool", [1, 4, 16, 4097], "rows_masked"))


def test_training_forward_combines_its_logsumexp(fake_gpu, tmp_path):
    """The logsumexp of a split forward: (M + log2 L) ln 2 in the combine, -inf for a row that
    sees no key (M_safe keeps its weights 0, not NaN)."""
    text = _training_forward_text(TRAINING_FORWARD)
    mod, src = _emulated(fake_gpu, tmp_path, "training_forward", text)
    assert "tl.store(out_ptr1 + rows, lse, mask=row_mask)" in src
    _check_training_forward(mod, _split_tuners(mod, 1), TRAINING_FORWARD)
    # Without M_safe those rows' weights are exp2(-inf - -inf) = NaN: the lse check fails.
    line = '    m_safe = tl.where(m_max == float("-inf"), 0.0, m_max)\n'
    assert src.count(line) == 1
    path = tmp_path / "broken_m_safe.py"
    path.write_text(src.replace(line, "    m_safe = m_max\n"))
    broken = tl_emulator.emulate_module(fake_gpu, str(path), "emu_decode_broken_m_safe",
                                        kinds={"attention"})
    with pytest.raises(AssertionError, match="lse, config #0: NaN"):
        _check_training_forward(broken, _split_tuners(broken, 1), TRAINING_FORWARD)


BROKEN = {
    # the combine without the chunks' weights on their outputs, or on their sums
    "output_weight": ("acc += tl.load(arg_acc", " * w[:, None]\n", "\n"),
    "sum_weight": ("l_sum += tl.load(arg_sum", " * w\n", "\n"),
    # the causal partial loops not clamped to their chunk: the chunks overlap
    "chunk": ("hi = tl.minimum(hi, chunk_hi)\n", "hi = tl.minimum(hi, chunk_hi)\n", "\n"),
}


@pytest.mark.parametrize("what", sorted(BROKEN))
def test_a_wrong_kernel_fails(fake_gpu, tmp_path, what):
    """The checks can fail: each of these breaks the module and must be caught."""
    cases = [_case(3, 4097, causal=True, mask=("bool", [1, 1, 3, 4097], "rows_masked"))]
    import coil
    src, _ = coil.Graph.parse(PREPARE.graph_text(cases), "<broken>").generate_gpu_module()
    anchor, old, new = BROKEN[what]
    lines = src.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if anchor in line]
    assert hits, anchor
    for i in hits:
        assert old in lines[i], (old, lines[i])
        lines[i] = lines[i].replace(old, new)
    path = tmp_path / f"broken_{what}.py"
    path.write_text("".join(lines))
    mod = tl_emulator.emulate_module(fake_gpu, str(path), f"emu_decode_broken_{what}",
                                     kinds={"attention"})
    with pytest.raises(AssertionError, match="max abs err|NaN at"):
        _check_cases(mod, _split_tuners(mod, 1), cases, seed=1)
