"""coil.torch against eager: the C ABI from Python, the aten table, forward and backward graphs
through AOTAutograd (functorch on torch 1.13), training steps, and the eager fallback."""

import os

import pytest
import torch
import torch.nn as nn

import coil
import coil.torch as ct
from coil_runtime import logs

OPTIONS = {"autotune": False}  # the template everywhere: no timing runs in tests


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """One code cache for the session (graphs of the same shapes compile once), never the
    user's."""
    old = os.environ.get("COIL_CACHE_DIR")
    os.environ["COIL_CACHE_DIR"] = str(tmp_path_factory.mktemp("coil-cache"))
    yield
    if old is None:
        os.environ.pop("COIL_CACHE_DIR", None)
    else:
        os.environ["COIL_CACHE_DIR"] = old


def test_the_package_finds_the_library():
    path = coil.library_path()
    assert os.path.exists(path) and path.endswith("libcoil_c.so")
    assert coil.version().startswith("coil ")


@pytest.mark.parametrize("shape", [(4, 1024), (1, 1), (7, 13), (3, 5, 17)])
def test_a_graph_built_from_python_runs_on_torch_tensors(shape):
    g = coil.Graph()
    x = g.input("x", f"f32[{', '.join(map(str, shape))}]")
    w = g.input("w", f"f32[{shape[-1]}]")
    g.output(g.node("gelu", [g.node("mul", [x, w])]), "y")
    model = coil.compile(g, **OPTIONS)
    xt, wt = torch.randn(shape), torch.randn(shape[-1])
    (y,) = model(xt, wt)
    torch.testing.assert_close(y, torch.nn.functional.gelu(xt * wt), rtol=1e-5, atol=1e-6)
    # A transposed (strided) input is read as it is; a strided output is written in place.
    if len(shape) == 2:
        xs = torch.randn(shape[::-1]).t()
        out = torch.empty(shape[::-1]).t()
        model.run_into([xs, wt], [out])
        torch.testing.assert_close(out, torch.nn.functional.gelu(xs * wt), rtol=1e-5, atol=1e-6)


