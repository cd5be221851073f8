#!/usr/bin/env python3
"""Real models, exported to ONNX by torch.onnx (opset 17), with their input and torch's output,
for onnx_models_test.cpp (coil checks each against torch) and bench/model_bench.py.

Usage: export_models.py DIR [NAME ...]     (default: every model; --list prints the names)

Writes DIR/<name>.onnx, DIR/<name>_in.npy (the input, graph input "x") and DIR/<name>_out.npy
(torch's output, graph output "y"), all fp32. Weights are random with fixed seeds: nothing is
downloaded. The models:

  mlp              3-layer MLP (512 -> 1024 -> 1024 -> 10, ReLU), batch 16
  ln_gelu_mlp      pre-norm MLP block: x + Linear(GELU(Linear(LayerNorm(x)))), d 256, 4x, [4, 64, 256]
  transformer      nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True), [2, 64, 256]
  resnet18         torchvision resnet18 (1000 classes), [1, 3, 224, 224]
  mobilenet_v2     torchvision mobilenet_v2 (1000 classes), [1, 3, 224, 224]
  squeezenet1_1    torchvision squeezenet1_1 (1000 classes), [1, 3, 224, 224]: 1x1 and 3x3
                   convolutions, ceil-mode max pooling, no batch norm (issue 19's GPU check)
  efficientnet_b0  torchvision efficientnet_b0 (1000 classes), [1, 3, 224, 224] (benchmarks only:
                   bench/compile_latency.py; 189 kernels, squeeze-excitation blocks)
  shufflenet_v2    torchvision shufflenet_v2_x1_0, [1, 3, 224, 224] (benchmarks only: the ONNX
                   Runtime anchors of bench/model_bench.py --ort; channel shuffles, depthwise)
  mnasnet          torchvision mnasnet1_0, [1, 3, 224, 224] (benchmarks only, as shufflenet_v2)
  gpt_block        a GPT-style decoder block (bench/compile_latency.py): token embedding (vocab
                   1024, d 256), learned positions, pre-norm causal self-attention with 4 heads
                   through matmuls, softmax and a mask, a GELU MLP, the output projection tied
                   to the embedding; int64 tokens [2, 128] -> logits [2, 128, 1024]
  lstm_lm          a 2-layer LSTM language model: int64 tokens [13, 3] (seq, batch) -> embedding
                   (vocab 97, d 29) -> nn.LSTM(29, 37, num_layers=2) -> Linear(37, 97): logits
                   [13, 3, 97]; one ONNX LSTM per layer
  gru_classifier   a bidirectional nn.GRU(20, 37, batch_first=True) over [3, 13, 20], its last
                   states of both directions concatenated -> Linear(74, 5)
  lstm_lm_large    lstm_lm at serving sizes (benchmarks only): vocab 1000, d 128, hidden 256,
                   tokens [64, 8]
  gru_classifier_large  gru_classifier at d 128, hidden 256 over [8, 64, 128] (benchmarks only)
  rnn_relu         a 2-layer bidirectional nn.RNN(19, 37, nonlinearity="relu") over [13, 3, 19],
                   its output sequence [13, 3, 74]
  unet             a small U-Net: conv + GroupNorm + ReLU blocks, two stages down (max pooling),
                   up by ConvTranspose (stride 2) and by bilinear and nearest nn.Upsample, skips
                   concatenated, [1, 3, 64, 64]; unet_dynbatch: the same with a dynamic batch
  groupnorm_cnn    conv -> nn.GroupNorm(4, 16) -> SiLU -> conv -> nn.GroupNorm(3, 12) -> global
                   average -> linear, [2, 3, 17, 19]; GroupNorm exports as InstanceNormalization
                   on [N, groups, -1] and an affine Mul/Add
  transformer_dynbatch  the transformer layer exported with a dynamic batch dim ("batch"):
                   traced at batch 2, its input and output saved at batch 3, so its
                   Shape -> Gather -> Mul -> Concat -> Reshape subgraphs compute on a symbol
  encoder_dynamic  a 2-layer nn.TransformerEncoder (d_model 64, 4 heads, feed-forward 128,
                   batch_first=False) exported with a dynamic sequence length and batch
                   ([seq, batch, 64]), traced at seq 5, batch 3; its input and output saved at
                   seq 7, batch 3, and at each (batch, seq) of ENCODER_SIZES as
                   <name>_in_<batch>x<seq>.npy / <name>_out_<batch>x<seq>.npy, listed in
                   <name>_sizes.txt ("batch seq" per line): its attention reshapes to
                   [seq, 4*batch, 16] and back from [seq*batch, 64]
  encoder_dynamic_mask  encoder_dynamic's encoder called with src_key_padding_mask, a second
                   graph input "pad" (bool [batch, seq], True = padding), so the attention adds
                   a mask made with ConstantOfShape of [4*batch, 1, seq]; saved at the
                   (batch, seq) pairs of MASK_SIZES as <name>_in_/_pad_/_out_<batch>x<seq>.npy
                   (every row keeps at least one position: torch gives NaN for a row all padded)

  llama_decode_dynamic  one decode step of bench/gpu/llama_decode.py's Llama-style decoder
                   ("tiny": 2 layers, d 64, 4 heads over 2 kv heads, RMSNorm, rotary, SwiGLU)
                   with a KV cache: inputs tokens [batch, 1], pos [1] and the caches
                   ck0, ck1, cv0, cv1 [batch, 2, past, 16], exported with a dynamic batch and
                   past; outputs the last logits and the grown caches. Saved at the (batch,
                   past) pairs of DECODE_SIZES as <name>_<input>_<batch>x<past>.npy and
                   <name>_out<i>_<batch>x<past>.npy, listed in <name>_sizes.txt

Every model is in eval mode (dropout off, batch norm with its running statistics, which are
randomized so that they are not the identity). The transformer layer is traced with autograd
enabled: in eval mode with grad disabled, PyTorch would run (and export) its fused fast path
(one aten::_transformer_encoder_layer_fwd) instead of the primitive ops.
"""
import argparse
import inspect
import os
import sys

