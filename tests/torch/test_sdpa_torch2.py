"""torch.compile(backend="coil") of F.scaled_dot_product_attention, forward and backward, on torch
2.x (skipped on 1.13, which has neither torch.compile nor the fused ops): the fused op torch
picks (`_scaled_dot_product_flash_attention_for_cpu` on the CPU; flash, efficient or cuDNN on
CUDA) must become coil's attention op (lowering_sdpa.py), the backward op a coil graph
(lowering_sdpa_backward.py), nothing left to eager, and the output and the gradients of q, k,
v (and of a float mask) match eager's. Run on the GPU machine's host:
    bash tests/torch/run_torch2.sh tests/torch/test_sdpa_torch2.py"""

import pytest
import torch
import torch.nn.functional as F

from conftest import record_fallbacks

pytestmark = pytest.mark.skipif(not hasattr(torch, "compile") or not hasattr(
    torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu"),
    reason="torch 2.x (torch.compile and the fused attention ops)")

GQA = "enable_gqa" in str(getattr(torch.ops.aten.scaled_dot_product_attention.default,
                                  "_schema", "")) if hasattr(torch.ops.aten,
                                                             "scaled_dot_product_attention") \
    else False
LENGTHS = [1, 7, 64, 127]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _cases():
    """Every (Tq, Tk) pair for each D; causal on every other pair, a mask (bool, float) on
    every third, grouped-query heads on every fourth."""
    out = []
    i = 0
    for d in (16, 64, 80):
        for tq in LENGTHS:
            for tk in LENGTHS:
                causal = i % 2 == 1
                mask = None if causal or i % 3 == 0 else ("bool" if i % 3 == 1 else "float")
                gqa = GQA and i % 4 == 2
                out.append((tq, tk, d, causal, mask, gqa))
                i += 1
    return out


@pytest.fixture
def coil_graphs(monkeypatch):
    """The text of every coil graph compiled during the test."""
    from coil.torch import fx_compile
    texts = []
    real = fx_compile.CoilGraphCallable.__init__

    def init(self, *args, **kwargs):
        real(self, *args, **kwargs)
        texts.append(self.graph.to_text())
    monkeypatch.setattr(fx_compile.CoilGraphCallable, "__init__", init)
    return texts


def _inputs(tq, tk, d, mask, gqa, device, dtype):
    g = torch.Generator().manual_seed(tq * 1000 + tk * 10 + d)
    b, h = 2, 4
    hkv = 2 if gqa else h
    mk = lambda *s: torch.randn(*s, generator=g).to(device, dtype)  # noqa: E731
    q, k, v = mk(b, h, tq, d), mk(b, hkv, tk, d), mk(b, hkv, tk, d)
    m = None
    if mask == "bool":
        m = torch.rand(b, 1, tq, tk, generator=g) > 0.3
        m[..., 0] = True  # every row sees a key (a row without one is NaN in eager)
        m = m.to(device)
    elif mask == "float":
        m = torch.randn(1, h, tq, tk, generator=g).to(device, dtype)
    return q, k, v, m


def _params():
    """Every case on the CPU in f32; on CUDA (each a Triton compile of a forward and a backward
    module) a third of them, every D, length, mask kind, causal and GQA among them, in f32 and
    bf16."""
    out = []
    for i, c in enumerate(_cases()):
        out.append(("cpu", "f32", c))
        if "cuda" in DEVICES and (i % 3 == 1 or i % 8 == 2):
            out += [("cuda", "f32", c), ("cuda", "bf16", c)]
    return out


@pytest.mark.parametrize("device,dtype,case", _params(), ids=lambda x: x if isinstance(
    x, str) else "tq{}-tk{}-d{}-{}-{}{}".format(x[0], x[1], x[2], "causal" if x[3] else "full",
                                               x[4] or "nomask", "-gqa" if x[5] else ""))
def test_sdpa_forward_and_backward(case, device, dtype, coil_graphs, monkeypatch):
    tq, tk, d, causal, mask, gqa = case
    torch._dynamo.reset()
    fallbacks = record_fallbacks(monkeypatch)
    dt = torch.float32 if dtype == "f32" else torch.bfloat16
    q, k, v, m = _inputs(tq, tk, d, mask, gqa, device, dt)
    kwargs = {"enable_gqa": True} if gqa else {}

    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=causal, **kwargs)

    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    mleaf = m.clone().requires_grad_() if mask == "float" else m
    compiled = torch.compile(f, backend="coil", dynamic=False)
    y = compiled(*leaves, mleaf)
    dy = torch.randn(y.shape, generator=torch.Generator().manual_seed(5)).to(device, dt)
    y.backward(dy)

    # the reference: eager in f64 (the math path), rounded to the dtype
    ref = [t.detach().double().requires_grad_() for t in (q, k, v)]
    mref = m.detach().double().requires_grad_() if mask == "float" else m
    want = F.scaled_dot_product_attention(*ref, attn_mask=mref, is_causal=causal, **kwargs)
    want.backward(dy.double())
    tol = dict(rtol=1e-3, atol=1e-4) if dt == torch.float32 else dict(rtol=3e-2, atol=3e-2)
    torch.testing.assert_close(y, want.to(dt), **tol)
    for got, r in zip(leaves, ref):
        torch.testing.assert_close(got.grad, r.grad.to(dt), **tol)
    if mask == "float":
        # the mask's gradient where eager (same device and dtype) gives one: the fused kernel
        # torch picks may treat the mask as a constant
        meager = m.clone().requires_grad_()
        F.scaled_dot_product_attention(*[t.clone().requires_grad_() for t in (q, k, v)],
                                       attn_mask=meager, is_causal=causal, **kwargs).backward(dy)
        if meager.grad is None:
            assert mleaf.grad is None
        else:
            torch.testing.assert_close(mleaf.grad, mref.grad.to(dt), **tol)

    assert not fallbacks, fallbacks
    if device == "cuda" and ((causal and tq != tk) or
                             (gqa and (dt == torch.float32 or mask == "float"))):
        # torch's own choice on CUDA: non-square causal may go to a kernel that aligns it its
        # own way (eager), and grouped-query heads in f32 or with a float mask that requires
        # grad to the math path (the memory-efficient kernel, the one that gives a mask
        # gradient, has no GQA): written out, no attention op (the H100's torch 2.11 run of
        # 2026-12-07: the two bf16 float-mask GQA rows failed only here)
        return
    if device == "cpu" and mask == "float":
        # a float mask that requires grad: torch 2.11 traces the math path on the CPU (its
        # flash kernel gives no mask gradient), written out; the values and gradients above
        # are still checked (the GPU host's run of 2026-12-05: all 8 such cases failed only here)
        return
    assert any("attention(" in t for t in coil_graphs), "no coil graph holds the attention op"


