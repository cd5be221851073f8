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

Grouped-query packing (triton_attention_decode.h attention_packed_heads: a program per kv head,
its G query heads' Tq rows in one tile where Tq * G <= 64) applies to most of these cases (GQA
4:1); the PACKED cases vary G (2, 4, 8), Tq (1, 2, 3, 5), masks per head and broadcast over
heads with rows masked whole, causal, short (unsplit) and long (split) keys.
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


def _mask_a_row_whole(c, args):
    """An additive mask of several rows: the last query row of batch 0's first mask head (every
    head, where the mask broadcasts over heads) at -inf for every key: NaN (a bool mask
    'rows_masked' has its own)."""
    m = c["mask"]
    if m and m[0] != "bool" and len(m[1]) == 4 and m[1][0] * m[1][1] * m[1][2] > 1 and c["tk"]:
        args[3][0, 0, -1, :] = float("-inf")
    return args


def _check_cases(mod, tuners, cases, seed):
    inputs, refs = [], []
    for i, c in enumerate(cases):
        args = _mask_a_row_whole(c, SUITE.make_inputs(c, seed + i, device="cpu"))
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


def _symbolic_text(tq, d, dtype, causal, mask, h=4, hkv=1, mask_heads=1):
    """q [1, h, tq, d] against a cache of t positions ([1, hkv, t, d]: GQA 4:1 by default), the
    mask [1, mask_heads, tq, t]."""
    lines = [f"input q: {dtype}[1, {h}, {tq}, {d}]", f"input k: {dtype}[1, {hkv}, t, {d}]",
             f"input v: {dtype}[1, {hkv}, t, {d}]"]
    args = "q, k, v"
    if mask:
        lines.append(f"input m: {mask[0]}[1, {mask_heads}, {tq}, t]")
        args += ", m"
    lines += [f"y = attention({args}) {{causal={'true' if causal else 'false'}}}", "output y"]
    return "\n".join(lines) + "\n"


# Cache lengths: empty, shorter than the 64 chunks (the last chunks empty), around the blocks,
# long. 0 and 1 are below the module's size guard (runtime.guard_sizes: a size of 0 or 1 gets
# a module of its own), which the test lifts: the kernels must be right there too.
CACHE_LENGTHS = (0, 1, 2, 7, 16, 100, 1000, 4097)
SYMBOLIC = {
    # (Tq, D, dtype, causal, mask, H, Hkv, the mask's heads): all packed (G = H / Hkv)
    "f32_q1": (1, 64, "f32", False, None, 4, 1, 1),
    "bf16_q3_causal_mask": (3, 80, "bf16", True, ("f32", "random"), 4, 1, 1),
    "f32_q16_causal_bool": (16, 64, "f32", True, ("bool", "rows_masked"), 4, 1, 1),
    "f32_g8_q5_causal_head_bool": (5, 64, "f32", True, ("bool", "rows_masked"), 8, 1, 8),
    "bf16_g2_q2_head_mask": (2, 64, "bf16", False, ("f32", "random"), 4, 2, 4),
}


@pytest.mark.parametrize("name", sorted(SYMBOLIC))
def test_symbolic_cache_length_at_every_length(fake_gpu, tmp_path, monkeypatch, name):
    tq, d, dtype, causal, mask, h, hkv, mask_heads = SYMBOLIC[name]
    mod, src = _emulated(fake_gpu, tmp_path, name,
                         _symbolic_text(tq, d, dtype, causal, mask, h, hkv, mask_heads))
    assert "'kv_len': 'ks0'" in src and src.count("splits=64,") == 2
    assert src.count(f"packed_heads={h // hkv},") == 1  # the partial kernel
    assert "o = tl.where(TK == 0, 0.0, o)" in src
    tuners = _split_tuners(mod, 1)
    monkeypatch.setattr(runtime, "guard_sizes", lambda sizes, guards: None)
    for tk in CACHE_LENGTHS:
        c = _case(tq, tk, d=d, dtype=dtype, causal=causal, h=h, hkv=hkv,
                  mask=(mask[0], [1, mask_heads, tq, tk], mask[1]) if mask else None)
        # The first and the last configs at every length (BLOCK_N 64 and 32: other chunks).
        args = _mask_a_row_whole(c, SUITE.make_inputs(c, 7 + tk, device="cpu"))
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
    # packed rows (4 heads x 3 query rows): a row's query head or its causal limit per query
    # row wrong
    "packed_head": ("hq = kvh * 4 + rm // TQ", "rm // TQ", "rm % 4"),
    "packed_causal": ("s = tl.where(rn[None, :] <= iq[:, None] + (TK - TQ)", "iq[:, None] + ",
                      ""),
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


# --- grouped-query packing -------------------------------------------------------------------

