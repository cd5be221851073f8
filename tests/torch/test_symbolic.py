"""Graphs with symbolic sizes (torch's SymInts) through coil.torch: one size-generic coil model
where the graph lowers with its sizes symbolic, else a compile per size (python/coil/torch/
symbolic.py, per_size.py). Every result is compared with eager at several sizes, 1 and 2
included (coil specializes sizes 0 and 1; torch traces them as constants).

torch 1.13 has no Dynamo: its graphs come from make_fx(tracing_mode="symbolic"), where every
input dim is a symbol. torch 2.x (the GPU machine's host: tests/torch/run_torch2.sh) also runs
torch.compile(backend="coil") with dynamic=True and with automatic dynamic shapes."""

import os
import re

import pytest
import sympy
import torch
import torch.nn.functional as F

from coil.torch import fx_compile
from coil.torch.lowering import Unsupported
from coil.torch.per_size import PerSizeCallable
from coil.torch.symbolic import SymDim, Symbols

OPTIONS = {"autotune": False}
HAS_DYNAMO = hasattr(torch, "compile")


def _symbolic_fx(fn, *args):
    from torch.fx.experimental.proxy_tensor import make_fx
    return make_fx(fn, tracing_mode="symbolic")(*args)


def _modules(cache_dir):
    """The compiled modules (shared objects) in a coil code cache directory."""
    found = []
    for root, _, files in os.walk(cache_dir):
        found += [f for f in files if f.endswith(".so")]
    return found


def _close(got, want):
    got = got if isinstance(got, (tuple, list)) else [got]
    want = want if isinstance(want, (tuple, list)) else [want]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            assert g.shape == w.shape, (g.shape, w.shape)
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        else:
            assert g == w and type(g) is type(w), (g, w)


# ---- SymDim: arithmetic passes, decisions that need a value refuse -----------------------------