def test_calls_with_other_tensors_strides_and_threads_use_their_own_pointers():
    """run_into keeps each thread's last coil_tensor structs per signature and rewrites only the
    data pointers: new tensors of the same signature, another stride (a transposed input), an
    interleaving thread and a numpy array in between all give their own results."""
    import threading
    import numpy as np
    g = coil.Graph()
    x, w = g.input("x", "f32[6, 5]"), g.input("w", "f32[5]")
    g.output(g.node("mul", [x, w]), "y")
    model = coil.compile(g, **OPTIONS)
    w0 = torch.randn(5)
    for i in range(4):
        xs = torch.randn(6, 5) if i % 2 == 0 else torch.randn(5, 6).t()
        out = torch.empty(6, 5) if i < 2 else torch.empty(5, 6).t()
        model.run_into([xs, w0], [out])
        torch.testing.assert_close(out, xs * w0)
    outs = [np.empty((6, 5), np.float32)]
    model.run_into([np.ones((6, 5), np.float32), np.full(5, 2.0, np.float32)], outs)
    assert (outs[0] == 2.0).all()
    errors = []

    def worker(seed):
        gen = torch.Generator().manual_seed(seed)
        for _ in range(200):
            a, b = torch.randn(6, 5, generator=gen), torch.randn(5, generator=gen)
            o = torch.empty(6, 5)
            model.run_into([a, b], [o])
            if not torch.equal(o, a * b):
                errors.append(seed)
    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_size_generic_calls_rebuild_only_the_structs_whose_shape_changed():
    """A decode step's pattern: a size-generic model called with a KV-cache-like input that
    grows by one row per call beside fixed weights. The per-position struct cache rebuilds
    only the changed input's struct; output_shapes binds every output at once
    (coil_model_output_shapes). Every call's outputs, their shapes included, match eager."""
    g = coil.Graph()
    w = g.input("w", "f32[4, 3]")
    cache = g.input("cache", "f32[n, 3]")
    row = g.input("row", "f32[1, 3]")
    grown = g.node("concat", [cache, row], "{dim=0}")
    g.output(grown, "grown")
    g.output(g.node("matmul", [grown, g.node("transpose", [w], "{dim0=0, dim1=1}")]), "scores")
    g.output(g.node("sum", [grown], "{axes=[0]}"), "total")
    model = coil.compile(g, **OPTIONS)
    wt = torch.randn(4, 3)
    kv = torch.randn(2, 3)
    for step in range(6):
        r = torch.randn(1, 3)
        assert model.output_shapes([wt, kv, r]) == [(kv.shape[0] + 1, 3), (kv.shape[0] + 1, 4),
                                                    (3,)]
        new_kv, scores, total = model(wt, kv, r)
        want = torch.cat([kv, r])
        torch.testing.assert_close(new_kv, want)
        torch.testing.assert_close(scores, want @ wt.t(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(total, want.sum(0), rtol=1e-5, atol=1e-5)
        if step == 3:  # the same size again, other tensors: the cached structs, new pointers
            kv = torch.randn(kv.shape)
        else:
            kv = new_kv


@pytest.mark.parametrize("dtype", ["i16", "u16", "u32", "u64"])
def test_new_integer_dtypes_run_on_numpy_arrays(dtype):
    # Issue 27's dtypes through the C ABI from numpy (torch has uint16/32/64 only from 2.3);
    # wrap-around and unsigned order checked against numpy's own arithmetic.
    import numpy as np
    npt = {"i16": np.int16, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64}[dtype]
    info = np.iinfo(npt)
    a = np.array([info.max, info.min, 7, info.max // 2 + 3, 1], dtype=npt)
    b = np.array([2, 1, info.max, 5, info.max], dtype=npt)
    g = coil.Graph()
    x, y = g.input("a", f"{dtype}[5]"), g.input("b", f"{dtype}[5]")
    g.output(g.node("mul", [x, y]), "m")
    g.output(g.node("maximum", [x, y]), "mx")
    g.output(g.node("lt", [x, y]), "lt")
    model = coil.compile(g, **OPTIONS)
    outs = [np.empty(5, dtype=npt), np.empty(5, dtype=npt), np.empty(5, dtype=np.bool_)]
    model.run_into([a, b], outs)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(outs[0], a * b)
    np.testing.assert_array_equal(outs[1], np.maximum(a, b))
    np.testing.assert_array_equal(outs[2], a < b)
    assert [d for _, d, _ in model.outputs] == [dtype, dtype, "bool"]
    if dtype == "i16":  # torch has int16 in every version
        (m, _, _) = model(torch.from_numpy(a), torch.from_numpy(b))
        assert m.dtype == torch.int16
        np.testing.assert_array_equal(m.numpy(), outs[0])


def test_errors_name_the_op_and_value():
    g = coil.Graph()
    x = g.input("x", "f32[4, 3]")
    with pytest.raises(coil.Error, match="keepdims"):
        g.node("sum", [x], "{axes=[1], keepdims=true}")
    with pytest.raises(coil.Error, match="frob"):
        g.node("frob", [x])
    g.output(g.node("relu", [x]), "y")
    with pytest.raises(coil.Error, match="bogus"):
        coil.compile(g, bogus=1)
    model = coil.compile(g, **OPTIONS)
    with pytest.raises(coil.Error, match="shape|\\[4, 3\\]"):
        model(torch.randn(3, 4))


class LnGeluMlp(nn.Module):
    def __init__(self, d=64, hidden=128, out=10):
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, out)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(self.ln(x))))


def _grads(model):
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("batch", [8, 3])
def test_mlp_forward_and_backward_match_eager(batch):
    torch.manual_seed(0)
    eager = LnGeluMlp()
    for p in eager.ln.parameters():  # away from the identity
        p.data.uniform_(0.5, 1.5)
    compiled_model = LnGeluMlp()
    compiled_model.load_state_dict(eager.state_dict())
    compiled = ct.compile(compiled_model, options=OPTIONS)
    x = torch.randn(batch, 64)
    y_eager, y = eager(x), compiled(x)
    torch.testing.assert_close(y, y_eager, rtol=1e-4, atol=1e-5)
    (y_eager ** 2).sum().backward()
    (y ** 2).sum().backward()
    for g, ge in zip(_grads(compiled_model), _grads(eager)):
        torch.testing.assert_close(g, ge, rtol=1e-3, atol=1e-5)


def test_a_call_with_other_shapes_traces_again():
    """AOTAutograd traces once and reuses that trace for every call; coil.torch.compile keeps
    one per call signature, so another batch size (or back to the first) is right."""
    fn = ct.compile(lambda x, w: torch.nn.functional.gelu(x @ w).sum(-1), options=OPTIONS)
    w = torch.randn(8, 5)
    for rows in (4, 7, 4, 1):
        x = torch.randn(rows, 8)
        torch.testing.assert_close(fn(x, w), torch.nn.functional.gelu(x @ w).sum(-1),
                                   rtol=1e-4, atol=1e-5)
    assert len(fn.per_signature.traces) == 3
    x = torch.randn(3, 8, dtype=torch.float64)  # another dtype: its own trace too
    torch.testing.assert_close(fn(x, w.double()), torch.nn.functional.gelu(x @ w.double()).sum(-1))


def test_a_module_first_called_without_grad_trains_later():
    """The first call under no_grad traced an inference graph; a later call with grad must
    trace the forward and backward pair (it returned an output without a grad_fn)."""
    torch.manual_seed(3)
    eager, mine = LnGeluMlp(), LnGeluMlp()
    mine.load_state_dict(eager.state_dict())
    compiled = ct.compile(mine, options=OPTIONS)
    x = torch.randn(6, 64)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)
    (compiled(x) ** 2).sum().backward()
    (eager(x) ** 2).sum().backward()
    for g, ge in zip(_grads(mine), _grads(eager)):
        torch.testing.assert_close(g, ge, rtol=1e-3, atol=1e-5)
    assert len(list(compiled.parameters())) == len(list(mine.parameters()))


