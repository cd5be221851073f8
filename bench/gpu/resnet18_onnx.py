#!/usr/bin/env python3
"""Writes torchvision's resnet18 (eval, random weights from seed 0: nothing is downloaded) as
ONNX with a [1, 3, 224, 224] input, for the GPU ahead-of-time run's convolutions
(bench/gpu/aot.sh):   python3 bench/gpu/resnet18_onnx.py OUT.onnx   (torch 1.13 here or 2.x)"""
import sys

import torch
import torchvision

torch.manual_seed(0)
model = torchvision.models.resnet18().eval()
x = torch.randn(1, 3, 224, 224)
torch.onnx.export(model, (x,), sys.argv[1], input_names=["x"], output_names=["y"],
                  opset_version=17, do_constant_folding=True)
print(f"wrote {sys.argv[1]}")