import numpy as np
import torch
import torch.nn as nn


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                                 nn.Linear(1024, 10))

    def forward(self, x):
        return self.net(x)


class LnGeluMlp(nn.Module):
    def __init__(self, d=256):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class GptBlock(nn.Module):
    """A GPT-style decoder block (also bench/gpu/compile_latency_models.py's, at other sizes).
    embed=True: int64 tokens [B, T] in; embed=False: their embeddings [B, T, d] (the lookup
    outside the graph, as the GPU suite's compile-latency rows measure it; --device cuda had no
    gather at run-time indices before the twenty-first session)."""

    def __init__(self, vocab=1024, d=256, heads=4, seq=128, embed=True):
        super().__init__()
        self.heads, self.lookup = heads, embed
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(seq, d) * 0.02)
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.ln_f = nn.LayerNorm(d)
        self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), 1))

    def forward(self, x):
        b, t = x.shape[:2]
        h = (self.embed(x) if self.lookup else x) + self.pos[:t]
        q, k, v = self.qkv(self.ln1(h)).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (q.shape[-1] ** -0.5) + self.mask[:t, :t]
        y = (att.softmax(-1) @ v).transpose(1, 2).reshape(b, t, -1)
        h = h + self.proj(y)
        h = h + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(h))))
        return self.ln_f(h) @ self.embed.weight.t()


class LstmLm(nn.Module):
    def __init__(self, vocab=97, d=29, hidden=37):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.lstm = nn.LSTM(d, hidden, num_layers=2)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x):
        return self.out(self.lstm(self.embed(x))[0])


class GruClassifier(nn.Module):
    def __init__(self, d=20, hidden=37, classes=5):
        super().__init__()
        self.gru = nn.GRU(d, hidden, batch_first=True, bidirectional=True)
        self.out = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        _, h = self.gru(x)  # [2, B, hidden]: the last state of each direction
        return self.out(torch.cat([h[0], h[1]], dim=1))


class RnnRelu(nn.Module):
    def __init__(self, d=19, hidden=37):
        super().__init__()
        self.rnn = nn.RNN(d, hidden, num_layers=2, nonlinearity="relu", bidirectional=True)

    def forward(self, x):
        return self.rnn(x)[0]


