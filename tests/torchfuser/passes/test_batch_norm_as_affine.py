"""batch_norm_as_affine: inference batch norm runs in kernels as a per-channel affine, numerics as eager."""

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
        out = torchfuser.compile(model)(x)
    return out, reports[-1]


@pytest.mark.parametrize("norm", [nn.BatchNorm1d(5), nn.BatchNorm1d(5, affine=False), nn.BatchNorm1d(5, eps=1e-3)])
def test_batch_norm_then_relu_is_one_fused_affine(norm):
    model = nn.Sequential(with_statistics(norm), nn.ReLU()).eval()
    x = torch.randn(7, 5)
    x[0, 1], x[2, 3] = float("nan"), -float("inf")
    out, report = compiled(model, x)
    with torch.no_grad():
        assert_close(out, model(x))
    assert report.fallbacks == []
    (record,) = [p for p in report.passes if p.name == "batch_norm_as_affine"]
    assert record.stats["batch_norms"] == 1
    (fused,) = [k for k in report.kernels if "relu" in k.nodes]
    assert any(n.startswith("add") for n in fused.nodes)  # x * scale + shift and the relu: one kernel


@pytest.mark.parametrize("norm, shape", [(nn.BatchNorm1d(5), (3, 5, 7)), (nn.BatchNorm2d(6), (2, 6, 5, 3)),
                                         (nn.BatchNorm3d(3), (1, 3, 2, 3, 5))])
def test_batch_norm_over_spatial_dims_stays_in_pytorch_with_the_reason(norm, shape):
    model = nn.Sequential(with_statistics(norm), nn.ReLU()).eval()
    x = torch.randn(shape)
    out, report = compiled(model, x)
    with torch.no_grad():
        assert_close(out, model(x))
    (fallback,) = report.fallbacks
    assert "spatial dims" in fallback.reason


def test_an_empty_batch():
    norm = with_statistics(nn.BatchNorm1d(4))
    x = torch.randn(0, 4)
    out, _ = compiled(norm, x)
    with torch.no_grad():
        assert_close(out, norm(x))


def test_training_batch_norm_is_left_alone():
    norm = nn.BatchNorm2d(4).train()
    x = torch.randn(3, 4, 2, 2)
    expected = nn.BatchNorm2d(4).train()(x)
    out, report = compiled(norm, x)
    assert_close(out, expected)
    (record,) = [p for p in report.passes if p.name == "batch_norm_as_affine"]
    assert not record.modified