def test_batch_norm_statistics_and_eval_after_training_match_eager():
    """torch 1.13's AOTAutograd runs the module for real while it traces: a BatchNorm's
    running statistics were updated three times by the first call, and after eval() the
    training trace (batch statistics) was reused. The statistics now match eager's after
    every training step, and eval() traces again."""
    torch.manual_seed(4)

    def make():
        return nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.ReLU(), nn.Linear(6, 3))

    eager, mine = make(), make()
    mine.load_state_dict(eager.state_dict())
    compiled = ct.compile(mine, options=OPTIONS)
    for step in range(3):
        x = torch.randn(8, 4)
        torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)
        for name in ("running_mean", "running_var"):
            torch.testing.assert_close(getattr(mine[1], name), getattr(eager[1], name),
                                       rtol=1e-5, atol=1e-6, msg=f"{name} after step {step}")
    mine.eval()
    eager.eval()
    x = torch.randn(8, 4)  # the training calls' signature: only the mode differs
    torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), eager(x), rtol=1e-4, atol=1e-5)


def test_a_function_writing_its_input_writes_it_once_per_call():
    """The tracing call ran `x.add_(1)` once more while torch 1.13 traced it (x 2 and the
    result 4 after the first call, where eager gives 1 and 2)."""
    def f(x):
        x.add_(1)
        return x * 2

    compiled = ct.compile(f, options=OPTIONS)
    x = torch.zeros(3)
    for step in (1, 2, 3):
        y = compiled(x)
        torch.testing.assert_close(x, torch.full((3,), float(step)))
        torch.testing.assert_close(y, torch.full((3,), 2.0 * step))
    with torch.inference_mode():  # no version counters: runs, unchecked
        compiled(torch.zeros(2))

    def g(x, view):  # the expanded view shares x's version counter; it is not written back
        s = view.sum(0)  # (read before the write: the trace takes arguments as unaliased)
        x.add_(1)
        return x * 2 + s

    compiled = ct.compile(g, options=OPTIONS)
    x = torch.full((4,), 3.0)
    y = compiled(x, x[None].expand(2, 4))
    torch.testing.assert_close(x, torch.full((4,), 4.0))
    torch.testing.assert_close(y, torch.full((4,), 14.0))


