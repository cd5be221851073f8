#!/usr/bin/env python3
"""Small CNNs in the shape of torchvision's resnet18 and mobilenet_v2, exported to ONNX by
torch.onnx (for onnx_import_test.cpp, which imports them and compares coil's reference
interpreter with torch's outputs).

Usage: torch_cnn_export.py DIR

Writes DIR/<name>.onnx, DIR/<name>_in.npy (the input) and DIR/<name>_out.npy (torch's output)
for each model. The batch dim is dynamic ("batch").
"""
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 7, 2, 3, bias=False), nn.BatchNorm2d(8),
                                  nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1))
        self.layer1 = BasicBlock(8, 8, 1)
        self.layer2 = BasicBlock(8, 16, 2)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        x = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


class InvertedResidual(nn.Module):
    def __init__(self, c, expand):
        super().__init__()
        h = c * expand
        self.body = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(inplace=True),
            nn.Conv2d(h, h, 3, 1, 1, groups=h, bias=False), nn.BatchNorm2d(h),
            nn.ReLU6(inplace=True), nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.body(x)


class MobileNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU6(inplace=True),
            nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), nn.BatchNorm2d(8),
            nn.ReLU6(inplace=True), InvertedResidual(8, 4))
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(8, 5))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


class Pools(nn.Module):
    """ceil_mode, count_include_pad=False, dilation, a matmul with a batch broadcast."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 5))

    def forward(self, x):
        a = F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)
        m = F.max_pool2d(x, 2, 3, 1, dilation=2, ceil_mode=True)
        return torch.matmul(a[..., :4], self.w).sum() + m.sum() + F.max_pool2d(x, 2).mean()


def main():
    out = sys.argv[1]
    torch.manual_seed(0)
    models = {"resnetish": (ResNetish(), [2, 3, 32, 32], 13),
              "mobilenetish": (MobileNetish(), [2, 3, 17, 17], 13),
              "pools": (Pools(), [2, 3, 13, 11], 11)}
    for name, (model, shape, opset) in models.items():
        model.eval()
        # Non-trivial batch norm statistics (fresh ones are the identity).
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2)
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.5, 0.5)
        x = torch.randn(*shape)
        with torch.no_grad():
            y = model(x)
        torch.onnx.export(model, (x,), f"{out}/{name}.onnx", opset_version=opset,
                          input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}} if name != "pools" else None)
        np.save(f"{out}/{name}_in.npy", x.numpy())
        np.save(f"{out}/{name}_out.npy", y.numpy())
    return 0


if __name__ == "__main__":
    sys.exit(main())
