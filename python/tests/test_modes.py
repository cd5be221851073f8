"""The autotune modes (heuristics.autotune_policy, autotune.candidates), the template configs'
pruning and the compile pool (precompile.py), with the fake triton.

The modes: a module's COIL_AUTOTUNE_MODE global ('max-autotune' from `coil compile --mode
max-autotune`; absent: default), overridden by $COIL_TRITON_AUTOTUNE. Default mode takes cuBLAS
for matmul templates without timing a Triton config, unless a measurement says otherwise;
max-autotune times every config that can run.
"""

import os
import sys

import pytest
import torch

from coil_runtime import autotune, configs as cfgs, heuristics, precompile, runtime
from test_template import EPI, MODULE, TEM, _args, _bench, with_mode

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "sample_module.py")


def tuners(mod):
    return {t.name: t for t in heuristics.autotuners_of(mod)}


def edited(path, tmp_path, name, *replacements):
    """A copy of a module with text replaced (each `old` must be there)."""
    src = open(path).read()
    for old, new in replacements:
        assert old in src, old
        src = src.replace(old, new)
    out = tmp_path / name
    out.write_text(src)
    return str(out)


class Counter:
    """A benchmarker that counts its calls and times by what launched (test_template._bench)."""

    def __init__(self, fake, extern_ms=50.0, lt_ms=100.0):
        self.calls, self.inner = 0, _bench(fake, extern_ms=extern_ms, lt_ms=lt_ms)

    def __call__(self, fn):
        self.calls += 1
        return self.inner(fn)


def emulate_epilogue(fake):
    fake.EMULATORS[EPI] = lambda a, b, out, n: out.copy_(torch.relu(a + b))


# ---------------------------------------------------------------------------------------------
# Where the mode comes from


def test_mode_is_read_from_the_module_globals(fake_gpu, tmp_path):
    plain = tuners(runtime.load_module(MODULE, name="mode_plain"))
    assert {t.mode for t in plain.values()} == {"default"}
    tuned = tuners(runtime.load_module(with_mode(MODULE, tmp_path, "max-autotune"),
                                       name="mode_max"))
    assert {t.mode for t in tuned.values()} == {"max-autotune"}
    # max-autotune's lists are the wider ones: the 1-D pointwise kernel gets XBLOCK 128..1024.
    assert len(tuned[EPI].configs) > len(plain[EPI].configs)
    # The template's list is the same in both modes (only the policy differs).
    assert [c.key() for c in tuned[TEM].configs] == [c.key() for c in plain[TEM].configs]


def test_the_environment_variable_wins_over_the_module(fake_gpu, tmp_path, monkeypatch):
    path = with_mode(MODULE, tmp_path, "max-autotune")
    monkeypatch.setenv("COIL_TRITON_AUTOTUNE", "1")
    assert {t.mode for t in tuners(runtime.load_module(path, name="env1")).values()} == {
        "default"}
    monkeypatch.setenv("COIL_TRITON_AUTOTUNE", "0")
    none = tuners(runtime.load_module(path, name="env0"))
    assert {t.mode for t in none.values()} == {"none"}
    assert all(len(t.configs) == 1 for t in none.values())
    monkeypatch.setenv("COIL_TRITON_AUTOTUNE", "max")
    assert {t.mode for t in tuners(runtime.load_module(MODULE, name="envmax")).values()} == {
        "max-autotune"}


def test_an_unknown_mode_is_an_error_naming_it(fake_gpu, tmp_path, monkeypatch):
    with pytest.raises(ValueError, match=r"COIL_AUTOTUNE_MODE = 'fastest'.*'default', "
                                         r"'max-autotune'"):
        runtime.load_module(with_mode(MODULE, tmp_path, "fastest"), name="bad_mode")
    monkeypatch.setenv("COIL_TRITON_AUTOTUNE", "2")
    with pytest.raises(ValueError, match=r"COIL_TRITON_AUTOTUNE='2'"):
        runtime.load_module(MODULE, name="bad_env")


# ---------------------------------------------------------------------------------------------
# Default mode: cuBLAS for templates, unless measured otherwise


