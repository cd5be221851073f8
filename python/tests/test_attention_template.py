"""The flash-attention template decorator (heuristics.attention): configs fitted to the shape,
the grid, autotuning over its configs, and the generated module's call() wiring, with the fake
triton (the kernel itself runs on the GPU: tests/gpu/test_attention.py); the backward kernels'
lists and grids too."""

import math
import os

import torch

from coil_runtime import autotune, configs as cfgs, heuristics, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GOLDEN = os.path.join(ROOT, "tests", "golden", "triton")
KERNEL = "triton_tem_fused_attention_0"


def shape(tq=2048, tk=2048, d=128, dv=None, b=1, h=8, hkv=None):
    return {"batch": b, "heads": h, "kv_heads": hkv or h, "q_len": tq, "kv_len": tk,
            "head_dim": d, "value_dim": dv or d}


def test_attention_configs_fit_and_clamp():
    big = cfgs.attention_configs(shape(), "bfloat16")
    assert len(big) == len(cfgs.ATTENTION_CONFIGS)  # every default config fits D = 128 bf16
    assert big[0].kwargs == {"BLOCK_M": 128, "BLOCK_N": 64} and big[0].num_warps == 8
    # Short lengths: blocks clamp to next_pow2 (>= 16), duplicates dropped.
    small = cfgs.attention_configs(shape(tq=1, tk=7, d=64), "float32")
    assert all(c.kwargs == {"BLOCK_M": 16, "BLOCK_N": 16} for c in small)
    assert len({c.key() for c in small}) == len(small)
    # Head dim 256 in f32: the K/V stages and the accumulator leave only small tiles.
    for c in cfgs.attention_configs(shape(d=256), "float32"):
        assert cfgs.attention_shared_memory(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"],
                                            c.num_stages, shape(d=256), "float32") <= \
            cfgs.MM_SHARED_MEMORY
        assert cfgs.attention_registers(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps,
                                        shape(d=256)) <= cfgs.MM_MAX_ACC_REGISTERS
    # Nothing fits a tiny shared memory: the smallest tile, one stage.
    (only,) = cfgs.attention_configs(shape(), "float32", shared_memory=1024)
    assert only.kwargs == {"BLOCK_M": 32, "BLOCK_N": 16} and only.num_stages == 1
    assert len(cfgs.attention_configs(shape(), mode="0")) == 1
    assert len(cfgs.attention_configs(shape(), "bfloat16", mode="max")) > len(big)


def test_attention_grid():
    c = cfgs.Config({"BLOCK_M": 64, "BLOCK_N": 32})
    assert cfgs.attention_grid(c, shape(tq=100, b=2, h=3)) == (2, 6, 1)
    assert cfgs.attention_grid(c, shape(tq=0))[0] == 0
    try:
        cfgs.attention_grid(c, shape(b=70000, h=1))
        raise AssertionError("a grid over CUDA's y limit was accepted")
    except ValueError as e:
        assert "batch x heads" in str(e)


def _reference(q, k, v, causal):
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        tq, tk = s.shape[-2:]
        keep = torch.arange(tk)[None, :] <= torch.arange(tq)[:, None] + (tk - tq)
        s = s.masked_fill(~keep, -math.inf)
    return torch.softmax(s, -1) @ v


def test_golden_module_autotunes_and_launches_per_query_block(fake_gpu, capsys):
    fake = fake_gpu
    fake.EMULATORS[KERNEL] = lambda q, k, v, out: out.copy_(_reference(q, k, v, True))
    # Time falls with BLOCK_M * BLOCK_N: the largest tile wins.
    autotune.set_benchmarker(lambda fn: (fn(), 1000.0 / (fake.LAUNCHES[-1][4]["BLOCK_M"] *
                                                         fake.LAUNCHES[-1][4]["BLOCK_N"]))[1])
    mod = runtime.load_module(os.path.join(GOLDEN, "attention.py"), name="attn_golden")
    (tuner,) = heuristics.autotuners_of(mod)
    assert isinstance(tuner, heuristics.AttentionAutotuner) and tuner.causal
    assert tuner.runtime_names == ["arg_Q", "arg_K", "arg_V", "out_ptr0"]
    assert tuner.mutated_pos == [3]  # only the output is cloned for benchmarking
    assert tuner.flops == 2 * 2 * 4 * 64 * 64 * 64 // 2
    torch.manual_seed(0)
    args = [torch.randn(2, 4, 64, 32), torch.randn(2, 2, 64, 32), torch.randn(2, 2, 64, 32)]
    (out,) = mod.call(list(args))
    name, grid, _, _, consts, _ = fake.LAUNCHES[-1]
    assert name == KERNEL and consts == {"BLOCK_M": 64, "BLOCK_N": 64}  # clamped to Tq = Tk
    assert grid == (1, 8, 1)  # one block of 64 query rows, 2 x 4 (batch, head) programs
    torch.testing.assert_close(out, _reference(*args, True))
    assert "TFLOP/s" in capsys.readouterr().err


