"""A Llama-style decoder in plain torch generating tokens: prompt time and per-token latency of
eager, Inductor and coil (torch.compile(backend="coil")), with the graphs each compiled
(issue 24's decoding figures; docs/attention.md).

The model: RMSNorm, rotary embeddings, grouped-query attention through
F.scaled_dot_product_attention, a SwiGLU MLP; random weights. The KV cache grows by torch.cat at
every step, so the step's key length is new each time: torch.compile's automatic dynamic shapes
retrace it once with a symbolic length, and a backend that compiles that graph for every length
(coil: one size-generic model, python/coil/torch/symbolic.py) compiles the step once or twice in
all. Counted: the graphs torch.compile hands each backend (Dynamo's unique_graphs counter).

    python3 bench/gpu/llama_decode.py --device cpu --config 125m --prompt 512 --tokens 256
    python3 bench/gpu/llama_decode.py --device cuda --config 1b --backends eager,inductor,coil \\
        --mode reduce-overhead --json out.json

torch 2.x only (torch.compile). --check compares the generated tokens (greedy) and the last
logits of every backend with eager's, the prompt's logits (the same input for every backend),
and where tokens differ, the first such token and eager's top-2 logit margin at the step that
chose it (a margin within bf16's rounding of the logits: a rounding flip).
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

CONFIGS = {  # dim, layers, heads, kv_heads, hidden, vocab
    "tiny": (64, 2, 4, 2, 172, 256),
    "125m": (768, 12, 12, 4, 2048, 32000),
    "1b": (2048, 16, 32, 8, 5632, 32000),
}


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate(x, pos, theta=10000.0):
    """Rotary embedding of x [b, heads, t, d] at positions pos [t] (computed here: no table
    sliced at a symbolic offset)."""
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    ang = pos.to(torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


class Block(torch.nn.Module):
    def __init__(self, dim, heads, kv_heads, hidden):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, dim // heads
        self.wq = torch.nn.Linear(dim, dim, bias=False)
        self.wkv = torch.nn.Linear(dim, 2 * kv_heads * self.hd, bias=False)
        self.wo = torch.nn.Linear(dim, dim, bias=False)
        self.w13 = torch.nn.Linear(dim, 2 * hidden, bias=False)
        self.w2 = torch.nn.Linear(hidden, dim, bias=False)
        self.n1, self.n2 = RMSNorm(dim), RMSNorm(dim)

    def forward(self, x, pos, cache_k, cache_v):
        b, t, dim = x.shape
        h = self.n1(x)
        q = self.wq(h).view(b, t, self.heads, self.hd).transpose(1, 2)
        kv = self.wkv(h).view(b, t, 2, self.kv_heads, self.hd).permute(2, 0, 3, 1, 4)
        k, v = kv[0], kv[1]  # (not unpacked: torch 1.13's symbolic tracing cannot unbind)
        q, k = rotate(q, pos), rotate(k, pos)
        k, v = torch.cat([cache_k, k], dim=2), torch.cat([cache_v, v], dim=2)
        rep = self.heads // self.kv_heads
        kk = k.repeat_interleave(rep, dim=1)
        vv = v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, kk, vv, is_causal=t > 1)
        x = x + self.wo(a.transpose(1, 2).reshape(b, t, dim))
        g, u = self.w13(self.n2(x)).chunk(2, dim=-1)
        return x + self.w2(F.silu(g) * u), k, v


class Llama(torch.nn.Module):
    def __init__(self, dim, layers, heads, kv_heads, hidden, vocab):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads, kv_heads, hidden)
                                          for _ in range(layers))
        self.norm, self.out = RMSNorm(dim), torch.nn.Linear(dim, vocab, bias=False)
        self.kv_heads, self.hd = kv_heads, dim // heads

    def empty_cache(self, batch, device, dtype):
        z = torch.zeros(batch, self.kv_heads, 0, self.hd, device=device, dtype=dtype)
        return [z] * len(self.blocks), [z] * len(self.blocks)

    def forward(self, tokens, pos, ks, vs):
        x = self.emb(tokens)
        new_k, new_v = [], []
        for blk, ck, cv in zip(self.blocks, ks, vs):
            x, k, v = blk(x, pos, ck, cv)
            new_k.append(k)
            new_v.append(v)
        return self.out(self.norm(x[:, -1:])), new_k, new_v


def generate(step, model, prompt, tokens, sync, graphs=False):
    """Greedy: the prompt in one call, then one token per call. Returns (prompt seconds,
    per-token seconds, generated tokens, last logits, the prompt's logits, per position the
    margin of the top logit over the second: float32 [positions])."""
    ks, vs = model.empty_cache(prompt.shape[0], prompt.device, model.emb.weight.dtype)
    t0 = time.perf_counter()
    pos = torch.arange(prompt.shape[1], device=prompt.device)
    logits, ks, vs = step(prompt, pos, ks, vs)
    if graphs:  # the prompt's cache outlives the first step's replay
        ks, vs = [k.clone() for k in ks], [v.clone() for v in vs]
    sync()
    prompt_s = time.perf_counter() - t0
    nxt = logits.argmax(-1)
    first = logits.float().clone()
    margins = [margin(logits)]
    out, times = [nxt], []  # the prompt's token, then one per step
    for i in range(tokens):
        if graphs:  # reduce-overhead: this step may overwrite the last one's outputs
            torch.compiler.cudagraph_mark_step_begin()
        t0 = time.perf_counter()
        pos = torch.tensor([prompt.shape[1] + i], device=prompt.device)
        logits, ks, vs = step(nxt, pos, ks, vs)
        nxt = logits.argmax(-1)
        if graphs:  # the cache outlives the next replay
            ks, vs = [k.clone() for k in ks], [v.clone() for v in vs]
        sync()
        times.append(time.perf_counter() - t0)
        out.append(nxt)
        margins.append(margin(logits))
    return prompt_s, times, torch.cat(out, dim=1), logits, first, torch.stack(margins)


def margin(logits):
    """The top logit's lead over the second, per sequence (last position), float32."""
    top = logits[:, -1].float().topk(2, dim=-1).values
    return (top[:, 0] - top[:, 1]).cpu()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--config", default="125m", choices=sorted(CONFIGS))
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--backends", default="eager,inductor,coil")
    ap.add_argument("--mode", default=None, help="torch.compile mode (reduce-overhead on CUDA)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, a.dtype)
    model = Llama(*CONFIGS[a.config]).to(a.device, dtype).eval()
    for p in model.parameters():  # small weights: the logits stay O(1) through the layers
        torch.nn.init.normal_(p, std=0.02) if p.dim() > 1 else None
    params = sum(p.numel() for p in model.parameters())
    prompt = torch.randint(0, CONFIGS[a.config][5], (a.batch, a.prompt), device=a.device)
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    if "coil" in a.backends:
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "python"))
        import coil.torch  # noqa: F401
    results = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": a.device,
               "gpu": torch.cuda.get_device_name() if a.device == "cuda" else None,
               "cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0]
               .strip(": ") if os.path.exists("/proc/cpuinfo") else None,
               "threads": torch.get_num_threads(), "torch": torch.__version__,
               "config": a.config, "params": params, "dtype": a.dtype, "batch": a.batch,
               "prompt": a.prompt, "tokens": a.tokens, "mode": a.mode,
               "loadavg": os.getloadavg(), "backends": {}}
    print(f"{a.config}: {params / 1e6:.0f}M parameters, {a.dtype}, {a.device}, "
          f"{torch.get_num_threads()} threads, prompt {a.prompt}, {a.tokens} tokens")
    reference = None
    with torch.no_grad():
        for name in a.backends.split(","):
            torch._dynamo.reset()
            torch._dynamo.utils.counters.clear()
            step = model if name == "eager" else torch.compile(model, backend=name,
                                                               mode=a.mode)
            t0 = time.perf_counter()
            cuda_graphs = name != "eager" and a.mode == "reduce-overhead" and a.device == "cuda"
            prompt_s, times, toks, logits, first, margins = generate(
                step, model, prompt, a.tokens, sync, cuda_graphs)
            wall = time.perf_counter() - t0
            times.sort()
            row = {"prompt_s": prompt_s, "token_ms_median": 1e3 * times[len(times) // 2],
                   "token_ms_p90": 1e3 * times[int(len(times) * 0.9)],
                   "tokens_per_s": len(times) / sum(times), "wall_s": wall,
                   "graphs_compiled": int(torch._dynamo.utils.counters["stats"]
                                          ["unique_graphs"])}
            graphs = range(row["graphs_compiled"])
            if reference is None:
                reference = (toks, logits, first, margins)
            elif a.check:
                row["tokens_match_eager"] = bool((toks == reference[0]).all())
                row["last_logits_max_abs_diff"] = float((logits - reference[1]).abs().max())
                # Where greedy decoding parts from eager's, and by how much eager's own top
                # logit led at the step that chose it: a lead within the dtype's rounding of the logits (bf16:
                # ~2^-8 of their size) makes the split a rounding flip, not a wrong kernel.
                # The prompt's logits come from the same input for both, so they compare the
                # kernels directly.
                row["prompt_logits_max_abs_diff"] = float((first - reference[2]).abs().max())
                row["prompt_logits_max_abs"] = float(reference[2].abs().max())
                differ = (toks != reference[0]).any(dim=0).nonzero()
                if len(differ):
                    i = int(differ[0])
                    row["first_different_token"] = i
                    row["eager_top2_margin_there"] = float(reference[3][i].min())
            results["backends"][name] = row
            if a.json:  # after each backend: a run cut short keeps what it measured
                with open(a.json, "w") as f:
                    json.dump(results, f, indent=1)
            print(f"{name:9s} prompt {prompt_s * 1e3:9.1f} ms  token median "
                  f"{row['token_ms_median']:8.2f} ms  p90 {row['token_ms_p90']:8.2f} ms  "
                  f"graphs compiled {len(graphs)}  wall {wall:.1f} s" +
                  (f"  tokens match eager: {row['tokens_match_eager']}"
                   if "tokens_match_eager" in row else "") +
                  (f" (first different token {row['first_different_token']}, eager's top-2 "
                   f"margin there {row['eager_top2_margin_there']:.4f}; prompt logits "
                   f"{row['prompt_logits_max_abs_diff']:.4f} apart of "
                   f"{row['prompt_logits_max_abs']:.2f})" if "first_different_token" in row
                   else ""), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