# Each group one module. Long keys (4097) split (a few (batch, kv head) programs), short ones
# (0, 1, 7, 1000) are one packed forward kernel. Masks per head ([B, H, Tq, Tk]) and broadcast
# over heads ([B, 1, Tq, Tk]) with rows masked whole (bool 'rows_masked': every head's row 0;
# additive: _mask_a_row_whole), causal with Tq > Tk (rows with no key), padded head dims.
PACKED = {
    "split_f32": [
        _case(1, 4097, b=2, h=4, hkv=2),                                            # G 2
        _case(2, 4097, h=8, hkv=2, causal=True, mask=("bool", [1, 8, 2, 4097], "rows_masked")),
        _case(5, 4097, h=8, hkv=1, causal=True, mask=("f32", [1, 1, 5, 4097], "random")),
        _case(3, 4097, d=80, dv=48, h=4, hkv=2, mask=("bool", [1, 1, 3, 4097], "rows_masked")),
    ],
    "split_bf16": [
        _case(3, 4097, dtype="bf16", h=8, hkv=2, causal=True,
              mask=("f32", [1, 8, 3, 4097], "random")),
        _case(1, 4097, d=128, dtype="bf16", h=8, hkv=1),                            # G 8
        _case(5, 4097, dtype="bf16", b=2, h=4, hkv=2, causal=True),
    ],
    "short_f32": [
        _case(1, 1, b=2, h=4, hkv=2),
        _case(3, 7, h=8, hkv=1, causal=True),
        _case(5, 1, h=4, hkv=1, causal=True),                      # 4 of 5 rows see no key
        _case(5, 7, b=2, h=4, hkv=2, causal=True, mask=("f32", [2, 1, 5, 7], "random")),
        _case(2, 0, h=8, hkv=4),                                    # no key: zeros
    ],
    "short_bf16": [
        _case(2, 7, b=2, dtype="bf16", h=8, hkv=2, mask=("bool", [2, 8, 2, 7], "rows_masked")),
        _case(3, 1000, d=80, dtype="bf16", h=8, hkv=2, causal=True,
              mask=("bool", [1, 1, 3, 1000], "rows_masked")),
        _case(1, 7, dtype="bf16", h=8, hkv=1, mask=("f32", [1, 8, 1, 7], "random")),
    ],
}


@pytest.mark.parametrize("group", sorted(PACKED))
def test_packed_groups_match_the_reference(fake_gpu, tmp_path, group):
    cases = PACKED[group]
    mod, src = _emulated(fake_gpu, tmp_path, "packed_" + group, PREPARE.graph_text(cases))
    assert src.count("packed_heads=") == len(cases)  # every forward (or partial) kernel
    tuners = [t for t in heuristics.autotuners_of(mod) if t.kind == "attention"]
    split = group.startswith("split")
    assert sorted({t.attention_kernel for t in tuners}) == (
        ["decode_combine", "decode_partial"] if split else ["forward"])
    packed = [t for t in tuners if t.attention_kernel != "decode_combine"]
    assert len(packed) == len(cases)
    for t, c in zip(packed, cases):
        # BLOCK_M covers the group's Tq * G rows: one row block per (batch, kv head)
        assert t.packed_heads == c["h"] // c["hkv"]
        rows = c["tq"] * t.packed_heads
        block = max(16, 1 << (rows - 1).bit_length())
        assert {cfg.kwargs["BLOCK_M"] for cfg in t.configs} == {block}, (c, t.configs)
    _check_cases(mod, tuners, cases, seed=300 + len(group))


def test_packed_launch_is_a_program_per_kv_head(fake_gpu, tmp_path):
    """The grid of a packed kernel: one row block per (batch, kv head) (and chunk); the emulator
    counts every K and V block loaded: each once per kv head, not per query head."""
    cases = [_case(3, 4097, b=2, h=8, hkv=2, causal=True)]
    mod, src = _emulated(fake_gpu, tmp_path, "packed_grid", PREPARE.graph_text(cases))
    tuners = _split_tuners(mod, 1)
    partial = next(t for t in tuners if t.attention_kernel == "decode_partial")
    args = SUITE.make_inputs(cases[0], 3, device="cpu")
    n = len(fake_gpu.LAUNCHES)
    mod.call(list(args))
    grid = fake_gpu.LAUNCHES[n][1]
    assert grid == (1, 2 * 2, partial.splits), grid
    # K's loads: a program per (batch, kv head, chunk) walks its chunk once, so each key row is
    # read once per kv head (4 query heads share it).
    loads = []
    real = tl_emulator.tl.load

    def counting(p, mask=None, other=None, eviction_policy=None):
        if p.base.data_ptr() == args[1].data_ptr():
            off = p.off if mask is None else torch.where(torch.as_tensor(mask), p.off, -1)
            loads.append(torch.as_tensor(off).reshape(-1))
        return real(p, mask, other, eviction_policy)
    tl_emulator.tl.load = counting
    try:
        mod.call(list(args))
    finally:
        tl_emulator.tl.load = real
    off = torch.cat(loads)
    off = off[off >= 0]
    counts = torch.bincount(off.long(), minlength=args[1].numel())
    assert int(counts.max()) == 1 and int(counts.min()) == 1, (int(counts.min()),
                                                               int(counts.max()))


def test_packed_training_forward_stores_its_logsumexp(fake_gpu, tmp_path):
    """A training forward, packed and not split (Tk = 300): y and the logsumexp per packed row
    (-inf for the rows that see no key)."""
    c = _case(5, 300, b=2, h=4, hkv=2, causal=True, mask=("bool", [2, 4, 5, 300], "rows_masked"))
    mod, src = _emulated(fake_gpu, tmp_path, "packed_training", _training_forward_text(c))
    (tuner,) = heuristics.autotuners_of(mod)
    assert tuner.attention_kernel == "forward" and tuner.packed_heads == 2
    assert "tl.store(out_ptr1 + (bkv * 10 + rm), lse, mask=rm < ROWS)" in src
    _check_training_forward(mod, [tuner], c)
