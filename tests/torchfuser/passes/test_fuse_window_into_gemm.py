"""fuse_window_into_gemm: a depthwise convolution (or pooling) whose result only a GEMM reads is made inside that
GEMM, chunk by chunk of channels; in kernels, as eager."""

import math
import warnings

import pytest
import torch
from torch import nn

from eager_compare import assert_close, compiled
from torchfuser.ir.kernels import GemmKernel, Window, WindowKernel
from torchfuser.ir.program import ProgramBuilder


def fused(report) -> int:
    return {p.name: p.stats for p in report.passes}["fuse_window_into_gemm"].get("windows_in_gemms", 0)


def kinds(report) -> list[str]:
    return [k.kind for k in report.kernels]


def inverted_residual(channels: int, hidden: int, kernel, stride, padding, dilation=1) -> nn.Module:
    """MobileNetV2's block without its residual: 1x1 expand, depthwise, 1x1 project, batch norms and ReLU6."""
    def norm(c):
        bn = nn.BatchNorm2d(c)
        bn.running_mean.uniform_(-0.5, 0.5), bn.running_var.uniform_(0.5, 1.5), bn.weight.data.uniform_(0.5, 1.5)
        return bn
    return nn.Sequential(
        nn.Conv2d(channels, hidden, 1, bias=False), norm(hidden), nn.ReLU6(),
        nn.Conv2d(hidden, hidden, kernel, stride, padding, dilation, groups=hidden, bias=False), norm(hidden),
        nn.ReLU6(), nn.Conv2d(hidden, channels, 1, bias=False), norm(channels)).eval()


BLOCKS = {  # (kernel, stride, padding, dilation)
    "3x3 pad 1": (3, 1, 1, 1),
    "3x3 stride 2 pad 1": (3, 2, 1, 1),
    "5x5 pad 2": (5, 1, 2, 1),
    "3x3 no padding": (3, 1, 0, 1),
    "3x3 dilation 2 pad 2": (3, 1, 2, 2),
}


@pytest.mark.parametrize("hidden", [48, 12, 7])  # channel chunks of 16 (AVX-512) or 8, 4, element by element
@pytest.mark.parametrize("name", list(BLOCKS))
def test_depthwise_then_project_is_one_kernel_as_eager(name, hidden):
    torch.manual_seed(0)
    block = inverted_residual(8, hidden, *BLOCKS[name])
    x = torch.randn(2, 8, 11, 9) * 2
    x[0, 1, 3, 4], x[1, 2, 0, 0], x[1, 3, 10, 8] = math.nan, math.inf, -math.inf
    out, report = compiled(block, x)
    assert_close(out, block(x))
    assert report.fallbacks == []
    assert fused(report) == 1
    assert "window" not in kinds(report) and kinds(report).count("gemm") == 2


def test_mobilenet_block_with_its_residual():
    torch.manual_seed(0)
    block = inverted_residual(16, 96, 3, 1, 1)
    fn = lambda x: x + block(x)  # noqa: E731
    x = torch.randn(2, 16, 14, 14)
    out, report = compiled(fn, x)
    assert_close(out, fn(x))
    assert report.fallbacks == [] and fused(report) == 1


def test_max_pool_then_pointwise_conv():
    """A pooling's window kernel is a producer too: its max, NaN winning as in eager, made inside the GEMM."""
    torch.manual_seed(0)
    conv = nn.Conv2d(16, 40, 1).eval()
    fn = lambda x: conv(nn.functional.max_pool2d(x, 3, 2, 1))  # noqa: E731
    x = torch.randn(2, 16, 9, 10).contiguous(memory_format=torch.channels_last)
    x[0, 2, 4, 4], x[1, 5, 0, 0] = math.nan, -math.inf
    out, report = compiled(fn, x)
    assert_close(out, fn(x))
    assert report.fallbacks == []
    assert fused(report) == 1 and kinds(report) == ["gemm"]  # the 1x1 conv's copy of its input moved nothing


def test_a_window_result_read_twice_is_stored_once_for_both():
    torch.manual_seed(0)
    dw = nn.Conv2d(16, 16, 3, 1, 1, groups=16).eval()
    pw = nn.Conv2d(16, 24, 1).eval()
    fn = lambda x: (lambda y: pw(y).sum() + y.sum())(torch.relu(dw(x)))  # noqa: E731
    x = torch.randn(2, 16, 8, 8).contiguous(memory_format=torch.channels_last)
    out, report = compiled(fn, x)
    assert_close(out, fn(x), rtol=1e-4, atol=1e-3)  # two sums over 3072 values
    assert fused(report) == 0


def _program(op: str):
    """in0 op in1."""
    builder = ProgramBuilder(["float32", "float32"])
    return builder.build([builder.emit(op, (0, 1), "float32")])


@pytest.mark.parametrize("extra", ["row", "bcast", "strided"])
@pytest.mark.parametrize("x_layout", ["channels innermost", "channel stride"])
@pytest.mark.parametrize("n", [32, 40, 70])  # one panel, a ragged second one, three
def test_kernel_with_a_producer_against_its_reference(n, x_layout, extra):
    """The node on its own: the producer's extras by layout, x with or without contiguous channels (vectors or
    element by element), N over several panels with a ragged last one, M with tail rows and K = 512 channels
    (two K blocks: partial sums through C)."""
    torch.manual_seed(0)
    window = Window(2, 7, 9, 512, 3, 3, 1, 2, 1, 1)  # stride 2 along W, padding 1
    x = torch.randn(2, 7, 9, 512)
    if x_layout == "channel stride":
        x = torch.randn(2, 512, 7, 9).permute(0, 2, 3, 1)
    x[0, 3, 4, 5], x[1, 0, 0, 9] = math.nan, math.inf
    taps = torch.randn(9, 512)
    rows = window.rows
    e = {"row": torch.randn(rows, 512), "bcast": torch.randn(rows, 1), "strided": torch.randn(512, rows).t()}[extra]
    producer = WindowKernel(window, "sum", _program("mul"), 0)
    b, bias = torch.randn(512, n) / 16, torch.randn(n)
    kernel = GemmKernel(_program("add"), 1, producer=producer)
    assert kernel.mnk([x, b, bias, taps, e]) == (rows, 512, n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a kernel that fails to build runs in PyTorch, with a warning
        out = kernel(x, b, bias, taps, e)
    expected = nn.functional.conv2d(x.permute(0, 3, 1, 2), taps.t().reshape(512, 1, 3, 3), None, (1, 2), 1,
                                    groups=512).permute(0, 2, 3, 1).reshape(rows, 512) * e
    assert_close(out, expected @ b + bias, rtol=1e-4, atol=1e-4)  # sums over 512 channels
    assert_close(out, kernel.reference(x, b, bias, taps, e), rtol=1e-4, atol=1e-4)


def test_producer_runs_the_packed_schedule_only():
    from torchfuser.runtime.device import get_device
    from torchfuser.runtime.gemm_launch import candidate_variants
    variants = candidate_variants(get_device(), None, produced=True)
    assert variants and {v.schedule for v in variants} == {"packed"}


def test_pass_can_be_switched_off():
    torch.manual_seed(0)
    block = inverted_residual(8, 32, 3, 1, 1)
    x = torch.randn(2, 8, 6, 6)
    out, report = compiled(block, x, disable=["fuse_window_into_gemm"])
    with torch.no_grad():
        assert_close(out, block(x))
    assert "window" in kinds(report)
