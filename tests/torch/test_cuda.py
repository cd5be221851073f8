"""coil.torch on CUDA (python/coil/torch/cuda.py): graphs whose tensors are on CUDA become coil's
Triton module, loaded in-process and called with torch's CUDA tensors.

Without a GPU (CI here, torch 1.13, no Triton) the tests take graphs traced on the CPU whose
values are then claimed to be on CUDA (fake tensors in node.meta["val"] and as example inputs,
as Dynamo hands them to a backend): compile_fx generates the module (source checked, cached on
disk, reused by a second process), partitions around what coil's CUDA path refuses, and falls
back on mixed devices. A CPU stand-in for the loaded module (the same coil graph compiled for
the CPU) checks the wiring (input order, outputs, partitions) against eager.

With a GPU (tests/torch/run_torch2.sh on the GPU machine) the models of issue 18 run forward and
backward on CUDA against eager, whose cuBLAS/cuDNN calls then compute in IEEE fp32 as coil's
module does (runtime.fp32_precision("highest")): outputs rtol 1e-4 / atol 1e-5, gradients
rtol 1e-3 / atol 1e-5.
"""

import os
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from torch._subclasses import FakeTensorMode
from torch._subclasses.fake_tensor import FakeTensor
from torch.fx.experimental.proxy_tensor import make_fx

import coil
import coil.torch as ct
from coil.torch import cuda, fx_compile
from coil.torch.lowering import DECOMPOSITIONS
from conftest import record_fallbacks
from test_backend import LnGeluMlp
from test_models import GPT

HAS_CUDA = torch.cuda.is_available()
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path / "cache"))
    fx_compile._gpu_probes.clear()
    monkeypatch.setattr(cuda, "stats", {"generated": 0, "cached": 0, "graphs_captured": 0})


@pytest.fixture
def fallbacks(monkeypatch):
    return record_fallbacks(monkeypatch)


class CpuStandIn:
    """In place of a loaded Triton module (no GPU here): the module is generated and cached as
    on the GPU (cuda.module_path), and run() computes the same coil graph on the CPU."""
    made = []

    def __init__(self, graph, options):
        self.path = cuda.module_path(graph, options)
        self.model = coil.compile(graph, autotune=False)
        CpuStandIn.made.append(self)

    def run(self, inputs):
        return list(self.model(*[t.contiguous() for t in inputs]))


@pytest.fixture
def stand_in(monkeypatch):
    CpuStandIn.made = []
    monkeypatch.setattr(fx_compile, "_gpu_module", CpuStandIn)
    return CpuStandIn.made


def _fake_cuda(mode, t):
    return FakeTensor(mode, torch.empty(t.shape, dtype=t.dtype, device="meta"),
                      torch.device("cuda:0"))


def _claim_cuda(gm, example_inputs):
    """The graph's values and example inputs as fake CUDA tensors (what a backend gets from
    Dynamo on a GPU). torch 1.13 built without CUDA cannot trace on fake CUDA tensors through
    autograd, so graphs are traced on the CPU and then relabeled."""
    from torch.fx.passes.shape_prop import ShapeProp
    ShapeProp(gm).propagate(*example_inputs)
    mode = FakeTensorMode()
    for n in gm.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor):
            n.meta["val"] = _fake_cuda(mode, v)
        elif isinstance(v, (tuple, list)):
            n.meta["val"] = type(v)(_fake_cuda(mode, e) if isinstance(e, torch.Tensor) else e
                                    for e in v)
        elif n.op == "call_function" and n.meta.get("type") is type(None):
            n.meta["val"] = None  # (convolution_backward's absent bias gradient)
    from torch.utils._pytree import tree_flatten
    return gm, [_fake_cuda(mode, t) for t in tree_flatten(example_inputs)[0]]


def _traced(model, inputs, backward):
    """make_fx of the model's forward (and its parameters' gradients) as one aten graph."""
    try:
        from torch.func import functional_call  # torch 2.x
    except ImportError:
        from torch.nn.utils.stateless import functional_call
    names = [n for n, _ in model.named_parameters()]
    buffers = dict(model.named_buffers())

    def f(params, buffers, *xs):
        out = functional_call(model, {**dict(zip(names, params)), **buffers}, xs)
        if not backward:
            return out
        return out, torch.autograd.grad((out * out).sum(), params)
    params = [p.detach().requires_grad_(backward) for p in model.parameters()]
    if not backward:  # (1.13's functionalize cannot trace autograd.grad)
        try:
            from torch.func import functionalize
        except ImportError:
            from functorch.experimental import functionalize
        f = functionalize(f)
    # (on torch 2.x, F.scaled_dot_product_attention takes the math path the CUDA graphs of
    # coil.torch are traced with, not the CPU flash kernel: ct.math_attention)
    with _math_attention_anywhere():
        gm = make_fx(f, decomposition_table=DECOMPOSITIONS)(params, buffers, *inputs)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return _claim_cuda(gm, [params, buffers, *inputs])


