"""The rows of torch 2.x's fused attention ops (lowering_sdpa.py, lowering_sdpa_backward.py),
tested on any torch (1.13 here) through FX graphs built by hand: each graph calls a stand-in
named as the aten overload (str() is what the row table is keyed by), whose Python body is an
independent float64 reference of torch's semantics (top-left is_causal, bool or additive
masks, grouped-query heads, logsumexp, the efficient kernel's +inf padding). The graphs are
compiled by coil and their outputs compared with that reference; the coil graph must hold the
attention op. On torch 2.x, test_sdpa_torch2.py checks the real ops through torch.compile."""

import math
import operator
import re

import pytest
import torch

from coil.torch import fx_compile, lowering, lowering_sdpa, lowering_sdpa_backward

OPTIONS = {"autotune": False}


@pytest.fixture(autouse=True)
def all_rows(monkeypatch):
    """Every row registered, also those of overloads this torch lacks."""
    for table in (lowering_sdpa.ROW_FUNCTIONS, lowering_sdpa_backward.ROW_FUNCTIONS):
        for name, fn in table.items():
            monkeypatch.setitem(lowering.ROWS, name, fn)


class StandIn:
    """A callable FX target whose str() is an aten overload's name."""

    def __init__(self, name, fn):
        self.name, self.fn = name, fn
        self.__name__ = name.replace(".", "_")
        self.__module__ = __name__

    def __str__(self):
        return self.name

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


# ---- the reference (float64) ----------------------------------------------------------------