def test_mask_module_passes_the_mask_and_select_forces_configs(fake_gpu):
    fake = fake_gpu
    mod = runtime.load_module(os.path.join(GOLDEN, "attention_mask_broadcast.py"),
                              name="attn_mask")
    tuners = heuristics.autotuners_of(mod)
    assert sorted(t.runtime_names[3] for t in tuners) == ["arg_mask", "arg_mask"]
    args = [torch.randn(2, 4, 128, 64), torch.randn(2, 4, 96, 64), torch.randn(2, 4, 96, 64),
            torch.randn(2, 1, 1, 96), torch.rand(128, 96) < 0.5]
    for i in range(len(tuners[0].configs)):
        for t in tuners:
            t.select(i)
        n = len(fake.LAUNCHES)
        mod.call(list(args))
        launched = fake.LAUNCHES[n:]
        assert len(launched) == 2
        for name, grid, _, kernel_args, consts, warps in launched:
            t = next(t for t in tuners if t.name == name)
            assert consts == t.configs[i].kwargs and warps == t.configs[i].num_warps
            assert grid == (math.ceil(128 / consts["BLOCK_M"]), 8, 1)
            assert kernel_args[3].shape in ((2, 1, 1, 96), (128, 96))


def test_backward_configs_fit_clamp_and_grids():
    big = shape(d=128)
    for kernel in ("lse", "grad_q", "grad_k", "grad_v", "grad_kv"):
        configs = cfgs.attention_configs(big, "bfloat16", kernel=kernel)
        assert configs, kernel
        assert len(cfgs.attention_configs(big, "bfloat16", mode="0", kernel=kernel)) == 1
        assert len(cfgs.attention_configs(big, "bfloat16", mode="max", kernel=kernel)) >= \
            len(configs)
        for c in configs:
            bm, bn = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]
            assert cfgs.attention_backward_shared_memory(kernel, bm, bn, c.num_stages, big,
                                                         "bfloat16") <= cfgs.MM_SHARED_MEMORY
            assert cfgs.attention_backward_registers(kernel, bm, bn, c.num_warps, big) <= \
                cfgs.MM_MAX_ACC_REGISTERS
    # dq: long query blocks against short key blocks; dk/dv the other way round.
    assert cfgs.attention_configs(big, "bfloat16", kernel="grad_q")[0].kwargs == \
        {"BLOCK_M": 128, "BLOCK_N": 32}
    assert cfgs.attention_configs(big, "bfloat16", kernel="grad_k")[0].kwargs == \
        {"BLOCK_M": 32, "BLOCK_N": 128}
    # grad_kv: two accumulators; at D = 128 the 128-key blocks take 8 warps.
    first = cfgs.attention_configs(big, "bfloat16", kernel="grad_kv")[0]
    assert first.kwargs == {"BLOCK_M": 32, "BLOCK_N": 128} and first.num_warps == 8
    assert all(c.num_warps == 8 or c.kwargs["BLOCK_N"] < 128
               for c in cfgs.attention_configs(big, "bfloat16", kernel="grad_kv"))
    small = cfgs.attention_configs(shape(tq=7, tk=1, d=64), kernel="grad_v")
    assert all(c.kwargs == {"BLOCK_M": 16, "BLOCK_N": 16} for c in small)
    assert len({c.key() for c in small}) == len(small)
    (only,) = cfgs.attention_configs(big, kernel="grad_k", shared_memory=1024)
    assert only.kwargs == {"BLOCK_M": 32, "BLOCK_N": 32} and only.num_stages == 1
    try:
        cfgs.attention_configs(big, kernel="grad_x")
        raise AssertionError("an unknown kernel was accepted")
    except ValueError as e:
        assert "grad_x" in str(e)
    # Grids: grad_k / grad_v run per key block and (batch, kv head), also when Tq = 0.
    c = cfgs.Config({"BLOCK_M": 32, "BLOCK_N": 64})
    assert cfgs.attention_grid(c, shape(tq=0, tk=100, b=2, h=8, hkv=2), "grad_k") == (2, 4, 1)
    assert cfgs.attention_grid(c, shape(tq=100, tk=0, b=2, h=8, hkv=2), "grad_v")[0] == 0
    assert cfgs.attention_grid(c, shape(tq=5, tk=100, b=2, h=8, hkv=2), "grad_kv") == (2, 4, 1)
    assert cfgs.attention_grid(c, shape(tq=100, tk=0, b=2, h=8, hkv=2), "grad_q") == (4, 16, 1)
    assert cfgs.attention_grid(c, shape(tq=100, tk=7, b=2, h=8), "lse") == (4, 16, 1)


