"""reduce_over_last_dim: reductions over any dims run as row-reduction kernels, numerics as eager."""

import math

import pytest
import torch
import torch.nn.functional as F

import torchfuser
from eager_compare import assert_close

CASES = {
    "sum dim 0": lambda x: x.sum(0),
    "sum dims (0, 2) keepdim": lambda x: x.sum((0, 2), keepdim=True),
    "sum all": lambda x: x.sum(),
    "mean dim 1": lambda x: x.mean(1),
    "mean dims (-1, -2)": lambda x: x.mean((-1, -2)),
    "mean all": lambda x: x.mean(),
    "amax dim 0 keepdim": lambda x: x.amax(0, keepdim=True),
    "amin dim 1": lambda x: x.amin(1),
    "amin last dim": lambda x: x.amin(-1),
    "max all": lambda x: x.max(),
    "min all": lambda x: x.min(),
    "var dim 0": lambda x: x.var(0),
    "var dims (0, 1) unbiased off": lambda x: x.var((0, 1), correction=0),
    "std dim 1 keepdim": lambda x: x.std(1, keepdim=True),
    "norm dim 1": lambda x: torch.linalg.vector_norm(x, dim=1),
    "norm 1 all": lambda x: torch.linalg.vector_norm(x, ord=1),
    "norm inf dim 0": lambda x: torch.linalg.vector_norm(x, ord=math.inf, dim=0),
}
# the kinds added later: their kernels are the same row reductions, so one shape with a size-1 dim suffices
MORE_CASES = {
    "norm -inf dims (0, 2)": lambda x: torch.linalg.vector_norm(x, ord=-math.inf, dim=(0, 2)),
    "norm 0 dim 1": lambda x: torch.linalg.vector_norm(x, ord=0, dim=1),
    "norm 3 all": lambda x: torch.linalg.vector_norm(x, ord=3),
    "norm -1.5 dim 0": lambda x: torch.linalg.vector_norm(x, ord=-1.5, dim=0),
    "prod dim 0": lambda x: (x * 0.1 + 1).prod(0),
    "prod all": lambda x: (x * 0.1 + 1).prod(),
    "argmax dim 1 keepdim": lambda x: x.argmax(1, keepdim=True),
    "argmin dim 0": lambda x: x.argmin(0),
    "argmax all": lambda x: x.argmax(),
    "max dim 0": lambda x: torch.max(x, 0),
    "min dim 1 keepdim": lambda x: torch.min(x, 1, keepdim=True),
    "any dim 1": lambda x: (x > 1).any(1),
    "all dims (0, 2)": lambda x: torch.all(x.round(), dim=(0, 2)),
    "any all": lambda x: x.round().any(),
    "count_nonzero dims (0, 1)": lambda x: torch.count_nonzero(x.round(), dim=(0, 1)),
}
OPS_IN_PYTORCH = ("sum", "mean", "amax", "amin", "var", "max", "min", "linalg_vector_norm", "prod", "argmax",
                  "argmin", "any", "all", "count_nonzero")


def compiled(fn, *args, **options):
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torchfuser.compile(fn, **options)(*args)
    return out, reports


@pytest.mark.parametrize(("name", "shape"), [(n, s) for n in CASES for s in ((3, 5, 7), (1, 9, 1), (4, 33, 2))]
                         + [(n, (4, 9, 1)) for n in MORE_CASES])
def test_reductions_over_any_dims_match_eager_in_kernels(name, shape):
    fn = {**CASES, **MORE_CASES}[name]
    x = torch.randn(shape)
    out, reports = compiled(fn, x)
    assert_close(out, fn(x))
    assert not any("reduc" in f.reason or f.op.split(".")[1] in OPS_IN_PYTORCH
                   for r in reports for f in r.fallbacks), [f.op for r in reports for f in r.fallbacks]
    assert any(k.kind == "reduction" for r in reports for k in r.kernels)


def test_global_average_pooling_reads_the_input_as_rows_without_a_copy():
    x = torch.randn(2, 8, 5, 7)
    out, (report,) = compiled(lambda x: F.adaptive_avg_pool2d(x, 1).flatten(1) * 2, x)
    assert_close(out, F.adaptive_avg_pool2d(x, 1).flatten(1) * 2)
    (reduction,) = [k for k in report.kernels if k.kind == "reduction"]
    assert not any(n.startswith("clone") for k in report.kernels for n in k.nodes)  # H and W merge as a view
    assert report.fallbacks == []


def test_non_contiguous_inputs_odd_sizes_and_specials():
    x = torch.randn(6, 5, 9).transpose(0, 2)[::2]  # [5, 5, 6], strided
    x[0, 1, 2], x[1, 2, 3], x[2, 0, 0] = float("nan"), float("inf"), -float("inf")
    for fn in (lambda x: x.sum(1), lambda x: x.amax((0, 2)), lambda x: x.amin(0), lambda x: x.mean((0, 1)),
               lambda x: x.var(0)):
        out, _ = compiled(fn, x)
        assert_close(out, fn(x))


def test_arg_extremes_take_the_first_index_and_nan_wins_as_in_eager():
    x = torch.tensor([[1.0, 3.0, 3.0, -1.0], [2.0, math.nan, 5.0, math.nan], [-math.inf] * 4, [0.0, -0.0, 0.0, 1.0]])
    fn = lambda x: (x.argmax(-1), x.argmin(-1), x.argmax(0), x.argmin(0), torch.max(x, 1), torch.min(x, 0))  # noqa
    out, reports = compiled(fn, x)
    for actual, expected in zip(out, fn(x)):
        assert_close(actual, expected)
    assert [f.op for r in reports for f in r.fallbacks] == []


