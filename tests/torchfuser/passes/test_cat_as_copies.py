"""cat_as_copies: cats no fusion took (along a dynamic dim) become copy kernels, equal to eager bit for bit."""

import math

import pytest
import torch

import torchfuser
from eager_compare import aten_graph, call_nodes
from torchfuser.ir.kernels import CatKernel
from torchfuser.passes.cat_as_copies import cat_as_copies

aten = torch.ops.aten


def exactly(kernel, *inputs):
    """The kernel run standalone equals torch.cat bit for bit (nan included), with eager's shape and strides."""
    actual, expected = kernel(*inputs), torch.cat(inputs, kernel.dim)
    assert actual.shape == expected.shape and actual.stride() == expected.stride()
    assert torch.equal(actual.view(torch.uint8) if actual.dtype.is_floating_point else actual,
                       expected.view(torch.uint8) if expected.dtype.is_floating_point else expected)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_every_dim_with_odd_sizes_and_three_operands(dim):
    shapes = [[3, 5, 7], [3, 5, 7], [3, 5, 7]]
    shapes[1][dim] = 1
    shapes[2][dim] = 4
    exactly(CatKernel(dim, 0), *(torch.randn(s) for s in shapes))


def test_strided_operands_read_in_place_and_operands_that_are_not_one_run_copied_first():
    past = torch.randn(2, 8, 9, 64)
    new = torch.randn(2, 1, 8, 64).transpose(1, 2)  # [2, 8, 1, 64]: one run from dim 2 on, strided outside
    exactly(CatKernel(2, 0), past, new)
    sliced = torch.randn(2, 8, 20, 64)[:, :, 3:12]  # a storage offset, rows of 64 every 64: one run per head
    exactly(CatKernel(2, 0), sliced, new)
    transposed = torch.randn(2, 8, 64, 9).transpose(2, 3)  # dims 2 and 3 are not one run: copied
    exactly(CatKernel(2, 0), transposed, new)


def test_long_rows_split_into_runs_and_many_short_rows():
    exactly(CatKernel(1, 0), torch.randn(2, 5000), torch.randn(2, 3333))  # runs of SPAN_MAX straddle operands
    exactly(CatKernel(1, 0), torch.randn(4097, 3), torch.randn(4097, 1))


def test_values_and_dtypes_are_copied_exactly():
    x = torch.tensor([[math.inf, -math.inf, math.nan, -0.0]])
    exactly(CatKernel(0, 0), x, torch.randn(3, 4))
    exactly(CatKernel(1, 0), torch.randint(-9, 9, (3, 4)), torch.randint(-9, 9, (3, 2)))
    exactly(CatKernel(0, 0), torch.rand(2, 5) > 0.5, torch.rand(1, 5) > 0.5)
    exactly(CatKernel(1, 0), torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 1, dtype=torch.float64))


def test_empty_operands_and_results():
    exactly(CatKernel(2, 0), torch.tensor([]), torch.randn(1, 8, 1, 64))  # eager skips an empty 1-d operand
    exactly(CatKernel(1, 0), torch.randn(3, 0), torch.randn(3, 2))
    exactly(CatKernel(0, 0), torch.randn(0, 4), torch.randn(0, 4))


def test_a_kv_cache_growing_by_one_runs_one_kernel_and_nothing_in_pytorch():
    def append(past, new):
        return torch.cat([past, new], 2)

    compiled = torch.compile(append, backend="torchfuser", dynamic=True)
    new = torch.randn(1, 1, 4, 16).transpose(1, 2)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for length in (2, 7, 128, 4097):
            past = torch.randn(1, 4, length, 16)
            assert torch.equal(compiled(past, new), append(past, new))
    report = reports[-1]
    assert report.fallbacks == [] and [k.kind for k in report.kernels] == ["cat"]
    record = next(p for p in report.passes if p.name == "cat_as_copies")
    assert record.stats["cats"] == 1
    assert len({spec for spec, _lane, _claimed in report.plan.built}) == 1


def test_the_rewrite_and_what_stays_in_pytorch():
    gm = aten_graph(lambda a, b: torch.cat([a, b], 1), torch.randn(2, 3), torch.randn(2, 4))
    assert cat_as_copies(gm).modified
    (node,) = call_nodes(gm)
    assert isinstance(node.target, CatKernel) and node.target.dim == 1
    mixed = aten_graph(lambda a, b: torch.cat([a, b], 1), torch.randn(2, 3), torch.randn(2, 4, dtype=torch.float64))
    assert not cat_as_copies(mixed).modified
    (cat,) = [n for n in call_nodes(mixed) if n.target is aten.cat.default]
    assert "another dtype" in cat.meta["torchfuser_unfused"]["cat_as_copies"]


def test_disabling_the_pass_names_it_as_the_reason():
    def append(past, new):
        return torch.cat([past, new], 2)

    compiled = torch.compile(append, backend="torchfuser", dynamic=True, options={"disable": ["cat_as_copies"]})
    past, new = torch.randn(1, 4, 5, 16), torch.randn(1, 4, 1, 16)
    with torchfuser.collect_reports() as reports:
        assert torch.equal(compiled(past, new), append(past, new))
    (fallback,) = reports[-1].fallbacks
    assert fallback.op == "aten.cat.default" and "cat_as_copies is disabled" in fallback.reason
