"""The generated flash-attention kernels, executed on the CPU (tl_emulator.py runs their
@triton.jit bodies with torch tensors) through the modules' own call() (fake triton), against
the written-out pattern in float64: the template's algorithm (online softmax, causal block
split, masks, GQA, padded head dims, bounds masks, NaN rows, Tk = 0) under every config the
runtime may pick. The GPU runs the same cases compiled by Triton (tests/gpu/test_attention.py).

The golden modules always run; the GPU suite's modules (tests/gpu/generated/attn_*, written by
tests/gpu/prepare_attention.py) run when present: the small groups here, all of them with
COIL_EMULATE_ATTENTION=all (minutes).
"""

import importlib.util
import json
import os

import pytest
import torch

import tl_emulator
from coil_runtime import heuristics

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "triton")
GENERATED = os.path.join(ROOT, "tests", "gpu", "generated")


def _gpu_script(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "tests", "gpu", file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SUITE = _gpu_script("gpu_test_attention", "test_attention.py")


def _emulate(fake, path, name):
    """Loads the module with its attention kernels emulated (a written-out attention's
    kernels, D > 256, are launched, not emulated)."""
    return tl_emulator.emulate_module(fake, path, name, kinds={"attention"})


def _check_every_config(fake, path, name, cases, seed):
    mod = _emulate(fake, path, name)
    tuners = [t for t in heuristics.autotuners_of(mod) if t.kind == "attention"]
    inputs, refs = [], []
    for i, c in enumerate(cases):
        args = SUITE.make_inputs(c, seed + i, device="cpu")
        inputs += args
        refs.append(SUITE.reference(c, args))
    problems = []
    for r in range(max(len(t.configs) for t in tuners)):
        for t in tuners:
            t.select(r)
        outs = mod.call(list(inputs))
        for i, (c, got, want) in enumerate(zip(cases, outs, refs)):
            if max(c["d"], c["dv"]) > 256:
                continue  # written out (not the template): the GPU suite checks it
            why = SUITE.compare(got, want, c["dtype"])
            if why:
                problems.append(f"{name} #{i} ({SUITE.describe(c)}), config #{r}: {why}")
    assert not problems, "\n".join(problems[:10])
    return len(tuners)


def _case(tq, tk, d, dtype="f32", causal=False, b=2, h=4, hkv=None, dv=None, mask=None,
          scale=None):
    return {"tq": tq, "tk": tk, "d": d, "dv": dv or d, "dtype": dtype, "causal": causal,
            "b": b, "h": h, "hkv": hkv or h, "mask": mask, "scale": scale}


GOLDEN_CASES = {
    "attention": [_case(64, 64, 32, causal=True, hkv=2)],
    "attention_causal_gqa_bf16": [_case(100, 300, 80, "bf16", causal=True, b=1, h=8, hkv=2,
                                        dv=64, scale=0.125)],
    "attention_mask_broadcast": [_case(128, 96, 64, mask=("f32", [2, 1, 1, 96], "random")),
                                 _case(128, 96, 64, mask=("bool", [128, 96], "random"))],
}


@pytest.mark.parametrize("golden", sorted(GOLDEN_CASES))
def test_golden_kernels_compute_attention(fake_gpu, golden):
    cases = GOLDEN_CASES[golden]
    if len(cases) == 2:  # both kernels of the mask module read the same q, k, v
        path = os.path.join(GOLDEN, golden + ".py")
        mod = _emulate(fake_gpu, path, "emu_" + golden)
        args = SUITE.make_inputs(cases[0], 7, device="cpu")
        keep = SUITE.make_inputs(cases[1], 7, device="cpu")[3]
        refs = [SUITE.reference(cases[0], args), SUITE.reference(cases[1], args[:3] + [keep])]
        for r in range(len(heuristics.autotuners_of(mod)[0].configs)):
            for t in heuristics.autotuners_of(mod):
                t.select(r)
            outs = mod.call(args + [keep])
            for c, got, want in zip(cases, outs, refs):
                assert not SUITE.compare(got, want, c["dtype"]), (r, SUITE.compare(got, want,
                                                                                    c["dtype"]))
        return
    _check_every_config(fake_gpu, os.path.join(GOLDEN, golden + ".py"), "emu_" + golden, cases,
                        seed=3)


def test_a_wrong_kernel_fails(fake_gpu, tmp_path):
    """The check can fail: the golden kernel without its causal mask is wrong."""
    src = open(os.path.join(GOLDEN, "attention.py")).read()
    line = '        s = tl.where(rn[None, :] <= rm[:, None] + (TK - TQ), s, float("-inf"))\n'
    assert line in src
    path = tmp_path / "broken.py"
    path.write_text(src.replace(line, ""))
    with pytest.raises(AssertionError, match="max abs err"):
        _check_every_config(fake_gpu, str(path), "emu_broken", GOLDEN_CASES["attention"], 3)


def _generated_groups():
    if not os.path.isdir(GENERATED):
        return []
    # The backward group (kind 'backward') is test_attention_backward_emulated.py's.
    groups = sorted(d[5:] for d in os.listdir(GENERATED) if d.startswith("attn_") and
                    not d.startswith("attn_bench_") and
                    os.path.exists(os.path.join(GENERATED, d, "attention.json")) and
                    json.load(open(os.path.join(GENERATED, d, "attention.json"))).get(
                        "kind", "forward") == "forward")
    if os.environ.get("COIL_EMULATE_ATTENTION") == "all":
        return groups
    return [g for g in groups if g in ("masks", "edges", "grid_f16_d64")]


@pytest.mark.parametrize("group", _generated_groups())
def test_gpu_suite_group_emulated(fake_gpu, group):
    d = os.path.join(GENERATED, "attn_" + group)
    info = json.load(open(os.path.join(d, "attention.json")))
    assert info["status"] == "ok", info.get("log")
    _check_every_config(fake_gpu, os.path.join(d, "module.py"), "emu_" + group, info["cases"],
                        seed=1000 * len(group))


def test_views_of_a_packed_projection_are_read_in_place(fake_gpu):
    """q, k, v as views of one [B, T, 3, H, D] input: offsets and row strides in the kernel."""
    path = os.path.join(GOLDEN, "attention_qkv_views.py")
    mod = _emulate(fake_gpu, path, "emu_qkv_views")
    (tuner,) = heuristics.autotuners_of(mod)
    torch.manual_seed(5)
    qkv = torch.randn(2, 64, 3, 4, 32)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    c = _case(64, 64, 32, causal=True)
    want = SUITE.reference(c, [q, k, v])
    for r in range(len(tuner.configs)):
        tuner.select(r)
        (got,) = mod.call([qkv])
        assert not SUITE.compare(got, want, "f32"), (r, SUITE.compare(got, want, "f32"))


# Grouped-query heads packed into the rows of one query tile (a program per kv head: the
# forward template where Tq * G <= 64, triton_attention_decode.h attention_packed_heads): every
# G in {2, 4, 8} with every Tq in {1, 2, 3, 5} over short keys (one kernel, not split), causal
# on every other, masks per head and broadcast over heads (rows masked whole) on every third.
PACKED_CASES = [
    _case(tq, tk, 32, "bf16" if i % 4 == 3 else "f32", causal=i % 2 == 1, b=2, h=8,
          hkv=8 // g,
          mask=(None if i % 3 else ("bool", [2, 8 if i % 2 else 1, tq, tk], "rows_masked")))
    for i, (g, tq, tk) in enumerate((g, tq, tk) for g in (2, 4, 8) for tq in (1, 2, 3, 5)
                                    for tk in ((7,) if tq != 3 else (1,)))
]


def test_packed_grouped_query_forward(fake_gpu, tmp_path):
    import coil
    prepare = _gpu_script("gpu_prepare_attention", "prepare_attention.py")
    src, _ = coil.Graph.parse(prepare.graph_text(PACKED_CASES), "<packed>").generate_gpu_module()
    assert src.count("packed_heads=") == len(PACKED_CASES)
    assert "kernel='decode_partial'" not in src  # short keys: the forward template
    path = tmp_path / "packed.py"
    path.write_text(src)
    _check_every_config(fake_gpu, str(path), "emu_packed", PACKED_CASES, seed=11)
    # The check can fail: rows stored at the unpacked (batch x head) offsets are wrong.
    broken = src.replace("tl.store(out_ptr0 + (bkv * ", "tl.store(out_ptr0 + (kvh * ")
    assert broken != src
    path = tmp_path / "packed_broken.py"
    path.write_text(broken)
    with pytest.raises(AssertionError, match="max abs err|NaN at"):
        _check_every_config(fake_gpu, str(path), "emu_packed_broken", PACKED_CASES, seed=11)