def test_any_all_and_counts_of_bools_and_integers_with_nan():
    x = torch.tensor([[0.0, math.nan, 0.0], [0.0, 0.0, 0.0], [1.0, -2.0, math.inf]])
    fn = lambda x: (x.any(1), x.all(1), x.any(), x.all(0, keepdim=True), (x != 0).sum(0),  # noqa: E731
                    torch.count_nonzero(x), (x > 0).long().sum(1), x.int().sum(-1))
    out, reports = compiled(fn, x.nan_to_num())
    for actual, expected in zip(out, fn(x.nan_to_num())):
        assert_close(actual, expected)
    out, reports = compiled(lambda x: (x.any(1), x.all(1), torch.count_nonzero(x, 0)), x)
    for actual, expected in zip(out, (x.any(1), x.all(1), torch.count_nonzero(x, 0))):
        assert_close(actual, expected)
    assert [f.op for r in reports for f in r.fallbacks] == []


def test_nansum_and_nanmean_take_their_zero_as_a_literal():
    x = torch.randn(4, 6)
    x[1, 2] = x[3, :] = math.nan
    fn = lambda x: (torch.nansum(x, 1), torch.nanmean(x, 0), torch.nansum(x))  # noqa: E731
    out, reports = compiled(fn, x)
    for actual, expected in zip(out, fn(x)):
        assert_close(actual, expected)
    assert [f.op for r in reports for f in r.fallbacks] == []


def test_zero_size_inputs():
    for shape, fn in [((0, 4), lambda x: x.sum(0)), ((3, 0, 2), lambda x: x.sum(1)), ((0, 4), lambda x: x.mean(1)),
                      ((3, 0), lambda x: x.sum())]:
        x = torch.randn(shape)
        out, _ = compiled(fn, x)
        assert_close(out, fn(x))


def test_amin_as_negated_amax_matches_eager_with_zeros_and_nan():
    """Values as eager; the sign of a zero minimum follows the order elements are combined in (eager's own
    vectorised and scalar paths differ there), so it is not compared."""
    x = torch.tensor([[0.0, -0.0, 1.0], [float("nan"), 2.0, -3.0]])
    for fn in (lambda x: x.amin(0), lambda x: x.amin(1), lambda x: x.min()):
        out, _ = compiled(fn, x)
        assert_close(out, fn(x))


def test_a_full_reduction_too_large_for_one_row_stays_in_pytorch_and_is_named():
    x = torch.randn(300, 300)
    out, (report,) = compiled(lambda x: x.sum(), x)
    assert_close(out, x.sum(), rtol=1e-4, atol=1e-3)
    assert [f.op for f in report.fallbacks] == ["aten.sum.dim_IntList"] or [f.op for f in report.fallbacks] == [
        "aten.sum.default"]


def test_dynamic_shapes_reduce_over_a_symbolic_dim():
    fn = lambda x: x.mean(1) + x.amax(1)  # noqa: E731
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        compiled_fn = torch.compile(fn, backend="torchfuser", dynamic=True)
        for t in (3, 7, 20):
            x = torch.randn(2, t, 5)
            assert_close(compiled_fn(x), fn(x))
    assert len(reports) == 1 and not reports[0].fallbacks


@pytest.mark.parametrize("name", ["sum", "mean", "amax", "amin", "var0", "max", "logsumexp"])
@pytest.mark.parametrize("shape", [(), (5,)])
def test_0d_inputs_and_1d_reductions_over_every_dim(name, shape):
    """OpInfo's first samples: a 0-d input (any dim it names is its one element) and a 1-d input reduced over
    every dim (dim None or []), which fuse_reductions would not read as the last dim."""
    fns = {"sum": lambda x: (x.sum(), x.sum(0, keepdim=True), x.sum(dim=[])),
           "mean": lambda x: (x.mean(), x.mean(-1)), "amax": lambda x: (x.amax(), x.amax(0, keepdim=True)),
           "amin": lambda x: (x.amin(), x.amin(-1)), "var0": lambda x: (x.var(correction=0), x.var(0, correction=0)),
           "max": lambda x: (x.max(),), "logsumexp": lambda x: (torch.logsumexp(x, 0),)}
    fn, x = fns[name], torch.randn(shape)
    out, reports = compiled(fn, x)
    for actual, expected in zip(out, fn(x)):
        assert_close(actual, expected)
    assert [f.op for r in reports for f in r.fallbacks] == []
    assert any(k.kind == "reduction" for r in reports for k in r.kernels)


@pytest.mark.parametrize("kwargs", [dict(dim=1), dict(dim=(0, 2), keepdim=True), dict(), dict(dim=-1, correction=0)])
def test_var_mean_and_std_mean_become_two_row_reductions(kwargs):
    x = torch.randn(3, 5, 7)
    x[1, 2, 3] = math.nan
    for fn in (lambda x: torch.var_mean(x, **kwargs), lambda x: torch.std_mean(x, **kwargs)):
        out, reports = compiled(fn, x)
        for actual, expected in zip(out, fn(x)):
            assert_close(actual, expected)
        assert [f.op for r in reports for f in r.fallbacks] == []
        assert sum(k.kind == "reduction" for r in reports for k in r.kernels) >= 1