def test_default_mode_takes_cublas_without_timing_the_template(fake_gpu, tmp_path):
    fake = fake_gpu
    emulate_epilogue(fake)
    # One extern choice (torch.mm + the epilogue kernel): nothing to time for the template.
    path = edited(MODULE, tmp_path, "one_extern.py", (
        "attach_externs(extern_0, extern_0_lt)", "attach_externs(extern_0)"))
    bench = Counter(fake)
    autotune.set_benchmarker(bench)
    mod = runtime.load_module(path, name="default_one_extern")
    args = _args()
    (out,) = mod.call(list(args))
    t = tuners(mod)
    tem, epi = t[TEM], t[EPI]
    assert tem.choice() == "extern" and tem.timings == {}
    assert "cuBLAS" in list(tem.reasons.values())[0]
    assert not any(c[0] == TEM for c in fake.COMPILES)  # no Triton config compiled
    # The only benchmark calls: the epilogue kernel's own (default) configs.
    assert bench.calls == len(epi.configs) <= 2
    torch.testing.assert_close(out, torch.relu(args[0] @ args[1] + args[2]))


def test_default_mode_times_only_the_extern_choices(fake_gpu):
    fake = fake_gpu
    emulate_epilogue(fake)
    bench = Counter(fake, extern_ms=2.0, lt_ms=1.0)
    autotune.set_benchmarker(bench)
    mod = runtime.load_module(MODULE, name="default_two_externs")
    mod.call(_args())
    tem, epi = tuners(mod)[TEM], tuners(mod)[EPI]
    rows = list(tem.timings.values())[0]
    assert [r["config"].kwargs for r in rows] == [{"EXTERN": 1}, {"EXTERN": 2}]
    assert tem.choice() == "extern" and list(tem.chosen.values())[0].kwargs == {"EXTERN": 2}
    assert not any(c[0] == TEM for c in fake.COMPILES)
    assert bench.calls == 2 + len(epi.configs)


def test_a_measured_template_for_the_mm_bucket_is_used(fake_gpu, tmp_path, capsys):
    fake = fake_gpu
    emulate_epilogue(fake)
    # max-autotune measures the template faster than cuBLAS: the mm-bucket cache says so.
    autotune.set_benchmarker(_bench(fake, extern_ms=50.0))
    first = runtime.load_module(with_mode(MODULE, tmp_path, "max-autotune"), name="mm_max")
    first.call(_args())
    best = list(tuners(first)[TEM].chosen.values())[0]
    assert not cfgs.is_extern(best)
    # Another kernel of the same mm shape bucket and dtype (another hash: its own cache entry
    # misses), in default mode: the measured config, with no benchmark at all.
    path = edited(MODULE, tmp_path, "other_kernel.py", (
        "kernel_hash='1936b778f49f0f846e28d79c97040381'", "kernel_hash='another'"))
    autotune.set_benchmarker(lambda fn: pytest.fail("benchmarked despite the measurement"))
    second = runtime.load_module(path, name="mm_default")
    second.call(_args())
    tem = tuners(second)[TEM]
    assert tem.choice() == "triton" and list(tem.chosen.values())[0] == best
    assert "mm bucket" in list(tem.reasons.values())[0]
    assert "measured faster than cuBLAS" in capsys.readouterr().err


def test_a_default_mode_entry_does_not_stop_a_full_search(fake_gpu, tmp_path):
    fake = fake_gpu
    emulate_epilogue(fake)
    autotune.set_benchmarker(_bench(fake, extern_ms=50.0))
    runtime.load_module(MODULE, name="entry_default").call(_args())  # times the externs only
    bench = Counter(fake)
    autotune.set_benchmarker(bench)
    mod = runtime.load_module(with_mode(MODULE, tmp_path, "max-autotune"), name="entry_max")
    mod.call(_args())
    tem = tuners(mod)[TEM]
    assert len(list(tem.timings.values())[0]) == len(tem.configs)  # searched, not a cache hit
    assert tem.choice() == "triton"


# ---------------------------------------------------------------------------------------------
# max-autotune: every config that can run, compiled before timing


def test_max_autotune_times_every_config(fake_gpu, tmp_path):
    fake = fake_gpu
    emulate_epilogue(fake)
    bench = Counter(fake)
    autotune.set_benchmarker(bench)
    mod = runtime.load_module(with_mode(MODULE, tmp_path, "max-autotune"), name="max_all")
    mod.call(_args())
    tem, epi = tuners(mod)[TEM], tuners(mod)[EPI]
    rows = list(tem.timings.values())[0]
    assert [r["config"] for r in rows] == tem.configs and all(r["ms"] for r in rows)
    triton = [c for c in tem.configs if not cfgs.is_extern(c)]
    compiled = {tuple(sorted(c[1].items())) for c in fake.COMPILES if c[0] == TEM}
    assert compiled == {tuple(sorted(c.kwargs.items())) for c in triton}
    assert bench.calls == len(tem.configs) + len(epi.configs)


