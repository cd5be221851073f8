"""Unit tests of coil_runtime's config tables, grids, autotune cache and launch path.

They run without a GPU or triton: the launch-path tests load sample_module.py (a module in the
generated shape) with the fake triton of fake_triton.py and CPU tensors.
"""

import json
import os

import pytest
import torch

from coil_runtime import autotune, configs as cfgs, heuristics, logs, runtime


def blocks(configs):
    return [(dict(sorted(c.kwargs.items())), c.num_warps) for c in configs]


# ---------------------------------------------------------------------------------------------
# Config tables (expected values: Inductor's choices, ../shared/reference/inductor-measured.md)


def test_pointwise_1d_large_is_inductors_pair():
    # (a) x*0.5+1 on 64M floats: Inductor picks XBLOCK=1024 with 4 warps out of these two.
    assert blocks(cfgs.pointwise_configs({"x": 67108864})) == [
        ({"XBLOCK": 1024}, 4), ({"XBLOCK": 512}, 8)]


def test_pointwise_1d_small_and_tiny():
    assert blocks(cfgs.pointwise_configs({"x": 16384})) == [({"XBLOCK": 256}, 4),
                                                             ({"XBLOCK": 128}, 4)]
    # A 3-element kernel: blocks clamp to the size hint (4) and warps drop accordingly.
    assert blocks(cfgs.pointwise_configs({"x": 3})) == [({"XBLOCK": 4}, 1)]
    assert blocks(cfgs.pointwise_configs({"x": 1})) == [({"XBLOCK": 1}, 1)]


def test_pointwise_modes():
    wide = cfgs.pointwise_configs({"x": 67108864}, mode="max")
    assert sorted({c.kwargs["XBLOCK"] for c in wide}) == [128, 256, 512, 1024]
    assert len(cfgs.pointwise_configs({"x": 67108864}, mode="0")) == 1


def test_pointwise_2d_tiles():
    got = blocks(cfgs.pointwise_configs({"y": 8192, "x": 8192}))
    # (f) x.t()+y: Inductor's winner YBLOCK=64, XBLOCK=64, 8 warps is in the list.
    assert ({"XBLOCK": 64, "YBLOCK": 64}, 8) in got
    assert got[0] == ({"XBLOCK": 32, "YBLOCK": 32}, 4)
    assert len(got) == 6
    assert blocks(cfgs.pointwise_configs({"y": 8192, "x": 8192}, tile_hint="SQUARE")) == [
        ({"XBLOCK": 32, "YBLOCK": 32}, 4)]
    # Small tiles clamp to the hints; y never exceeds its 1024 maximum.
    for c in cfgs.pointwise_configs({"y": 4, "x": 100000}):
        assert c.kwargs["YBLOCK"] <= 4


def test_persistent_inner_rows_get_one_warp():
    # (c) softmax, (d) layer_norm, (e1) sum(-1) [65536,1024] and (i) softmax [10000,1000]:
    # Inductor runs XBLOCK=1 with one warp, a single config (no autotuning).
    for hints in ({"x": 65536, "r0_": 1024}, {"x": 16384, "r0_": 1024}):
        assert blocks(cfgs.persistent_reduction_configs(hints, "INNER")) == [({"XBLOCK": 1}, 1)]
    # 256-element rows: four rows per program, still one warp.
    assert blocks(cfgs.persistent_reduction_configs({"x": 65536, "r0_": 256}, "INNER")) == [
        ({"XBLOCK": 4}, 1)]


def test_persistent_xblock_limits():
    got = cfgs.persistent_reduction_configs({"x": 128, "r0_": 64}, "DEFAULT")
    xs = [c.kwargs["XBLOCK"] for c in got]
    assert xs == [1, 8, 32]  # 128 * 64 > 4096
    assert all("R0_BLOCK" not in c.kwargs for c in got)
    for c in got:
        assert c.kwargs["XBLOCK"] * 64 <= 4096 or c.kwargs["XBLOCK"] == 1
    # Fewer rows than 8: only XBLOCK=1 (xblock <= xnumel).
    assert [c.kwargs["XBLOCK"] for c in
            cfgs.persistent_reduction_configs({"x": 4, "r0_": 16}, "DEFAULT")] == [1]
    assert [c.kwargs["XBLOCK"] for c in
            cfgs.persistent_reduction_configs({"x": 128, "r0_": 64}, "OUTER")] == [32]