def test_mlp_sgd_loss_curve_matches_eager():
    torch.manual_seed(1)
    eager = LnGeluMlp()
    mine = LnGeluMlp()
    mine.load_state_dict(eager.state_dict())
    compiled = ct.compile(mine, options=OPTIONS)
    x, target = torch.randn(16, 64), torch.randn(16, 10)
    losses = {}
    for name, model, fn in [("eager", eager, eager), ("coil", mine, compiled)]:
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        curve = []
        for _ in range(20):
            opt.zero_grad()
            loss = ((fn(x) - target) ** 2).mean()
            loss.backward()
            opt.step()
            curve.append(loss.item())
        losses[name] = curve
    assert losses["eager"][-1] < losses["eager"][0]  # it trains
    for a, b in zip(losses["coil"], losses["eager"]):
        assert abs(a - b) <= 1e-4 * abs(b), (losses["coil"], losses["eager"])


def test_an_unsupported_op_runs_in_eager_and_is_logged(capsys):
    def f(x):
        y = torch.relu(x) * 2
        z = torch.special.hermite_polynomial_h(y, y)  # no coil row, no decomposition: eager
        return torch.exp(z) + 1

    old = logs.set_channels("fallback")
    try:
        compiled = ct.compile(f, options=OPTIONS)
        x = torch.randn(5, 7)
        torch.testing.assert_close(compiled(x), f(x), rtol=1e-5, atol=1e-6)
    finally:
        logs.set_channels(",".join(old) if old else "")
    err = capsys.readouterr().err
    assert "[coil:fallback] aten.special_hermite_polynomial_h.default runs in eager" in err


