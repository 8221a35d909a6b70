"""conv_as_gemm: convolutions run as GEMM kernels that read their input's patches in place, numerics as eager."""

import re

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close, compiled
from torchfuser.passes import PIPELINE
from torchfuser.passes.conv_as_gemm import NAME
from torchfuser.runtime import gemm_launch

CONV_OPS = ("aten.convolution.default",)


def test_in_the_default_pipeline_after_folding_and_before_the_concatenation_and_gemm_passes():
    assert PIPELINE.index("fold_batch_norm") < PIPELINE.index(NAME) < PIPELINE.index("cat_as_last_dim")
    assert PIPELINE.index(NAME) < PIPELINE.index("merge_sibling_gemms")


@pytest.mark.parametrize("kernel", [1, 3, 5, 7])
@pytest.mark.parametrize("stride", [1, 2])
def test_conv2d_kernel_sizes_and_strides(kernel, stride):
    torch.manual_seed(kernel + stride)
    conv = nn.Conv2d(3, 5, kernel, stride=stride, padding=kernel // 2).eval()
    x = torch.randn(2, 3, 11, 9)
    out, report = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x))
    assert not [f for f in report.fallbacks if f.op in CONV_OPS]
    assert [k.kind for k in report.kernels].count("gemm") == 1
    assert out.is_contiguous()


@pytest.mark.parametrize("conv, shape", [
    (nn.Conv2d(4, 6, 3, dilation=2, padding=2, bias=False), (1, 4, 8, 13)),
    (nn.Conv2d(2, 3, (3, 1), stride=(2, 1), padding=(1, 0)), (3, 2, 7, 5)),
    (nn.Conv1d(4, 6, 3, padding=1), (2, 4, 17)),
    (nn.Conv1d(4, 6, 5, stride=2, dilation=2), (2, 4, 23)),
    (nn.Conv1d(80, 16, 3, padding=1), (1, 80, 30)),  # Whisper's front-end, narrowed
])
def test_dilation_rectangular_kernels_and_conv1d(conv, shape):
    conv = conv.eval()
    x = torch.randn(shape)
    out, report = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x))
    assert not [f for f in report.fallbacks if f.op in CONV_OPS]


class AfterAConvolution(nn.Module):
    """conv reading the result of a 1x1 convolution (channels-last between them), not the model's NCHW input."""

    def __init__(self, conv: nn.Module):
        super().__init__()
        channels = conv.in_channels
        self.first = (nn.Conv1d if isinstance(conv, nn.Conv1d) else nn.Conv2d)(channels, channels, 1)
        self.conv = conv

    def forward(self, x):
        return self.conv(self.first(x))


LAYOUTS = {"model input": lambda conv: conv, "after a convolution": AfterAConvolution}


def reads_channels_first(gemm) -> bool:
    """The GEMM's window reads an NCHW input (ir/window.Window.text)."""
    return re.search(r"window=\S*,channels-first", gemm.spec) is not None


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("width,variant", [(w, v) for w, variants in gemm_launch.PACKED_VARIANTS.items()
                                           for v in variants[:3]])
def test_the_gemm_reads_the_patches_in_place_in_every_packed_variant(width, variant, layout, monkeypatch, tmp_path):
    """No im2col copy: the GEMM kernel takes the patches node and reads the padded input itself (the model's
    NCHW input, or a convolution's channels-last result); K blocks that end inside a tap's run of channels
    (C = 37, K = 333) and ragged tiles, every variant."""
    import torchfuser.runtime.autotune as autotune

    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: width)
    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "1")
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))  # a tuning database of its own
    monkeypatch.setattr(autotune, "candidate_variants",
                        lambda device, *_, **__: [gemm_launch.GemmVariant("packed", *variant)])
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 0)
    conv = nn.Sequential(LAYOUTS[layout](nn.Conv2d(37, 45, 3, stride=2, padding=1)), nn.ReLU()).eval()
    x = torch.randn(3, 37, 13, 10)
    out, report = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x), rtol=1e-4, atol=1e-4)
    (gemm,) = [k for k in report.kernels if k.kind == "gemm" and any(n.startswith("tf_conv_patches") for n in k.nodes)]
    assert "window=" in gemm.spec and reads_channels_first(gemm) == (layout == "model input")
    assert not any("as_strided" in n for k in report.kernels for n in k.nodes)


