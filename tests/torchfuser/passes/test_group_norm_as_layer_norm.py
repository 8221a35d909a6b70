"""group_norm_as_layer_norm (opt-in): group norm as layer-norm rows and a per-channel affine, numerics as eager."""

import math

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.passes import PIPELINE, unregister_pass
from torchfuser.passes.group_norm_as_layer_norm import NAME, register


@pytest.fixture(autouse=True)
def registered():
    register()
    yield
    unregister_pass(NAME)


def test_registers_before_the_fusions():
    assert PIPELINE.index(NAME) < PIPELINE.index("fuse_reductions")


@pytest.mark.parametrize("shape, groups, affine", [((2, 8, 5, 3), 4, True), ((3, 6, 7), 3, False), ((2, 6), 2, True),
                                                   ((1, 32, 9, 9), 32, True), ((2, 12, 4, 4), 1, True)])
def test_group_norm_runs_as_a_row_reduction(shape, groups, affine):
    torch.manual_seed(0)
    model = nn.GroupNorm(groups, shape[1], affine=affine).eval()
    if affine:
        nn.init.normal_(model.weight)
        nn.init.normal_(model.bias)
    x = torch.randn(shape) * 3 + 1
    x.view(-1)[5] = math.nan
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        assert_close(torchfuser.compile(model)(x), model(x))
    assert [f.op for r in reports for f in r.fallbacks] == []
    assert any(k.kind == "reduction" for r in reports for k in r.kernels)


def test_mean_and_rstd_results_are_group_norms_own():
    fn = lambda x: torch.ops.aten.native_group_norm(x, None, None, 2, 8, 15, 4, 1e-5)  # noqa: E731
    x = torch.randn(2, 8, 5, 3)
    torch._dynamo.reset()
    for actual, expected in zip(torchfuser.compile(fn)(x), fn(x)):
        assert_close(actual, expected)


@pytest.mark.parametrize("width", [16, 15])
def test_the_per_channel_affine_reads_its_operands_as_channels(width):
    """[C] operands broadcast along the middle dim take the CHANNEL layout: vectors where a channel's run
    holds whole vectors (H * W = 16 * 4), element by element otherwise; values as eager either way."""
    model = nn.GroupNorm(2, 6).eval()
    nn.init.normal_(model.weight)
    x = torch.randn(2, 6, 4, width)
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        assert_close(torchfuser.compile(model)(x), model(x))
    (affine,) = [k for r in reports for k in r.kernels if k.kind == "pointwise"]
    assert "channel" in affine.spec and ("vector=16" in affine.spec) == (width == 16)