def test_decode_configs_and_grids():
    """The split decoding path's lists (the partial kernel: BLOCK_M 16, pruned like the
    forward's; the combine: rows per program) and grids (a z dimension of chunks for the
    partial kernel, blocks of (batch, head, query) rows for the combine)."""
    dec = shape(tq=1, tk=8192, d=128, h=32, hkv=8)
    partial = cfgs.attention_configs(dec, "bfloat16", kernel="decode_partial")
    assert partial[0].kwargs == {"BLOCK_M": 16, "BLOCK_N": 64} and len(partial) > 2
    assert all(c.kwargs["BLOCK_M"] == 16 for c in partial)
    assert len(cfgs.attention_configs(dec, "bfloat16", mode="max", kernel="decode_partial")) > \
        len(partial)
    # D = 256 in f32: the K/V stages leave only the small tiles; nothing fits a tiny shared
    # memory: 16 x 16, one stage.
    for c in cfgs.attention_configs(shape(tq=1, tk=8192, d=256), kernel="decode_partial"):
        assert cfgs.attention_shared_memory(16, c.kwargs["BLOCK_N"], c.num_stages,
                                            shape(d=256)) <= cfgs.MM_SHARED_MEMORY
    (only,) = cfgs.attention_configs(dec, shared_memory=1024, kernel="decode_partial")
    assert only.kwargs == {"BLOCK_M": 16, "BLOCK_N": 16} and only.num_stages == 1
    combine = cfgs.attention_configs(dec, kernel="decode_combine")
    assert [c.kwargs for c in combine] == [{"BLOCK_M": 1}, {"BLOCK_M": 4}, {"BLOCK_M": 16}]
    assert len(cfgs.attention_configs(dec, mode="0", kernel="decode_combine")) == 1
    c = cfgs.Config({"BLOCK_M": 16, "BLOCK_N": 64})
    assert cfgs.attention_grid(c, dict(dec, splits=8), "decode_partial") == (1, 32, 8)
    assert cfgs.attention_grid(c, dict(dec, q_len=0, splits=8), "decode_partial")[0] == 0
    assert cfgs.attention_grid(cfgs.Config({"BLOCK_M": 4}), dict(dec, q_len=3),
                               "decode_combine") == (24, 1, 1)
    assert cfgs.attention_grid(cfgs.Config({"BLOCK_M": 4}), dict(dec, q_len=0),
                               "decode_combine")[0] == 0


def test_packed_configs_and_grids():
    """A grouped-query group packed into a tile's rows (packed_heads G: the forward and the
    partial kernel): every config's BLOCK_M covers the Tq * G rows, padded to a power of two
    >= 16, and the grid has a program per (batch, kv head) (and chunk)."""
    dec = shape(tq=3, tk=8192, d=128, b=2, h=32, hkv=4)  # G = 8: 24 rows
    for kernel in ("decode_partial", "forward"):
        for mode in ("1", "max"):
            listed = cfgs.attention_configs(dec, "bfloat16", mode=mode, kernel=kernel,
                                            packed_heads=8)
            assert listed and all(c.kwargs["BLOCK_M"] == 32 for c in listed), (kernel, listed)
            for c in listed:
                assert cfgs.attention_registers(32, c.kwargs["BLOCK_N"], c.num_warps, dec) <= \
                    cfgs.MM_MAX_ACC_REGISTERS
        (only,) = cfgs.attention_configs(dec, shared_memory=1024, kernel=kernel, packed_heads=8)
        assert only.kwargs["BLOCK_M"] == 32
    assert {c.kwargs["BLOCK_M"] for c in cfgs.attention_configs(
        shape(tq=1, tk=8192, h=32, hkv=8), kernel="decode_partial", packed_heads=4)} == {16}
    assert {c.kwargs["BLOCK_M"] for c in cfgs.attention_configs(
        shape(tq=16, tk=300, h=8, hkv=2), packed_heads=4)} == {64}
    # The lse and backward kernels are never packed: their lists ignore it.
    assert cfgs.attention_configs(dec, kernel="grad_q", packed_heads=8) == \
        cfgs.attention_configs(dec, kernel="grad_q")
    c = cfgs.Config({"BLOCK_M": 32, "BLOCK_N": 64})
    assert cfgs.attention_grid(c, dict(dec, splits=16, packed_heads=8), "decode_partial") == \
        (1, 8, 16)
    assert cfgs.attention_grid(c, dict(dec, packed_heads=8)) == (1, 8, 1)
    # A smaller BLOCK_M (not listed) would still cover the rows with more row blocks.
    assert cfgs.attention_grid(cfgs.Config({"BLOCK_M": 16, "BLOCK_N": 64}),
                               dict(dec, packed_heads=8)) == (2, 8, 1)
    # The combine reads (batch, head, query) rows: unchanged.
    assert cfgs.attention_grid(cfgs.Config({"BLOCK_M": 4}), dict(dec, packed_heads=8),
                               "decode_combine") == (48, 1, 1)


