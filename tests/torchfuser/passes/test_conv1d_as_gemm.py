"""conv1d_as_gemm (default): dense 1-D convolutions run as GEMM kernels over their channels-last input, numerics
and strides as eager; 2-D, dilated and grouped ones stay in PyTorch with the reason."""

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.passes import PIPELINE
from torchfuser.passes.conv1d_as_gemm import NAME

CONV = "aten.convolution.default"


def compiled(model, x):
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torchfuser.compile(model)(x)
    with torch.no_grad():
        expected = model(x)
    assert_close(out, expected)
    assert out.stride() == expected.stride()
    return reports[-1]


def rewritten(report) -> int:
    return {p.name: p.stats for p in report.passes}[NAME].get("convolutions", 0)


def test_in_the_default_pipeline_after_the_pointwise_one_and_before_the_layout_pass():
    assert PIPELINE.index("pointwise_conv_as_gemm") < PIPELINE.index(NAME) < PIPELINE.index("channels_last_between_convs")


@pytest.mark.parametrize("kernel", [1, 3, 5, 7])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_kernel_sizes_strides_padding_and_odd_lengths(kernel, stride, bias):
    torch.manual_seed(kernel * 10 + stride)
    conv = nn.Conv1d(5, 7, kernel, stride=stride, padding=kernel // 2, bias=bias).eval()
    x = torch.randn(3, 5, 23)
    x[0, 1, 4], x[2, 0, 0] = float("nan"), float("-inf")
    report = compiled(conv, x)
    assert not report.fallbacks
    assert [k.kind for k in report.kernels].count("gemm") == 1
    assert rewritten(report) == (0 if kernel == 1 and stride == 1 else 1)  # 1x1 stride 1: the pointwise pass


def test_whisper_front_end_stays_channels_last_between_its_convolutions():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Conv1d(16, 24, 3, padding=1), nn.GELU(), nn.Conv1d(24, 24, 3, stride=2, padding=1),
                          nn.GELU()).eval()
    for x in (torch.randn(2, 16, 37), torch.randn(2, 16, 37).transpose(1, 2).contiguous().transpose(1, 2),
              torch.randn(0, 16, 37)):
        report = compiled(model, x)
        assert not report.fallbacks and rewritten(report) == 2
    assert {p.name: p.stats for p in report.passes}["channels_last_between_convs"]["copies_dropped"] >= 1


@pytest.mark.parametrize("conv, why", [
    (nn.Conv2d(4, 6, 3, padding=1), "a 2-D convolution"),
    (nn.Conv1d(4, 6, 3, dilation=2), "dilation [2]"),
    (nn.Conv1d(4, 6, 3, groups=2), "grouped"),
])
def test_other_convolutions_stay_in_pytorch_with_the_reason(conv, why):
    conv = conv.eval()
    x = torch.randn(2, 4, 11) if isinstance(conv, nn.Conv1d) else torch.randn(2, 4, 9, 8)
    report = compiled(conv, x)
    reasons = [f.reason for f in report.fallbacks if f.op == CONV]
    assert len(reasons) == 1 and why in reasons[0], reasons