@pytest.mark.parametrize("conv, shape", [
    (nn.Conv2d(16, 12, 3, padding=1), (2, 16, 9, 7)),
    (nn.Conv2d(8, 12, 5, stride=2, padding=2), (3, 8, 11, 10)),
    (nn.Conv2d(9, 5, 3, dilation=2, padding=(2, 3)), (2, 9, 6, 8)),
    (nn.Conv2d(8, 4, (1, 3), stride=(1, 2), padding=(0, 1)), (2, 8, 5, 9)),
    (nn.Conv1d(24, 16, 3, stride=2, padding=1), (2, 24, 31)),
])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_padding_of_eight_or_more_channels_is_read_as_bounds(conv, shape, layout):
    """No padded copy of the input: taps in the padding read zeros; NaN and inf at the borders as eager."""
    torch.manual_seed(0)
    conv = LAYOUTS[layout](conv).eval()
    x = torch.randn(shape)
    x[0, 1, 0], x[-1, 2, -1] = float("nan"), float("inf")
    out, report = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x))
    assert not [f for f in report.fallbacks if f.op in CONV_OPS]
    assert not any("cat" in n for k in report.kernels for n in k.nodes), [k.nodes for k in report.kernels]


@pytest.mark.parametrize("conv, shape", [
    (nn.Conv1d(80, 24, 3, padding=1), (2, 80, 50)),  # Whisper's front-end, narrowed
    (nn.Conv1d(16, 8, 3, stride=2), (3, 16, 21)),  # unpadded: the taps at offsets from each row's corner
    (nn.Conv2d(12, 8, (3, 5), stride=(2, 1), padding=(1, 2), dilation=(1, 2)), (2, 12, 9, 11)),
])
def test_a_models_nchw_input_is_read_where_it_lies(conv, shape):
    """A contiguous NCHW (NCL) input that no convolution made is not copied channels-last first: the GEMM reads
    each tap's channels a plane apart, one kernel in all."""
    conv = conv.eval()
    x = torch.randn(shape)
    x[0, 3, 0], x[-1, 5, -1] = float("nan"), float("inf")
    out, report = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x))
    (gemm,) = report.kernels
    assert gemm.kind == "gemm" and reads_channels_first(gemm)


def test_channels_last_input_with_specials():
    conv = nn.Conv2d(3, 4, 3, padding=1).eval()
    x = torch.randn(2, 3, 6, 5).to(memory_format=torch.channels_last)
    x[0, 1, 2, 2], x[1, 0, 5, 4] = float("nan"), float("inf")
    out, _ = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x))


def test_conv_batch_norm_relu_and_a_residual_block():
    torch.manual_seed(0)

    class Basic(nn.Module):
        def __init__(self, c=8):
            super().__init__()
            self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            for bn in (self.bn1, self.bn2):
                bn.running_mean.uniform_(-1, 1)
                bn.running_var.uniform_(0.5, 2)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(self.bn2(self.conv2(y)) + x)

    block = Basic().eval()
    x = torch.randn(2, 8, 9, 9)
    out, report = compiled(block, x)
    with torch.no_grad():
        assert_close(out, block(x), rtol=1e-4, atol=1e-4)
    assert {f.op for f in report.fallbacks} <= {"aten._native_batch_norm_legit_no_training.default"}


@pytest.mark.parametrize("groups", [2, 4])
def test_grouped_and_depthwise_convolutions_stay_in_pytorch_with_the_reason(groups):
    conv = nn.Conv2d(4, 8, 3, padding=1, groups=groups).eval()
    x = torch.randn(1, 4, 5, 5)
    out, report = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x))
    (fallback,) = report.fallbacks
    assert fallback.op == "aten.convolution.default" and "grouped convolution" in fallback.reason