def test_decode_golden_module_launches_both_kernels(fake_gpu):
    fake = fake_gpu
    mod = runtime.load_module(os.path.join(GOLDEN, "attention_decode.py"), name="attn_decode")
    tuners = {t.attention_kernel: t for t in heuristics.autotuners_of(mod)}
    assert sorted(tuners) == ["decode_combine", "decode_partial"]
    assert tuners["decode_partial"].splits == 32
    # 32 query heads on 8 kv heads: a program per kv head, its 4 query heads the tile's rows.
    assert tuners["decode_partial"].packed_heads == 4
    assert tuners["decode_combine"].packed_heads == 1
    assert tuners["decode_partial"].mutated_pos == [3, 4, 5]  # the partial buffers
    assert tuners["decode_combine"].flops == 0
    args = [torch.randn(1, 32, 1, 128).bfloat16(), torch.randn(1, 8, 8192, 128).bfloat16(),
            torch.randn(1, 8, 8192, 128).bfloat16()]
    for r in range(2):
        for t in tuners.values():
            t.select(r)
        n = len(fake.LAUNCHES)
        (y,) = mod.call(list(args))
        assert tuple(y.shape) == (1, 32, 1, 128)
        launched = [(name, grid, consts) for name, grid, _, _, consts, _ in fake.LAUNCHES[n:]]
        assert [name for name, _, _ in launched] == [tuners["decode_partial"].name,
                                                     tuners["decode_combine"].name]
        (_, grid, consts), (_, cgrid, cconsts) = launched
        assert grid == (1, 8, 32) and consts["BLOCK_M"] == 16
        assert cgrid == (-(-32 // cconsts["BLOCK_M"]), 1, 1)


def test_backward_golden_module_launches_each_kernel_on_its_grid(fake_gpu):
    fake = fake_gpu
    mod = runtime.load_module(os.path.join(GOLDEN, "attention_backward.py"), name="attn_bw")
    tuners = {t.attention_kernel: t for t in heuristics.autotuners_of(mod)}
    # The forward stores attention_lse's logsumexp too (one kernel for both nodes), and dK's
    # kernel dV (grad_kv), after the delta kernel (rowsum(dO * out) per query row).
    assert sorted(tuners) == sorted(["forward", "grad_q", "grad_kv", "delta"])
    assert tuners["forward"].runtime_names[-2:] == ["out_ptr0", "out_ptr1"]
    assert tuners["grad_kv"].runtime_names == ["arg_Q", "arg_K", "arg_V", "arg_DELTA", "arg_DO",
                                               "arg_LSE", "arg_mask", "out_ptr0", "out_ptr1"]
    assert tuners["delta"].runtime_names == ["arg_O", "arg_DO", "arg_LSE", "out_ptr0"]
    assert tuners["delta"].flops == 0
    assert tuners["grad_q"].mutated_pos == [7]  # only the gradient is cloned for benchmarking
    assert tuners["grad_kv"].mutated_pos == [7, 8]
    # flops: q k^T, dO v^T and ds k (grad_q), q k^T, dO v^T, ds^T q and p^T dO (grad_kv),
    # halved (causal)
    assert tuners["grad_q"].flops == 2 * 2 * 4 * 64 * 64 * (32 * 3) // 2
    assert tuners["grad_kv"].flops == 2 * tuners["forward"].flops
    args = [torch.randn(2, 4, 64, 32), torch.randn(2, 2, 64, 32), torch.randn(2, 2, 64, 32),
            torch.ones(2, 1, 1, 64, dtype=torch.bool), torch.randn(2, 4, 64, 32)]
    for r in range(2):
        for t in tuners.values():
            t.select(r)
        n = len(fake.LAUNCHES)
        outs = mod.call(list(args))
        assert [tuple(o.shape) for o in outs] == [(2, 4, 64, 32), (2, 4, 64), (2, 4, 64, 32),
                                                  (2, 2, 64, 32), (2, 2, 64, 32)]
        launched = {name: (grid, consts) for name, grid, _, _, consts, _ in fake.LAUNCHES[n:]}
        assert len(launched) == 4
        for kernel, t in tuners.items():
            grid, consts = launched[t.name]
            assert consts == t.configs[min(r, len(t.configs) - 1)].kwargs
            if kernel == "delta":  # its rows: B x H x Tq
                assert grid == (-(-2 * 4 * 64 // consts["BLOCK_M"]), 1, 1), (grid, consts)
            elif kernel == "grad_kv":
                assert grid == (64 // consts["BLOCK_N"], 4, 1), (kernel, grid, consts)
            else:
                assert grid == (64 // consts["BLOCK_M"], 8, 1), (kernel, grid, consts)
