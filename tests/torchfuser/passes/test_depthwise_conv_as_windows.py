"""depthwise_conv_as_windows: a channels-last depthwise convolution as one window kernel (any window, the
padding read as bounds, what follows in its epilogue); an NCHW one at stride 1 as a per-channel weighted sum of
one strided view per tap; in kernels, as eager."""

import math
import warnings

import pytest
import torch
from torch import nn

from eager_compare import assert_close, compiled


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


def kinds(report) -> list[str]:
    return [k.kind for k in report.kernels]


WINDOWS = {  # (kernel size, stride, padding, dilation)
    "1x1": (1, 1, 0, 1),
    "3x3 pad 1": (3, 1, 1, 1),
    "3x3 stride 2 pad 1": (3, 2, 1, 1),
    "5x5 pad 2": (5, 1, 2, 1),
    "5x5 stride 2 pad 2": (5, 2, 2, 1),
    "7x7 pad 3": (7, 1, 3, 1),
    "3x3 dilation 2 pad 2": (3, 1, 2, 2),
    "(1, 3) stride (1, 2)": ((1, 3), (1, 2), (0, 1), 1),
    "3x3 no padding": (3, 1, 0, 1),
    "2x2 pad 1 (output larger)": (2, 1, 1, 1),
}


@pytest.mark.parametrize("channels", [32, 12, 7])  # vectors of 16 (AVX-512) or 8, 4, element by element
@pytest.mark.parametrize("name", list(WINDOWS))
def test_channels_last_depthwise_is_one_kernel_with_its_activation(name, channels):
    torch.manual_seed(0)
    kernel, stride, padding, dilation = WINDOWS[name]
    block = nn.Sequential(nn.Conv2d(channels, channels, kernel, stride, padding, dilation, groups=channels),
                          nn.ReLU6()).eval()
    x = (torch.randn(2, channels, 9, 11) * 4).contiguous(memory_format=torch.channels_last)
    x[0, 1, 3, 4], x[1, 2, 0, 0], x[1, 3, 8, 10] = math.nan, math.inf, -math.inf
    out, report = compiled(block, x)
    assert_close(out, block(x))
    assert report.fallbacks == [] and rewritten(report) == 1
    assert kinds(report) == ["window"]
    assert {p.name: p.stats for p in report.passes}["fuse_gemm_epilogue"]["window_epilogue"] == 1


def test_channels_last_depthwise_without_bias_and_read_twice_keeps_its_result():
    """A result that two ops read takes no epilogue: the kernel stores the sum itself."""
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 16, 3, 1, 1, groups=16, bias=False).eval()
    fn = lambda x: (lambda y: torch.relu(y) * torch.sigmoid(y) + y)(conv(x))  # noqa: E731
    x = torch.randn(3, 16, 7, 5).contiguous(memory_format=torch.channels_last)
    out, report = compiled(fn, x)
    assert_close(out, fn(x))
    assert report.fallbacks == [] and "window" in kinds(report)


def test_channels_last_conv1d_is_a_depthwise_kernel():
    torch.manual_seed(0)
    conv = nn.Conv1d(24, 24, 4, padding=3, groups=24).eval()
    fn = lambda x: conv(x.transpose(1, 2))[..., :x.shape[1]]  # noqa: E731  x: [N, L, C], channels innermost
    x = torch.randn(3, 150, 24)  # rows longer than a work-item's run
    out, report = compiled(fn, x)
    assert_close(out, fn(x))
    assert report.fallbacks == [] and "window" in kinds(report)


def test_channels_last_zero_size_batch():
    conv = nn.Conv2d(16, 16, 3, padding=1, groups=16).eval()
    x = torch.randn(0, 16, 6, 6).contiguous(memory_format=torch.channels_last)
    out, report = compiled(conv, x)
    assert out.shape == (0, 16, 6, 6) and rewritten(report) == 1


def test_channels_last_float64_sums_its_windows():
    """The window kernel is float32: a float64 channels-last input takes the window sum."""
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=8).double().eval()
    x = torch.randn(2, 8, 6, 7, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    out, report = compiled(conv, x)
    assert_close(out, conv(x))
    assert rewritten(report) == 1 and "window" not in kinds(report)


@pytest.mark.parametrize("extra", ["row", "bcast", "strided"])
def test_depthwise_kernel_epilogue_extras_by_their_layout(extra):
    """The kernel run on its own against its reference: extras on [M, C] read c-contiguous, one per row, or
    through their strides (element by element)."""
    from torchfuser.ir.kernels.window import WindowKernel, Window
    from torchfuser.ir.program import ProgramBuilder
    torch.manual_seed(0)
    window = Window(2, 7, 9, 16, 3, 3, 2, 1, 1, 1)
    x = torch.randn(2, 16, 7, 9).permute(0, 2, 3, 1)  # NHWC view of a contiguous NCHW tensor: channel stride 63
    taps = torch.randn(9, 16)
    e = {"row": torch.randn(window.rows, 16), "bcast": torch.randn(window.rows, 1),
         "strided": torch.randn(16, window.rows).t()}[extra]
    builder = ProgramBuilder(["float32", "float32"])
    program = builder.build([builder.emit("mul", (builder.emit("add", (0, 1), "float32"), 1), "float32")])
    kernel = WindowKernel(window, "sum", program, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a kernel that fails to build runs in PyTorch, with a warning
        assert_close(kernel(x, taps, e), kernel.reference(x, taps, e))
        assert_close(kernel(x.contiguous(), taps, e), kernel.reference(x, taps, e))


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
