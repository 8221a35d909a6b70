"""pointwise_conv_as_gemm (with conv_as_gemm, which takes them first, off): 1x1 stride-1 convolutions run as plain
GEMM kernels over their channels-last input, their bias, folded batch norm and activation in the GEMM's epilogue;
numerics and strides as eager."""

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.passes import PIPELINE
from torchfuser.passes.pointwise_conv_as_gemm import NAME

CONV = "aten.convolution.default"


def compiled(model, x, **options):
    """With conv_as_gemm, which takes every convolution this pass would (the same rewrite), switched off."""
    options.setdefault("disable", ("conv_as_gemm",))
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torchfuser.compile(model, **options)(x)
    return out, reports[-1]


def in_kernels_as_eager(model, x):
    """Compiled: eager's values and strides, nothing left to PyTorch; the report."""
    out, report = compiled(model, x)
    with torch.no_grad():
        expected = model(x)
    assert_close(out, expected)
    assert out.stride() == expected.stride()
    assert not report.fallbacks
    return report


def stats(report) -> dict:
    return {p.name: p.stats for p in report.passes}[NAME]


def test_in_the_default_pipeline_before_the_layout_and_depthwise_passes():
    assert PIPELINE.index("fold_batch_norm") < PIPELINE.index(NAME) < PIPELINE.index("channels_last_between_convs")
    assert PIPELINE.index(NAME) < PIPELINE.index("depthwise_conv_as_windows") < PIPELINE.index("fuse_gemm_epilogue")


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("bias", [True, False])
def test_1x1_conv2d_is_one_gemm_kernel_with_eager_numerics_and_strides(bias, layout):
    torch.manual_seed(0)
    conv = nn.Conv2d(7, 13, 1, bias=bias).eval()
    x = torch.randn(3, 7, 9, 5)
    x[0, 2, 3, 4], x[2, 6, 0, 0] = float("nan"), float("inf")
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    report = in_kernels_as_eager(conv, x)
    assert [k.kind for k in report.kernels].count("gemm") == 1
    assert stats(report)["convolutions"] == 1


@pytest.mark.parametrize("shape", [(3, 7, 9, 5), (1, 7, 4, 4), (2, 7, 17)])  # NCHW, one image, NCL
def test_1x1_conv_of_a_contiguous_input_reads_it_in_place(shape):
    """Per image, the GEMM's A is the input transposed, read where it lies: no copy of it into channels-last, and
    the result stored in eager's layout by the GEMM itself (no copy of it either)."""
    torch.manual_seed(0)
    conv = (nn.Conv2d if len(shape) == 4 else nn.Conv1d)(7, 13, 1).eval()
    block = nn.Sequential(conv, nn.ReLU6()).eval()
    x = torch.randn(shape) * 4
    x.view(-1)[5], x.view(-1)[-1] = float("nan"), float("-inf")
    report = in_kernels_as_eager(block, x)
    assert [k.kind for k in report.kernels] == ["gemm"]
    gemm = next(k for k in report.kernels if k.kind == "gemm")
    assert "bmm" in " ".join(gemm.nodes) and any("hardtanh" in n for n in gemm.nodes)


def test_1x1_conv1d_and_zero_batch():
    torch.manual_seed(1)
    conv = nn.Conv1d(6, 10, 1).eval()
    for x in (torch.randn(2, 6, 17), torch.randn(0, 6, 17)):
        in_kernels_as_eager(conv, x)


def test_folded_batch_norm_and_relu6_join_the_gemm():
    torch.manual_seed(2)
    norm = nn.BatchNorm2d(12).eval()
    norm.running_var.uniform_(0.5, 2)
    norm.running_mean.uniform_(-1, 1)
    model = nn.Sequential(nn.Conv2d(8, 12, 1, bias=False), norm, nn.ReLU6()).eval()
    report = in_kernels_as_eager(model, torch.randn(2, 8, 6, 7) * 4)
    # the copy into channels-last before the GEMM, the GEMM with the affine and clamp, the copy back
    assert [k.kind for k in report.kernels].count("gemm") == 1 and len(report.kernels) <= 3