def ref_scores(q, k, mask=None, causal=False, scale=None):
    q, k = q.double(), k.double()
    h, hkv = q.shape[1], k.shape[1]
    k = k.repeat_interleave(h // hkv, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-1, -2) * scale
    if mask is not None and mask.dtype == torch.bool:
        s = s.masked_fill(~mask, -math.inf)
    elif mask is not None:
        s = s + mask.double()
    if causal:
        tq, tk = s.shape[-2:]
        tri = torch.ones(tq, tk, dtype=torch.bool).tril()
        s = s.masked_fill(~tri, -math.inf)
    return s


def ref_attention(q, k, v, mask=None, causal=False, scale=None):
    s = ref_scores(q, k, mask, causal, scale)
    h, hkv = q.shape[1], k.shape[1]
    v = v.double().repeat_interleave(h // hkv, dim=1)
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def cpu_forward(q, k, v, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    o, lse = ref_attention(q, k, v, attn_mask, is_causal, scale)
    return o.to(q.dtype), lse.float()


def efficient_forward(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                      *, scale=None):
    o, lse = ref_attention(q, k, v, attn_bias, is_causal, scale)
    b, h, tq = lse.shape
    if compute_log_sumexp:
        pad = (tq + 31) // 32 * 32
        lse = torch.cat([lse, torch.full((b, h, pad - tq), math.inf, dtype=lse.dtype)], 2)
    else:
        lse = lse[..., :0]
    # the RNG state in a dtype coil lacks (uint64 on torch 2.x; int16 here)
    return (o.to(q.dtype), lse.float(), torch.zeros(2, dtype=torch.int16),
            torch.zeros((), dtype=torch.int16))


def flash_forward(q, k, v, dropout_p=0.0, is_causal=False, return_debug_mask=False, *,
                  scale=None):
    o, lse = ref_attention(q, k, v, None, is_causal, scale)
    return (o.to(q.dtype), lse.float(), None, None, q.shape[2], k.shape[2],
            torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64),
            torch.zeros(0, dtype=q.dtype))


def cudnn_forward(q, k, v, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False,
                  return_debug_mask=False, *, scale=None):
    o, lse = ref_attention(q, k, v, attn_bias, is_causal, scale)
    return (o.to(q.dtype), lse.float()[..., None], None, None, q.shape[2], k.shape[2],
            torch.zeros((), dtype=torch.int64), torch.zeros((), dtype=torch.int64),
            torch.zeros(0, dtype=q.dtype))


def ref_grads(dout, q, k, v, mask, causal, scale, mask_grad=False):
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    m = mask
    if mask is not None and mask.dtype != torch.bool and mask_grad:
        m = mask.detach().double().requires_grad_()
        leaves.append(m)
    o, _ = ref_attention(*leaves[:3], m, causal, scale)
    grads = torch.autograd.grad(o, leaves, dout.double())
    return [g.to(t.dtype) for g, t in zip(grads, (q, k, v, mask)[:len(grads)])]


def cpu_backward(dout, q, k, v, out, lse, dropout_p, is_causal, *, attn_mask=None, scale=None):
    return tuple(ref_grads(dout, q, k, v, attn_mask, is_causal, scale))


def flash_backward(dout, q, k, v, out, lse, cum_q, cum_k, max_q, max_k, dropout_p, is_causal,
                   seed, offset, *, scale=None):
    return tuple(ref_grads(dout, q, k, v, None, is_causal, scale))


def efficient_backward(dout, q, k, v, bias, out, lse, seed, offset, dropout_p, grad_input_mask,
                       is_causal=False, *, scale=None):
    g = ref_grads(dout, q, k, v, bias, is_causal, scale, mask_grad=grad_input_mask[3])
    return tuple(g) + ((None,) if len(g) == 3 else ())


def cudnn_backward(dout, q, k, v, out, lse, seed, offset, bias, cum_q, cum_k, max_q, max_k,
                   dropout_p, is_causal, *, scale=None):
    return tuple(ref_grads(dout, q, k, v, bias if bias.numel() else None, is_causal, scale))


CPU = StandIn("aten._scaled_dot_product_flash_attention_for_cpu.default", cpu_forward)
EFF = StandIn("aten._scaled_dot_product_efficient_attention.default", efficient_forward)
FLASH = StandIn("aten._scaled_dot_product_flash_attention.default", flash_forward)
def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, *, scale=None,
         enable_gqa=False):
    return ref_attention(q, k, v, attn_mask, is_causal, scale)[0].to(q.dtype)


SDPA = StandIn("aten.scaled_dot_product_attention.default", sdpa)
CUDNN = StandIn("aten._scaled_dot_product_cudnn_attention.default", cudnn_forward)
CPU_BW = StandIn("aten._scaled_dot_product_flash_attention_for_cpu_backward.default",
                 cpu_backward)
FLASH_BW = StandIn("aten._scaled_dot_product_flash_attention_backward.default", flash_backward)
EFF_BW = StandIn("aten._scaled_dot_product_efficient_attention_backward.default",
                 efficient_backward)
CUDNN_BW = StandIn("aten._scaled_dot_product_cudnn_attention_backward.default", cudnn_backward)


# ---- graphs built by hand ---------------------------------------------------------------------

def build(target, inputs, args, kwargs, outputs):
    """A GraphModule: placeholders for `inputs` (name -> tensor), one call of `target` with
    `args`/`kwargs` (strings name placeholders), graph outputs = getitems `outputs`. Every
    node's meta["val"] is its value on the inputs."""
    g = torch.fx.Graph()
    env = {n: g.placeholder(n) for n in inputs}
    for n, t in inputs.items():
        env[n].meta["val"] = t
    sub = lambda a: env[a] if isinstance(a, str) and a in env else a  # noqa: E731
    call = g.call_function(target, tuple(sub(a) for a in args),
                           {k: sub(a) for k, a in kwargs.items()})
    real = lambda a: inputs[a] if isinstance(a, str) and a in inputs else a  # noqa: E731
    val = target(*[real(a) for a in args], **{k: real(a) for k, a in kwargs.items()})
    call.meta["val"] = val
    outs = []
    for i in outputs:
        item = g.call_function(operator.getitem, (call, i))
        item.meta["val"] = val[i]
        outs.append(item)
    g.output(tuple(outs))
    return torch.fx.GraphModule(torch.nn.Module(), g), [val[i] for i in outputs]


def compile_and_run(gm, inputs, fallbacks_ok=False):
    seen = []
    real = fx_compile._log_fallback
    fx_compile._log_fallback = lambda what, why: seen.append(f"{what}: {why}")
    try:
        compiled = fx_compile.compile_fx(gm, list(inputs.values()), OPTIONS)
    finally:
        fx_compile._log_fallback = real
    if not fallbacks_ok:
        assert not seen, seen
    return compiled, compiled(*inputs.values())


def coil_text(compiled):
    return compiled.graph.to_text()


def rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape) * 7 + len(shape))
    return torch.randn(*shape, generator=g).to(dtype)


def close(got, want, rtol=1e-4, atol=1e-5):
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, want.shape,
                                                                  got.dtype, want.dtype)
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)