def test_training_gradients_match():
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 5, 5, requires_grad=True)
    torch._dynamo.reset()
    out = torchfuser.compile(conv)(x)
    (gx, gw) = torch.autograd.grad(out.square().sum(), (x, conv.weight))
    ex, ew = torch.autograd.grad(conv(x).square().sum(), (x, conv.weight))
    assert_close(gx, ex, rtol=1e-4, atol=1e-4)
    assert_close(gw, ew, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("conv, shape", [
    (nn.Conv2d(6, 5, 1), (2, 6, 7, 9)),                 # a 1x1 convolution: its NHWC input is A
    (nn.Conv2d(3, 8, 4, stride=4), (2, 3, 12, 16)),      # patches that tile the input: one reordering copy
    (nn.Conv2d(3, 8, (2, 3), stride=(2, 3)), (2, 3, 6, 9)),
    (nn.Conv1d(6, 5, 4, stride=4), (2, 6, 20)),
    (nn.Conv1d(6, 5, 1), (2, 6, 11)),
])
def test_pointwise_and_tiling_convolutions_run_as_plain_gemms(conv, shape):
    """Patches that tile a contiguous input are copied once, from NCHW in (C, KH, KW) order, and B is the weight
    viewed as [Cout, C * KH * KW] and transposed: no channels-last copy of the input, no weight transform."""
    torch.manual_seed(0)
    conv = conv.eval()
    x = torch.randn(shape)
    out, report = compiled(conv, x)
    with torch.no_grad():
        assert_close(out, conv(x))
    assert report.fallbacks == []
    gemms = [k for k in report.kernels if k.kind == "gemm"]
    assert len(gemms) == 1 and "tf_conv_patches" not in gemms[0].nodes
    if conv.kernel_size != (1,) * len(conv.kernel_size):  # tiling
        nodes = [n for k in report.kernels for n in k.nodes]
        assert not any("weight_as_matrix" in n for n in nodes), nodes
        copies = [k for k in report.kernels if k.kind == "pointwise"]
        # the patches: the GEMM stores its result in eager's layout itself (gemm_result_channels_first)
        assert len(copies) == 1, [k.nodes for k in copies]
    assert out.is_contiguous()


@pytest.mark.parametrize("conv, shape", [
    (nn.Conv2d(3, 5, 3, stride=2, padding=1), (2, 3, 11, 9)),
    (nn.Conv2d(4, 6, 3, dilation=2, padding=2, bias=False), (1, 4, 8, 13)),
    (nn.Conv1d(6, 8, 5, stride=2, padding=2), (2, 6, 21)),
    (nn.Conv2d(8, 6, 3, padding=1), (2, 8, 7, 6)),  # its padding read as bounds: PyTorch's convolution pads
    (nn.Conv1d(12, 8, 3, padding=1), (2, 12, 9)),
])
def test_the_extern_variant_is_pytorchs_convolution_with_the_gemms_epilogue(conv, shape, monkeypatch, tmp_path):
    """With no template variant to time, the autotuner's choice is PyTorch's convolution of the padded
    channels-last input (B turned back into the weight), the bias and activation in the epilogue kernel."""
    import torchfuser.runtime.autotune as autotune

    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "1")
    monkeypatch.setattr(gemm_launch, "PACKED_VARIANTS", {width: () for width in gemm_launch.PACKED_VARIANTS})
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 0)
    torch.manual_seed(3)
    model = nn.Sequential(conv, nn.ReLU()).eval()
    x = torch.randn(shape)
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        fused = torchfuser.compile(model)
        assert_close(fused(x), model(x))
        assert_close(fused(x), model(x))  # the weight made from B reused
        model[0].weight.mul_(-0.5)  # a new weight version: B and the weight made from it follow
        assert_close(fused(x), model(x))
    (gemm,) = [k for k in reports[-1].kernels if k.kind == "gemm"]
    assert gemm.tuning["winner"] == "extern" and "conv2d" in " ".join(gemm.transforms)


def test_off_cpus_a_convolution_gemm_runs_in_pytorch_with_the_reason(monkeypatch):
    """The implicit patches are read by the packed (CPU) schedule only: elsewhere the node falls back, named."""
    from torchfuser.runtime.device import Device

    monkeypatch.setattr(Device, "type_name", property(lambda self: "GPU"))
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 5, 3, padding=1), nn.ReLU()).eval()
    x = torch.randn(2, 3, 7, 6)
    out, report = compiled(block, x)
    with torch.no_grad():
        assert_close(out, block(x))
    assert any("no kernel schedule" in f.reason and "packed schedule" in f.reason for f in report.fallbacks), [
        f.reason for f in report.fallbacks]


def test_max_pooling_between_convolutions_reads_their_channels_last_result_as_a_window_kernel():
    """ResNet's stem: the pooling follows the convolution's channels-last result (channels_last_between_convs),
    so it is a window kernel over it, with no layout copy on either side."""
    torch.manual_seed(0)
    stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1), nn.Conv2d(16, 8, 3, padding=1),
                         nn.ReLU()).eval()
    x = torch.randn(2, 3, 30, 26)
    out, report = compiled(stem, x)
    with torch.no_grad():
        assert_close(out, stem(x))
    kinds = [k.kind for k in report.kernels]
    assert "window" in kinds and not [f for f in report.fallbacks if f.op in CONV_OPS]
    stats = {p.name: p.stats for p in report.passes}["channels_last_between_convs"]
    assert stats["copies_back"] == 0
