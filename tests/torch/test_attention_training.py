"""Training through coil.torch.compile of attention as torch 1.13 traces it: nn.MultiheadAttention
and F._scaled_dot_product_attention become, under functorch's aot_module, written-out graphs
(bmm, softmax, _softmax_backward_data's decomposition) whose forward and backward must run in
coil with no op left to eager, and whose gradients match eager's (rtol 1e-3). (On torch 2.x the
fused ops and their backward rows: test_sdpa_torch2.py.)"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import coil.torch as ct

from conftest import record_fallbacks

OPTIONS = {"autotune": False}


class _Mha(nn.Module):
    """MultiheadAttention returning its output only (1.13's aot_module takes no None output)."""

    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, x, mask, pad):
        return self.mha(x, x, x, attn_mask=mask, key_padding_mask=pad, need_weights=False)[0]


def _grads_close(model, ref):
    for (name, p), (_, r) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, r.grad, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.parametrize("masks", ["none", "causal", "padding"])
def test_multihead_attention_training_matches_eager(masks, monkeypatch):
    fallbacks = record_fallbacks(monkeypatch)
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(32, 4, batch_first=True)
    ref = nn.MultiheadAttention(32, 4, batch_first=True)
    ref.load_state_dict(mha.state_dict())
    x = torch.randn(3, 7, 32)
    mask = torch.triu(torch.ones(7, 7, dtype=torch.bool), 1) if masks == "causal" else None
    pad = None
    if masks == "padding":
        pad = torch.zeros(3, 7, dtype=torch.bool)
        pad[1, 5:] = True
        pad[2, 2:] = True
    compiled = ct.compile(_Mha(mha), OPTIONS)
    for step in range(2):  # twice: the second call reuses the compiled graphs
        for m in (mha, ref):
            m.zero_grad()
        y = compiled(x, mask, pad)
        want = _Mha(ref)(x, mask, pad)
        torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-5)
        (y * y).sum().backward()
        (want * want).sum().backward()
        _grads_close(mha, ref)
    assert not fallbacks, fallbacks


@pytest.mark.skipif(not hasattr(F, "_scaled_dot_product_attention"),
                    reason="torch 1.13's F._scaled_dot_product_attention")
@pytest.mark.parametrize("causal", [False, True])
def test_private_sdpa_training_matches_eager(causal, monkeypatch):
    fallbacks = record_fallbacks(monkeypatch)
    torch.manual_seed(1)

    def f(q, k, v):
        return F._scaled_dot_product_attention(q, k, v, None, 0.0, False, causal)[0]
    # (sdpa_math, the bridge's option of tracing CUDA graphs with torch's math path, is not
    # one of coil's compile options: it must not reach coil.compile)
    compiled = ct.compile(f, dict(OPTIONS, sdpa_math=causal))
    q, k, v = (torch.randn(2, 3, 9, 16, requires_grad=True) for _ in range(3))
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    y = compiled(q, k, v)
    want = f(q2, k2, v2)
    torch.testing.assert_close(y, want, rtol=1e-4, atol=1e-5)
    g = torch.randn_like(y)
    y.backward(g)
    want.backward(g)
    for a, b in [(q, q2), (k, k2), (v, v2)]:
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5)
    assert not fallbacks, fallbacks