class UNet(nn.Module):
    """A small U-Net: conv + GroupNorm + ReLU blocks, max pooling down, up by ConvTranspose
    (stride 2) and by bilinear and nearest Upsample, skip connections concatenated."""

    def __init__(self, c=16):
        super().__init__()

        def block(i, o):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.GroupNorm(4, o), nn.ReLU(),
                                 nn.Conv2d(o, o, 3, padding=1), nn.GroupNorm(4, o), nn.ReLU())

        self.enc1, self.enc2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.pool = nn.MaxPool2d(2)
        self.up_t = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = block(4 * c, 2 * c)
        self.up_bilinear = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.dec1 = block(3 * c, c)
        self.up_nearest = nn.Upsample(scale_factor=2, mode="nearest")
        self.head = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        m = self.mid(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up_t(m), e2], 1))
        d1 = self.dec1(torch.cat([self.up_bilinear(d2), e1], 1))
        return self.head(self.up_nearest(self.pool(d1)))


class GroupNormCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.GroupNorm(4, 16), nn.SiLU(),
                                 nn.Conv2d(16, 12, 3, stride=2), nn.GroupNorm(3, 12), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 7))

    def forward(self, x):
        return self.net(x)


def randomize_norms(model):
    """Batch norm statistics and affine parameters away from the identity; layer norms' too."""
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
        elif isinstance(m, (nn.LayerNorm, nn.GroupNorm)):
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)


def build(name):
    """(model, input shape) for a model name."""
    if name == "mlp":
        return Mlp(), [16, 512]
    if name == "gpt_block":
        return GptBlock(), [2, 128]
    if name == "ln_gelu_mlp":
        return LnGeluMlp(), [4, 64, 256]
    if name == "lstm_lm":
        return LstmLm(), [13, 3]
    if name == "gru_classifier":
        return GruClassifier(), [3, 13, 20]
    if name == "lstm_lm_large":
        return LstmLm(vocab=1000, d=128, hidden=256), [64, 8]
    if name == "gru_classifier_large":
        return GruClassifier(d=128, hidden=256), [8, 64, 128]
    if name == "rnn_relu":
        return RnnRelu(), [13, 3, 19]
    if name == "groupnorm_cnn":
        return GroupNormCnn(), [2, 3, 17, 19]
    if name in ("transformer", "transformer_dynbatch"):
        return nn.TransformerEncoderLayer(d_model=256, nhead=4, batch_first=True), [2, 64, 256]
    if name in ("unet", "unet_dynbatch"):
        return UNet(), [1, 3, 64, 64]
    if name in ("encoder_dynamic", "encoder_dynamic_mask"):
        layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128)
        # enable_nested_tensor (torch >= 1.13) only matters for padded batches in eval mode.
        return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False), [5, 3, 64]
    import torchvision  # only the CNNs need it (Debian's python3-torchvision)
    if name == "resnet18":
        return torchvision.models.resnet18(weights=None), [1, 3, 224, 224]
    if name == "mobilenet_v2":
        return torchvision.models.mobilenet_v2(weights=None), [1, 3, 224, 224]
    if name == "squeezenet1_1":
        return torchvision.models.squeezenet1_1(weights=None), [1, 3, 224, 224]
    if name == "efficientnet_b0":
        return torchvision.models.efficientnet_b0(weights=None), [1, 3, 224, 224]
    if name == "shufflenet_v2":
        return torchvision.models.shufflenet_v2_x1_0(weights=None), [1, 3, 224, 224]
    if name == "mnasnet":
        return torchvision.models.mnasnet1_0(weights=None), [1, 3, 224, 224]
    raise SystemExit(f"unknown model {name!r} (known: {', '.join(ALL)})")


MODELS = ["mlp", "ln_gelu_mlp", "transformer", "resnet18", "mobilenet_v2", "squeezenet1_1",
          "lstm_lm", "gru_classifier", "rnn_relu", "groupnorm_cnn", "unet"]
# models whose input is int64 tokens, with their vocabulary size
TOKENS = {"gpt_block": 1024, "lstm_lm": 97, "lstm_lm_large": 1000}
DYNAMIC = {"transformer_dynbatch": ({0: "batch"}, [3, 64, 256]),  # dynamic_axes, saved input
           "unet_dynbatch": ({0: "batch"}, [2, 3, 64, 64]),
           "encoder_dynamic": ({0: "seq", 1: "batch"}, [7, 3, 64]),
           "encoder_dynamic_mask": ({0: "seq", 1: "batch"}, [7, 3, 64])}
