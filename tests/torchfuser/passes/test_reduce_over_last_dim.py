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


def compiled(fn, *args, **options):
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torchfuser.compile(fn, **options)(*args)
    return out, reports


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("shape", [(3, 5, 7), (1, 9, 1), (4, 33, 2)])
def test_reductions_over_any_dims_match_eager_in_kernels(name, shape):
    fn = CASES[name]
    x = torch.randn(shape)
    out, reports = compiled(fn, x)
    assert_close(out, fn(x))
    assert not any("reduc" in f.reason or f.op.split(".")[1] in ("sum", "mean", "amax", "amin", "var", "max", "min",
                                                                 "linalg_vector_norm")
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