def test_a_graph_coil_fails_to_compile_is_saved_as_a_repro(monkeypatch, tmp_path):
    """A coil error while compiling an FX graph names a text-format repro of it (constants
    included) that `coil check` and `coil minify` take; here the compile error is injected."""
    w = torch.randn(7, 3)

    def f(x):
        return torch.relu(x @ w * 2) + 1

    monkeypatch.setenv("COIL_TESTING_INJECT_BUG", "relu_compile_error")
    monkeypatch.setenv("COIL_DEBUG_DIR", str(tmp_path))
    x = torch.randn(5, 7)
    with pytest.raises(Exception) as info:
        ct.compile(f, options=OPTIONS)(x)
    msg = str(info.value)
    assert "relu_injected_bug" in msg  # the compiler's error
    assert "the FX graph as a coil repro: " in msg
    path = msg.split("the FX graph as a coil repro: ")[1].split(" ")[0]
    assert path.startswith(str(tmp_path / "fx-repros")) and os.path.exists(path)
    text = open(path).read()
    assert "# the FX graph:" in text and "relu" in text
    # Without the bug the repro compiles and computes f.
    monkeypatch.delenv("COIL_TESTING_INJECT_BUG")
    m = coil.compile(text, **OPTIONS)
    (out,) = m(x)
    torch.testing.assert_close(out, f(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("fn", [
    lambda x: torch.softmax(x, -1),
    lambda x: torch.log_softmax(x * 3, 1),
    lambda x: x.sum(0, keepdim=True) - x.mean(),
    lambda x: torch.where(x > 0, x, x * 0.1).t().contiguous(),
    lambda x: torch.cat([x, torch.sigmoid(x)], dim=1)[:, 1:5],
    lambda x: x.amax(1) + x.var(0).sum(),
    lambda x: torch.tanh(x).pow(2).clamp(0.1, 0.5),
])
def test_single_ops_forward_and_backward(fn):
    torch.manual_seed(2)
    x = torch.randn(6, 9, requires_grad=True)
    xc = x.detach().clone().requires_grad_(True)
    compiled = ct.compile(fn, options=OPTIONS)
    y, yc = fn(x), compiled(xc)
    torch.testing.assert_close(yc, y, rtol=1e-4, atol=1e-5)
    y.sum().backward()
    yc.sum().backward()
    torch.testing.assert_close(xc.grad, x.grad, rtol=1e-3, atol=1e-5)


@pytest.mark.skipif(not hasattr(torch, "compile"),
                    reason="torch 1.13 has no torch.compile (Dynamo); torch 2.x runs this "
                           "(the GPU machine's host: tests/torch/run_torch2.sh)")
@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_backend_coil(dynamic):
    torch.manual_seed(3)
    eager = LnGeluMlp()
    mine = LnGeluMlp()
    mine.load_state_dict(eager.state_dict())
    compiled = torch.compile(mine, backend="coil", options=OPTIONS, dynamic=dynamic)
    for batch in (8, 5):
        x = torch.randn(batch, 64)
        y_eager, y = eager(x), compiled(x)
        torch.testing.assert_close(y, y_eager, rtol=1e-4, atol=1e-5)
    (y_eager ** 2).sum().backward()
    (y ** 2).sum().backward()
    for g, ge in zip(_grads(mine), _grads(eager)):
        torch.testing.assert_close(g, ge, rtol=1e-3, atol=1e-5)


def test_torch_compile_modes_map_to_coil_modes():
    assert ct.options_for_mode(None, None) == {"mode": "default"}
    # reduce-overhead: coil's default mode, and each CUDA call replayed as a CUDA graph
    assert ct.options_for_mode({}, "reduce-overhead") == {"mode": "default", "cuda_graphs": True}
    assert ct.options_for_mode({"autotune": False}, "max-autotune") == {
        "autotune": False, "mode": "max-autotune"}
    assert ct.options_for_mode({}, "max-autotune-no-cudagraphs")["mode"] == "max-autotune"
    assert ct.options_for_mode({"mode": "default"}, "max-autotune")["mode"] == "default"
    with pytest.raises(ValueError, match="'fastest'"):
        ct.options_for_mode({}, "fastest")


def test_compile_mode_option_and_a_bad_mode():
    g = coil.Graph.parse("input x: f32[8, 16]\ninput w: f32[16, 4]\nm = matmul(x, w)\noutput m\n")
    x, w = torch.randn(8, 16), torch.randn(16, 4)
    (y,) = coil.compile(g, mode="max-autotune", **OPTIONS)(x, w)
    torch.testing.assert_close(y, x @ w, rtol=1e-5, atol=1e-5)
    with pytest.raises(coil.Error, match="mode 'fast'"):
        coil.compile(g, mode="fast")


def test_remote_cache_option(tmp_path, monkeypatch):
    """coil.compile(remote_cache=URL): a fresh cache directory is served from Redis (a private
    redis-server on a free loopback port); a URL that is not redis:// is an error naming it."""
    import shutil
    import socket
    import subprocess
    import time
    g = coil.Graph.parse("input x: f32[6, 10]\ny = tanh(x)\nz = sum(y) {axes=[1]}\noutput z\n")
    with pytest.raises(coil.Error, match="'http://cache:80': only redis://"):
        coil.compile(g, remote_cache="http://cache:80", **OPTIONS)
    if shutil.which("redis-server") is None:  # the GPU host has none (scripts/setup.sh installs it)
        pytest.skip("redis-server is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.02)
        monkeypatch.setenv("COIL_REMOTE_CACHE_KEY", "python-test-secret-0123456789")
        url = f"redis://127.0.0.1:{port}"
        x = torch.randn(6, 10)
        monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "a"))
        first = coil.compile(g, remote_cache=url, **OPTIONS)
        assert first.report["remote_cache"] == "miss"
        monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "b"))
        second = coil.compile(g, remote_cache=url, **OPTIONS)
        assert second.report["remote_cache"] == "hit"
        assert second.report["model_cache"] == "hit"
        torch.testing.assert_close(second(x)[0], torch.tanh(x).sum(1), rtol=1e-5, atol=1e-5)
    finally:
        server.kill()
        server.wait()


def _compile_fx(f, *inputs):
    from torch.fx.experimental.proxy_tensor import make_fx
    from coil.torch import fx_compile, lowering
    gm = make_fx(f, decomposition_table=lowering.DECOMPOSITIONS)(*inputs)
    fx_compile._ensure_shapes(gm, list(inputs))
    return fx_compile.compile_fx(gm, list(inputs), OPTIONS)


