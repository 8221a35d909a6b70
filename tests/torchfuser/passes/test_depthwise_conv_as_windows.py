"""depthwise_conv_as_windows: a stride-1 depthwise convolution as a per-channel weighted sum of one strided view
per tap, in kernels, as eager."""

import math

import pytest
import torch
from torch import nn

import torchfuser
from eager_compare import assert_close


def compiled(fn, *inputs):
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torchfuser.compile(fn)(*inputs)
    return out, reports[-1]


def rewritten(report) -> int:
    return {p.name: p.stats for p in report.passes}["depthwise_conv_as_windows"].get("convolutions", 0)


CONVS = {  # (kernel size, padding, dilation, bias)
    "3x3 pad 1": (3, 1, 1, True),
    "3x3 no padding": (3, 0, 1, False),
    "1x1": (1, 0, 1, True),
    "(1, 3) pad (0, 2) dilation 2": ((1, 3), (0, 2), 2, True),
    "(3, 1) pad (2, 0)": ((3, 1), (2, 0), 1, False),
    "2x2 pad 1 (output larger)": (2, 1, 1, True),
}


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "odd sizes"])
@pytest.mark.parametrize("name", list(CONVS))
def test_depthwise_conv2d_runs_in_kernels_as_eager(name, layout):
    torch.manual_seed(0)
    kernel, padding, dilation, bias = CONVS[name]
    conv = nn.Conv2d(6, 6, kernel, 1, padding, dilation, groups=6, bias=bias).eval()
    x = torch.randn(2, 6, 9, 7) if layout == "odd sizes" else torch.randn(2, 6, 8, 16)
    x[0, 1, 3, 4], x[1, 2, 0, 0] = math.nan, math.inf
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    out, report = compiled(conv, x)
    assert_close(out, conv(x))
    assert report.fallbacks == []
    assert rewritten(report) == 1


def test_depthwise_conv1d_causal_padding():
    torch.manual_seed(0)
    conv = nn.Conv1d(8, 8, 4, padding=3, groups=8).eval()  # Mamba's / Conformer's short convolution
    fn = lambda x: conv(x)[..., :x.shape[-1]]  # noqa: E731
    x = torch.randn(3, 8, 33)
    out, report = compiled(fn, x)
    assert_close(out, fn(x))
    assert report.fallbacks == [] and rewritten(report) == 1


def test_folded_batch_norm_relu6_and_residual_fuse_into_one_kernel_after_the_padding():
    torch.manual_seed(0)
    bn = nn.BatchNorm2d(8).eval()
    bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.data.uniform_(0.5, 1.5)
    block = nn.Sequential(nn.Conv2d(8, 8, 3, 1, 1, groups=8, bias=False), bn, nn.ReLU6()).eval()
    fn = lambda x: x + block(x)  # noqa: E731
    x = torch.randn(2, 8, 10, 12) * 4
    out, report = compiled(fn, x)
    assert_close(out, fn(x))
    assert report.fallbacks == []
    assert {p.name: p.stats for p in report.passes}["fold_batch_norm"]["folded"] == 1
    assert len(report.kernels) == 3  # the padding along W, along H, then one kernel for the rest


def test_zero_size_batch():
    conv = nn.Conv2d(4, 4, 3, padding=1, groups=4).eval()
    out, report = compiled(conv, torch.randn(0, 4, 6, 6))
    assert out.shape == (0, 4, 6, 6) and rewritten(report) == 1


@pytest.mark.parametrize("conv, reason", [
    (nn.Conv2d(6, 6, 3, 2, 1, groups=6), "strided"),
    (nn.Conv2d(6, 6, 5, 1, 2, groups=6), "more than 9 taps"),
    (nn.Conv2d(6, 12, 3, 1, 1, groups=6), "depth multiplier"),
    (nn.Conv2d(6, 6, 3, 1, 1, groups=2), "2 groups of 3 channels"),
])
def test_grouped_convolutions_it_does_not_take_stay_in_pytorch_with_the_reason(conv, reason):
    conv = conv.eval()
    x = torch.randn(2, 6, 9, 9)
    out, report = compiled(conv, x)
    assert_close(out, conv(x))
    assert rewritten(report) == 0
    assert any(reason in f.reason for f in report.fallbacks), [f.reason for f in report.fallbacks]
