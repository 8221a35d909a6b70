"""fold_batch_norm: an inference batch norm after a convolution is folded into its weights, numerics as eager."""

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close


def with_statistics(norm: nn.Module) -> nn.Module:
    torch.manual_seed(1)
    norm.running_mean.uniform_(-1, 1)
    norm.running_var.uniform_(0.25, 4)
    if norm.affine:
        norm.weight.data.uniform_(0.5, 2)
        norm.bias.data.uniform_(-1, 1)
    return norm.eval()


def compiled(model, x):
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        fused = torchfuser.compile(model)
        out = fused(x)
    return fused, out, reports[-1]


def folded(report) -> int:
    return {p.name: p.stats for p in report.passes}["fold_batch_norm"]["folded"]


CONVS = {
    "2d 3x3 padded, no bias": lambda: nn.Conv2d(3, 6, 3, padding=1, bias=False),
    "2d 1x1 with bias": lambda: nn.Conv2d(4, 6, 1),
    "2d 5x5 stride 2 dilation 2": lambda: nn.Conv2d(3, 6, 5, stride=2, dilation=2, padding=2),
    "2d grouped": lambda: nn.Conv2d(4, 6, 3, groups=2),
    "2d depthwise": lambda: nn.Conv2d(6, 6, 3, padding=1, groups=6, bias=False),
    "1d 7 stride 2": lambda: nn.Conv1d(4, 6, 7, stride=2, padding=3),
}


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("name", list(CONVS))
def test_conv_then_batch_norm_runs_as_one_folded_conv(name, affine):
    conv = CONVS[name]()
    one_d = isinstance(conv, nn.Conv1d)
    norm = (nn.BatchNorm1d if one_d else nn.BatchNorm2d)(conv.out_channels, affine=affine, eps=1e-3)
    model = nn.Sequential(conv, with_statistics(norm), nn.ReLU6()).eval()
    x = torch.randn(2, conv.in_channels, 19) if one_d else torch.randn(2, conv.in_channels, 13, 11)
    _, out, report = compiled(model, x)
    with torch.no_grad():
        assert_close(out, model(x))
    assert folded(report) == 1
    # no batch norm left; the convolutions run in kernels too (conv_as_gemm, depthwise_conv_as_windows), but the
    # grouped one
    assert [f.op for f in report.fallbacks] == (["aten.convolution.default"] if name == "2d grouped" else [])


def test_channels_last_nan_and_inf_inputs():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), with_statistics(nn.BatchNorm2d(4))).eval()
    x = torch.randn(2, 3, 9, 8).contiguous(memory_format=torch.channels_last)
    x[0, 1, 2, 3], x[1, 0, 0, 0] = float("nan"), float("inf")
    _, out, report = compiled(model, x)
    with torch.no_grad():
        assert_close(out, model(x))
    assert folded(report) == 1


def test_new_statistics_are_folded_again():
    """The folded weights are kept while the weights and statistics are unchanged: an in-place update of the
    running variance (a new version) makes them anew."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), with_statistics(nn.BatchNorm2d(4))).eval()
    x = torch.randn(1, 3, 8, 8)
    fused, _, _ = compiled(model, x)
    with torch.no_grad():
        model[1].running_var.mul_(3.0)
        model[0].weight.add_(0.5)
        assert_close(fused(x), model(x))


def test_batch_norm_not_after_a_convolution_or_with_the_conv_read_elsewhere_is_not_folded():
    class ConvReadTwice(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.norm = nn.Conv2d(3, 4, 3), with_statistics(nn.BatchNorm2d(4))

        def forward(self, x):
            c = self.conv(x)
            return self.norm(c) + c

    for model in (ConvReadTwice().eval(), nn.Sequential(nn.ReLU(), with_statistics(nn.BatchNorm2d(3))).eval()):
        x = torch.randn(2, 3, 7, 7)
        _, out, report = compiled(model, x)
        with torch.no_grad():
            assert_close(out, model(x))
        assert folded(report) == 0
