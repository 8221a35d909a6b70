"""channels_last_between_convs (default, after the passes that compute convolutions channels-last: conv_as_gemm
and pointwise_conv_as_gemm): values between convolutions stay channels-last, eager's layout at the graph's
edges; numerics and output strides as eager."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from eager_compare import assert_close, compiled
from torchfuser.passes import PIPELINE
from torchfuser.passes.channels_last_between_convs import NAME
from torchfuser.passes.conv_as_gemm import NAME as CONV_AS_GEMM
from torchfuser.passes.pointwise_conv_as_gemm import NAME as POINTWISE_CONV_AS_GEMM


def compiled_with_stats(model, x):
    out, report = compiled(model, x)
    return out, {p.name: p.stats for p in report.passes}[NAME], report


def as_eager(model, x):
    """(this pass's stats, the report) of model compiled, its result checked against eager's: values, strides."""
    out, stats, report = compiled_with_stats(model, x)
    with torch.no_grad():
        expected = model(x)
    assert_close(out, expected)
    assert out.stride() == expected.stride()
    return stats, report


class Block(nn.Module):
    """A ResNet basic block and what follows it: pooling windows, a flatten."""

    def __init__(self, c=6):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.conv1, self.conv2 = nn.Conv2d(c, c, 3, padding=1), nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.norm = nn.BatchNorm2d(c).eval()
        self.norm.running_var.uniform_(0.5, 2)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.stem(x)), 3, 2, 1)
        z = torch.relu(self.norm(self.conv2(torch.relu(self.conv1(x)))) + self.conv1(x))
        return z.mean((-1, -2)), z.flatten(1)


def test_runs_after_every_pass_that_computes_convolutions_channels_last():
    assert PIPELINE.index(CONV_AS_GEMM) < PIPELINE.index(POINTWISE_CONV_AS_GEMM) < PIPELINE.index(NAME)
    assert PIPELINE.index(NAME) < PIPELINE.index("depthwise_conv_as_windows") < PIPELINE.index("cat_as_last_dim")


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_block_keeps_channels_last_inside_and_eager_layout_outside(layout):
    torch.manual_seed(0)
    model = Block().eval()
    x = torch.randn(2, 3, 11, 13)
    x[0, 1, 2, 3] = float("nan")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    (pooled, flat), stats, report = compiled_with_stats(model, x)
    with torch.no_grad():
        expected_pooled, expected_flat = model(x)
    assert_close(pooled, expected_pooled)
    assert_close(flat, expected_flat)
    assert flat.stride() == expected_flat.stride()
    # gone: the copies back to NCHW after each of the four convolutions, and the copies into NHWC of conv2's
    # input (a ReLU of conv1's result) and of both conv1's (the stem's pooling, which follows the stem's layout);
    # one copy back serves the mean and the flatten; a channels-last input: the stem's copy of it too
    assert stats["copies_dropped"] == (8 if layout == "channels_last" else 7)
    assert stats["cats_in_nhwc"] == 0  # the pooling reads its padding as bounds (convolutions pad in NHWC already)
    assert stats["copies_back"] == 1
    assert [k.kind for k in report.kernels].count("window") == 1  # the pooling, over the stem's NHWC result
    assert [f.op for f in report.fallbacks] == []


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_result_of_a_convolution_returned_as_is_has_eager_strides(layout):
    """Eager's convolution of an NCHW input is NCHW (one copy back), of a channels-last input channels-last
    (none)."""
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 5, 3, padding=1).eval()
    model = lambda x: torch.relu(conv(x))  # noqa: E731
    x = torch.randn(2, 4, 7, 9)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    stats, _ = as_eager(model, x)
    assert stats["results_restored"] == (layout == "contiguous")


def test_conv1d_stack_stays_nlc_and_its_transposed_result_has_eager_strides():
    """Whisper's front-end: conv1d, GELU, conv1d, GELU, transpose(1, 2); the transposed result is [N, L, C]
    memory in eager, a transposed view of the NCL result."""
    torch.manual_seed(0)
    conv1, conv2 = nn.Conv1d(8, 12, 3, padding=1).eval(), nn.Conv1d(12, 12, 3, stride=2, padding=1).eval()
    model = lambda x: F.gelu(conv2(F.gelu(conv1(x)))).transpose(1, 2)  # noqa: E731
    x = torch.randn(2, 8, 23)
    stats, report = as_eager(model, x)
    assert stats["copies_dropped"] == 3  # both results' copies to NCL, conv2's copy of its input to NLC
    assert report.fallbacks == []


@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_convolution_between_gemm_convolutions_reads_and_writes_nhwc(stride):
    """MobileNetV2's block: its depthwise convolution reads the expansion's channels-last result as an NHWC
    view (a window kernel, ReLU6 in its epilogue), strided too, and the projection reads its result in place."""
    torch.manual_seed(0)
    hidden = 12
    body = nn.Sequential(nn.Conv2d(4, hidden, 1), nn.ReLU6(), nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden),
                         nn.ReLU6(), nn.Conv2d(hidden, 4, 1)).eval()
    x = torch.randn(2, 4, 9, 11)
    stats, report = as_eager(body, x)
    assert report.fallbacks == []
    depthwise = {p.name: p.stats for p in report.passes}["depthwise_conv_as_windows"]
    assert depthwise["convolutions"] == 1
    # between the copies of the block's input and output: the three convolutions, each activation in one of them
    # (the depthwise one made inside the projection's GEMM: fuse_window_into_gemm)
    assert [k.kind for k in report.kernels if k.kind != "pointwise"] == ["gemm", "gemm"]
    assert {p.name: p.stats for p in report.passes}["fuse_window_into_gemm"]["windows_in_gemms"] == 1
    assert stats["copies_dropped"] == 3  # the expansion's and projection's copies back, the projection's copy in


def test_residual_of_a_max_pooling_joins_the_convolutions_epilogue():
    """ResNet's first block adds the stem's max pooling to its second convolution: the pooling's channels-last
    result is viewed in NHWC beside the convolution's, so the add and ReLU run in that GEMM's epilogue."""
    torch.manual_seed(0)
    stem, conv1, conv2 = nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1), nn.Conv2d(16, 16, 3, padding=1)

    def block(x):
        x = F.max_pool2d(torch.relu(stem(x)), 3, 2, 1)
        return torch.relu(conv2(torch.relu(conv1(x))) + x)

    x = torch.randn(2, 3, 20, 18)
    stats, report = as_eager(block, x)
    assert stats["elementwise_in_nhwc"] >= 1
    epilogues = [k.spec for k in report.kernels if k.kind == "gemm"]
    assert len(epilogues) == 3 and any("add" in spec and "relu" in spec for spec in epilogues)
    assert not any(k.kind == "pointwise" and "add" in k.spec for k in report.kernels)


def test_a_channels_last_input_is_read_where_it_lies():
    """A channels-last model's input: the 1x1 convolution's copy of it into NHWC moves nothing and is dropped."""
    torch.manual_seed(0)
    conv = nn.Conv2d(24, 8, 1).eval()
    x = torch.randn(2, 24, 7, 9).contiguous(memory_format=torch.channels_last)
    _, report = as_eager(conv, x)
    assert [k.kind for k in report.kernels if k.kind == "pointwise"] == []
