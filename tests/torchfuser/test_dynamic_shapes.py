"""torch.compile(backend="torchfuser") with shapes that change between calls: after the second shape Dynamo
hands the backend symbolic sizes, and torchfuser compiles a shape-specialised plan per concrete signature."""

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 8)).eval()


def test_changing_batch_sizes_each_run_fused_kernels():
    model = mlp()
    compiled = torch.compile(model, backend="torchfuser")  # dynamic=None: Dynamo's automatic dynamic shapes
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for batch in (3, 7, 33, 7, 0, 1):
            x = torch.randn(batch, 32)
            assert_close(compiled(x), model(x))
    titles = [r.title for r in reports]
    assert any("[7x32]" in t for t in titles) and any("[33x32]" in t for t in titles)
    assert sum("[7x32]" in t for t in titles) == 1  # the second batch of 7 reused its plan
    specialised = [r for r in reports if "[7x32]" in r.title or "[33x32]" in r.title]
    assert all([k.kind for k in r.kernels] == ["gemm", "reduction", "gemm"] and not r.fallbacks for r in specialised)


def test_training_with_changing_shapes_matches_eager_gradients():
    model = mlp().train()
    compiled = torch.compile(model, backend="torchfuser")
    for batch in (4, 9, 17):
        x = torch.randn(batch, 32, requires_grad=True)
        compiled(x).square().sum().backward()
        got, x.grad = x.grad, None
        model(x).square().sum().backward()
        assert_close(got, x.grad)


@pytest.mark.parametrize("seq", [[5, 9, 13]])
def test_sequence_lengths_of_an_attention_block(seq):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    compiled = torch.compile(layer, backend="torchfuser")
    with torch.no_grad():
        for t in seq:
            x = torch.randn(2, t, 32)
            assert_close(compiled(x), layer(x))
