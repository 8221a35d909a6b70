"""Claimed split launches (runtime/claims.py, codegen/opencl/claimed.py): both threads take slices of the grid
from one counter, so results match eager at any balance, and a worker that cannot start holds nothing up."""

import time

import numpy as np
import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.runtime.call import Runtime
from torchfuser.runtime.device import get_device
from torchfuser.runtime.lanes import SPLIT, LaneRates

pytestmark = pytest.mark.skipif(get_device() is None or get_device().inline is None,
                                reason="needs PoCL's two devices")

RATES = LaneRates(inline_bytes_per_s=25e9, inline_flops_per_s=100e9, split_bytes_per_s=45e9,
                  split_flops_per_s=200e9, wake_seconds=40e-6, inline_launch_seconds=1.5e-6,
                  split_launch_seconds=15e-6)


@pytest.fixture
def splitting(monkeypatch):
    monkeypatch.setattr(Runtime.for_device(get_device()), "_rates", RATES)


def _split_bounds(report):
    return [b for step in report.plan.steps if hasattr(step[2], "bound") for b in step[2].bound.values()
            if b.lane == SPLIT]


@pytest.mark.parametrize("rows", [1, 7, 300])
@torch.no_grad()
def test_splits_match_eager_and_only_streaming_ones_are_claimed(rows, splitting):
    """A GEMV (the rows schedule, a 1-D grid, about half a FLOP per byte: claimed), a 7-row and a 300-row GEMM
    (more FLOPs per byte than a quarter of the rates' ridge point: a fixed cut; the 300-row one over packed
    panels on a 3-D grid), each with a bias and GELU epilogue, over several calls."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(768, 1544), nn.GELU()).eval()
    compiled = torchfuser.compile(model)
    for _ in range(4):
        x = torch.randn(rows, 768)
        assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    report = torchfuser.last_report()
    split = _split_bounds(report)
    assert split and all((b.cell is not None) == (rows == 1) for b in split)
    (kernel,) = report.kernels
    assert ("claim its slices" in kernel.lane_reason) == (rows == 1)
    if rows == 1:
        assert kernel.source.endswith("}\n") and "__claimed(" in kernel.source  # the source shown is what runs
        assert kernel.line_nodes  # and the explorer still maps its lines to the graph


_SPIN = """
__kernel void spin(volatile __global const int* flag, const int polls) {
  for (int j = 0; j < 30 && flag[0] == 0; ++j)  // seconds, unless released
    for (int i = 0; i < polls && flag[0] == 0; ++i) { }
}
"""


@torch.no_grad()
def test_a_worker_that_cannot_start_leaves_every_slice_to_the_calling_thread(splitting):
    import pyopencl as cl

    torch.manual_seed(0)
    model = nn.Linear(768, 3072).eval()
    compiled = torchfuser.compile(model)
    x = torch.randn(1, 768)
    assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    device = get_device()
    flag = np.zeros(16, np.int32)
    buffer = cl.Buffer(device.context, cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR, hostbuf=flag)
    spin = cl.Kernel(cl.Program(device.context, _SPIN).build(devices=[device.cl_device]), "spin")
    spin.set_args(buffer, np.int32(2**31 - 1))
    Runtime.for_device(device).release_workers()
    busy = cl.enqueue_nd_range_kernel(device.queue, spin, (1,), (1,))  # the workers' queue: busy until released
    try:
        started = time.perf_counter()
        x = torch.randn(1, 768)
        y = compiled(x)
        seconds = time.perf_counter() - started
    finally:
        flag[0] = 1
        busy.wait()
    assert_close(y, model(x), rtol=1e-4, atol=1e-4)
    assert seconds < 0.5  # done by the calling thread alone, while the workers were still held
    assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)  # and the workers take part again after
