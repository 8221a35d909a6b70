"""Convolutional workloads for `python -m torchfuser.bench` (section "cnn"): a ResNet-18 written out, a
MobileNetV2 inverted-residual block, a conv1d stack (an audio front-end) and ViT's patch embedding, random
weights and batch-norm statistics built locally, eval mode, no grad, against eager, inductor and
inductor+freezing."""

from __future__ import annotations

import torch
import torch.nn as nn

from torchfuser.tools.bench.blocks import module_row


def _batch_norm(channels: int, dims: int = 2) -> nn.Module:
    """A batch norm with real-looking statistics and affine parameters (not the identity of a fresh one)."""
    norm = (nn.BatchNorm1d if dims == 1 else nn.BatchNorm2d)(channels)
    with torch.no_grad():
        norm.running_mean.normal_(0, 0.1)
        norm.running_var.uniform_(0.5, 1.5)
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.normal_(0, 0.1)
    return norm


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = _batch_norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = _batch_norm(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), _batch_norm(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(out + identity)


class ResNet18(nn.Module):
    """torchvision's resnet18, written out (no torchvision needed)."""

    def __init__(self, classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = _batch_norm(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise, 1x1 project, each with a batch norm, ReLU6 between."""

    def __init__(self, channels: int, expand: int = 6):
        super().__init__()
        hidden = channels * expand
        self.body = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), _batch_norm(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden, bias=False), _batch_norm(hidden), nn.ReLU6(inplace=True),
            nn.Conv2d(hidden, channels, 1, bias=False), _batch_norm(channels))

    def forward(self, x):
        return x + self.body(x)


class Conv1dStack(nn.Module):
    """Whisper's audio front-end: two conv1d over mel frames with GELU, the second halving the length."""

    def __init__(self, mels: int = 80, width: int = 384):
        super().__init__()
        self.conv1 = nn.Conv1d(mels, width, 3, padding=1)
        self.conv2 = nn.Conv1d(width, width, 3, stride=2, padding=1)
        self.gelu = nn.GELU()

    def forward(self, x):
        return self.gelu(self.conv2(self.gelu(self.conv1(x)))).transpose(1, 2)


class PatchEmbedding(nn.Module):
    """ViT's patch embedding: a 16x16 stride-16 convolution, flattened to tokens."""

    def __init__(self, width: int = 768, patch: int = 16):
        super().__init__()
        self.proj = nn.Conv2d(3, width, patch, patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


# name -> (model, input shape)
CNNS = {
    "resnet18": (ResNet18, (4, 3, 112, 112)),
    "mbv2_block": (lambda: InvertedResidual(32), (4, 32, 56, 56)),
    "conv1d": (Conv1dStack, (2, 80, 1000)),
    "patch_embed": (PatchEmbedding, (4, 3, 224, 224)),
}


@torch.no_grad()
def cnn_row(name: str, repeats: int, inductor: bool) -> dict:
    torch.manual_seed(0)
    make, shape = CNNS[name]
    model = make().eval()
    row = module_row(name, model, torch.randn(shape), repeats, inductor)
    return {**row, "input": shape}
