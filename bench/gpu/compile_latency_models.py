"""The models of bench/gpu/compile_latency.py, as torch modules: the same definitions here
(torch 1.13, where they are exported to ONNX) and on the GPU machine (torch 2.11, where eager and
torch.compile run them and coil's modules get their weights).

  gpt_block   a GPT-style decoder block: learned positions added to the token embeddings,
              pre-norm causal self-attention with 12 heads through matmuls, an additive mask
              and softmax, a GELU MLP (4x), a final LayerNorm and the output projection tied to
              the embedding (vocab 8192, d 768); embedded tokens f32 [8, 256, 768] -> logits
              [8, 256, 8192]. The embedding lookup itself is outside the graph (the eager
              `embed(tokens)` makes the input): `coil compile --device cuda` refuses a gather
              with dynamic indices ("does not support gather with dynamic indices (an indirect
              load of buffer buf18)"). GptBlock(embed=True) is the whole block, for the CPU.
  mlp_mixer   a small MLP-Mixer: 16x16 patches of [64, 3, 224, 224] by reshape + permute and a
              linear layer (196 tokens, d 512), 4 blocks of token mixing (196 -> 256 -> 196) and
              channel mixing (512 -> 2048 -> 512) MLPs with GELU and LayerNorm, mean over the
              tokens, a 1000-class head
  shufflenet  torchvision shufflenet_v2_x1_0, eval, [64, 3, 224, 224]
  resnet18    torchvision resnet18, eval, [64, 3, 224, 224]

Weights are random (`build(name)` seeds torch): the ONNX files carry none (exported with
export_params=False), so coil's module takes every parameter and buffer as an input, named as in
the module's state_dict; the GPU side builds the model from the same seed and passes its tensors.
Batch norm statistics and norm affine parameters are moved away from the identity.
"""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests",
                                "models"))
from export_models import GptBlock, randomize_norms  # noqa: E402  (one definition of each)

MODELS = ("gpt_block", "mlp_mixer", "shufflenet", "resnet18")


class MixerBlock(nn.Module):
    def __init__(self, tokens, d, token_hidden, channel_hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(d)
        self.token_fc1 = nn.Linear(tokens, token_hidden)
        self.token_fc2 = nn.Linear(token_hidden, tokens)
        self.norm2 = nn.LayerNorm(d)
        self.channel_fc1 = nn.Linear(d, channel_hidden)
        self.channel_fc2 = nn.Linear(channel_hidden, d)

    def forward(self, x):  # [B, tokens, d]
        y = self.norm1(x).transpose(1, 2)
        x = x + self.token_fc2(F.gelu(self.token_fc1(y))).transpose(1, 2)
        return x + self.channel_fc2(F.gelu(self.channel_fc1(self.norm2(x))))


class MlpMixer(nn.Module):
    def __init__(self, image=224, patch=16, d=512, depth=4, token_hidden=256,
                 channel_hidden=2048, classes=1000):
        super().__init__()
        self.patch, self.grid = patch, image // patch
        self.stem = nn.Linear(3 * patch * patch, d)
        tokens = self.grid * self.grid
        self.blocks = nn.Sequential(*[MixerBlock(tokens, d, token_hidden, channel_hidden)
                                      for _ in range(depth)])
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, x):  # [B, 3, H, W]
        b, g, p = x.shape[0], self.grid, self.patch
        x = x.reshape(b, 3, g, p, g, p).permute(0, 2, 4, 3, 5, 1).reshape(b, g * g, p * p * 3)
        x = self.blocks(self.stem(x))
        return self.head(self.norm(x).mean(1))


def build(name):
    """(model in eval mode, example input) for a model name; the same weights every time."""
    torch.manual_seed(0)
    if name == "gpt_block":
        model = GptBlock(vocab=8192, d=768, heads=12, seq=256, embed=False)
        with torch.no_grad():
            x = model.embed(torch.randint(0, 8192, (8, 256)))
    elif name == "mlp_mixer":
        model, x = MlpMixer(), torch.randn(64, 3, 224, 224)
    elif name in ("shufflenet", "resnet18"):
        import torchvision
        ctor = (torchvision.models.shufflenet_v2_x1_0 if name == "shufflenet"
                else torchvision.models.resnet18)
        model, x = ctor(), torch.randn(64, 3, 224, 224)
    else:
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}")
    with torch.no_grad():
        randomize_norms(model)
    return model.eval(), x