def test_outputs_that_are_views_of_inputs_are_torch_views():
    """An output that is a view (or a chain of views) of a graph input is made by torch at each
    call, sharing the input's memory as eager's does, instead of a copy by coil (a backward
    graph's reshaped tangents were a 64 MB copy on the GPU: docs/gpu-results.md, nineteenth
    session). Computed outputs beside them are still coil's."""
    def f(x, w):
        return (x.view(-1), x.t(), torch.relu(x @ w), x.unsqueeze(0).expand(2, -1, -1),
                x.reshape(3, 2, 5).permute(2, 0, 1))
    torch.manual_seed(4)
    x, w = torch.randn(6, 5), torch.randn(5, 7)
    compiled = _compile_fx(f, x, w)
    for _ in range(2):  # the second call's views are of its own inputs
        x, w = torch.randn(6, 5), torch.randn(5, 7)
        got, want = compiled(x, w), f(x, w)
        for g, e in zip(got, want):
            torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
        for i in (0, 1, 3, 4):
            assert got[i].data_ptr() == x.data_ptr(), i
            assert got[i].stride() == want[i].stride(), i
        assert got[2].data_ptr() != x.data_ptr()


def test_a_view_of_an_input_the_graph_writes_is_computed_after_the_write():
    def f(x):
        x.mul_(2)
        return x.view(-1) + 0, x.view(-1)
    x = torch.randn(4, 3)
    compiled = _compile_fx(f, x.clone())
    x0 = x.clone()
    got = compiled(x)
    torch.testing.assert_close(x, x0 * 2)
    torch.testing.assert_close(got[1], (x0 * 2).view(-1))
    torch.testing.assert_close(got[0], (x0 * 2).view(-1))


