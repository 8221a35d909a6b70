"""pool_as_windows: max and average pooling as elementwise ops over one strided view per tap, as eager."""

import math

import pytest
import torch
import torch.nn.functional as F

from eager_compare import assert_close, compiled

POOLS = {
    "max 3 stride 2 pad 1": lambda x: F.max_pool2d(x, 3, 2, 1),
    "max 2 after relu": lambda x: F.max_pool2d(torch.relu(x), 2),
    "max 3 dilation 2 pad 1": lambda x: F.max_pool2d(x, 3, 1, 1, dilation=2),
    "max (2, 3) stride (1, 2)": lambda x: F.max_pool2d(x, (2, 3), (1, 2)),
    "avg 3 stride 2 pad 1": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "avg (2, 3) stride (1, 2)": lambda x: F.avg_pool2d(x, (2, 3), (1, 2)),
    "max1d 3 stride 2 pad 1": lambda x: F.max_pool1d(x.flatten(2), 3, 2, 1),
    "avg1d 4": lambda x: F.avg_pool1d(x.flatten(2), 4),
    "max then scale": lambda x: F.max_pool2d(x, 2) * 2 + 1,
}


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "3-d"])
@pytest.mark.parametrize("name", list(POOLS))
def test_pooling_runs_in_kernels_as_eager(name, layout):
    fn = POOLS[name]
    x = torch.randn(2, 5, 13, 11)
    x[0, 1, 3, 4], x[1, 2, 0, 0], x[1, 3, 5, 5] = math.nan, math.inf, -math.inf
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "3-d":
        x = x[0]
    out, report = compiled(fn, x)
    expected = fn(x)
    assert_close(out, expected)
    assert out.shape == expected.shape
    assert report.fallbacks == []
    assert {p.name: p.stats for p in report.passes}["pool_as_windows"]["poolings"] == 1


def test_pooling_it_does_not_take_stays_in_pytorch_with_the_reason():
    x = torch.randn(2, 3, 9, 9)
    for fn, reason in ((lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), "ceil_mode"),
                       (lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), "does not count"),
                       (lambda x: F.max_pool2d(x, 3, return_indices=True)[1].float(), "indices"),
                       (lambda x: F.avg_pool2d(x, 8), "taps")):
        out, report = compiled(fn, x)
        assert_close(out, fn(x))
        assert any(reason in f.reason for f in report.fallbacks), [f.reason for f in report.fallbacks]


def test_zero_size_batch():
    x = torch.randn(0, 3, 8, 8)
    out, _ = compiled(lambda x: F.max_pool2d(x, 2), x)
    assert out.shape == (0, 3, 4, 4)


@pytest.mark.parametrize("name", [n for n in POOLS if n.startswith("max") and "1d" not in n])
def test_max_pooling_of_a_channels_last_batch_is_one_window_kernel(name):
    """Read in place (no padded copy), NaN propagating, what follows in its epilogue, eager's strides."""
    fn = lambda x: torch.relu(POOLS[name](x)) - 1  # noqa: E731
    x = torch.randn(2, 24, 13, 11).contiguous(memory_format=torch.channels_last)
    x[0, 1, 3, 4], x[1, 2, 0, 0], x[1, 3, 5, 5] = math.nan, math.inf, -math.inf
    out, report = compiled(fn, x)
    expected = fn(x)
    assert_close(out, expected)
    assert out.stride() == expected.stride()
    window = [k for k in report.kernels if k.kind == "window"]
    others = [k for k in report.kernels if k.kind != "window"]  # a ReLU before the pooling: its own kernel
    assert len(window) == 1 and len(others) == ("after relu" in name)
    assert any("max_pool2d_with_indices" in n for n in window[0].nodes) and any("sub" in n for n in window[0].nodes)
