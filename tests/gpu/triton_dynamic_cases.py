"""The graphs of the size-generic Triton run (issue 20's GPU part): each compiled ONCE with its
sizes unbound (tests/gpu/prepare_triton_dynamic.py, on the build machine), then run at every
size of `sizes` on the GPU (tests/gpu/test_triton_dynamic.py) against torch.

A case: the coil graph, its inputs as (name, shape) with size symbols as strings, the sizes to
run (one value per symbol, in `symbols` order), and `reference(sizes, *inputs)` in torch
(float64). Shared by both scripts so that the graph and its reference live in one place."""

import math

SIZES = [1, 2, 3, 7, 16, 17, 1000, 1023, 4097]


def _gelu(x):
    import torch
    return torch.nn.functional.gelu(x)


def _attention(q, k, v, causal=True):
    import torch
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:  # bottom-right aligned, as coil and torch's is_causal for Tq == Tk
        tq, tk = q.shape[2], k.shape[2]
        i = torch.arange(tq, device=q.device)[:, None]
        j = torch.arange(tk, device=q.device)[None, :]
        s = s.masked_fill(j > i + tk - tq, -math.inf)
    return torch.softmax(s, -1) @ v


def _decode(x, wq, wo, kc, vc):
    q = (x.reshape(1, 256) @ wq).reshape(1, 1, 4, 64).permute(0, 2, 1, 3)
    a = _attention(q, kc, vc, causal=False).permute(0, 2, 1, 3).reshape(1, 1, 256)
    return (a.reshape(1, 256) @ wo).reshape(1, 1, 256) + x


def _layer_norm(x, w, b):
    import torch
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)


CASES = {
    "pointwise": {
        "graph": "input x: f32[n, 64]\ninput g: f32[64]\na = mul(x, g)\ny = gelu(a)\noutput y\n",
        "inputs": [("x", ["n", 64]), ("g", [64])],
        "symbols": ["n"],
        "sizes": [[n] for n in SIZES],
        "reference": lambda s, x, g: _gelu(x * g),
    },
    "sum_symbolic_axis": {
        "graph": "input x: f32[8, n]\ny = sum(x) {axes=[1]}\noutput y\n",
        "inputs": [("x", [8, "n"])],
        "symbols": ["n"],
        "sizes": [[n] for n in SIZES],
        "reference": lambda s, x: x.sum(1),
    },
    "transpose_and_column_sum": {
        # the GPU suite's f and e0 over a symbolic n: 2-D tiles for the transposed read, the
        # column sum split into a constant number of chunks of ceil(n / chunks) rows
        "graph": "input x: f32[n, 64]\ninput y: f32[64, n]\nt = transpose(x)\na = add(t, y)\n"
                 "s = sum(x) {axes=[0]}\noutput a\noutput s\n",
        "inputs": [("x", ["n", 64]), ("y", [64, "n"])],
        "symbols": ["n"],
        "sizes": [[n] for n in SIZES],
        "reference": lambda s, x, y: (x.t() + y, x.sum(0)),
    },
    "softmax_symbolic_axis": {
        "graph": "input x: f32[4, n]\ny = softmax(x) {axis=-1}\noutput y\n",
        "inputs": [("x", [4, "n"])],
        "symbols": ["n"],
        "sizes": [[n] for n in SIZES],
        "reference": lambda s, x: x.softmax(-1),
    },
    "softmax_symbolic_rows": {
        "graph": "input x: f32[n, 1000]\ny = softmax(x) {axis=-1}\noutput y\n",
        "inputs": [("x", ["n", 1000])],
        "symbols": ["n"],
        "sizes": [[n] for n in SIZES],
        "reference": lambda s, x: x.softmax(-1),
    },
    "layer_norm": {
        "graph": ("input x: f32[n, 1024]\ninput w: f32[1024]\ninput b: f32[1024]\n"
                  "y = layer_norm(x, w, b)\noutput y\n"),
        "inputs": [("x", ["n", 1024]), ("w", [1024]), ("b", [1024])],
        "symbols": ["n"],
        "sizes": [[n] for n in SIZES],
        "reference": lambda s, x, w, b: _layer_norm(x, w, b),
    },
    "matmul_epilogue": {
        "graph": ("input x: f32[n, 256]\ninput w: f32[256, 128]\ninput b: f32[128]\n"
                  "m = matmul(x, w)\ns = add(m, b)\ny = relu(s)\noutput y\n"),
        "inputs": [("x", ["n", 256]), ("w", [256, 128]), ("b", [128])],
        "symbols": ["n"],
        "sizes": [[n] for n in SIZES],
        "reference": lambda s, x, w, b: (x @ w + b).relu(),
    },
    "attention": {
        "graph": ("input q: f32[2, 4, s, 64]\ninput k: f32[2, 2, t, 64]\n"
                  "input v: f32[2, 2, t, 64]\ny = attention(q, k, v) {causal=true}\noutput y\n"),
        "inputs": [("q", [2, 4, "s", 64]), ("k", [2, 2, "t", 64]), ("v", [2, 2, "t", 64])],
        "symbols": ["s", "t"],
        # decoding (Tq 1, any Tk), prefill (Tq = Tk), and odd pairs (Tq > Tk: NaN rows)
        "sizes": ([[1, t] for t in SIZES] + [[t, t] for t in SIZES[1:]] +
                  [[3, 7], [7, 16], [17, 1000], [16, 3], [1000, 17]]),
        "reference": lambda s, q, k, v: _attention(q, k, v),
    },
    "decode_step": {
        "graph": ("input x: f32[1, 1, 256]\ninput wq: f32[256, 256]\ninput wo: f32[256, 256]\n"
                  "input kc: f32[1, 4, t, 64]\ninput vc: f32[1, 4, t, 64]\n"
                  "q0 = matmul(x, wq)\nq1 = reshape(q0) {shape=[1, 1, 4, 64]}\n"
                  "q = permute(q1) {dims=[0, 2, 1, 3]}\na = attention(q, kc, vc)\n"
                  "a1 = permute(a) {dims=[0, 2, 1, 3]}\na2 = reshape(a1) {shape=[1, 1, 256]}\n"
                  "o = matmul(a2, wo)\ny = add(o, x)\noutput y\n"),
        "inputs": [("x", [1, 1, 256]), ("wq", [256, 256]), ("wo", [256, 256]),
                   ("kc", [1, 4, "t", 64]), ("vc", [1, 4, "t", 64])],
        "symbols": ["t"],
        "sizes": [[t] for t in SIZES],
        "reference": lambda s, x, wq, wo, kc, vc: _decode(x, wq, wo, kc, vc),
    },
}


def variants(case):
    """The bound sizes each variant module is compiled for: every combination of the run's
    sizes of 0 or 1 (coil_runtime.dynamic.variant_key), as a sorted tuple of (symbol, value)."""
    out = set()
    for sizes in case["sizes"]:
        bound = tuple(sorted((s, v) for s, v in zip(case["symbols"], sizes) if v < 2))
        if bound:
            out.add(bound)
    return sorted(out)


def variant_dir(bound):
    return "bound_" + "_".join(f"{s}{v}" for s, v in bound)