def test_large_outputs_are_their_own_mappings_and_stay_valid():
    """Outputs of 32 MiB and more come from an anonymous mapping advised to use 2 MiB pages
    (coil/_host_memory.py: a 64 MB output in torch.empty's memory took 16,384 page faults a
    call). They must behave as any tensor: right values, writable, one per call, alive as long
    as a view of them is. coil.Model's outputs too."""
    def f(x):
        return torch.relu(x) * 2, x.sum(0)
    x = torch.randn(8200, 1024)  # 32.03 MiB of f32: at the threshold
    compiled = _compile_fx(f, x)
    a, s = compiled(x)
    b, _ = compiled(x + 1)
    torch.testing.assert_close(a, torch.relu(x) * 2)
    torch.testing.assert_close(b, torch.relu(x + 1) * 2)
    torch.testing.assert_close(s, x.sum(0), rtol=1e-4, atol=1e-3)
    assert a.shape == (8200, 1024) and a.dtype == torch.float32 and a.is_contiguous()
    assert a.data_ptr() != b.data_ptr()
    # A mapping of its own starts on a page (torch.empty's large blocks start 64 bytes into
    # glibc's mapped chunk); the small output is torch.empty's.
    assert a.data_ptr() % 4096 == 0 and b.data_ptr() % 4096 == 0
    view = a[5:7]
    del a, compiled
    view.add_(1)  # writable, and its mapping outlives the tensor it came from
    torch.testing.assert_close(view, torch.relu(x[5:7]) * 2 + 1)
    from coil._host_memory import HUGE_OUTPUT_BYTES, new_output
    for dtype in (torch.float32, torch.int64, torch.bool, torch.bfloat16):
        size = torch.empty((), dtype=dtype).element_size()
        for numel in (HUGE_OUTPUT_BYTES // size - 1, HUGE_OUTPUT_BYTES // size + 5):
            t = new_output((numel,), dtype)
            assert t.shape == (numel,) and t.dtype == dtype and t.is_contiguous()
            if numel * size >= HUGE_OUTPUT_BYTES:  # (torch.empty's may start on a page too)
                assert t.data_ptr() % 4096 == 0, (dtype, numel)
            t[-1] = 1  # the last element is in the mapping
    m = coil.compile("input x: f32[8200, 1024]\ny = relu(x)\noutput y\n", **OPTIONS)
    (y,) = m(x)
    torch.testing.assert_close(y, torch.relu(x))
    assert y.data_ptr() % 4096 == 0


def test_a_permuted_input_is_read_in_place_not_copied():
    """An input that is a permutation of a dense tensor (a backward graph's W.t()) is passed as
    its contiguous permutation and permuted back inside the graph, so the runtime copies
    nothing (fx_compile._dense_permutation; the MLP's backward through the bridge went from 36
    to 11 ms). A call whose tensor is laid out otherwise is still right (torch copies it)."""
    def f(x, w, v):
        return torch.relu(x @ w) + v.sum(0)
    torch.manual_seed(5)
    x = torch.randn(9, 70)
    w = torch.randn(33, 70).t()           # [70, 33], strides (1, 70)
    v = torch.randn(9, 3, 33).permute(1, 0, 2)  # [3, 9, 33]: a 3-D permutation
    compiled = _compile_fx(f, x, w, v)
    perms = {i: p for i, p in compiled.input_perms.items()}
    assert perms == {1: [1, 0], 2: [1, 0, 2]}, perms
    torch.testing.assert_close(compiled(x, w, v), f(x, w, v), rtol=1e-5, atol=1e-5)
    w2, v2 = torch.randn(70, 33), torch.randn(3, 9, 33)  # contiguous this time
    torch.testing.assert_close(compiled(x, w2, v2), f(x, w2, v2), rtol=1e-5, atol=1e-5)


def _relu_and_weighted_sum(a, b):
    return a.relu(), (a * b).sum(0)


def _weighted_sum_and_relu(b, a):  # the same graph, inputs and outputs in another order
    x = a.relu()
    return (a * b).sum(0), x


def test_an_fx_graph_with_permuted_inputs_and_outputs_is_the_same_coil_graph():
    """AOTAutograd orders a forward graph's saved tensors, and so the backward graph's inputs,
    differently in each process (under the same names): coil orders its inputs by name and
    its outputs by the FX nodes that make them, so that the coil graph, and its cache key,
    are the same, and the call still maps each argument and result where it belongs."""
    from functorch import make_fx
    from coil.torch import fx_compile
    a, b = torch.randn(5, 7), torch.randn(5, 7)
    one = make_fx(_relu_and_weighted_sum)(a, b)
    other = make_fx(_weighted_sum_and_relu)(b, a)
    assert [n.name for n in one.graph.nodes if n.op == "placeholder"] == ["a_1", "b_1"]
    assert [n.name for n in other.graph.nodes if n.op == "placeholder"] == ["b_1", "a_1"]
    c1 = fx_compile.CoilGraphCallable(one, OPTIONS)
    c2 = fx_compile.CoilGraphCallable(other, OPTIONS)
    assert c1.graph.to_text() == c2.graph.to_text()
    for got, want in [(c1(a, b), _relu_and_weighted_sum(a, b)),
                      (c2(b, a), _weighted_sum_and_relu(b, a))]:
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_a_second_process_compiles_nothing_for_a_training_step(tmp_path):
    """issue 18's cache across processes, through functorch's aot_module (forward and
    backward): the second process finds both graphs in the cache (no `miss` in COIL_LOGS=cache)
    and matches the first's loss and gradients bit for bit."""
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"""
import sys; sys.path[:0] = [{os.path.join(os.path.dirname(os.path.dirname(here)), 'python')!r}, {here!r}]
import torch, coil.torch as ct
from test_backend import LnGeluMlp
torch.manual_seed(0)
m = LnGeluMlp()
y = ct.compile(m, options={{"autotune": False}})(torch.randn(16, 64))
y.square().sum().backward()
print(repr(float(y.square().sum())), repr(float(m.fc1.weight.grad.abs().sum())))
"""
    env = dict(os.environ, COIL_CACHE_DIR=str(tmp_path / "cache"), COIL_LOGS="cache")
    runs = [subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    misses = [r.stderr.count("[coil:cache] miss") for r in runs]
    assert misses[0] >= 2 and misses[1] == 0, [r.stderr for r in runs]
    assert runs[0].stdout == runs[1].stdout