def test_symdim_arithmetic_and_decisions():
    syms = Symbols()
    a, b = sympy.Symbol("s0", positive=True, integer=True), sympy.Symbol("t0.size(1)")
    s0, s1 = SymDim.of(a, syms), SymDim.of(b, syms)
    assert s0.symbol_name == "s0" and s1.symbol_name == "s1"  # 1.13's names renamed
    assert (s0 * 4).text == "4*s0" and (s0 * 4).symbol_name is None
    assert (2 * s0 - s0).symbol_name == "s0"
    assert (s0 * s1 // s1).same(s0)
    assert (s0 - s0) == 0 and type(s0 - s0) is int
    assert s0 == s0 and s0 != 1 and s0 != 0 and (s0 * s1) != 1  # a symbol is >= 2
    assert s0 > 1 and s0 >= 2 and s0 < 2**62 and not s0 < 1
    for decide in (lambda: s0 == 3, lambda: s0 == s1, lambda: int(s0), lambda: s0 > 2,
                   lambda: range(s0), lambda: s0 < 100, lambda: float(s0)):
        with pytest.raises(Unsupported, match="symbolic size"):
            decide()
    assert s0.parse("2*s0").same(s0 * 2) and s0.parse("64") == 64
    assert s0.parse("s0*s1").same(s0 * s1)
    assert s0.evaluate({"s0": 7}) == 7 and (s0 * s1 + 1).evaluate({"s0": 3, "s1": 5}) == 16


def test_assume_equal_makes_one_symbol_stand_for_two():
    """attention's key and value lengths are one size for eager, two symbols in Dynamo's graph
    (SameSize): the later symbol becomes an alias of the earlier; a size equal to a number or
    to another expression is never assumed (compiled per size instead)."""
    from coil.torch.symbolic import SameSize, require_same
    syms = Symbols()
    a, b, c = (sympy.Symbol(n, positive=True, integer=True) for n in ("s0", "s66", "s7"))
    s0, s66, s7 = (SymDim.of(x, syms) for x in (a, b, c))
    with pytest.raises(SameSize, match="s0 \\+ 1 and s66 \\+ 1|s0\\+1 and s66\\+1"):
        require_same("key and value", s0 + 1, s66 + 1)
    require_same("same", s0 * 2, 2 * s0)  # provably equal: nothing raised
    require_same("a number", s0, 5)  # int against symbol: coil's own type check decides
    assert syms.assume_equal(s0 + 1, s66 + 1)
    assert SymDim.of(b + 3, syms).same(s0 + 3) and SymDim.of(b, syms).symbol_name == "s0"
    assert not syms.assume_equal(s7, s0 * s0)  # s7 would be an expression: refused
    assert not syms.assume_equal(s7, 5)
    assert SymDim.of(c, syms).symbol_name == "s7"


# ---- torch 1.13 and 2.x: make_fx's symbolic graphs ---------------------------------------------

def _mlp(x, w, v):
    n = x.shape[0]
    y = torch.relu(x @ w) + 1
    return (y.view(-1), y.sum(1), torch.softmax(y, -1), torch.log_softmax(y, 0), n * 2,
            y.amax(-1, keepdim=True), (y.t() @ y).mean(), y @ v)


def test_size_generic_model_serves_every_size(tmp_path, monkeypatch):
    """A graph whose sizes stay symbolic becomes one size-generic coil model: right at every
    size, and the sizes other than 0/1 share one compiled module."""
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    args = [torch.randn(5, 8), torch.randn(8, 6), torch.randn(6, 3)]
    gm = _symbolic_fx(_mlp, *args)
    compiled = fx_compile.compile_fx(gm, args, OPTIONS)
    assert isinstance(compiled, fx_compile.CoilGraphCallable) and compiled.size_generic
    text = compiled.graph.to_text()
    # (torch 2.x keeps its symbol names, s75 ...; 1.13's become s0, s1, ...)
    assert re.search(r"input in0: f32\[s\d+, s\d+\]", text) and "shape=[-1]" in text, text
    for n in (5, 7, 13, 2, 1):
        x = torch.randn(n, 8)
        _close(compiled(x, args[1], args[2]), _mlp(x, args[1], args[2]))
    # the output's size n * 2 is an int of this call's n
    assert compiled(torch.randn(11, 8), args[1], args[2])[4] == 22
    # a second feature size (s1) is the same module too
    x, w = torch.randn(9, 12), torch.randn(12, 6)
    _close(compiled(x, w, args[2]), _mlp(x, w, args[2]))
    # one module for every size, and one for n = 1 (coil's 0/1 rule); y.t() @ y reduces over
    # the symbolic n (the matmul template's k prints as the symbol)
    assert len(_modules(tmp_path)) == 2


def test_sizes_cross_checked_between_inputs():
    """x @ w binds both of w's dims to symbols; a call whose sizes disagree is coil's error
    naming the input, not a wrong answer."""
    args = [torch.randn(5, 8), torch.randn(8, 6), torch.randn(6, 3)]
    compiled = fx_compile.compile_fx(_symbolic_fx(_mlp, *args), args, OPTIONS)
    with pytest.raises(Exception, match="in1|dim"):
        compiled(torch.randn(5, 8), torch.randn(9, 6), args[2])


def _merge_heads(x):
    b, h, t, d = x.shape
    y = x.transpose(1, 2).reshape(b, t, h * d)  # b, t and an inferred h*d
    mask = torch.ones(t, t).expand(b, t, t) * 2  # a full and an expand of symbolic sizes
    return y, mask + y.sum(-1, keepdim=True)


def test_views_with_several_symbols_stay_one_model(tmp_path, monkeypatch):
    """Reshape, full and expand to targets of several symbols become coil's `sizes` text (the
    symbols by name, an expression of them inferred): one size-generic model."""
    from coil.torch.lowering import DECOMPOSITIONS
    from torch.fx.experimental.proxy_tensor import make_fx
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path))
    x = torch.randn(2, 3, 5, 4)
    gm = make_fx(_merge_heads, decomposition_table=DECOMPOSITIONS, tracing_mode="symbolic")(x)
    compiled = fx_compile.compile_fx(gm, [x], OPTIONS)
    assert isinstance(compiled, fx_compile.CoilGraphCallable) and compiled.size_generic
    text = compiled.graph.to_text()
    b, _, t, _ = re.search(r"input in0: f32\[(s\d+), (s\d+), (s\d+), (s\d+)\]", text).groups()
    assert f'sizes="{b}, {t}, -1"' in text and f'sizes="{t}, {t}"' in text, text
    for shape in ((2, 3, 5, 4), (3, 2, 7, 5), (1, 3, 9, 2), (4, 4, 2, 3), (2, 5, 11, 3)):
        x = torch.randn(*shape)
        _close(compiled(x), _merge_heads(x))
    assert len(_modules(tmp_path)) == 2  # b = 1 has its own


