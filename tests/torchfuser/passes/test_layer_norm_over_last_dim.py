"""layer_norm_over_last_dim: layer norms over several trailing dims run as row kernels, numerics as eager."""

import math

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.passes import PIPELINE
from torchfuser.passes.layer_norm_over_last_dim import NAME


def test_runs_before_the_row_reductions():
    assert PIPELINE.index("reduce_over_last_dim") < PIPELINE.index(NAME) < PIPELINE.index("fuse_reductions")


@pytest.mark.parametrize("shape, normalized, affine", [
    ((2, 3, 4, 5), [4, 5], True), ((2, 8, 3, 3), [8, 3, 3], True), ((4, 6, 1, 7), [1, 7], False),
    ((3, 5, 2), [5, 2], True), ((2, 3, 4, 5), [2, 3, 4, 5], True),
])
def test_layer_norm_over_trailing_dims_is_one_row_kernel(shape, normalized, affine):
    torch.manual_seed(0)
    model = nn.LayerNorm(normalized, elementwise_affine=affine).eval()
    if affine:
        nn.init.normal_(model.weight)
        nn.init.normal_(model.bias)
    x = torch.randn(shape) * 3 + 1
    x.view(-1)[5] = math.nan
    x.view(-1)[-1] = math.inf
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torchfuser.compile(model)(x)
    expected = model(x)
    assert_close(out, expected)
    assert out.stride() == expected.stride()
    assert [f.op for r in reports for f in r.fallbacks] == []
    assert [k.kind for r in reports for k in r.kernels] == ["reduction"]


def test_mean_and_rstd_keep_eager_s_shapes_for_the_backward():
    torch.manual_seed(0)
    model = nn.LayerNorm([6, 4])
    nn.init.normal_(model.weight)
    x = torch.randn(3, 5, 6, 4, requires_grad=True)
    torch._dynamo.reset()
    out = torchfuser.compile(model)(x)
    (gx, gw) = torch.autograd.grad(out.square().sum(), (x, model.weight))
    ex, ew = torch.autograd.grad(model(x).square().sum(), (x, model.weight))
    assert_close(out, model(x))
    assert_close(gx, ex, rtol=1e-4, atol=1e-4)
    assert_close(gw, ew, rtol=1e-4, atol=1e-4)


def test_trailing_dims_that_do_not_view_as_one_stay_as_they_are():
    """x transposed in its normalised dims: no view makes them one row; the layer norm keeps its reason."""
    torch.manual_seed(0)
    model = nn.LayerNorm([4, 5]).eval()
    x = torch.randn(2, 5, 4).transpose(1, 2)
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torchfuser.compile(model)(x)
    assert_close(out, model(x))
    assert any("more than the last dim" in f.reason for r in reports for f in r.fallbacks)