def test_looped_reduction_tables():
    # (e0) sum(0) of [65536,1024] as Inductor splits it: both kernels OUTER. Inductor's config
    # first, then coil's wider ones (more bytes in flight), timed against it.
    assert blocks(cfgs.reduction_configs({"x": 131072, "r0_": 512}, "OUTER")) == [
        ({"R0_BLOCK": 8, "XBLOCK": 64}, 4), ({"R0_BLOCK": 32, "XBLOCK": 64}, 8),
        ({"R0_BLOCK": 16, "XBLOCK": 128}, 8), ({"R0_BLOCK": 8, "XBLOCK": 256}, 8)]
    assert blocks(cfgs.reduction_configs({"x": 1024, "r0_": 128}, "OUTER")) == [
        ({"R0_BLOCK": 64, "XBLOCK": 8}, 4)]
    # One long row: XBLOCK=1, R0_BLOCK=2048, 16 warps.
    assert blocks(cfgs.reduction_configs({"x": 1, "r0_": 1 << 20}, "INNER")) == [
        ({"R0_BLOCK": 2048, "XBLOCK": 1}, 16)]
    every = cfgs.reduction_configs({"x": 64, "r0_": 8192}, "DEFAULT")
    assert len(every) == 5 and len({c.key() for c in every}) == 5
    # Register-pressure rule: many loads halve the maximum R0_BLOCK.
    heavy = cfgs.reduction_configs({"x": 4096, "r0_": 8192}, "INNER", num_load=8,
                                   num_reduction=2)
    assert heavy[0].kwargs["R0_BLOCK"] == 1024


def test_every_block_is_a_power_of_two_within_limits():
    cases = [cfgs.pointwise_configs({"x": n}, mode=m) for n in (1, 3, 17, 1000003, 1 << 26)
             for m in ("0", "1", "max")]
    cases += [cfgs.pointwise_configs({"y": y, "x": x}) for y, x in ((1, 7), (3, 1 << 20))]
    cases += [cfgs.persistent_reduction_configs({"x": x, "r0_": r}, h)
              for x in (1, 17, 65536) for r in (1, 3, 1000) for h in cfgs.REDUCTION_HINTS]
    cases += [cfgs.reduction_configs({"x": x, "r0_": r}, h)
              for x in (1, 17, 65536) for r in (3, 5000, 1000003) for h in cfgs.REDUCTION_HINTS]
    for configs in cases:
        assert configs
        for c in configs:
            assert c.num_stages == 1 and c.num_warps in (1, 2, 4, 8, 16, 32)
            for name, v in c.kwargs.items():
                assert v & (v - 1) == 0 and v <= cfgs.TRITON_MAX_BLOCK[name[:-len("BLOCK")]]
                assert v <= cfgs.COIL_MAX_BLOCK[name]  # the code generator's mask contract


def test_bad_hints_are_errors():
    with pytest.raises(ValueError):
        cfgs.reduction_configs({"x": 4, "r0_": 4}, "SIDEWAYS")
    with pytest.raises(ValueError):
        cfgs.pointwise_configs({"q": 4})
    assert heuristics._hint_name("ReductionHint.OUTER", cfgs.REDUCTION_HINTS) == "OUTER"


# ---------------------------------------------------------------------------------------------
# Grids


def test_grids():
    c1 = cfgs.Config({"XBLOCK": 1024}, 4)
    assert cfgs.grid_for(c1, {"x": 4194304}) == (4096, 1, 1)
    assert cfgs.grid_for(c1, {"x": 1000003}) == (977, 1, 1)
    c2 = cfgs.Config({"XBLOCK": 64, "YBLOCK": 32}, 8)
    assert cfgs.grid_for(c2, {"y": 768, "x": 1000}) == (16, 24, 1)
    # Reductions: one program per XBLOCK rows, whatever R0_BLOCK is.
    c3 = cfgs.Config({"XBLOCK": 8, "R0_BLOCK": 64}, 4)
    assert cfgs.grid_for(c3, {"x": 1000, "r0_": 4096}) == (125, 1, 1)
    # No XBLOCK (Inductor's no_x_dim): one program per row.
    assert cfgs.grid_for(cfgs.Config({}, 1), {"x": 77, "r0_": 5}) == (77, 1, 1)
    assert cfgs.grid_for(c1, {"x": 0}) == (0, 1, 1)
    with pytest.raises(ValueError):
        cfgs.grid_for(cfgs.Config({"XBLOCK": 1, "YBLOCK": 1}, 1), {"y": 70000, "x": 1})