def test_configs_that_cannot_fit_are_pruned_before_compiling(fake_gpu, tmp_path, monkeypatch):
    mm = {"m": 8192, "n": 4096, "k": 4096, "batch": 1}
    every = cfgs.mm_configs(mm, "float32")
    small = cfgs.mm_configs(mm, "float32", shared_memory=64 * 1024)
    assert 0 < len(small) < len(every)
    for c in small[:-1]:
        k = c.kwargs
        assert cfgs.mm_shared_memory(k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], c.num_stages,
                                     "float32") <= 64 * 1024
    # A 128x128 f32 accumulator over 2 warps is 256 registers a thread: pruned.
    table = ((128, 128, 32, 2, 2), (128, 128, 32, 2, 4))
    kept = cfgs.mm_configs(mm, "bfloat16", table=table)
    assert [c.num_warps for c in kept[:-1]] == [4]
    # The decorator uses the GPU's limit; the pruned configs are never compiled.
    monkeypatch.setattr(heuristics, "_shared_memory", 64 * 1024)
    fake = fake_gpu
    emulate_epilogue(fake)
    autotune.set_benchmarker(Counter(fake))
    mod = runtime.load_module(with_mode(MODULE, tmp_path, "max-autotune"), name="pruned")
    tem = tuners(mod)[TEM]
    limited = [c for c in cfgs.mm_configs(tem.mm, "float32", shared_memory=64 * 1024)
               if not cfgs.is_extern(c)]
    assert [c.key() for c in tem.configs if not cfgs.is_extern(c)] == [c.key() for c in limited]
    mod.call(_args())
    fits = {tuple(sorted(c.kwargs.items())) for c in limited}
    compiled = {tuple(sorted(c[1].items())) for c in fake.COMPILES if c[0] == TEM}
    assert compiled and compiled <= fits


# ---------------------------------------------------------------------------------------------
# The compile pool and the first call's compile pass


def test_the_pool_compiles_and_honours_compile_threads(fake_gpu, tmp_path, monkeypatch):
    fake = fake_gpu
    emulate_epilogue(fake)
    monkeypatch.setenv("COIL_COMPILE_THREADS", "3")
    assert precompile.compile_threads() == 3 and precompile.pool()._max_workers == 3
    autotune.set_benchmarker(Counter(fake))
    mod = runtime.load_module(with_mode(MODULE, tmp_path, "max-autotune"), name="pooled")
    mod.call(_args())
    tem_threads = [t for c, t in zip(fake.COMPILES, fake.COMPILE_THREADS) if c[0] == TEM]
    assert tem_threads and all(t.startswith("coil-compile") for t in tem_threads)
    monkeypatch.setenv("COIL_COMPILE_THREADS", "1")
    assert precompile.pool() is None
    monkeypatch.delenv("COIL_COMPILE_THREADS")
    assert precompile.compile_threads() == max(1, min(32, os.cpu_count() or 1))
    for bad in ("0", "many", "-2"):
        monkeypatch.setenv("COIL_COMPILE_THREADS", bad)
        with pytest.raises(ValueError, match=f"COIL_COMPILE_THREADS='{bad}'"):
            precompile.compile_threads()


def _sample_args():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g) for s in ((4096, 1024), (4096, 1000), (1024, 768),
                                                  (768, 1024))]