def _math_attention_anywhere():
    import contextlib
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.MATH)
    except ImportError:
        return contextlib.nullcontext()


def _models():
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return {
        "mlp": (LnGeluMlp(), [torch.randn(8, 64)], True),
        "transformer_encoder_layer": (nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0,
                                                                 batch_first=True),
                                      [torch.randn(3, 7, 32)], True),
        "gpt_block": (GPT(), [torch.randint(0, 61, (3, 12))], True),
        # forward only: 1.13's make_fx of its backward (not functionalized) writes in place
        # (its backward on CUDA: test_models_on_cuda_forward_and_backward)
        "resnet18": (tv.models.resnet18(num_classes=10).eval(), [torch.randn(2, 3, 32, 32)],
                     False),
    }


@pytest.mark.parametrize("name", ["mlp", "transformer_encoder_layer", "gpt_block", "resnet18"])
def test_a_cuda_graph_becomes_a_cached_triton_module(name, stand_in, fallbacks):
    model, inputs, backward = _models()[name]
    gm, fake = _traced(model, inputs, backward)
    compiled = fx_compile.compile_fx(gm, fake, {})
    assert stand_in, "no Triton module was generated"
    # Every op is in a module: the GPT block's embedding too, a gather at run-time indices
    # whose index the kernel checks (runtime.check_indices raises one out of range).
    assert not fallbacks, fallbacks
    assert isinstance(compiled, fx_compile.CoilGraphCallable)
    if name == "gpt_block":
        assert any("runtime.check_indices(index_check" in open(s.path).read() for s in stand_in)
    for s in stand_in:
        assert os.path.dirname(s.path) == os.path.join(os.environ["COIL_CACHE_DIR"],
                                                       "torch_cuda")
        source = open(s.path).read()
        assert "@triton.jit" in source and "def call(args):" in source
        # one input check per coil input, with its shape and contiguous strides
        for name_, dtype, shape in s.model.inputs:
            assert f"runtime.check_input(arg{name_[2:]}_1, '{name_}', {shape}" in source
    assert cuda.stats["generated"] == len({s.path for s in stand_in})


def _launches(source):
    """(Triton kernel launches, library calls) in a module's call()."""
    body = source[source.index("def call(args):"):source.index("def get_args():")]
    kernels = len(re.findall(r"^    \w+\.run\(", body, re.M))
    library = len(re.findall(r"^        torch\.|^    torch\.index_add|\.index_add_\(", body, re.M))
    return kernels, library


# Launches of the forward-and-backward module (one graph: make_fx of the loss's gradients), as
# Inductor's tests count kernels: a regression shows as more launches. A training layer norm is
# one Triton kernel (its first element of each row recomputed from its loads: triton_plan.cpp
# recompute_stored; it was 8) that also writes its output (lowering.cpp store_before_reshape:
# the [B*T, D] matmul operand is a view of it), the embedding's gradient one index_add call.
# Before those: gpt_block 49 kernels, transformer_encoder_layer 34.
LAUNCH_BOUNDS = {"mlp": (10, 1), "gpt_block": (32, 18), "transformer_encoder_layer": (24, 13)}


@pytest.mark.parametrize("name", sorted(LAUNCH_BOUNDS))
def test_training_graphs_launch_no_more_kernels_than_before(name, stand_in, fallbacks):
    model, inputs, _ = _models()[name]
    gm, fake = _traced(model, inputs, True)
    fx_compile.compile_fx(gm, fake, {})
    assert not fallbacks, fallbacks
    (s,) = stand_in
    source = open(s.path).read()
    kernels, library = _launches(source)
    most_kernels, most_library = LAUNCH_BOUNDS[name]
    assert kernels <= most_kernels and library <= most_library, (kernels, library)
    # the forward layer norm is one kernel: its statistics and output together, no kernel of
    # only a mean, a variance or a shifted sum (the split one's triton_per_fused_var_2, ...)
    assert re.search(r"def triton_per_fused_\w*mean_var_layer_norm", source)
    assert not re.search(r"def triton_per_fused_(mean|var|layer_norm)_\d+\(", source)