def _heads_of_cache(x):
    # [s] -> [s, 8] -> [1, 4, s, 2]: integer sizes other than 1 before the one symbol (a decode
    # step's view of its KV cache); finding the symbol must not compare it with them
    y = x.unsqueeze(1) * torch.arange(8.0)
    return y.view(1, 4, x.shape[0], 2) * 2


def test_view_with_one_symbol_after_integer_sizes_is_size_generic():
    x = torch.randn(6)
    compiled = fx_compile.compile_fx(_symbolic_fx(_heads_of_cache, x), [x], OPTIONS)
    assert isinstance(compiled, fx_compile.CoilGraphCallable) and compiled.size_generic
    for n in (6, 9, 2, 17):
        x = torch.randn(n)
        _close(compiled(x), _heads_of_cache(x))


def _split_heads(x, w):
    b = x.shape[0]
    h = (x @ w).view(b, 2, -1)  # the -1 is s1 // 2: not an exact quotient of the sizes
    return h.sum(1), torch.relu(h).amax(-1)


def test_per_size_compile_where_a_size_is_not_symbolic_enough():
    torch.manual_seed(1)
    args = [torch.randn(5, 8), torch.randn(8, 6)]
    compiled = fx_compile.compile_fx(_symbolic_fx(_split_heads, *args), args, OPTIONS)
    assert isinstance(compiled, PerSizeCallable)
    for n, k in ((5, 6), (3, 10), (5, 6), (1, 4), (3, 10)):
        x, w = torch.randn(n, 8), torch.randn(8, k)
        _close(compiled(x, w), _split_heads(x, w))
    assert len(compiled.compiled) == 3  # one compile per distinct tuple of sizes


def test_per_size_compiles_stay_bounded(monkeypatch):
    """Only the most recently used sizes stay loaded; one that comes back compiles again (a
    cache load) and is still right."""
    monkeypatch.setattr(PerSizeCallable, "MAX_SIZES", 2)
    args = [torch.randn(5, 8), torch.randn(8, 6)]
    compiled = fx_compile.compile_fx(_symbolic_fx(_split_heads, *args), args, OPTIONS)
    assert isinstance(compiled, PerSizeCallable)
    for n, k in ((5, 6), (3, 10), (7, 2), (5, 6), (3, 10)):
        x, w = torch.randn(n, 8), torch.randn(8, k)
        _close(compiled(x, w), _split_heads(x, w))
        assert len(compiled.compiled) <= 2
    assert [key[0][0] for key in compiled.compiled] == [(5, 8), (3, 8)]


def test_per_size_graph_keeps_its_inputs_writes_single():
    """The per-size path runs the graph once to learn its sizes: on copies, so an input written
    in place (copy_) is written once per call."""
    def fn(x, buf):
        buf.copy_(x * 2)
        return buf.view(x.shape[0], 2, -1).sum(1)
    x, buf = torch.randn(4, 6), torch.zeros(4, 6)
    gm = _symbolic_fx(fn, x, buf)
    compiled = fx_compile.compile_fx(gm, [x, buf], OPTIONS)
    assert isinstance(compiled, PerSizeCallable)
    x, buf = torch.randn(6, 4), torch.zeros(6, 4)
    out = compiled(x, buf)
    torch.testing.assert_close(buf, x * 2)
    torch.testing.assert_close(out, (x * 2).view(6, 2, -1).sum(1))


# ---- torch 2.x: torch.compile with dynamic shapes ----------------------------------------------

class _Block(torch.nn.Module):
    """A pre-norm attention block written out (matmuls, a causal mask, softmax) and an MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        a = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5)
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        a = a.masked_fill(~mask, float("-inf")).softmax(-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def _record_compiles(monkeypatch):
    """Records what coil.torch's compile_fx returns for each graph torch.compile hands it."""
    import coil.torch as ct
    made = []
    real = ct.compile_fx

    def record(gm, example_inputs, options=None):
        out = real(gm, example_inputs, options)
        made.append(out)
        return out
    monkeypatch.setattr(ct, "compile_fx", record)
    return made


