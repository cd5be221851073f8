#!/usr/bin/env python3
"""A Llama-style decode step with a preallocated KV cache written in place, through
coil.torch.compile against eager, on the CPU (issue 24; works on torch 1.13 and 2.x).

The model (random weights): --layers decoder layers of RMSNorm, attention with grouped-query
heads (--heads query heads, --kv-heads key/value heads, head dim 64) and rotary embeddings
computed from a position tensor, SwiGLU; tied embedding and output. Each step takes one token
and its position (a 1-element tensor) and writes the new key and value into per-layer caches
[1, Hkv, --max-len, 64] at that position (`cache.index_copy_(2, pos, k)`); attention reads the
whole cache under a mask of the positions <= pos. So every step has the same shapes: one trace
and one compile serve every position (counted below), where a cache grown by torch.cat changes
shape at each token.

Prints the compile count, the first call's time (trace + compile), the per-token median and
p90 of --tokens greedy steps for eager and coil, and whether the tokens and the last logits
agree.

  PYTHONPATH=python /usr/bin/python3 bench/decode_inplace_cache.py [--threads 2] [--tokens 64]
"""

import argparse
import statistics
import sys
import time

import torch

import coil
import coil.torch as coil_torch

HEAD_DIM = 64


class Decoder(torch.nn.Module):
    def __init__(self, vocab, dim, layers, heads, kv_heads, hidden, max_len):
        super().__init__()
        g = torch.Generator().manual_seed(0)

        def w(*shape):
            return torch.nn.Parameter(torch.randn(*shape, generator=g) * shape[-1] ** -0.5)
        self.heads, self.kv_heads, self.max_len = heads, kv_heads, max_len
        self.emb = w(vocab, dim)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            m = torch.nn.Module()
            m.wq, m.wk = w(heads * HEAD_DIM, dim), w(kv_heads * HEAD_DIM, dim)
            m.wv, m.wo = w(kv_heads * HEAD_DIM, dim), w(dim, heads * HEAD_DIM)
            m.w1, m.w3, m.w2 = w(hidden, dim), w(hidden, dim), w(dim, hidden)
            m.n1 = torch.nn.Parameter(torch.ones(dim))
            m.n2 = torch.nn.Parameter(torch.ones(dim))
            self.layers.append(m)
        self.norm = torch.nn.Parameter(torch.ones(dim))
        self.inv_freq = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))

    @staticmethod
    def rms(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight

    @staticmethod
    def rotate(x, cos, sin):  # x [1, H, 1, D]
        x1, x2 = x[..., : HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)

    def forward(self, token, pos, *caches):
        """token [1, 1] int64, pos [1] int64; caches: k and v per layer, written at pos."""
        x = torch.nn.functional.embedding(token, self.emb)  # [1, 1, dim]
        angle = pos.float()[:, None] * self.inv_freq[None, :]  # [1, D / 2]
        cos, sin = angle.cos(), angle.sin()
        visible = (torch.arange(self.max_len) <= pos).view(1, 1, 1, self.max_len)
        group = self.heads // self.kv_heads
        for i, m in enumerate(self.layers):
            kc, vc = caches[2 * i], caches[2 * i + 1]
            h = self.rms(x, m.n1)
            q = (h @ m.wq.t()).view(1, 1, self.heads, HEAD_DIM).transpose(1, 2)
            k = (h @ m.wk.t()).view(1, 1, self.kv_heads, HEAD_DIM).transpose(1, 2)
            v = (h @ m.wv.t()).view(1, 1, self.kv_heads, HEAD_DIM).transpose(1, 2)
            q, k = self.rotate(q, cos, sin), self.rotate(k, cos, sin)
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v)
            # grouped-query heads as Llama's repeat_kv does it (expand + reshape)
            kx = kc[:, :, None].expand(1, self.kv_heads, group, self.max_len, HEAD_DIM).reshape(
                1, self.heads, self.max_len, HEAD_DIM)
            vx = vc[:, :, None].expand(1, self.kv_heads, group, self.max_len, HEAD_DIM).reshape(
                1, self.heads, self.max_len, HEAD_DIM)
            s = (q @ kx.transpose(2, 3)) * HEAD_DIM ** -0.5
            s = s.masked_fill(~visible, float("-inf"))
            a = (s.softmax(-1) @ vx).transpose(1, 2).reshape(1, 1, -1)
            x = x + a @ m.wo.t()
            h = self.rms(x, m.n2)
            x = x + (torch.nn.functional.silu(h @ m.w1.t()) * (h @ m.w3.t())) @ m.w2.t()
        return self.rms(x, self.norm) @ self.emb.t()  # [1, 1, vocab]


def generate(step, caches, tokens, first):
    token, out, times = torch.tensor([[first]]), [], []
    for p in range(tokens):
        t0 = time.perf_counter()
        logits = step(token, torch.tensor([p]), *caches)
        times.append(time.perf_counter() - t0)
        token = logits[:, -1].argmax(-1, keepdim=True)
        out.append(int(token))
    return out, logits, times


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--max-len", type=int, default=256)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    coil.set_num_threads(a.threads)
    model = Decoder(a.vocab, a.dim, a.layers, a.heads, a.kv_heads, 4 * a.dim * 2 // 3 // 64 * 64,
                    a.max_len).eval()
    params = sum(t.numel() for t in model.parameters())

    def caches():
        return [torch.zeros(1, a.kv_heads, a.max_len, HEAD_DIM) for _ in range(2 * a.layers)]

    compiled = coil_torch.compile(model)
    print(f"torch {torch.__version__}, {a.threads} threads, {a.layers} layers, dim {a.dim}, "
          f"{a.heads}/{a.kv_heads} heads, {params / 1e6:.1f}M parameters, cache {a.max_len}")
    with torch.no_grad():
        eager_tokens, eager_logits, eager_times = generate(model, caches(), a.tokens, 1)
        t0 = time.perf_counter()
        compiled(torch.tensor([[1]]), torch.tensor([0]), *caches())
        first_call = time.perf_counter() - t0
        coil_tokens, coil_logits, coil_times = generate(compiled, caches(), a.tokens, 1)
    traces = len(compiled.per_signature.traces)
    for label, times in (("eager", eager_times), ("coil", coil_times)):
        times = sorted(times[1:])  # (coil's first step of this loop is warm already)
        print(f"{label:>6}: per token median {statistics.median(times) * 1e3:.2f} ms, "
              f"p90 {times[int(0.9 * (len(times) - 1))] * 1e3:.2f} ms")
    print(f"coil: {traces} trace(s) for {a.tokens + 1} steps; first call {first_call:.2f} s")
    print(f"tokens equal: {eager_tokens == coil_tokens}; last logits max diff "
          f"{(eager_logits - coil_logits).abs().max().item():.2e}")
    return 0 if eager_tokens == coil_tokens else 1


if __name__ == "__main__":
    sys.exit(main())