def test_the_first_call_compiles_every_kernel_before_launching(fake_gpu, monkeypatch, capsys):
    fake = fake_gpu
    autotune.set_benchmarker(lambda fn: (fn(), 1.0)[1])
    serial = runtime.load_module(SAMPLE, name="first_serial")
    serial.call(_sample_args())
    serial_launches = len(fake.LAUNCHES)
    serial_compiled = {(c[0], tuple(sorted(c[1].items()))) for c in fake.COMPILES}
    fake.reset()
    monkeypatch.setenv("COIL_CACHE_DIR", str(os.path.join(os.environ["COIL_CACHE_DIR"], "b")))
    monkeypatch.setenv("COIL_COMPILE_THREADS", "4")
    launches_at_submit = []
    real_submit = heuristics.CoilAutotuner.compile_async

    def compile_async(self, config, args):
        future = real_submit(self, config, args)
        if future is not None and future not in submitted:
            submitted.add(future)
            launches_at_submit.append(len(fake.LAUNCHES))
        return future
    submitted = set()
    monkeypatch.setattr(heuristics.CoilAutotuner, "compile_async", compile_async)
    pooled = runtime.load_module(SAMPLE, name="first_pooled")
    pooled.call(_sample_args())
    # Every config the serial call compiled was submitted to the pool by the compile pass,
    # before any launch (the pass launches nothing); the real call then launched what the
    # serial one did.
    n_configs = sum(len(t.configs) for t in tuners(pooled).values())
    assert launches_at_submit == [0] * n_configs
    assert {(c[0], tuple(sorted(c[1].items()))) for c in fake.COMPILES} == serial_compiled
    assert len(fake.LAUNCHES) == serial_launches
    assert f"first call: {n_configs} configs of 4 kernels compiling" in capsys.readouterr().err
    # Later calls are the module's own call().
    assert pooled.call is pooled.__dict__["call"] and not hasattr(pooled.call, "_coil_first_call")


_fake_cache = []


def _fake_triton_cache():
    """The fake Triton's disk cache, emptied: one directory for every test of this process,
    since the workers inherit the environment of multiprocessing's forkserver, which the
    first test starts and later ones reuse."""
    import tempfile
    if not _fake_cache:
        _fake_cache.append(tempfile.mkdtemp(prefix="fake-triton-cache-"))
    for name in os.listdir(_fake_cache[0]):
        os.remove(os.path.join(_fake_cache[0], name))
    return _fake_cache[0]


def test_the_process_pool_compiles_into_the_disk_cache_that_the_call_then_loads(
        fake_gpu, tmp_path, monkeypatch):
    fake = fake_gpu
    autotune.set_benchmarker(lambda fn: (fn(), 1.0)[1])
    serial = runtime.load_module(SAMPLE, name="processes_serial")
    serial.call(_sample_args())
    serial_launches = [(l[0], l[1], l[4]) for l in fake.LAUNCHES]
    serial_compiled = {(c[0], tuple(sorted(c[1].items()))) for c in fake.COMPILES}

    fake.install(preload=True)  # a Triton with JITFunction.preload and jit_cache_hook
    monkeypatch.setenv("FAKE_TRITON_CACHE", _fake_triton_cache())
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "cache-b"))
    monkeypatch.setenv("COIL_COMPILE_THREADS", "2")
    precompile.set_worker_init(fake.install, "3.6.0", True)
    try:
        assert precompile.pool_kind() == "thread"  # auto (the default), before any compile pass
        monkeypatch.setenv("COIL_COMPILE_POOL", "processes")
        with pytest.raises(ValueError, match="COIL_COMPILE_POOL='processes'"):
            precompile.pool_kind()
        monkeypatch.setenv("COIL_COMPILE_POOL", "process")
        assert precompile.pool_kind() == "process"
        pooled = runtime.load_module(SAMPLE, name="processes_pooled")
        pooled.call(_sample_args())
        # Each compile in this process loaded what a worker process had compiled; the call
        # compiled and launched what the serial one did.
        assert fake.COMPILES
        for c in fake.COMPILES:
            assert len(c) == 5 and c[4][0] == "disk cache hit", c
            assert int(c[4][1]) != os.getpid()
        assert {(c[0], tuple(sorted(c[1].items()))) for c in fake.COMPILES} == serial_compiled
        assert [(l[0], l[1], l[4]) for l in fake.LAUNCHES] == serial_launches
        assert fake.sys.modules["triton.knobs"].runtime.jit_cache_hook is precompile._capture_hook
    finally:
        precompile.set_worker_init(None)
        precompile.shutdown_process_pool()


