"""cat along any dim (the KV cache's dim -2 above all), lift_fresh_copy and integer arange as OpenCL
pointwise kernels, against eager: copies exactly, with odd sizes, strided inputs and zero-size operands."""

import pytest
import torch

import torchfuser
from eager_compare import assert_close

aten = torch.ops.aten


def compiled_exactly(fn, *inputs):
    """fn compiled; its outputs equal eager's bit for bit, with eager's strides. Returns the report."""
    actual, expected = torchfuser.compile(fn)(*inputs), fn(*inputs)
    as_list = lambda out: list(out) if isinstance(out, tuple) else [out]  # noqa: E731
    for a, e in zip(as_list(actual), as_list(expected)):
        assert a.shape == e.shape and a.dtype == e.dtype and a.stride() == e.stride()
        assert torch.equal(a, e)
    return torchfuser.last_report()


def no_fallbacks(report, kernels=None):
    assert report.fallbacks == [], [(f.op, f.reason) for f in report.fallbacks]
    if kernels is not None:
        assert len(report.kernels) == kernels, [k.nodes for k in report.kernels]


@pytest.mark.parametrize("dim", [0, 1, 2, -2, -1])
def test_cat_of_strided_operands_along_every_dim_copies_exactly(dim):
    def fn(a, b, c):
        return torch.cat((a, b, c), dim=dim)

    sizes = [(3, 5, 7, 4), (3, 5, 7, 4), (3, 5, 7, 4)]
    for t, size in enumerate(sizes):
        sizes[t] = tuple(s + (t * 2 + 1 if d == dim % 4 else 0) for d, s in enumerate(size))
    a = torch.randn(sizes[0][::-1]).permute(3, 2, 1, 0)  # every operand strided another way
    b = torch.randn(sizes[1][0], sizes[1][2], sizes[1][1], sizes[1][3]).transpose(1, 2)
    c = torch.randn(*sizes[2][:3], sizes[2][3] * 2)[..., ::2]
    assert not any(t.is_contiguous() for t in (a, b, c))
    no_fallbacks(compiled_exactly(fn, a, b, c), kernels=1)


def test_kv_cache_append_with_an_empty_past():
    """The first call of a Hugging Face KV cache: past is [B, H, 0, D]."""
    def fn(past_k, past_v, k, v):
        return torch.cat((past_k, k), dim=-2), torch.cat((past_v, v), dim=-2)

    k = torch.randn(2, 5, 3, 16).transpose(1, 2)  # [B, H, T, D] with heads transposed out, as after a GEMM
    v = torch.randn(2, 5, 3, 16).transpose(1, 2)
    empty = torch.zeros(2, 3, 0, 16)
    no_fallbacks(compiled_exactly(fn, empty, empty, k, v), kernels=2)
    past = torch.randn(2, 3, 7, 16)
    no_fallbacks(compiled_exactly(fn, past, past * 2, k, v), kernels=2)


def test_cat_with_a_legacy_empty_constant_and_its_lift_fresh_copy():
    """GPT-2 and LLaMA's DynamicLayer: keys = torch.cat([torch.tensor([]), key_states], dim=-2); eager skips
    1-d empty operands. Neither the cat nor the constant's copy is left to PyTorch."""
    def fn(k):
        return torch.cat([torch.tensor([]), k], dim=-2) * 0.5

    k = torch.randn(2, 7, 4, 16).transpose(1, 2)
    report = compiled_exactly(fn, k)
    no_fallbacks(report, kernels=1)
    assert {"cat", "mul"} <= {n.split("_")[0] for n in report.kernels[0].nodes}


@pytest.mark.parametrize("shapes,dim", [
    (((2, 0, 3), (2, 0, 3)), 1),  # every operand empty along the dim: a zero-size result
    (((0, 4, 3), (0, 2, 3)), 1),  # empty along another dim
    (((3, 1, 5), (3, 0, 5), (3, 2, 5)), 1),
])
def test_zero_size_operands(shapes, dim):
    def fn(*xs):
        return torch.cat(xs, dim=dim) + 1

    xs = [torch.randn(s) for s in shapes]
    no_fallbacks(compiled_exactly(fn, *xs))