def _run_claimed(fn, inputs, monkeypatch):
    """fn through coil.torch.compile with every graph claimed to be on CUDA (the stand-in
    computes it on the CPU)."""
    monkeypatch.setattr(fx_compile, "graph_devices", lambda gm, ex: {"cuda"})
    return ct.compile(fn)(*inputs)


def test_the_cuda_wiring_matches_eager_forward_and_backward(stand_in, fallbacks, monkeypatch):
    torch.manual_seed(2)
    for make, x in [(LnGeluMlp, torch.randn(5, 64)), (GPT, torch.randint(0, 61, (2, 9)))]:
        eager = make()
        mine = make()
        mine.load_state_dict(eager.state_dict())
        monkeypatch.setattr(fx_compile, "graph_devices", lambda gm, ex: {"cuda"})
        y = ct.compile(mine)(x)
        ye = eager(x)
        torch.testing.assert_close(y, ye, rtol=1e-4, atol=1e-5)
        g = torch.randn_like(ye)
        y.backward(g)
        ye.backward(g)
        for (n, a), b in zip(mine.named_parameters(), eager.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5,
                                       msg=lambda m: f"{make.__name__}.{n}: {m}")
    assert len(stand_in) >= 4  # forward and backward of both
    assert not fallbacks, fallbacks  # the GPT's embedding is a Triton gather


def _bias_gelu(x, b):
    return torch.nn.functional.gelu(x * 2 + b).sum(-1)


def test_a_symbolic_cuda_graph_is_one_size_generic_triton_module(stand_in, fallbacks):
    """torch.compile's dynamic shapes on CUDA: the graph with a symbolic size becomes one
    size-generic Triton module (docs/dynamic-shapes.md, "GPU"), not a compile per size."""
    x, b = torch.randn(5, 8), torch.randn(8)
    gm = make_fx(_bias_gelu, tracing_mode="symbolic")(x, b)
    compiled = fx_compile._compile_symbolic(gm, [x, b], {"autotune": False}, "cuda")
    assert isinstance(compiled, fx_compile.CoilGraphCallable)
    for n in (5, 3, 17, 5, 1000):
        x = torch.randn(n, 8)
        torch.testing.assert_close(compiled(x, b), _bias_gelu(x, b), rtol=1e-4, atol=1e-5)
    assert len(stand_in) == 1, "one module for every size"
    source = open(stand_in[0].path).read()
    assert "SIZE_SYMBOLS = {'ks0': " in source and "runtime.guard_sizes(" in source
    assert not fallbacks


def _decode_step(x, k_cache, w):
    """A decoder step's shape of sizes: the cache grows by one row (a cat), and every node
    after the cat sees the derived size s + 1."""
    k = torch.cat([k_cache, (x @ w).unsqueeze(1)], dim=1)
    p = (x.unsqueeze(1) * k).sum(-1).softmax(-1)
    return (p.unsqueeze(-1) * k).sum(1), k


def test_a_symbolic_cuda_graph_with_a_derived_size_is_one_module(stand_in, fallbacks):
    """The nodes after the cat have inputs of size s + 1, a size no input of a module of that
    node alone has: probing each node alone refused them all, and the Llama decoder's step
    compiled for every length on CUDA (1.2 s a token on the H100, 2026-12-07). The whole graph
    is one size-generic module."""
    x, kc, w = torch.randn(2, 16), torch.randn(2, 5, 16), torch.randn(16, 16)
    gm = make_fx(_decode_step, tracing_mode="symbolic")(x, kc, w)
    compiled = fx_compile._compile_symbolic(gm, [x, kc, w], {"autotune": False}, "cuda")
    assert isinstance(compiled, fx_compile.CoilGraphCallable)
    for n in (5, 6, 7, 1, 64):
        kc = torch.randn(2, n, 16)
        for got, want in zip(compiled(x, kc, w), _decode_step(x, kc, w)):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert len(stand_in) == 1, "one module for every length"
    assert not fallbacks


def test_size_generic_off_compiles_a_symbolic_cuda_graph_per_size(stand_in):
    from coil.torch.per_size import PerSizeCallable
    x, b = torch.randn(5, 8), torch.randn(8)
    gm = make_fx(_bias_gelu, tracing_mode="symbolic")(x, b)
    compiled = fx_compile._compile_symbolic(gm, [x, b], {"autotune": False,
                                                         "size_generic": False}, "cuda")
    assert isinstance(compiled, PerSizeCallable)