@pytest.mark.skipif(not HAS_DYNAMO, reason="torch 1.13 has no torch.compile (Dynamo); torch "
                    "2.x runs this (tests/torch/run_torch2.sh)")
@pytest.mark.parametrize("dynamic", [True, None])
def test_torch_compile_dynamic_runs_in_coil(dynamic, monkeypatch):
    """dynamic=True (sizes symbolic from the first call) and None (torch's automatic dynamic
    shapes: the second size recompiles with symbolic sizes): every sequence length runs in coil
    (never eager), forward and backward, and matches eager."""
    import coil.torch  # noqa: F401  (registers backend="coil")
    torch._dynamo.reset()
    made = _record_compiles(monkeypatch)
    torch.manual_seed(4)
    eager, mine = _Block(), _Block()
    mine.load_state_dict(eager.state_dict())
    compiled = torch.compile(mine, backend="coil", options=OPTIONS, dynamic=dynamic)
    for t in (7, 12, 5, 1, 12, 33):
        x = torch.randn(2, t, 32)
        xe, xc = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
        ye, yc = eager(xe), compiled(xc)
        torch.testing.assert_close(yc, ye, rtol=1e-4, atol=1e-4)
        ye.square().sum().backward()
        yc.square().sum().backward()
        torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-3, atol=1e-4)
    assert made and not any(isinstance(m, torch.fx.GraphModule) for m in made), made
    # Dynamo compiled few graphs: the symbolic ones serve every later length
    assert len(made) <= (4 if dynamic else 8), [type(m).__name__ for m in made]


class _DecodeStep(torch.nn.Module):
    """One step of a decoder with a KV cache (bench/gpu/llama_decode.py's shape of it): grouped
    query attention (repeat_interleave), the cache grown by cat, torch's fused SDPA."""

    def __init__(self, d=32, heads=4, kv_heads=2):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, d // heads
        self.wq = torch.nn.Linear(d, d, bias=False)
        self.wkv = torch.nn.Linear(d, 2 * kv_heads * self.hd, bias=False)
        self.wo = torch.nn.Linear(d, d, bias=False)

    def forward(self, x, cache_k, cache_v):
        b, t, d = x.shape
        q = self.wq(x).view(b, t, self.heads, self.hd).transpose(1, 2)
        kv = self.wkv(x).view(b, t, 2, self.kv_heads, self.hd).permute(2, 0, 3, 1, 4)
        k = torch.cat([cache_k, kv[0]], dim=2)
        v = torch.cat([cache_v, kv[1]], dim=2)
        rep = self.heads // self.kv_heads
        a = F.scaled_dot_product_attention(q, k.repeat_interleave(rep, dim=1),
                                           v.repeat_interleave(rep, dim=1), is_causal=t > 1)
        return x + self.wo(a.transpose(1, 2).reshape(b, t, d)), k, v


@pytest.mark.skipif(not HAS_DYNAMO, reason="torch 1.13 has no torch.compile (Dynamo) and no "
                    "scaled_dot_product_attention")
