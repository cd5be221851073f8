"""Whole models through coil.torch against eager, forward and backward (issue 18's model list):
torchvision resnet18 and mobilenet_v2 (eval), nn.TransformerEncoderLayer (grad enabled, so no
fused fast path) and a GPT-style decoder block in plain torch (token embedding, causal mask,
tied output projection), plus 20 SGD steps of the GPT block.

Tolerances (f32): outputs rtol 1e-4 / atol 1e-5, gradients rtol 1e-3 / atol 1e-5, loss curves
1e-4 relative. Sizes are small so that the file runs in about a minute on 2
cores. Every model must run fully in coil: a fallback op fails the test (the partitioner would
still run it, but then these models would not show coil's coverage).
"""

import math
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import coil.torch as ct
from conftest import record_fallbacks

OPTIONS = {"autotune": False}


@pytest.fixture(scope="module", autouse=True)
def private_cache(tmp_path_factory):
    old = os.environ.get("COIL_CACHE_DIR")
    os.environ["COIL_CACHE_DIR"] = str(tmp_path_factory.mktemp("coil-cache-models"))
    yield
    if old is None:
        os.environ.pop("COIL_CACHE_DIR", None)
    else:
        os.environ["COIL_CACHE_DIR"] = old


@pytest.fixture(autouse=True)
def no_fallback(monkeypatch):
    """Records every fallback (fx_compile._log_fallback) and fails the test on any."""
    seen = record_fallbacks(monkeypatch)
    yield seen
    assert not seen, "ops fell back to eager:\n" + "\n".join(seen)


