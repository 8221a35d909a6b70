"""cat_as_last_dim: cats along inner dims become cats along the last dim of flattening views, copied exactly."""

import pytest
import torch

import torchfuser
from eager_compare import aten_graph, call_nodes
from torchfuser.passes.cat_as_last_dim import cat_as_last_dim

aten = torch.ops.aten


def exactly(fn, *inputs):
    """fn compiled equals eager bit for bit, with eager's strides; returns the report."""
    actual, expected = torchfuser.compile(fn)(*inputs), fn(*inputs)
    assert actual.shape == expected.shape and actual.stride() == expected.stride()
    assert torch.equal(actual, expected)
    return torchfuser.last_report()


def pass_record(report):
    return next(p for p in report.passes if p.name == "cat_as_last_dim")


def kv_append(past, new):
    return torch.cat([past, new], dim=-2)


@pytest.mark.parametrize("length", [1, 63, 64])
def test_a_kv_cache_append_becomes_a_row_kernel(length):
    past = torch.randn(1, 8, length, 64)
    new = torch.randn(1, 1, 8, 64).transpose(1, 2)  # [1, 8, 1, 64] as attention makes it: strided, size-1 dim
    report = exactly(kv_append, past, new)
    assert pass_record(report).stats["cats"] == 1 and report.fallbacks == []
    (kernel,) = report.kernels
    assert " rows=" in kernel.spec and f"n={length * 64}]" in kernel.spec  # one row per head, the cat along it


def test_the_rewrite_is_views_around_a_last_dim_cat():
    gm = aten_graph(lambda a, b: torch.cat([a, b], 1), torch.randn(2, 3, 4, 5), torch.randn(2, 1, 4, 5))
    assert cat_as_last_dim(gm).modified
    cats = [n for n in call_nodes(gm) if n.target is aten.cat.default]
    assert len(cats) == 1 and cats[0].args[1] == -1 and tuple(cats[0].meta["val"].shape) == (2, 80)
    assert [u.target for u in cats[0].users] == [aten.view.default]
    assert all(x.target is aten.view.default for x in cats[0].args[0])


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_every_inner_dim_with_odd_sizes(dim):
    shapes = [[3, 5, 7, 2], [3, 5, 7, 2]]
    shapes[1][dim] = 4
    a, b = torch.randn(shapes[0]), torch.randn(shapes[1])
    report = exactly(lambda a, b: torch.cat([a, b, a], dim), a, b)
    assert pass_record(report).stats["cats"] == 1


def test_operands_whose_tail_is_not_one_run_keep_the_strided_kernel():
    a = torch.randn(4, 6, 5).transpose(1, 2)  # [4, 5, 6]: dims 1 and 2 are not one run of memory
    b = torch.randn(4, 2, 6)
    report = exactly(lambda a, b: torch.cat([a, b], 1), a, b)
    assert not pass_record(report).modified and len(report.kernels) == 1


def test_an_elementwise_consumer_keeps_the_cat_in_its_kernel():
    def fn(a, b, bias):
        return torch.cat([a, b], -2) * bias  # the bias broadcasts along the last dim of the cat's result

    a, b, bias = torch.randn(2, 5, 6), torch.randn(2, 3, 6), torch.randn(6)
    report = exactly(fn, a, b, bias)
    assert not pass_record(report).modified and len(report.kernels) == 1


def test_an_elementwise_operand_becomes_its_own_kernel():
    """LLaMA's rotated key: the rotation writes the new row, the cat copies the cache along rows."""
    def fn(past, k, cos, sin):
        rotated = k * cos + torch.cat([-k[..., 32:], k[..., :32]], -1) * sin
        return torch.cat([past, rotated], -2)

    past, k = torch.randn(1, 4, 50, 64), torch.randn(1, 4, 1, 64)
    cos, sin = torch.randn(1, 1, 1, 64), torch.randn(1, 1, 1, 64)
    report = exactly(fn, past, k, cos, sin)
    assert pass_record(report).stats["cats"] == 1 and report.fallbacks == []


def test_an_empty_past_and_a_cat_along_the_last_dim():
    report = exactly(kv_append, torch.randn(1, 8, 0, 64), torch.randn(1, 8, 1, 64))
    assert report.fallbacks == []
    report = exactly(lambda a, b: torch.cat([a, b], -1), torch.randn(3, 4), torch.randn(3, 2))
    assert not pass_record(report).modified