SHAPES = [  # (B, H, Hkv, Tq, Tk, D)
    (1, 2, 2, 7, 7, 16), (2, 4, 2, 1, 64, 16), (1, 2, 1, 64, 7, 80), (2, 3, 3, 127, 127, 64),
    (1, 4, 4, 7, 127, 16), (1, 6, 2, 64, 1, 64),
]


# each shape causal and not, the masks cycling (none, bool, float)
COMBOS = [(s, c, [None, "bool", "float"][(i + c) % 3]) for i, s in enumerate(SHAPES)
          for c in (False, True)]
COMBO_IDS = ["x".join(map(str, s)) + ("-causal" if c else "") + f"-{m or 'nomask'}"
             for s, c, m in COMBOS]


def _mask(kind, b, h, tq, tk, seed):
    if kind is None:
        return None
    if kind == "bool":
        m = rand(b, 1, tq, tk, seed=seed) > -0.5
        m[..., 0] = True  # no row without a key (the reference's NaN rows are tested apart)
        return m
    return rand(1, h, tq, tk, seed=seed)


@pytest.mark.parametrize("shape,causal,mask", COMBOS, ids=COMBO_IDS)
def test_cpu_flash_forward_and_logsumexp(shape, causal, mask):
    b, h, hkv, tq, tk, d = shape
    q, k, v = rand(b, h, tq, d, seed=1), rand(b, hkv, tk, d, seed=2), rand(b, hkv, tk, d, seed=3)
    inputs = {"q": q, "k": k, "v": v}
    kwargs = {}
    if mask is not None:
        inputs["m"] = _mask(mask, b, h, tq, tk, seed=4)
        kwargs["attn_mask"] = "m"
    if shape[0] == 2:
        kwargs["scale"] = 0.3
    gm, want = build(CPU, inputs, ["q", "k", "v", 0.0, causal], kwargs, [0, 1])
    compiled, got = compile_and_run(gm, inputs)
    text = coil_text(compiled)
    assert "attention(" in text
    close(got[0], want[0])
    close(got[1], want[1])
    # causal and Tq != Tk: torch's top-left triangle passed as a mask, not coil's causal
    assert ("causal=true" in text.replace(" ", "")) == (causal and tq == tk)


@pytest.mark.parametrize("mask", ["bool", "float"])
def test_bf16_with_a_bf16_mask_and_top_left_causal(mask):
    q, k, v = (rand(2, 4, 5, 16, seed=1).bfloat16(), rand(2, 2, 9, 16, seed=2).bfloat16(),
               rand(2, 2, 9, 16, seed=3).bfloat16())
    m = _mask(mask, 2, 4, 5, 9, seed=4)
    m = m if m.dtype == torch.bool else m.bfloat16()
    inputs = {"q": q, "k": k, "v": v, "m": m}
    gm, want = build(CPU, inputs, ["q", "k", "v", 0.0, True], {"attn_mask": "m"}, [0, 1])
    compiled, got = compile_and_run(gm, inputs)
    assert "attention(" in coil_text(compiled)
    close(got[0], want[0], rtol=2e-2, atol=2e-2)
    close(got[1], want[1], rtol=1e-3, atol=1e-3)


def test_scaled_dot_product_attention_kept_whole():
    """aten.scaled_dot_product_attention (one output) where a tracer keeps it: GQA only with
    enable_gqa, as torch checks."""
    q, k, v = rand(2, 4, 7, 16, seed=1), rand(2, 2, 9, 16, seed=2), rand(2, 2, 9, 16, seed=3)
    m = _mask("float", 2, 4, 7, 9, seed=4)
    inputs = {"q": q, "k": k, "v": v, "m": m}
    g = torch.fx.Graph()
    env = {n: g.placeholder(n) for n in inputs}
    for n, t in inputs.items():
        env[n].meta["val"] = t
    call = g.call_function(SDPA, (env["q"], env["k"], env["v"], env["m"]),
                           {"enable_gqa": True, "scale": 0.25})
    call.meta["val"] = want = sdpa(q, k, v, m, scale=0.25)
    g.output(call)
    compiled, got = compile_and_run(torch.fx.GraphModule(torch.nn.Module(), g), inputs)
    assert "attention(" in coil_text(compiled)
    close(got, want)
    call.kwargs = {"scale": 0.25}  # enable_gqa=False with 4 and 2 heads: torch's error, eager
    L = lowering.Lowering(__import__("coil").Graph())
    vals = [lowering.Value(L.g.input(n, fx_compile._type_text(t.shape, t.dtype)))
            for n, t in inputs.items()]
    with pytest.raises(lowering.Unsupported, match="enable_gqa=False"):
        lowering.ROWS[str(SDPA)](L, call, vals, dict(call.kwargs))