class Block(nn.Module):
    """One pre-norm GPT decoder layer: causal self-attention and a GELU MLP."""

    def __init__(self, d, heads, ctx):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        self.register_buffer("causal", torch.tril(torch.ones(ctx, ctx, dtype=torch.bool)))

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        att = att.masked_fill(~self.causal[:t, :t], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Token and position embeddings, one block, a final LayerNorm, the output projection tied
    to the token embedding."""

    def __init__(self, vocab=61, d=32, heads=4, ctx=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(ctx, d) * 0.02)
        self.block = Block(d, heads, ctx)
        self.ln = nn.LayerNorm(d)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos[:t]
        return self.ln(self.block(x)) @ self.tok.weight.t()


def _pair(make, seed=0):
    torch.manual_seed(seed)
    eager = make()
    mine = make()
    mine.load_state_dict(eager.state_dict())
    return eager, mine


def _close_grads(named_a, named_b, rtol=1e-3, atol=1e-5):
    for (name, a), (_, b) in zip(named_a, named_b):
        assert a is not None and b is not None, name
        torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


def _forward_backward(eager, mine, inputs, input_grad=True):
    compiled = ct.compile(mine, options=OPTIONS)
    xe = [x.clone().requires_grad_(input_grad and x.is_floating_point()) for x in inputs]
    xm = [x.clone().requires_grad_(input_grad and x.is_floating_point()) for x in inputs]
    ye, ym = eager(*xe), compiled(*xm)
    torch.testing.assert_close(ym, ye, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(ye)
    ye.backward(g)
    ym.backward(g)
    _close_grads([(n, p.grad) for n, p in mine.named_parameters()],
                 [(n, p.grad) for n, p in eager.named_parameters()])
    for a, b in zip(xm, xe):
        if b.grad is not None:
            _close_grads([("input", a.grad)], [("input", b.grad)])


def _torchvision():
    return pytest.importorskip("torchvision")


def test_resnet18_eval_forward_and_backward():
    tv = _torchvision()
    eager, mine = _pair(lambda: tv.models.resnet18(num_classes=10).eval())
    for m in (eager, mine):  # running statistics away from 0/1, the same in both
        torch.manual_seed(5)
        for mod in m.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.2, 0.2)
                mod.running_var.uniform_(0.5, 1.5)
    torch.manual_seed(1)
    _forward_backward(eager, mine, [torch.randn(2, 3, 32, 32)])


def test_mobilenet_v2_eval_forward_and_backward():
    tv = _torchvision()
    eager, mine = _pair(lambda: tv.models.mobilenet_v2(num_classes=10, width_mult=0.5).eval())
    torch.manual_seed(1)
    _forward_backward(eager, mine, [torch.randn(2, 3, 32, 32)])


def test_transformer_encoder_layer_forward_and_backward():
    eager, mine = _pair(lambda: nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0,
                                                           batch_first=True))
    torch.manual_seed(1)
    with torch.enable_grad():
        _forward_backward(eager, mine, [torch.randn(3, 7, 32)])


def test_gpt_block_forward_and_backward():
    eager, mine = _pair(GPT)
    torch.manual_seed(1)
    idx = torch.randint(0, 61, (3, 12))
    idx[0, :4] = 7  # repeated tokens: their embedding gradients add up
    _forward_backward(eager, mine, [idx])


def test_gpt_block_sgd_loss_curve_matches_eager():
    eager, mine = _pair(GPT, seed=3)
    compiled = ct.compile(mine, options=OPTIONS)
    torch.manual_seed(4)
    idx = torch.randint(0, 61, (4, 16))
    target = torch.randint(0, 61, (4, 16))
    curves = {}
    for name, model, fn in [("eager", eager, eager), ("coil", mine, compiled)]:
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        curve = []
        for _ in range(20):
            opt.zero_grad()
            loss = F.cross_entropy(fn(idx).reshape(-1, 61), target.reshape(-1))
            loss.backward()
            opt.step()
            curve.append(loss.item())
        curves[name] = curve
    assert curves["eager"][-1] < curves["eager"][0] - 0.1  # it trains
    for a, b in zip(curves["coil"], curves["eager"]):
        assert abs(a - b) <= 1e-4 * abs(b), (curves["coil"], curves["eager"])


# ---- the layers those models need, over odd shapes ------------------------------------------

@pytest.mark.parametrize("n,c,h,w,oc,k,stride,pad,dil,groups,bias", [
    (2, 4, 1, 1, 6, 1, 1, 0, 1, 1, True),   # 1x1 on 1x1 (mobilenet's last conv)
    (2, 4, 7, 6, 6, 3, 2, 1, 1, 2, True),   # grouped, strided, odd sizes
    (1, 3, 9, 8, 4, 3, 1, 2, 2, 1, False),  # dilated, padded beyond the kernel's reach
    (2, 6, 8, 8, 6, 3, 2, 1, 1, 6, False),  # depthwise, stride 2
    (1, 4, 5, 5, 8, 2, 3, 0, 1, 2, True),   # stride above the kernel: rows never read
    (3, 2, 11, 1, 3, 1, 1, 0, 1, 1, True),  # width 1
])
def test_conv2d_forward_and_backward(n, c, h, w, oc, k, stride, pad, dil, groups, bias):
    torch.manual_seed(7)

    def f(x, wt, b):
        return F.conv2d(x, wt, b, stride, pad, dil, groups)
    x, wt = torch.randn(n, c, h, w), torch.randn(oc, c // groups, k, k)
    b = torch.randn(oc) if bias else None
    _function_forward_backward(f, [x, wt, b])


@pytest.mark.parametrize("fn", [
    lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1),
    lambda x, w, b: F.conv_transpose1d(x, w.transpose(0, 1).contiguous(), None, stride=2,
                                       padding=1, output_padding=1),
])
def test_conv1d_and_transposed_forward_and_backward(fn):
    torch.manual_seed(8)
    x, w, b = torch.randn(2, 4, 9), torch.randn(6, 4, 3), torch.randn(6)
    if "transpose" in fn.__code__.co_names:
        _function_forward_backward(fn, [x, w, b], backward=False)
    else:
        _function_forward_backward(fn, [x, w, b])


@pytest.mark.parametrize("shape,k,stride,pad,dil,ceil", [
    ((2, 3, 9, 9), 3, 2, 1, 1, False),    # resnet's stem pool, odd size
    ((1, 2, 8, 7), 2, 2, 0, 1, True),     # ceil mode: a partial last window
    ((2, 1, 10, 9), 3, 1, 1, 2, False),   # dilated
    ((3, 5, 6), 2, 1, 0, 1, False),       # unbatched, overlapping windows
])
def test_max_pool2d_values_indices_and_backward(shape, k, stride, pad, dil, ceil):
    torch.manual_seed(9)
    x = torch.randn(shape)
    x.view(-1)[:4] = 1.5  # ties: torch's index is the first maximum

    def f(x):
        return F.max_pool2d(x, k, stride, pad, dil, ceil_mode=ceil, return_indices=True)
    (out, idx), (oute, idxe) = ct.compile(f, options=OPTIONS)(x), f(x)
    torch.testing.assert_close(out, oute, rtol=0, atol=0)
    assert torch.equal(idx, idxe), (idx, idxe)
    _function_forward_backward(lambda x: F.max_pool2d(x, k, stride, pad, dil, ceil_mode=ceil),
                               [x])


def _function_forward_backward(f, inputs, backward=True):
    xs = [t.clone().requires_grad_(backward) if t is not None else None for t in inputs]
    xe = [t.clone().requires_grad_(backward) if t is not None else None for t in inputs]
    y, ye = ct.compile(f, options=OPTIONS)(*xs), f(*xe)
    torch.testing.assert_close(y, ye, rtol=1e-4, atol=1e-5)
    if not backward:
        return
    g = torch.randn_like(ye)
    y.backward(g)
    ye.backward(g)
    for i, (a, b) in enumerate(zip(xs, xe)):
        if b is not None:
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5,
                                       msg=lambda m: f"gradient of input {i}: {m}")


@pytest.fixture
def kernel_names(monkeypatch):
    """The kernel names of every coil model compiled during the test."""
    from coil.torch import fx_compile
    names = []
    real = fx_compile.CoilGraphCallable.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if self.model is not None:
            names.extend(k["name"] for k in self.model.report["kernels"])
    monkeypatch.setattr(fx_compile.CoilGraphCallable, "__init__", init)
    return names


def test_gpt_block_inference_attention_is_the_flash_kernel(kernel_names):
    """The block's attention (masked_fill of the bool causal mask, reaching coil as torch 1.13's
    bmm views around where(logical_not(mask), -inf, s)) is recognized as one attention node
    and runs as the flash kernel; the result matches eager."""
    torch.manual_seed(4)
    block = Block(64, 4, 48).eval()
    x = torch.randn(2, 48, 64)
    with torch.no_grad():
        want = block(x)
        got = ct.compile(block, options=OPTIONS)(x)
    assert any(n.startswith("cpp_extern_attention") for n in kernel_names), kernel_names
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_gpt_block_in_bf16_is_as_close_to_f32_as_torchs_bf16(kernel_names):
    """Issue 28: a GPT block in bf16 (weights and activations) matches torch's bf16 within the
    bf16 tolerance. Both differ from the f32 block by rounding; coil's error against the f32
    result must stay within twice torch's own bf16 error (and within bf16's tolerance). Its
    attention runs as the flash kernel (scores and probabilities in f32, where eager rounds
    them to bf16)."""
    torch.manual_seed(3)
    block = Block(64, 4, 48).eval()
    x = torch.randn(2, 48, 64)
    with torch.no_grad():
        want = block(x)
        b16 = Block(64, 4, 48).eval()
        b16.load_state_dict(block.state_dict())
        b16 = b16.to(torch.bfloat16)
        x16 = x.to(torch.bfloat16)
        eager = b16(x16).float()
        got = ct.compile(b16, options=OPTIONS)(x16)
    assert got.dtype == torch.bfloat16
    assert any(n.startswith("cpp_extern_attention") for n in kernel_names), kernel_names
    got = got.float()
    err_coil = (got - want).abs().max().item()
    err_torch = (eager - want).abs().max().item()
    assert err_coil <= 2 * err_torch + 1e-3, (err_coil, err_torch)
    torch.testing.assert_close(got, eager, rtol=1.6e-2, atol=4 * err_torch)