def test_compile_workers_never_run_the_main_script(tmp_path, monkeypatch):
    """multiprocessing would have each worker import the main script (as __mp_main__); a
    script without an `if __name__ == "__main__":` guard would run again in every worker."""
    import types
    marker = tmp_path / "runs"
    script = tmp_path / "user_script.py"
    script.write_text(f"open({str(marker)!r}, 'a').write('ran\\n')\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    main.__spec__ = None
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setenv("COIL_COMPILE_THREADS", "2")
    try:
        with precompile._MainHidden():
            future = precompile.process_pool().submit(os.getpid)
        assert future.result(timeout=120) != os.getpid()
        assert main.__file__ == str(script)  # put back
    finally:
        precompile.shutdown_process_pool()
    assert not marker.exists()


def _process_ready(fake, tmp_path, monkeypatch):
    """A fake Triton with what the process pool needs, its disk cache, 2 workers."""
    fake.install(preload=True)
    monkeypatch.setenv("FAKE_TRITON_CACHE", _fake_triton_cache())
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "cache-p"))
    monkeypatch.setenv("COIL_COMPILE_THREADS", "2")
    monkeypatch.delenv("COIL_COMPILE_POOL", raising=False)
    precompile.set_worker_init(fake.install, "3.6.0", True)


def test_auto_takes_processes_for_many_configs_and_threads_for_few(fake_gpu, tmp_path,
                                                                    monkeypatch):
    """COIL_COMPILE_POOL=auto (the default): the compile pass counts the configs to compile
    first; the process pool's start (3-4 s on the H200's host) pays only for many of them."""
    fake = fake_gpu
    autotune.set_benchmarker(lambda fn: (fn(), 1.0)[1])
    _process_ready(fake, tmp_path, monkeypatch)
    try:
        assert precompile.pool_setting() == "auto" and precompile.pool_kind() == "thread"
        monkeypatch.setattr(precompile, "PROCESS_MIN_CONFIGS", 10**6)
        few = runtime.load_module(SAMPLE, name="auto_few")
        few.call(_sample_args())
        assert precompile.pool_kind() == "thread"
        assert fake.COMPILES and all(len(c) == 4 for c in fake.COMPILES)  # no disk cache hit
        assert all(t.startswith("coil-compile") for t in fake.COMPILE_THREADS)
        n_configs = sum(len(t.configs) for t in tuners(few).values())

        fake.reset()
        monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "cache-q"))
        monkeypatch.setattr(precompile, "PROCESS_MIN_CONFIGS", n_configs)
        many = runtime.load_module(SAMPLE, name="auto_many")
        many.call(_sample_args())
        assert precompile.pool_kind() == "process"
        # every compile here loaded what a worker compiled
        assert len({(c[0], tuple(sorted(c[1].items()))) for c in fake.COMPILES}) == n_configs
        for c in fake.COMPILES:
            assert len(c) == 5 and c[4][0] == "disk cache hit" and int(c[4][1]) != os.getpid()
    finally:
        precompile.set_worker_init(None)
        precompile.shutdown_process_pool()
    assert precompile.pool_kind() == "thread"  # shutdown forgets the pick


def test_compile_workers_import_only_the_kernels(fake_gpu, tmp_path, monkeypatch):
    """A worker runs a module's imports and kernel definitions, not its top level: a generated
    module moves its weights to the GPU there (a CUDA context in every worker)."""
    fake = fake_gpu
    autotune.set_benchmarker(lambda fn: (fn(), 1.0)[1])
    marker = tmp_path / "imports"
    path = edited(SAMPLE, tmp_path, "sample_marked.py", (
        'INPUT_NAMES = ("x", "s", "a", "b")',
        f'INPUT_NAMES = ("x", "s", "a", "b")\nopen({str(marker)!r}, "a").write("ran\\n")'))
    _process_ready(fake, tmp_path, monkeypatch)
    monkeypatch.setenv("COIL_COMPILE_POOL", "process")
    try:
        mod = runtime.load_module(path, name="marked")
        mod.call(_sample_args())
        hits = [c for c in fake.COMPILES if len(c) == 5 and c[4][0] == "disk cache hit"]
        assert hits and len(hits) == len(fake.COMPILES)
    finally:
        precompile.set_worker_init(None)
        precompile.shutdown_process_pool()
    assert marker.read_text() == "ran\n"  # this process's import only

    from coil_runtime import compile_worker
    kernels = compile_worker.load_kernels(path, "marked_kernels")
    try:
        assert marker.read_text() == "ran\n"
        assert {t.name for t in heuristics.autotuners_of(kernels)} == set(tuners(mod))
        assert not hasattr(kernels, "call") and not hasattr(kernels, "INPUT_NAMES")
        # Triton reads each kernel's source from the file, at its own lines
        jit = kernels.triton_poi_fused_add_mul_0.fn.fn
        assert jit.__code__.co_filename == path
        main_jit = mod.triton_poi_fused_add_mul_0.fn.fn
        assert jit.__code__.co_firstlineno == main_jit.__code__.co_firstlineno
    finally:
        sys.modules.pop("marked_kernels", None)