@pytest.mark.parametrize("device", DEVICES)
def test_sdpa_inference_computes_no_logsumexp(device, coil_graphs, monkeypatch):
    """Without gradients the forward's logsumexp is not read: the coil graph is the attention
    op alone (no score matrix written out)."""
    torch._dynamo.reset()
    fallbacks = record_fallbacks(monkeypatch)
    q, k, v, _ = _inputs(64, 127, 64, None, False, device, torch.float32)
    compiled = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
                             backend="coil", dynamic=False)
    with torch.no_grad():
        y = compiled(q, k, v)
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double())
    torch.testing.assert_close(y, want.float(), rtol=1e-4, atol=1e-5)
    assert not fallbacks, fallbacks
    text = "\n".join(coil_graphs)
    assert "attention(" in text and "matmul(" not in text, text


def test_dropout_is_not_coils_attention(coil_graphs, monkeypatch):
    """dropout_p != 0 is random: never coil's attention op (the fused row refuses it; the
    math path torch may pick instead has dropout's random ops)."""
    torch._dynamo.reset()
    record_fallbacks(monkeypatch)  # dropout's random ops may fall back: recorded, not asserted
    q, k, v, _ = _inputs(7, 7, 16, None, False, "cpu", torch.float32)
    compiled = torch.compile(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, dropout_p=0.5), backend="coil", dynamic=False)
    y = compiled(q, k, v)
    assert y.shape == q.shape
    assert not any("attention(" in t for t in coil_graphs)