def test_unused_logsumexp_is_not_computed():
    q, k, v = rand(1, 2, 7, 16, seed=1), rand(1, 2, 9, 16, seed=2), rand(1, 2, 9, 16, seed=3)
    inputs = {"q": q, "k": k, "v": v}
    gm, want = build(CPU, inputs, ["q", "k", "v", 0.0, True], {}, [0])
    compiled, got = compile_and_run(gm, inputs)
    close(got[0], want[0])
    text = coil_text(compiled)
    assert "attention(" in text and "matmul" not in text and "exp(" not in text


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tq", [1, 7, 33, 64])
def test_efficient_forward_pads_logsumexp_and_fills_rng_state(causal, tq):
    q, k, v = rand(2, 4, tq, 16, seed=1), rand(2, 2, 40, 16, seed=2), rand(2, 2, 40, 16, seed=3)
    bias = rand(2, 4, tq, 40, seed=5)
    inputs = {"q": q, "k": k, "v": v, "bias": bias}
    gm, want = build(EFF, inputs, ["q", "k", "v", "bias", True, 0.0, causal], {}, [0, 1, 2, 3])
    compiled, got = compile_and_run(gm, inputs)
    assert "attention(" in coil_text(compiled)
    close(got[0], want[0])
    assert got[1].shape == (2, 4, (tq + 31) // 32 * 32)
    close(got[1], want[1])  # the padding is +inf, as the CUDA kernel writes it
    # the RNG state: a dtype coil lacks, made by the callable (zeros), not by coil
    assert got[2].dtype == torch.int16 and got[2].shape == (2,) and not got[2].any()
    assert got[3].dtype == torch.int16 and got[3].shape == ()


def test_efficient_forward_without_logsumexp():
    q, k, v = rand(1, 2, 5, 16, seed=1), rand(1, 2, 6, 16, seed=2), rand(1, 2, 6, 16, seed=3)
    inputs = {"q": q, "k": k, "v": v}
    gm, want = build(EFF, inputs, ["q", "k", "v", None, False], {}, [0, 1])
    compiled, got = compile_and_run(gm, inputs)
    close(got[0], want[0])
    assert got[1].shape == (1, 2, 0)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_cuda_forward(causal):
    q, k, v = rand(2, 4, 33, 64, seed=1), rand(2, 4, 33, 64, seed=2), rand(2, 4, 33, 64, seed=3)
    inputs = {"q": q, "k": k, "v": v}
    gm, want = build(FLASH, inputs, ["q", "k", "v", 0.0, causal], {"scale": 0.2},
                     [0, 1, 6, 7])
    compiled, got = compile_and_run(gm, inputs)
    assert "attention(" in coil_text(compiled)
    close(got[0], want[0])
    close(got[1], want[1])
    assert got[2].dtype == torch.int64 and got[2].shape == ()


def test_cudnn_forward_with_bias_and_trailing_lse_dim():
    q, k, v = rand(1, 4, 9, 64, seed=1), rand(1, 4, 9, 64, seed=2), rand(1, 4, 9, 64, seed=3)
    bias = rand(1, 1, 9, 9, seed=5)
    inputs = {"q": q, "k": k, "v": v, "bias": bias}
    gm, want = build(CUDNN, inputs, ["q", "k", "v", "bias", True, 0.0, True], {}, [0, 1])
    compiled, got = compile_and_run(gm, inputs)
    assert "attention(" in coil_text(compiled)
    close(got[0], want[0])
    assert got[1].shape == (1, 4, 9, 1)
    close(got[1], want[1])


@pytest.mark.parametrize("tq,tk", [(1, 7), (7, 40), (40, 7)])
def test_cudnn_non_square_causal_is_top_left(tq, tk):
    """The dense cuDNN kernel's is_causal is torch's top-left triangle (cudnn-frontend's
    causal mask), coil's own: forward and backward compile with no fallback (torch 2.11 picks
    cuDNN for bf16 decoding rows, Tq 1 against Tk 7 among test_sdpa_torch2.py's cases)."""
    q, k, v = rand(1, 2, tq, 16, seed=1), rand(1, 2, tk, 16, seed=2), rand(1, 2, tk, 16, seed=3)
    inputs = {"q": q, "k": k, "v": v}
    gm, want = build(CUDNN, inputs, ["q", "k", "v", None, True, 0.0, True], {}, [0, 1])
    compiled, got = compile_and_run(gm, inputs)
    assert "attention(" in coil_text(compiled)
    close(got[0], want[0])
    close(got[1], want[1])
    out, lse = want[0], want[1]
    dout = rand(1, 2, tq, 16, seed=9)
    binputs = {"do": dout, "q": q, "k": k, "v": v, "o": out, "lse": lse,
               "seed": torch.zeros((), dtype=torch.int64),
               "off": torch.zeros((), dtype=torch.int64), "bias": torch.zeros(0)}
    gm, want = build(CUDNN_BW, binputs, ["do", "q", "k", "v", "o", "lse", "seed", "off", "bias",
                                         None, None, tq, tk, 0.0, True], {}, [0, 1, 2])
    compiled, got = compile_and_run(gm, binputs)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-3, atol=1e-4)