def test_kv_cache_decode_steps_share_one_model(monkeypatch):
    """Token-by-token decoding grows the cache by one each step: after the prompt and the first
    step, torch's automatic dynamic shapes hand coil a graph whose cache length is a symbol. On
    the CPU that graph must be one size-generic coil model (never a compile per length, never
    eager), and every step must match eager."""
    import coil.torch  # noqa: F401
    torch._dynamo.reset()
    made = _record_compiles(monkeypatch)
    torch.manual_seed(5)
    step = _DecodeStep().eval()
    compiled = torch.compile(step, backend="coil", options=OPTIONS)
    x = torch.randn(1, 9, 32)
    k = v = torch.zeros(1, 2, 0, 8)
    ke = ve = k
    with torch.no_grad():
        for i in range(8):
            ye, ke, ve = step(x, ke, ve)
            yc, k, v = compiled(x, k, v)
            torch.testing.assert_close(yc, ye, rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(k, ke)
            x = torch.randn(1, 1, 32)
    names = [type(m).__name__ for m in made]
    assert made and not any(isinstance(m, torch.fx.GraphModule) for m in made), names
    assert len(made) <= 3, names
    # Dynamo's second graph may make only one cache's length symbolic (the other's change is
    # seen a step later): coil compiles it for its one size; the last graph serves every length
    assert all(len(m.compiled) <= 1 for m in made if isinstance(m, PerSizeCallable)), names
    assert isinstance(made[-1], fx_compile.CoilGraphCallable) and made[-1].size_generic, names


class _Decoder(torch.nn.Module):
    """_DecodeStep stacked: each layer has its own KV cache, so torch gives every cache its own
    length symbol and coil unifies two per layer (24 for the 12 layers here)."""

    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList([_DecodeStep() for _ in range(layers)])

    def forward(self, x, *caches):
        out = []
        for i, layer in enumerate(self.layers):
            x, k, v = layer(x, caches[2 * i], caches[2 * i + 1])
            out += [k, v]
        return (x, *out)


@pytest.mark.skipif(not HAS_DYNAMO, reason="torch 1.13 has no torch.compile (Dynamo) and no "
                    "scaled_dot_product_attention")
def test_kv_cache_decode_with_many_layers_is_one_model(monkeypatch):
    """A 12-layer decoder's step: its 24 cache lengths are unified pair by pair (a bound of 8
    rounds once sent the 125M Llama to a compile per length, 1.5 s a token)."""
    import coil.torch  # noqa: F401
    torch._dynamo.reset()
    made = _record_compiles(monkeypatch)
    torch.manual_seed(6)
    model = _Decoder(12).eval()
    compiled = torch.compile(model, backend="coil", options=OPTIONS)
    x = torch.randn(1, 5, 32)
    caches = eager_caches = [torch.zeros(1, 2, 0, 8)] * 24
    with torch.no_grad():
        for i in range(6):
            ye, *eager_caches = model(x, *eager_caches)
            yc, *caches = compiled(x, *caches)
            torch.testing.assert_close(yc, ye, rtol=1e-4, atol=1e-5)
            x = torch.randn(1, 1, 32)
    names = [type(m).__name__ for m in made]
    assert isinstance(made[-1], fx_compile.CoilGraphCallable) and made[-1].size_generic, names


def _shifted(x):
    # a language model's shift: every position but the last, and every one but the first, with
    # the bounds computed from the symbolic size (x.shape[1] - 1), as torch code often does
    # (aten's slice: torch 1.13's symbolic tracing cannot take x[:, :n - 1])
    n, sl = x.shape[1], torch.ops.aten.slice.Tensor
    return sl(x, 1, 0, n - 1) * 2 + sl(x, 1, 1, n), sl(x, 1, n - 1, n) * 3, sl(x, 1, -1) + 1


def _shifted_by_3(x):
    n, sl = x.shape[1], torch.ops.aten.slice.Tensor
    return sl(x, 1, n - 3, n) * 3  # at n = 2, torch's start -1 wraps: not python's -3


def test_slices_at_the_size_minus_a_constant_are_size_generic(tmp_path, monkeypatch):
    """Bounds that are the size minus 0 or 1 (and python's -1) on a symbolic dim: one
    size-generic model, right at every size; minus 3 would clamp differently from torch's wrap
    at size 2: compiled per size."""
    monkeypatch.setenv("COIL_CACHE_DIR", str(tmp_path))
    x = torch.randn(2, 7)
    compiled = fx_compile.compile_fx(_symbolic_fx(_shifted, x), [x], OPTIONS)
    assert isinstance(compiled, fx_compile.CoilGraphCallable) and compiled.size_generic
    for shape in ((2, 7), (3, 4), (2, 9), (2, 3), (4, 12), (2, 2)):
        x = torch.randn(*shape)
        _close(compiled(x), _shifted(x))
    compiled = fx_compile.compile_fx(_symbolic_fx(_shifted_by_3, x), [x], OPTIONS)
    # torch 1.13's make_fx hands coil the start s1 - 3, which coil refuses on a symbolic dim:
    # compiled per size. torch 2.11's graph differs (coil makes one model of it): either way,
    # every size must match, the wrapping size 2 among them
    if not HAS_DYNAMO:
        assert isinstance(compiled, PerSizeCallable)
    for shape in ((2, 7), (3, 2), (1, 5), (2, 3)):
        x = torch.randn(*shape)
        _close(compiled(x), _shifted_by_3(x))