# ---------------------------------------------------------------------------------------------
# Autotune cache


class _Tuner:
    """The attributes of a CoilAutotuner the cache functions read."""

    def __init__(self, configs, name="triton_poi_fused_add_0", kernel_hash="abc123"):
        self.configs, self.name, self.kernel_hash, self.kind = configs, name, kernel_hash, "pw"


def test_cache_key_and_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path))
    tuner = _Tuner(cfgs.pointwise_configs({"x": 1 << 20}))
    bucket = autotune.size_bucket({"x": 1000000})
    assert bucket == (("x", 1 << 20),)
    assert autotune.size_bucket({"y": 3, "x": 1025}) == (("y", 4), ("x", 2048))
    path = autotune.cache_path(tuner, bucket, "NVIDIA H200")
    assert path.startswith(str(tmp_path / "triton_autotune"))
    assert path == autotune.cache_path(tuner, bucket, "NVIDIA H200")  # stable
    assert path != autotune.cache_path(tuner, bucket, "NVIDIA H100")
    assert path != autotune.cache_path(tuner, (("x", 2048),), "NVIDIA H200")
    assert autotune.read_cache(tuner, bucket, "NVIDIA H200") is None

    best = tuner.configs[1]
    rows = [{"config": c, "ms": 0.1 * (i + 1), "status": "ok", "n_regs": 18, "n_spills": 0}
            for i, c in enumerate(tuner.configs)]
    assert autotune.write_cache(tuner, bucket, "NVIDIA H200", best, rows, 0.5) == path
    assert autotune.read_cache(tuner, bucket, "NVIDIA H200") is tuner.configs[1]
    entry = json.load(open(path))
    assert entry["kernel_hash"] == "abc123" and entry["bucket"] == {"x": 1 << 20}
    assert entry["best"] == best.to_json()
    # Another device, another kernel hash or another config list: not used.
    assert autotune.read_cache(tuner, bucket, "NVIDIA H100") is None
    assert autotune.read_cache(_Tuner(tuner.configs, kernel_hash="other"), bucket,
                               "NVIDIA H200") is None
    assert autotune.read_cache(_Tuner(tuner.configs[:1]), bucket, "NVIDIA H200") is None
    # A corrupt entry is ignored (with a warning), never an error.
    with open(path, "w") as f:
        f.write("{not json")
    assert autotune.read_cache(tuner, bucket, "NVIDIA H200") is None


def test_cache_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("COIL_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert autotune.cache_dir() == str(tmp_path / "coil" / "triton_autotune")
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert autotune.cache_dir() == str(tmp_path / ".cache" / "coil" / "triton_autotune")


# ---------------------------------------------------------------------------------------------
# The sample module through the fake triton


SAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sample_module.py")


def sample_args():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s in ((4096, 1024), (4096, 1000), (1024, 768),
                                                  (768, 1024))]


def fake_times(fake):
    """A benchmarker: calls the launcher once and times the config that launched, preferring
    (for each kernel) the second config of its list."""
    def bench(fn):
        fn()
        name, grid, stream, args, consts, warps = fake.LAUNCHES[-1]
        return 0.5 if (consts.get("XBLOCK"), warps) in (
            (512, 8), (64, 8), (2, 2)) else 1.0  # the 2nd config of each list
    return bench


def test_sample_module_imports_as_autotuners(fake_gpu):
    mod = runtime.load_module(SAMPLE, name="sample_import")
    tuners = {t.name: t for t in heuristics.autotuners_of(mod)}
    assert set(tuners) == {"triton_poi_fused_add_mul_0", "triton_per_fused__softmax_1",
                           "triton_poi_fused_add_t_2", "triton_red_fused_sum_3"}
    poi, per = tuners["triton_poi_fused_add_mul_0"], tuners["triton_per_fused__softmax_1"]
    tile, red = tuners["triton_poi_fused_add_t_2"], tuners["triton_red_fused_sum_3"]
    assert poi.runtime_names == ["in_ptr0", "out_ptr0", "xnumel"]
    assert poi.numel_pos == {"x": 2} and poi.mutated_pos == [1]
    assert len(poi.configs) == 2 and len(per.configs) == 1
    assert tile.numel_pos == {"y": 3, "x": 4} and len(tile.configs) == 6
    assert red.numel_pos == {"x": 2, "r0_": 3} and red.constexpr_names == ["XBLOCK", "R0_BLOCK"]
    assert len(red.configs) > 1