def test_dropout_and_non_square_flash_causal_stay_in_eager():
    q, k, v = rand(1, 2, 5, 16, seed=1), rand(1, 2, 6, 16, seed=2), rand(1, 2, 6, 16, seed=3)
    inputs = {"q": q, "k": k, "v": v}
    for target, args in [(CPU, ["q", "k", "v", 0.1, False]), (FLASH, ["q", "k", "v", 0.0, True])]:
        gm, want = build(target, inputs, args, {}, [0])
        seen = []
        real = fx_compile._log_fallback
        fx_compile._log_fallback = lambda what, why: seen.append(f"{what}: {why}")
        try:
            node = next(n for n in gm.graph.nodes if n.op == "call_function")
            L = lowering.Lowering(__import__("coil").Graph())
            with pytest.raises(lowering.Unsupported, match="dropout_p=0.1|Tq 5 != Tk 6"):
                vals = {"q": q, "k": k, "v": v}
                L_args = []
                for a in args:
                    L_args.append(lowering.Value(L.g.input(a, fx_compile._type_text(
                        vals[a].shape, vals[a].dtype))) if isinstance(a, str) else a)
                lowering.ROWS[str(target)](L, node, L_args, {})
        finally:
            fx_compile._log_fallback = real


def _backward_case(shape, causal, mask_kind, seed=0):
    b, h, hkv, tq, tk, d = shape
    q, k, v = rand(b, h, tq, d, seed=1), rand(b, hkv, tk, d, seed=2), rand(b, hkv, tk, d, seed=3)
    mask = _mask(mask_kind, b, h, tq, tk, seed=4)
    out, lse = ref_attention(q, k, v, mask, causal)
    dout = rand(b, h, tq, d, seed=6)
    return q, k, v, mask, out.float(), lse.float(), dout


@pytest.mark.parametrize("shape,causal,mask", COMBOS, ids=COMBO_IDS)
def test_cpu_flash_backward(shape, causal, mask):
    q, k, v, m, out, lse, dout = _backward_case(shape, causal, mask)
    inputs = {"do": dout, "q": q, "k": k, "v": v, "o": out, "lse": lse}
    kwargs = {}
    if m is not None:
        inputs["m"] = m
        kwargs["attn_mask"] = "m"
    gm, want = build(CPU_BW, inputs, ["do", "q", "k", "v", "o", "lse", 0.0, causal], kwargs,
                     [0, 1, 2])
    compiled, got = compile_and_run(gm, inputs)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-3, atol=1e-4)
    # three attention_grad nodes (the CPU's flash backward): no score matrix written out
    text = coil_text(compiled)
    assert text.count("attention_grad(") == 3 and "matmul" not in text, text