def test_a_second_process_generates_nothing(stand_in):
    # the GPT block (its embedding a Triton gather): the same module key in a new process
    model, inputs, _ = _models()["gpt_block"]
    gm, fake = _traced(model, inputs, True)
    fx_compile.compile_fx(gm, fake, {})
    assert cuda.stats == {"generated": 1, "cached": 0, "graphs_captured": 0}
    gm, fake = _traced(model, inputs, True)
    fx_compile.compile_fx(gm, fake, {})  # the same graph again: the module is on disk
    assert cuda.stats == {"generated": 1, "cached": 1, "graphs_captured": 0}
    code = f"""
import sys; sys.path[:0] = [{os.path.join(ROOT, 'python')!r}, {os.path.dirname(__file__)!r}]
import test_cuda
from coil.torch import cuda, fx_compile
fx_compile._gpu_module = lambda g, o: cuda.module_path(g, o)
model, inputs, _ = test_cuda._models()["gpt_block"]
gm, fake = test_cuda._traced(model, inputs, True)
fx_compile.compile_fx(gm, fake, {{}})
print(cuda.stats)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ), timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "{'generated': 0, 'cached': 1, 'graphs_captured': 0}", \
        out.stdout
    assert len(os.listdir(cuda.cache_root())) == 1  # the module; no temporary left


def test_mixed_devices_run_in_eager(fallbacks):
    gm = make_fx(lambda x, y: (x + y.sum()).relu())(torch.randn(3, 4), torch.randn(5))
    mode = FakeTensorMode()
    fake = [_fake_cuda(mode, torch.randn(3, 4)), torch.randn(5)]
    assert fx_compile.compile_fx(gm, fake, {}) is gm
    assert fallbacks == ["the graph: its tensors are on cpu, cuda: coil compiles graphs whose "
                         "tensors are all on the CPU or all on CUDA"]


def test_max_autotune_reaches_the_module_and_cpu_options_are_dropped(stand_in):
    model, inputs, _ = _models()["mlp"]
    for mode, marker in [("max-autotune", True), ("default", False)]:
        gm, fake = _traced(model, inputs, False)
        opts = ct.options_for_mode({"isa": "avx2", "autotune": True}, mode)
        fx_compile.compile_fx(gm, fake, opts)
        source = open(stand_in[-1].path).read()
        assert ("COIL_AUTOTUNE_MODE = 'max-autotune'" in source) == marker
    assert cuda.gpu_options({"isa": "avx2", "remote_cache": "redis://x", "autotune": False,
                             "precision": "high"}) == {"precision": "high", "device": "cuda"}
    g = coil.Graph()
    g.output(g.node("relu", [g.input("x", "f32[2]")]), "y")
    with pytest.raises(coil.Error, match="bogus"):  # an unknown option is coil's error
        cuda.module_path(g, {"bogus": 1})


# ---- on a GPU ---------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (tests/torch/run_torch2.sh "
                         "runs these on the GPU machine)")


def _cuda_forward_backward(make, inputs):
    from coil_runtime import runtime
    torch.manual_seed(0)
    eager = make().cuda()
    mine = make().cuda()
    mine.load_state_dict(eager.state_dict())
    compiled = ct.compile(mine, options={"precision": "highest"})
    xs = [x.cuda() for x in inputs]
    y = compiled(*xs)
    with runtime.fp32_precision("highest"):
        ye = eager(*xs)
    assert y.is_cuda
    torch.testing.assert_close(y, ye, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(ye)
    y.backward(g)
    with runtime.fp32_precision("highest"):
        ye.backward(g)
    for (n, a), b in zip(mine.named_parameters(), eager.parameters()):
        assert a.grad is not None and a.grad.is_cuda, n
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5,
                                   msg=lambda m: f"{n}: {m}")


@gpu
@pytest.mark.parametrize("name", ["mlp", "transformer_encoder_layer", "gpt_block", "resnet18"])
def test_models_on_cuda_forward_and_backward(name, fallbacks):
    tv = pytest.importorskip("torchvision")

    def resnet18():
        m = tv.models.resnet18(num_classes=10).eval()
        for mod in m.modules():  # running statistics away from 0/1
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
        return m
    makes = {
        "mlp": (LnGeluMlp, [torch.randn(8, 64)]),
        "transformer_encoder_layer": (lambda: nn.TransformerEncoderLayer(
            32, 4, 64, dropout=0.0, batch_first=True), [torch.randn(3, 7, 32)]),
        "gpt_block": (GPT, [torch.randint(0, 61, (3, 12))]),
        "resnet18": (resnet18, [torch.randn(2, 3, 32, 32)]),
    }
    make, inputs = makes[name]
    with torch.enable_grad():
        _cuda_forward_backward(make, inputs)
    assert not fallbacks, fallbacks


@gpu
@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch 2.x: torch.compile")
def test_torch_compile_backend_coil_on_cuda(fallbacks):
    torch.manual_seed(3)
    eager = LnGeluMlp().cuda()
    mine = LnGeluMlp().cuda()
    mine.load_state_dict(eager.state_dict())
    compiled = torch.compile(mine, backend="coil", mode="max-autotune")
    x = torch.randn(16, 64, device="cuda")
    y, ye = compiled(x), eager(x)
    torch.testing.assert_close(y, ye, rtol=1e-4, atol=1e-5)
    y.square().sum().backward()
    ye.square().sum().backward()
    for a, b in zip(mine.parameters(), eager.parameters()):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5)
    assert not fallbacks, fallbacks
    assert cuda.stats["generated"] + cuda.stats["cached"] >= 2  # forward and backward


def test_reduce_overhead_asks_for_cuda_graphs_and_coil_never_sees_the_option(stand_in):
    assert ct.options_for_mode({}, "reduce-overhead")["cuda_graphs"] is True
    assert "cuda_graphs" not in ct.options_for_mode({}, "default")
    assert ct.options_for_mode({"cuda_graphs": False}, "reduce-overhead")["cuda_graphs"] is False
    assert "cuda_graphs" not in cuda.gpu_options({"cuda_graphs": True, "precision": "high"})
    # The CPU path drops it too (CUDA graphs mean nothing there).
    model, inputs, _ = _models()["mlp"]
    compiled = ct.compile(model, options={"cuda_graphs": True, "autotune": False})
    torch.testing.assert_close(compiled(*inputs), model(*inputs), rtol=1e-4, atol=1e-5)


@gpu
def test_cuda_graphs_replay_with_new_inputs_updated_weights_and_moved_buffers(fallbacks):
    torch.manual_seed(5)
    model = LnGeluMlp().cuda().eval()
    plain = ct.compile(model, options={"precision": "highest"})
    graphed = ct.compile(model, options={"precision": "highest", "cuda_graphs": True})
    x = torch.randn(16, 64, device="cuda")
    with torch.no_grad():
        outs = []
        for step in range(6):
            x.copy_(torch.randn(16, 64, device="cuda"))  # same address, new values: live input
            y, want = graphed(x), plain(x)
            torch.testing.assert_close(y, want, rtol=0, atol=0)
            outs.append((y, want.clone()))
            if step == 3:  # an in-place weight update is read by the next replay
                next(model.parameters()).mul_(1.5)
        for y, want in outs:  # returned outputs are copies: later replays leave them alone
            torch.testing.assert_close(y, want, rtol=0, atol=0)
        for _ in range(3):  # a new tensor each call: copied into the graph's own buffer
            x2 = torch.randn(16, 64, device="cuda")
            torch.testing.assert_close(graphed(x2), plain(x2), rtol=0, atol=0)
        # captured at the second call, again when x2 moved (x was read in place until then)
        assert cuda.stats["graphs_captured"] == 2, cuda.stats
    assert not fallbacks, fallbacks


@gpu
@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch 2.x: torch.compile")
def test_torch_compile_reduce_overhead_trains_with_cuda_graphs(fallbacks):
    torch.manual_seed(3)
    eager = LnGeluMlp().cuda()
    mine = LnGeluMlp().cuda()
    mine.load_state_dict(eager.state_dict())
    compiled = torch.compile(mine, backend="coil", mode="reduce-overhead")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_m = torch.optim.SGD(mine.parameters(), lr=0.1)
    from coil_runtime import runtime
    for step in range(4):  # the optimizer updates the weights in place between replays
        x = torch.randn(16, 64, device="cuda")
        y = compiled(x)
        with runtime.fp32_precision("highest"):
            ye = eager(x)
        torch.testing.assert_close(y, ye, rtol=1e-4, atol=1e-5, msg=lambda m: f"step {step}: {m}")
        y.square().sum().backward()
        with runtime.fp32_precision("highest"):
            ye.square().sum().backward()
        opt_e.step(), opt_m.step(), opt_e.zero_grad(), opt_m.zero_grad()
    assert not fallbacks, fallbacks
    assert cuda.stats["graphs_captured"] >= 2, cuda.stats  # forward and backward
