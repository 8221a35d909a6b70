"""gemm_result_channels_first: a convolution's GEMM whose result is only copied into eager's NCHW (NCL) layout
stores it so, and the copy goes; in kernels, as eager, in every GEMM schedule."""

import math
import warnings

import pytest
import torch
from torch import nn

from eager_compare import assert_close, compiled
from torchfuser.ir.kernels import GemmKernel
from torchfuser.ir.program import ProgramBuilder
from torchfuser.runtime import gemm_launch


def stats(report) -> dict:
    return {p.name: p.stats for p in report.passes}["gemm_result_channels_first"]


@pytest.mark.parametrize("conv, shape", [
    (nn.Conv2d(7, 13, 1), (2, 7, 5, 9)),          # a bmm per image (an NCHW input read in place)
    (nn.Conv2d(5, 40, 3, padding=1), (3, 5, 6, 7)),  # implicit patches of a channels-last copy: a plain mm
    (nn.Conv1d(6, 10, 3, padding=1), (2, 6, 13)),
])
def test_a_convolutions_result_is_stored_in_eagers_layout(conv, shape):
    torch.manual_seed(0)
    block = nn.Sequential(conv, nn.ReLU6()).eval()
    x = torch.randn(shape) * 4
    x.view(-1)[3], x.view(-1)[-2] = float("nan"), float("inf")
    out, report = compiled(block, x)
    with torch.no_grad():
        expected = block(x)
    assert_close(out, expected)
    assert out.stride() == expected.stride()
    assert stats(report)["results_channels_first"] == 1 and stats(report)["copies_dropped"] == 1
    assert [k.kind for k in report.kernels].count("gemm") == 1


def test_a_residual_add_in_nchw_reads_the_channels_last_result():
    """MobileNetV2's last projection adds the block's NCHW input: the add kernel reads the GEMM's channels-last
    result across (cheaper than the GEMM storing columns of pixels), and computes the NCHW result itself."""
    torch.manual_seed(0)
    proj = nn.Conv2d(24, 8, 1).eval()
    fn = lambda x, y: x + proj(y)  # noqa: E731
    x, y = torch.randn(2, 8, 7, 9), torch.randn(2, 24, 7, 9).contiguous(memory_format=torch.channels_last)
    out, report = compiled(fn, x, y)
    assert_close(out, fn(x, y))
    assert stats(report)["results_channels_first"] == 0
    assert [k.kind for k in report.kernels] == ["gemm", "pointwise"]


def test_a_k_deeper_than_a_k_block_runs_in_one_block_channels_first():
    """K = 384, over the packed variants' K blocks: the GEMM runs K in one block and stores NCL itself."""
    torch.manual_seed(0)
    conv = nn.Conv1d(128, 16, 3, padding=1).eval()
    x = torch.randn(2, 128, 20)
    out, report = compiled(conv, x)
    with torch.no_grad():
        expected = conv(x)
    assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert out.stride() == expected.stride()
    assert stats(report)["results_channels_first"] == 1


def test_a_k_deeper_than_max_depth_keeps_its_row_major_result_and_the_copy(monkeypatch):
    """K over MAX_DEPTH (a panel too deep for L2 in one block): left as it was, K in blocks."""
    from torchfuser.passes import gemm_result_channels_first as channels_first

    monkeypatch.setattr(channels_first, "MAX_DEPTH", 256)
    torch.manual_seed(0)
    conv = nn.Conv1d(128, 16, 3, padding=1).eval()  # K = 384
    x = torch.randn(2, 128, 20)
    out, report = compiled(conv, x)
    assert_close(out, conv(x), rtol=1e-4, atol=1e-4)
    assert stats(report)["results_channels_first"] == 0


def _program(n_inputs: int):
    """in0 + in1 + ... : the accumulator and its extras."""
    builder = ProgramBuilder(["float32"] * n_inputs)
    value = 0
    for i in range(1, n_inputs):
        value = builder.emit("add", (value, i), "float32")
    return builder.build([value])


@pytest.mark.parametrize("variant", ["default", "rows 8x32", "strided 4x8", "extern", "packed 4x64 k128 r8",
                                     "packed 6x16 k256 r8"])  # 6 rows: no vector of 6 pixels (AVX2's 6x16)
@pytest.mark.parametrize("spatial, images, n", [((5, 7), 2, 70), ((4, 8), 3, 32), ((13,), 1, 20)])
def test_every_schedule_stores_channels_first(variant, spatial, images, n, monkeypatch):
    """The node on its own, against its reference and PyTorch: tiles across image boundaries and past M, a
    ragged panel, a per-column bias and a residual in the [M, N] frame."""
    if variant != "default":
        monkeypatch.setattr(gemm_launch, "default_variant", lambda *a, **k: gemm_launch.GemmVariant.parse(variant))
    torch.manual_seed(0)
    pixels = math.prod(spatial)
    m, k = images * pixels, 37
    a, b, bias, residual = torch.randn(m, k), torch.randn(k, n), torch.randn(n), torch.randn(m, n)
    kernel = GemmKernel(_program(3), 0, channels_first=spatial)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a kernel that fails to build runs in PyTorch, with a warning
        out = kernel(a, b, bias, residual)
    expected = (a @ b + bias + residual).view(images, pixels, n).transpose(1, 2).reshape(images, n, *spatial)
    assert out.shape == expected.shape and out.is_contiguous()
    assert_close(out, expected, rtol=1e-4, atol=1e-4)
    assert_close(out, kernel.reference(a, b, bias, residual), rtol=1e-4, atol=1e-4)


def test_a_linears_transposed_copy_is_its_gemms_store():
    """Not only convolutions: `linear(x).transpose(1, 2).contiguous()` (a sequence model handing NCL to a conv)."""
    torch.manual_seed(0)
    lin = nn.Linear(64, 48)
    fn = lambda x: torch.relu(lin(x)).transpose(1, 2).contiguous()  # noqa: E731
    x = torch.randn(3, 17, 64)
    out, report = compiled(fn, x)
    with torch.no_grad():
        expected = fn(x)
    assert_close(out, expected)
    assert out.stride() == expected.stride() and [k.kind for k in report.kernels] == ["gemm"]