class InvertedResidual(nn.Module):
    """MobileNetV2's block: expand 1x1, depthwise 3x3, project 1x1, residual."""

    def __init__(self, c=8, expand=4, stride=1):
        super().__init__()
        wide = c * expand
        self.expand = nn.Sequential(nn.Conv2d(c, wide, 1, bias=False), nn.BatchNorm2d(wide), nn.ReLU6())
        self.depthwise = nn.Sequential(nn.Conv2d(wide, wide, 3, stride, 1, groups=wide, bias=False),
                                       nn.BatchNorm2d(wide), nn.ReLU6())
        self.project = nn.Sequential(nn.Conv2d(wide, c, 1, bias=False), nn.BatchNorm2d(c))
        self.residual = stride == 1

    def forward(self, x):
        y = self.project(self.depthwise(self.expand(x)))
        return x + y if self.residual else y


@pytest.mark.parametrize("stride", [1, 2])
def test_mobilenet_block_runs_without_pytorch_and_keeps_channels_last_inside(stride):
    torch.manual_seed(3)
    model = InvertedResidual(stride=stride).eval()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_var.uniform_(0.5, 2)
    report = in_kernels_as_eager(model, torch.randn(2, 8, 11, 9))
    assert stats(report)["convolutions"] == 2
    layout = {p.name: p.stats for p in report.passes}["channels_last_between_convs"]
    assert layout["copies_dropped"] >= 2  # the expand's copy back to NCHW and the project's copy into NHWC


@pytest.mark.parametrize("conv, shape", [
    (nn.Conv2d(4, 6, 3, padding=1), "3x3"),
    (nn.Conv2d(4, 6, 1, stride=2), "1x1 convolution with stride [2, 2]"),
    (nn.Conv2d(4, 6, 1, padding=1), "padding [1, 1]"),
    (nn.Conv1d(4, 6, 5), "a 5 convolution"),
])
def test_other_convolutions_stay_in_pytorch_with_the_reason(conv, shape):
    conv = conv.eval()
    x = torch.randn(2, 4, 9) if isinstance(conv, nn.Conv1d) else torch.randn(2, 4, 9, 8)
    out, report = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x))
    reasons = [f.reason for f in report.fallbacks if f.op == CONV]
    assert len(reasons) == 1 and shape in reasons[0] and "1x1 stride-1 convolutions only" in reasons[0], reasons


def test_a_grouped_1x1_convolution_stays_in_pytorch():
    conv = nn.Conv2d(4, 6, 1, groups=2).eval()
    x = torch.randn(2, 4, 5, 5)
    out, report = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x))
    assert [f.op for f in report.fallbacks] == [CONV]
    assert "grouped" in report.fallbacks[0].reason


def test_disabled_leaves_the_convolution_to_pytorch():
    conv = nn.Conv2d(4, 6, 1).eval()
    x = torch.randn(2, 4, 5, 5)
    out, report = compiled(conv, x, disable=(NAME, "conv_as_gemm"))
    with torch.no_grad():
        assert_close(out, conv(x))
    assert [f.op for f in report.fallbacks] == [CONV]
    assert NAME in report.fallbacks[0].reason


def test_a_tuned_gemm_with_a_relu6_epilogue(monkeypatch, tmp_path):
    """The autotuner checks each candidate against the epilogue's reference (ReLU6's literal bounds)."""
    from torchfuser.runtime import autotune, gemm_launch

    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "1")  # the suite runs with the search off
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 0)
    monkeypatch.setattr(autotune, "REPEATS", 1)
    monkeypatch.setattr(autotune, "candidate_variants", lambda device, *_, **__: [
        gemm_launch.default_variant(device.type_name, 16, None)])  # one variant: the check, not the timing
    model = nn.Sequential(nn.Conv2d(8, 16, 1), nn.ReLU6()).eval()
    x = torch.randn(2, 8, 5, 6) * 4
    out, report = compiled(model, x)
    with torch.no_grad():
        assert_close(out, model(x))
    (gemm,) = [k for k in report.kernels if k.kind == "gemm"]
    assert gemm.tuning["source"] == "tuned"