# (batch, seq) pairs at which encoder_dynamic's inputs and torch's outputs are saved: 1, 2, 3, 7,
# 17 and 64 on either side, and odd combinations (onnx_dynamic_model_test.cpp runs them all
# through one size-generic model).
ENCODER_SIZES = [(1, 1), (1, 2), (2, 1), (2, 3), (3, 7), (7, 3), (1, 17), (17, 1), (2, 64),
                 (64, 2), (3, 3), (7, 7), (17, 17), (5, 13), (13, 5), (64, 1), (1, 64), (4, 9),
                 (9, 31), (3, 64)]
MASK_SIZES = [(1, 1), (2, 3), (3, 7), (7, 2), (5, 17), (17, 5)]


# (batch, past) pairs of llama_decode_dynamic: an empty cache, 1, 2, 7, 17, 64 and 100 positions.
DECODE_SIZES = [(1, 0), (1, 1), (1, 2), (2, 3), (1, 7), (3, 5), (1, 17), (2, 64), (1, 100),
                (5, 9)]


def export_llama_decode(name, out):
    """llama_decode_dynamic (see the docstring)."""
    import math
    import torch.nn.functional as F
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "gpu"))
    import llama_decode as lm

    def sdpa(q, k, v, is_causal=False):  # torch 1.13 has no F.scaled_dot_product_attention
        assert not is_causal  # (one query position: nothing to mask)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        return s.softmax(-1) @ v

    def repeat_kv(x, r, dim):
        # repeat_interleave as Llama's reference code writes it (expand, reshape): torch 1.13's
        # ONNX export of repeat_interleave over a dynamic dim reshapes [1, 1, 2, P, 16] with a 0
        # that copies the repeat count, a graph whose MatMul cannot broadcast
        s = list(x.shape)
        y = x.unsqueeze(dim + 1).expand(*s[:dim + 1], r, *s[dim + 1:])
        return y.reshape(*s[:dim], s[dim] * r, *s[dim + 1:])

    saved = getattr(F, "scaled_dot_product_attention", None), torch.Tensor.repeat_interleave
    F.scaled_dot_product_attention, torch.Tensor.repeat_interleave = sdpa, repeat_kv
    try:
        torch.manual_seed(0)
        cfg = lm.CONFIGS["tiny"]
        llama = lm.Llama(*cfg).eval()
        layers, kv_heads, hd = cfg[1], cfg[3], cfg[0] // cfg[2]

        class Step(nn.Module):
            def __init__(self):
                super().__init__()
                self.m = llama

            def forward(self, tokens, pos, *caches):
                y, ks, vs = self.m(tokens, pos, list(caches[:layers]), list(caches[layers:]))
                return (y, *ks, *vs)

        model = Step().eval()
        names = ["tokens", "pos"] + [f"c{kv}{i}" for kv in "kv" for i in range(layers)]
        axes = {"tokens": {0: "batch"}}
        axes.update({c: {0: "batch", 2: "past"} for c in names[2:]})

        def inputs(b, past):
            caches = [torch.randn(b, kv_heads, past, hd) for _ in range(2 * layers)]
            return [torch.randint(0, cfg[5], (b, 1)), torch.tensor([past])] + caches

        legacy = ({"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters
                  else {})
        with torch.no_grad():
            torch.onnx.export(model, tuple(inputs(2, 5)), os.path.join(out, f"{name}.onnx"),
                              opset_version=17, input_names=names, dynamic_axes=axes, **legacy)
            with open(os.path.join(out, f"{name}_sizes.txt"), "w") as f:
                for b, past in DECODE_SIZES:
                    xs = inputs(b, past)
                    ys = model(*xs)
                    for what, t in list(zip(names, xs)) + [(f"out{i}", y) for i, y in
                                                           enumerate(ys)]:
                        np.save(os.path.join(out, f"{name}_{what}_{b}x{past}.npy"), t.numpy())
                    f.write(f"{b} {past}\n")
    finally:
        F.scaled_dot_product_attention, torch.Tensor.repeat_interleave = saved
        if saved[0] is None:
            del F.scaled_dot_product_attention
    return model, None


class MaskedEncoder(nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, x, pad):
        return self.encoder(x, src_key_padding_mask=pad)


def export_masked(name, out):
    """encoder_dynamic_mask: two graph inputs, saved at MASK_SIZES (see the docstring)."""
    torch.manual_seed(0)
    encoder, shape = build(name)
    randomize_norms(encoder)
    model = MaskedEncoder(encoder).eval()
    axes = {"x": {0: "seq", 1: "batch"}, "pad": {0: "batch", 1: "seq"}, "y": {0: "seq", 1: "batch"}}

    def pad_mask(b, s):
        pad = torch.zeros(b, s, dtype=torch.bool)
        for i in range(b):
            pad[i, 1 + int(torch.randint(0, s, ())):] = True  # keeps 1 to s positions
        return pad

    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    x = torch.randn(*shape)
    with torch.enable_grad():
        torch.onnx.export(model, (x, pad_mask(shape[1], shape[0])),
                          os.path.join(out, f"{name}.onnx"), opset_version=17,
                          input_names=["x", "pad"], output_names=["y"], dynamic_axes=axes,
                          training=torch.onnx.TrainingMode.EVAL, **legacy)
    with open(os.path.join(out, f"{name}_sizes.txt"), "w") as f:
        for b, s in MASK_SIZES:
            xs, pad = torch.randn(s, b, 64), pad_mask(b, s)
            with torch.no_grad():
                ys = model(xs, pad)
            for what, t in (("in", xs), ("pad", pad), ("out", ys)):
                np.save(os.path.join(out, f"{name}_{what}_{b}x{s}.npy"), t.numpy())
            f.write(f"{b} {s}\n")
    return model, x
# benchmarks only (no test runs them); the CNNs are issue 28's ONNX Runtime anchors
BENCH = ["efficientnet_b0", "gpt_block", "shufflenet_v2", "mnasnet", "lstm_lm_large",
         "gru_classifier_large"]
ALL = MODELS + list(DYNAMIC) + ["llama_decode_dynamic"] + BENCH


def export(name, out):
    """Writes the model's files into `out`; returns the module (eval mode) and its input."""
    if name == "encoder_dynamic_mask":
        return export_masked(name, out)
    if name == "llama_decode_dynamic":
        return export_llama_decode(name, out)
    torch.manual_seed(0)
    model, shape = build(name)
    randomize_norms(model)
    model.eval()
    x = torch.randint(0, TOKENS[name], shape) if name in TOKENS else torch.randn(*shape)
    axes = None
    if name in DYNAMIC:
        axes, saved = DYNAMIC[name]
        axes = {"x": axes, "y": axes}
    # Autograd stays enabled while tracing (see the module docstring); the parameters require
    # grad as usual.
    # torch >= 2.9 exports through Dynamo by default; the TorchScript exporter (torch 1.13's
    # only one) gives the same graphs on both, so the GPU host (torch 2.11) can export too.
    legacy = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}
    with torch.enable_grad():
        torch.onnx.export(model, (x,), os.path.join(out, f"{name}.onnx"), opset_version=17,
                          input_names=["x"], output_names=["y"], dynamic_axes=axes,
                          training=torch.onnx.TrainingMode.EVAL, **legacy)
    if name in DYNAMIC:
        x = torch.randn(*saved)  # another size than the traced one
    with torch.no_grad():
        y = model(x)
    np.save(os.path.join(out, f"{name}_in.npy"), x.numpy())
    np.save(os.path.join(out, f"{name}_out.npy"), y.numpy())
    if name == "encoder_dynamic":
        with open(os.path.join(out, f"{name}_sizes.txt"), "w") as f:
            for b, s in ENCODER_SIZES:
                xs = torch.randn(s, b, 64)
                with torch.no_grad():
                    ys = model(xs)
                np.save(os.path.join(out, f"{name}_in_{b}x{s}.npy"), xs.numpy())
                np.save(os.path.join(out, f"{name}_out_{b}x{s}.npy"), ys.numpy())
                f.write(f"{b} {s}\n")
    return model, x


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("dir", nargs="?")
    p.add_argument("names", nargs="*")
    p.add_argument("--list", action="store_true", help="print the model names and exit")
    a = p.parse_args()
    if a.list:
        print("\n".join(ALL))
        return 0
    if not a.dir:
        p.error("DIR is required")
    os.makedirs(a.dir, exist_ok=True)
    torch.set_num_threads(1)
    for name in a.names or ALL:
        export(name, a.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