def test_sample_module_call_launches_directly(fake_gpu, capsys):
    fake = fake_gpu
    autotune.set_benchmarker(fake_times(fake))
    mod = runtime.load_module(SAMPLE, name="sample_call")
    args = sample_args()
    mod.call(list(args))  # compiles, autotunes, launches
    n_compiles, n_launches = len(fake.COMPILES), len(fake.LAUNCHES)
    bench = [la for la in fake.LAUNCHES if la[0] == "triton_poi_fused_add_mul_0"][:2]
    # Second call: cached launchers, no compile, no benchmark: exactly 4 launches.
    outs = mod.call(list(args))
    assert len(fake.COMPILES) == n_compiles and len(fake.LAUNCHES) == n_launches + 4
    assert [tuple(o.shape) for o in outs] == [(4096, 1024), (4096, 1000), (768, 1024), (1000,)]
    real = {name: (grid, stream, a, consts, warps)
            for name, grid, stream, a, consts, warps in fake.LAUNCHES[-4:]}
    # Pointwise: the benchmark preferred XBLOCK=512 (8 warps): 8192 programs.
    grid, stream, a, consts, warps = real["triton_poi_fused_add_mul_0"]
    assert grid == (8192, 1, 1) and stream == 1234 and consts == {"XBLOCK": 512} and warps == 8
    assert a[0] is args[0] and a[1] is outs[0] and a[2] == 4194304
    # Persistent reduction: single config, R0_BLOCK = next_pow2(1000), one row per program.
    grid, _, a, consts, warps = real["triton_per_fused__softmax_1"]
    assert grid == (4096, 1, 1) and consts == {"XBLOCK": 1, "R0_BLOCK": 1024} and warps == 1
    # 2-D tile: (cdiv(xnumel, XBLOCK), cdiv(ynumel, YBLOCK)).
    grid, _, a, consts, warps = real["triton_poi_fused_add_t_2"]
    assert grid == (1024 // consts["XBLOCK"], -(768 // -consts["YBLOCK"]), 1)
    assert (consts["XBLOCK"], consts["YBLOCK"], warps) == (64, 64, 8)
    grid, _, a, consts, warps = real["triton_red_fused_sum_3"]
    assert grid == (-(1000 // -consts["XBLOCK"]), 1, 1)
    # Benchmarks ran on clones of the outputs (one launch per config, then the real one).
    assert [la[4] for la in bench] == [{"XBLOCK": 1024}, {"XBLOCK": 512}]
    first_out = [la for la in fake.LAUNCHES if la[0] == "triton_poi_fused_add_mul_0"][2][3][1]
    assert all(la[3][1] is not first_out and la[3][1].shape == first_out.shape for la in bench)
    err = capsys.readouterr().err
    assert "[coil:autotune] triton_poi_fused_add_mul_0 (pointwise, x=4194304) on Fake GPU" in err
    assert "<- best" in err

    # A misaligned input is another specialization: compiled again, same config.
    x_off = torch.empty(4096 * 1024 + 1)[1:].view(4096, 1024)
    mod.call([x_off] + args[1:])
    new = fake.COMPILES[n_compiles:]
    assert [c[0] for c in new] == ["triton_poi_fused_add_mul_0"]
    assert new[0][3] == (False, True) and new[0][1] == {"XBLOCK": 512}

    # Another process: a fresh module finds every winner in the disk cache.
    autotune.set_benchmarker(lambda fn: pytest.fail("benchmarked despite the cache"))
    mod2 = runtime.load_module(SAMPLE, name="sample_call_2")
    mod2.call(list(args))
    err = capsys.readouterr().err
    assert err.count("cache hit") == 3
    for t in heuristics.autotuners_of(mod2):
        first = {t2.name: t2 for t2 in heuristics.autotuners_of(mod)}[t.name]
        assert t.chosen == first.chosen


def test_spilling_and_failing_configs_are_skipped(fake_gpu, capsys):
    fake = fake_gpu
    fake.SPILLS["triton_poi_fused_add_mul_0"] = {frozenset({"XBLOCK": 512}.items()): 12}
    fake.FAIL["triton_poi_fused_add_t_2"] = {frozenset({"XBLOCK": 64, "YBLOCK": 64}.items())}
    autotune.set_benchmarker(fake_times(fake))
    mod = runtime.load_module(SAMPLE, name="sample_spill")
    mod.call(sample_args())
    tuners = {t.name: t for t in heuristics.autotuners_of(mod)}
    assert list(tuners["triton_poi_fused_add_mul_0"].chosen.values())[0].kwargs == {"XBLOCK": 1024}
    assert list(tuners["triton_poi_fused_add_t_2"].chosen.values())[0].kwargs != {
        "XBLOCK": 64, "YBLOCK": 64}
    err = capsys.readouterr().err
    assert "skipped: 12 spills" in err and "compile failed" in err


def test_jit_launch_mode_and_select(fake_gpu):
    fake = fake_gpu
    heuristics.set_launch_mode("jit")
    try:
        mod = runtime.load_module(SAMPLE, name="sample_jit")
        tile = next(t for t in heuristics.autotuners_of(mod) if t.name.endswith("_t_2"))
        tile.select(4)  # (bs, 1): XBLOCK=1024, YBLOCK=1
        mod.call(sample_args())
        launches = {la[0]: la for la in fake.JIT_LAUNCHES}
        assert set(launches) == {t.name for t in heuristics.autotuners_of(mod)}
        name, grid, args, consts, warps = launches["triton_poi_fused_add_t_2"]
        assert consts == {"XBLOCK": 1024, "YBLOCK": 1} and grid == (1, 768, 1)
        assert launches["triton_per_fused__softmax_1"][3] == {"XBLOCK": 1, "R0_BLOCK": 1024}
        assert tile.launch_modes == {"jit"}
    finally:
        heuristics.set_launch_mode("direct")


def test_kernels_compile_without_fma_contraction_or_ftz(fake_gpu):
    # docs/numerics.md "Triton": Triton's defaults contract a*b+c into an FMA and flush
    # subnormals in libdevice; every compile and JIT launch turns both off.
    fake = fake_gpu
    ieee = {"enable_fp_fusion": False, "enable_reflect_ftz": False}
    mod = runtime.load_module(SAMPLE, name="sample_ieee")
    mod.call(sample_args())
    assert fake.OPTIONS and all(options == ieee for _, options in fake.OPTIONS)
    assert all("enable_fp_fusion" not in c[1] for c in fake.COMPILES)  # not a constexpr
    fake.reset()
    heuristics.set_launch_mode("jit")
    try:
        mod = runtime.load_module(SAMPLE, name="sample_ieee_jit")
        mod.call(sample_args())
        assert len(fake.OPTIONS) == len(fake.JIT_LAUNCHES) > 0
        assert all(options == ieee for _, options in fake.OPTIONS)
    finally:
        heuristics.set_launch_mode("direct")
    # Without CUDAOptions to ask, only enable_fp_fusion (an option Triton does not know is a
    # KeyError at launch).
    import sys
    del sys.modules["triton.backends.nvidia.compiler"]
    assert heuristics.ieee_compile_options() == {"enable_fp_fusion": False}


def test_old_launcher_signature_falls_back_to_jit(fake_gpu, capsys):
    fake = fake_gpu
    fake.REJECT_CONSTEXPR_ARGS = True  # a launcher that does not take constexprs
    mod = runtime.load_module(SAMPLE, name="sample_fallback")
    per = next(t for t in heuristics.autotuners_of(mod) if t.kind == "persistent_reduction")
    args = sample_args()
    out = torch.empty(4096, 1000)
    per.run(args[1], out, 4096, 1000)
    per.run(args[1], out, 4096, 1000)
    assert len(fake.JIT_LAUNCHES) == 2 and "direct launch failed" in capsys.readouterr().err


def test_wrong_argument_count_is_a_clear_error(fake_gpu):
    mod = runtime.load_module(SAMPLE, name="sample_argc")
    poi = next(t for t in heuristics.autotuners_of(mod) if t.kind == "pointwise")
    with pytest.raises(TypeError, match=r"takes 3 arguments \(in_ptr0, out_ptr0, xnumel\)"):
        poi.run(torch.empty(4), 4)


def test_size_hints_must_match_the_signature(fake_gpu):
    import triton
    import triton.language as tl

    def k(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
        pass
    with pytest.raises(TypeError, match="no 'r0_numel' parameter"):
        heuristics.reduction(size_hints={"x": 4, "r0_": 4}, name="k")(triton.jit(k))


def test_logs_channels():
    old = logs.set_channels("perf, autotune")
    try:
        assert logs.enabled("autotune") and not logs.enabled("launch")
        logs.set_channels("all")
        assert logs.enabled("launch")
    finally:
        logs._channels = old