def test_a_compile_worker_builds_the_kernels_launcher(fake_gpu, monkeypatch):
    """Triton builds a C launcher per argument signature with gcc (0.3-0.4 s each on the H200's
    host); the worker builds it into the disk cache, so that the main process only loads it."""
    import types

    from coil_runtime import compile_worker
    fake = fake_gpu
    fake.install(preload=True)
    built = []
    driver = types.ModuleType("triton.backends.nvidia.driver")
    driver.CudaLauncher = lambda src, metadata: built.append((src, metadata))
    monkeypatch.setitem(sys.modules, "triton.backends.nvidia.driver", driver)
    kernel = types.SimpleNamespace(src="the ASTSource", metadata="its metadata")
    jit = types.SimpleNamespace(preload=lambda data: kernel)
    module = types.SimpleNamespace(my_kernel=jit)
    monkeypatch.setattr(compile_worker, "_module", lambda name, path: module)
    assert compile_worker.compile_kernel("m", "/m.py", "my_kernel", "{}", ("cuda", 90, 32),
                                         {}) is None
    assert built == [("the ASTSource", "its metadata")]
    # best effort: a Triton without it, or a kernel without src, builds nothing
    del driver.CudaLauncher
    assert compile_worker.build_launcher(kernel) is False
    assert compile_worker.build_launcher(None) is False


def test_submitting_to_the_process_pool_does_not_wait_for_its_start(fake_gpu, monkeypatch):
    """The first submissions wait for the pool's server to import torch and Triton (3-4 s);
    the feeder thread waits instead of the compile pass."""
    import threading
    import time
    from concurrent.futures import Future
    fake = fake_gpu
    fake.install(preload=True)
    release = threading.Event()

    class SlowStart:
        def submit(self, fn, *args):
            release.wait(10)
            if args[2] == "broken":
                raise OSError("the server did not start")
            done = Future()
            done.set_result(("compiled", args[2]))
            return done
    monkeypatch.setattr(precompile, "process_pool", lambda: SlowStart())
    start = time.perf_counter()
    first = precompile.submit_compile("m", "/m.py", "k0", "{}")
    second = precompile.submit_compile("m", "/m.py", "broken", "{}")
    assert time.perf_counter() - start < 1.0 and not first.done()
    release.set()
    assert first.result(timeout=10) == ("compiled", "k0")
    assert isinstance(second.exception(timeout=10), OSError)


def test_loading_a_module_with_many_configs_warms_the_process_pool(fake_gpu, tmp_path,
                                                                   monkeypatch):
    """The pool's server and workers start while the module's top level and the compile pass
    run, when the first call will use them (auto: enough configs not in the autotune cache)."""
    import time
    fake = fake_gpu
    autotune.set_benchmarker(lambda fn: (fn(), 1.0)[1])
    _process_ready(fake, tmp_path, monkeypatch)
    try:
        monkeypatch.setattr(precompile, "PROCESS_MIN_CONFIGS", 10**6)
        few = runtime.load_module(SAMPLE, name="warm_few")
        n_configs = sum(len(t.configs) for t in tuners(few).values())
        assert precompile.configs_to_compile(few) == n_configs - 1  # the softmax has one
        assert not precompile._warmed and precompile._processes is None
        # an autotune cache entry (any bucket) takes a kernel out of the estimate
        few.call(_sample_args())
        assert precompile.configs_to_compile(few) == 0

        monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "cache-w"))
        monkeypatch.setattr(precompile, "PROCESS_MIN_CONFIGS", n_configs - 1)
        fake.reset()
        many = runtime.load_module(SAMPLE, name="warm_many")
        assert precompile._warmed and precompile._processes is not None
        deadline = time.time() + 60
        while len(precompile._processes._processes or {}) < 2 and time.time() < deadline:
            time.sleep(0.05)
        assert len(precompile._processes._processes) == 2  # before the first call
        assert not fake.COMPILES
        many.call(_sample_args())
        assert precompile.pool_kind() == "process"
        assert fake.COMPILES and all(len(c) == 5 and c[4][0] == "disk cache hit"
                                     for c in fake.COMPILES)
    finally:
        precompile.set_worker_init(None)
        precompile.shutdown_process_pool()