def test_computed_operands_promotion_and_a_broadcast_consumer():
    def fn(x, n, bias):
        return torch.cat((x.exp(), n * 3), dim=-2) * bias

    x, n, bias = torch.randn(2, 5, 6), torch.randint(-4, 4, (2, 3, 6)), torch.randn(6)
    actual = torchfuser.compile(fn)(x, n, bias)
    assert_close(actual, fn(x, n, bias))
    no_fallbacks(torchfuser.last_report(), kernels=1)


def test_cat_along_dim_1_with_slices_along_it():
    def fn(x):
        h = x.sigmoid()
        return torch.cat((h[:, 4:], -h[:, :4]), dim=1) + h

    x = torch.randn(3, 9, 5)
    assert_close(torchfuser.compile(fn)(x), fn(x))
    no_fallbacks(torchfuser.last_report(), kernels=1)


def test_the_reference_path_computes_in_the_same_frame():
    """The kernel's PyTorch meaning (no device, or a failed build) for a cat along dim 1."""
    from torchfuser.passes.fuse_pointwise import fuse_pointwise
    from eager_compare import aten_graph, call_nodes

    def fn(x, y):
        return torch.cat((x, y.tanh()), dim=1) * 2

    x, y = torch.randn(4, 3, 5).transpose(1, 2), torch.randn(4, 2, 3)
    gm = fuse_pointwise(aten_graph(fn, x, y)).gm
    (node,) = call_nodes(gm)
    expected = fn(x, y)
    actual = node.target.reference(*[{"x_1": x, "y_1": y}[a.name] for a in node.args])
    assert actual.stride() == expected.stride()
    assert_close(actual, expected)


def test_lift_fresh_copy_of_a_constant_joins_the_kernel():
    def fn(x):
        return x * torch.tensor([[1.5, -2.0, 0.25], [3.0, 0.0, -1.0]])

    x = torch.randn(2, 3)
    no_fallbacks(compiled_exactly(fn, x), kernels=1)


@pytest.mark.parametrize("start,end,step", [(0, 13, 1), (3, 40, 4), (10, -7, -3), (5, 5, 1)])
def test_integer_arange(start, end, step):
    def fn(x):
        return torch.arange(start, end, step) + x

    x = torch.randint(-5, 5, (2, len(range(start, end, step))))
    no_fallbacks(compiled_exactly(fn, x))


def test_arange_positions_as_in_gpt2():
    def fn(n: torch.Tensor):
        return (torch.arange(n.shape[1]) + 0).unsqueeze(0)

    compiled_exactly(fn, torch.zeros(2, 11))


def test_what_still_falls_back_says_why():
    def fn(x, y):
        return torch.cat((x, y), dim=1)

    x, y = torch.randn(2, 3, dtype=torch.float16), torch.randn(2, 5, dtype=torch.float16)
    compiled_exactly(fn, x, y)
    (fallback,) = torchfuser.last_report().fallbacks
    assert fallback.op == "aten.cat.default" and "float16" in fallback.reason


def test_a_floating_arange_stays_in_pytorch_and_says_why():
    def fn(x):
        return torch.arange(0.5, 3.0, 0.25) * x

    compiled_exactly(fn, torch.randn(10))
    (fallback,) = torchfuser.last_report().fallbacks
    assert fallback.op == "aten.arange.start_step" and "integer aranges only" in fallback.reason


@pytest.mark.parametrize("widths", [(5000, 7001), (4100, 17), (16, 9000)])
def test_a_cat_of_few_long_rows_is_cut_into_runs_and_copies_exactly(widths):
    """Three rows of 12001 (4117, 9016) elements: each row is cut into runs, a work-item each, whose bounds fall
    inside, across and at the edges of the operands' segments; every element is copied exactly."""
    def fn(a, b):
        return torch.cat((a, b), dim=1) * 2

    a, b = torch.randn(3, widths[0]), torch.randn(3, widths[1])
    report = compiled_exactly(fn, a, b)
    (step,) = [s[2] for s in report.plan.steps if hasattr(s[2], "bound") and s[2].target.kind == "pointwise"]
    (bound,) = step.bound.values()
    assert bound.launch.spec.row_length == sum(widths) and bound.launch.spec.row_chunks > 1