def test_bf16_backward_computes_in_f32():
    q, k, v, _, out, lse, dout = _backward_case((1, 4, 2, 7, 9, 16), True, None)
    q, k, v, out, dout = (t.bfloat16() for t in (q, k, v, out, dout))
    inputs = {"do": dout, "q": q, "k": k, "v": v, "o": out, "lse": lse}
    gm, want = build(CPU_BW, inputs, ["do", "q", "k", "v", "o", "lse", 0.0, True], {},
                     [0, 1, 2])
    compiled, got = compile_and_run(gm, inputs)
    for g, w in zip(got, want):
        close(g, w, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_cuda_backward(causal):
    q, k, v, _, out, lse, dout = _backward_case((2, 4, 2, 33, 33, 64), causal, None)
    inputs = {"do": dout, "q": q, "k": k, "v": v, "o": out, "lse": lse,
              "seed": torch.zeros((), dtype=torch.int64), "off": torch.zeros((), dtype=torch.int64)}
    gm, want = build(FLASH_BW, inputs, ["do", "q", "k", "v", "o", "lse", None, None, 33, 33, 0.0,
                                        causal, "seed", "off"], {}, [0, 1, 2])
    compiled, got = compile_and_run(gm, inputs)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_cudnn_backward(bias, causal):
    """cuDNN's backward (torch 2.x picks cuDNN attention for bf16 on the H100/H200): its
    logsumexp has a trailing dim of 1 and its attn_bias is an empty tensor when there is none."""
    q, k, v, m, out, lse, dout = _backward_case((2, 4, 2, 9, 9, 64), causal,
                                                "float" if bias else None)
    inputs = {"do": dout, "q": q, "k": k, "v": v, "o": out, "lse": lse.unsqueeze(-1),
              "seed": torch.zeros((), dtype=torch.int64), "off": torch.zeros((), dtype=torch.int64),
              "bias": m.expand(2, 4, 9, 9) if bias else torch.zeros(0)}
    gm, want = build(CUDNN_BW, inputs, ["do", "q", "k", "v", "o", "lse", "seed", "off", "bias",
                                        None, None, 9, 9, 0.0, causal], {}, [0, 1, 2])
    compiled, got = compile_and_run(gm, inputs)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("bias_grad", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_efficient_backward(bias_grad, causal):
    q, k, v, bias, out, lse, dout = _backward_case((2, 4, 2, 7, 40, 16), causal, "float")
    bias = bias.expand(2, 4, 7, 40)
    pad = torch.full((2, 4, 25), math.inf)
    inputs = {"do": dout, "q": q, "k": k, "v": v, "bias": bias, "o": out,
              "lse": torch.cat([lse, pad], 2), "seed": torch.zeros(2, dtype=torch.int16),
              "off": torch.zeros((), dtype=torch.int16)}
    gm, want = build(EFF_BW, inputs, ["do", "q", "k", "v", "bias", "o", "lse", "seed", "off",
                                      0.0, [True, True, True, bias_grad], causal], {},
                     [0, 1, 2, 3] if bias_grad else [0, 1, 2])
    compiled, got = compile_and_run(gm, inputs)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_forward_then_backward_matches_autograd(dtype):
    """The forward's logsumexp (coil's attention_lse) feeding the backward row."""
    shape = (2, 4, 2, 64, 127, 16)
    b, h, hkv, tq, tk, d = shape
    q, k, v = (rand(b, h, tq, d, seed=1, dtype=dtype), rand(b, hkv, tk, d, seed=2, dtype=dtype),
               rand(b, hkv, tk, d, seed=3, dtype=dtype))
    inputs = {"q": q, "k": k, "v": v}
    gm, _ = build(CPU, inputs, ["q", "k", "v", 0.0, True], {}, [0, 1])
    compiled, (out, lse) = compile_and_run(gm, inputs)
    text = coil_text(compiled)
    assert "attention_lse(" in text and "matmul" not in text, text
    dout = rand(b, h, tq, d, seed=9, dtype=dtype)
    binputs = {"do": dout, "q": q, "k": k, "v": v, "o": out, "lse": lse}
    gm, _ = build(CPU_BW, binputs, ["do", "q", "k", "v", "o", "lse", 0.0, True], {}, [0, 1, 2])
    _, got = compile_and_run(gm, binputs)
    want = ref_grads(dout, q, k, v, None, True, None)
    for g, w in zip(got, want):
        close(g, w, rtol=1e-3, atol=1e-4)


def _cuda_probe(gm):
    """The Triton module coil's CUDA code generator writes for the graph (generated, neither
    written to disk nor loaded: no GPU needed)."""
    c = fx_compile.CoilGraphCallable(gm, OPTIONS, device="cuda", probe=True)
    return c.graph.generate_gpu_module()[0]


@pytest.mark.parametrize("kind,dtype", [("efficient", torch.float32), ("flash", torch.bfloat16),
                                         ("flash", torch.float16), ("cpu_masked", torch.float32),
                                         ("cudnn", torch.bfloat16)])
def test_cuda_codegen_takes_forward_and_backward(kind, dtype):
    """The graphs the CUDA rows build (the attention op with masks and the top-left triangle,
    attention_lse and attention_grad with grouped heads) generate Triton modules: the flash
    templates, forward and backward (the gradient of q's kernel, and those of k and v from one
    kernel after the delta kernel)."""
    b, h, hkv, tq, tk, d = 2, 4, 2, 7, 40, 16
    if kind in ("flash", "cudnn"):
        tk = tq
    q, k, v = (rand(b, h, tq, d, seed=1, dtype=dtype), rand(b, hkv, tk, d, seed=2, dtype=dtype),
               rand(b, hkv, tk, d, seed=3, dtype=dtype))
    if kind == "efficient":
        bias = rand(b, h, tq, tk, seed=5)
        inputs = {"q": q, "k": k, "v": v, "bias": bias}
        gm, fw = build(EFF, inputs, ["q", "k", "v", "bias", True, 0.0, True], {}, [0, 1, 2, 3])
        assert "fused_attention" in _cuda_probe(gm)
        binputs = {"do": fw[0], "q": q, "k": k, "v": v, "bias": bias, "o": fw[0], "lse": fw[1],
                   "seed": fw[2], "off": fw[3]}
        gm, _ = build(EFF_BW, binputs, ["do", "q", "k", "v", "bias", "o", "lse", "seed", "off",
                                        0.0, [True, True, True, True], True], {}, [0, 1, 2, 3])
    elif kind == "flash":
        inputs = {"q": q, "k": k, "v": v}
        gm, fw = build(FLASH, inputs, ["q", "k", "v", 0.0, True], {}, [0, 1, 6, 7])
        assert "fused_attention" in _cuda_probe(gm)
        binputs = {"do": fw[0], "q": q, "k": k, "v": v, "o": fw[0], "lse": fw[1], "seed": fw[2],
                   "off": fw[3]}
        gm, _ = build(FLASH_BW, binputs, ["do", "q", "k", "v", "o", "lse", None, None, tq, tk,
                                          0.0, True, "seed", "off"], {}, [0, 1, 2])
    elif kind == "cudnn":  # bf16 SDPA on the H100/H200 (torch 2.11 picks cuDNN there)
        bias = rand(b, h, tq, tk, seed=5, dtype=dtype)
        inputs = {"q": q, "k": k, "v": v, "bias": bias}
        gm, fw = build(CUDNN, inputs, ["q", "k", "v", "bias", True, 0.0, True], {}, [0, 1])
        assert "fused_attention" in _cuda_probe(gm)
        binputs = {"do": fw[0], "q": q, "k": k, "v": v, "o": fw[0], "lse": fw[1],
                   "seed": torch.zeros((), dtype=torch.int64),
                   "off": torch.zeros((), dtype=torch.int64), "bias": bias}
        gm, _ = build(CUDNN_BW, binputs, ["do", "q", "k", "v", "o", "lse", "seed", "off", "bias",
                                          None, None, tq, tk, 0.0, True], {}, [0, 1, 2])
    else:
        m = _mask("bool", b, h, tq, tk, seed=4)
        inputs = {"q": q, "k": k, "v": v, "m": m}
        gm, fw = build(CPU, inputs, ["q", "k", "v", 0.0, True], {"attn_mask": "m"}, [0, 1])
        assert "fused_attention" in _cuda_probe(gm)
        binputs = {"do": fw[0], "q": q, "k": k, "v": v, "o": fw[0], "lse": fw[1], "m": m}
        gm, _ = build(CPU_BW, binputs, ["do", "q", "k", "v", "o", "lse", 0.0, True],
                      {"attn_mask": "m"}, [0, 1, 2])
    src = _cuda_probe(gm)
    assert "@triton.jit" in src and not re.search(r"tem_fused_attention_\d", src)
    if kind != "efficient":
        # The backward templates: dq's kernel, delta's and dk + dv's (grad_kv: the bridge's
        # three attention_grad nodes read the same operands), no matmul.
        grads = re.findall(r"kernel='(grad_\w+|delta)'", src)
        assert sorted(grads) == ["delta", "grad_kv", "grad_q"], grads
        assert len(re.findall(r"def triton_tem_fused_attention_grad\w*\(", src)) == 3
        assert "torch.mm" not in src and "torch.matmul" not in src
    else:  # the bridge writes the whole backward out for the attn_bias gradient (dS itself)
        assert "kernel='grad_" not in src
