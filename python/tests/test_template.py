"""The matmul template decorator (heuristics.template): configs, grid, and the choice between
the Triton configs and the extern (torch.mm + epilogue kernel) path, with the fake triton."""

import os

import torch

from coil_runtime import autotune, configs as cfgs, heuristics, runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULE = os.path.join(ROOT, "tests", "golden", "triton", "matmul_bias_relu.py")
TEM, EPI = "triton_tem_fused_matmul_add_relu_0", "triton_poi_fused_add_relu_1"


def test_mm_configs_scaled_filtered_and_extern_last():
    big = cfgs.mm_configs({"m": 8192, "n": 4096, "k": 4096, "batch": 1}, "bfloat16")
    assert cfgs.is_extern(big[-1]) and not any(cfgs.is_extern(c) for c in big[:-1])
    assert len(big) == len(cfgs.MM_CONFIGS) + 1  # every bf16 config fits in shared memory
    assert all(c.kwargs["GROUP_M"] == 8 for c in big[:-1])
    # Small problems: blocks clamp to next_pow2 of each dim (>= 16), duplicates dropped.
    small = cfgs.mm_configs({"m": 20, "n": 8, "k": 100, "batch": 1}, "float32")
    for c in small[:-1]:
        assert c.kwargs["BLOCK_M"] == 32 and c.kwargs["BLOCK_N"] == 16
        assert c.kwargs["BLOCK_K"] in (16, 32, 64, 128)
    assert len(set(c.key() for c in small)) == len(small)
    # Shared memory: f32 128x128x64 with 5 stages needs 320 KiB and is dropped.
    f32 = cfgs.mm_configs({"m": 8192, "n": 4096, "k": 4096, "batch": 1}, "float32")
    assert not any(c.kwargs == {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}
                   and c.num_stages == 5 for c in f32)
    assert len(cfgs.mm_configs({"m": 64, "n": 64, "k": 64}, mode="0")) == 1


def test_mm_grid():
    c = cfgs.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16, "GROUP_M": 8})
    assert cfgs.mm_grid(c, {"m": 100, "n": 50, "k": 7, "batch": 3}) == (2 * 2, 3, 1)
    assert cfgs.mm_grid(c, {"m": 0, "n": 50, "k": 7, "batch": 1})[0] == 0


def _args():
    torch.manual_seed(0)
    return [torch.randn(512, 256), torch.randn(256, 128), torch.randn(128)]


def _bench(fake, extern_ms, lt_ms=100.0):
    """Times by what ran: the first extern choice launches the epilogue kernel, the cuBLASLt
    one (extern_0_lt) launches nothing; a template config's time falls with its tile area (so
    128x128 wins among them)."""
    def bench(fn):
        n = len(fake.LAUNCHES)
        fn()
        new = fake.LAUNCHES[n:]
        if not new:
            return lt_ms
        if any(la[0] == EPI for la in new):
            return extern_ms
        consts = new[-1][4]
        return 1.0 + 1000.0 / (consts["BLOCK_M"] * consts["BLOCK_N"] * consts["BLOCK_K"])
    return bench


def with_mode(path, tmp_path, mode):
    """A copy of a generated module with `coil compile --mode MODE`'s line after the imports."""
    src = open(path).read()
    anchor = "from coil_runtime import heuristics, runtime\n"
    assert anchor in src
    out = tmp_path / f"{mode}_{os.path.basename(path)}"
    out.write_text(src.replace(anchor, anchor + f"\nCOIL_AUTOTUNE_MODE = '{mode}'  "
                                                f"# CompileOptions::mode\n", 1))
    return str(out)


def test_template_wins_and_launches_on_the_mm_grid(fake_gpu, capsys, tmp_path):
    # max-autotune: every Triton config is timed against the extern choices.
    fake = fake_gpu
    fake.EMULATORS[EPI] = lambda a, b, out, n: out.copy_(torch.relu(a + b))
    autotune.set_benchmarker(_bench(fake, extern_ms=50.0))
    mod = runtime.load_module(with_mode(MODULE, tmp_path, "max-autotune"), name="tem_triton")
    tem = {t.name: t for t in heuristics.autotuners_of(mod)}[TEM]
    assert isinstance(tem, heuristics.TemplateAutotuner) and tem.extern is mod.extern_0
    assert tem.runtime_names == ["arg_A", "arg_B", "in_ptr0", "out_ptr0"]
    assert tem.mutated_pos == [3] and tem.flops == 2 * 512 * 128 * 256
    mod.call(_args())
    assert tem.choice() == "triton"
    name, grid, _, args, consts, warps = fake.LAUNCHES[-1]
    assert name == TEM and consts["BLOCK_M"] == 128 and consts["BLOCK_N"] == 128
    assert grid == (4, 1, 1) and consts["GROUP_M"] == 8
    err = capsys.readouterr().err
    assert "TFLOP/s" in err and "extern_0 (cuBLAS + epilogue kernel)" in err
    assert "extern_0_lt (cuBLASLt, epilogue fused)" in err


def test_extern_wins_computes_through_torch_mm(fake_gpu, capsys):
    fake = fake_gpu
    fake.EMULATORS[EPI] = lambda a, b, out, n: out.copy_(torch.relu(a + b))
    autotune.set_benchmarker(_bench(fake, extern_ms=0.01, lt_ms=0.02))
    mod = runtime.load_module(MODULE, name="tem_extern")
    args = _args()
    (out,) = mod.call(list(args))
    tem = {t.name: t for t in heuristics.autotuners_of(mod)}[TEM]
    assert tem.choice() == "extern"
    assert fake.LAUNCHES[-1][0] == EPI
    torch.testing.assert_close(out, torch.relu(args[0] @ args[1] + args[2]))
    # Another process: the choice comes from the disk cache, extern included.
    autotune.set_benchmarker(lambda fn: (_ for _ in ()).throw(AssertionError("benchmarked")))
    mod2 = runtime.load_module(MODULE, name="tem_extern_2")
    mod2.call(list(args))
    tem2 = {t.name: t for t in heuristics.autotuners_of(mod2)}[TEM]
    assert tem2.choice() == "extern" and "cache hit" in capsys.readouterr().err


def test_select_forces_each_choice(fake_gpu):
    fake = fake_gpu
    fake.EMULATORS[EPI] = lambda a, b, out, n: out.copy_(torch.relu(a + b))
    mod = runtime.load_module(MODULE, name="tem_select")
    tem = {t.name: t for t in heuristics.autotuners_of(mod)}[TEM]
    assert [c.kwargs.get("EXTERN") for c in tem.configs[-3:]] == [None, 1, 2]
    assert tem.externs == [mod.extern_0, mod.extern_0_lt]
    tem.select(len(tem.configs) - 2)
    mod.call(_args())
    assert tem.choice() == "extern" and fake.LAUNCHES[-1][0] == EPI
    # cuBLASLt with bias and ReLU fused: one torch call, no kernel launch.
    n = len(fake.LAUNCHES)
    args = _args()
    tem.select(len(tem.configs) - 1)
    (out,) = mod.call(list(args))
    assert tem.choice() == "extern" and len(fake.LAUNCHES) == n
    torch.testing.assert_close(out, torch.relu(args[0] @ args[1] + args[2]))
    tem.select(0)
    mod.call(_args())
    assert tem.choice() == "triton" and fake.LAUNCHES[-1][0] == TEM
