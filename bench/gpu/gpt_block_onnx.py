#!/usr/bin/env python3
"""Writes the GPT block of bench/gpu/cuda_graphs.py (batch 2, 37 tokens, d 192, 6 heads, causal,
random weights from seed 0) as ONNX, for the GPU ahead-of-time run (bench/gpu/aot.sh) and its
eager comparison:   python3 bench/gpu/gpt_block_onnx.py OUT.onnx   (torch 1.13 here or 2.x)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from cuda_graphs import make_block  # noqa: E402

torch.manual_seed(0)
model = make_block(torch, nn, F)().eval()
x = torch.randn(2, 37, 192)
torch.onnx.export(model, (x,), sys.argv[1], input_names=["x"], output_names=["y"],
                  opset_version=17, do_constant_folding=True)
print(f"wrote {sys.argv[1]}")
