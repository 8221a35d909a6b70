"""PyTorch's OpenMP workers released before a plan's long calls (runtime/openmp_workers.py): they really exit,
PyTorch's next ops start new ones and compute the same, and only plans whose kernels use PoCL's workers for
long enough release them."""

import os
import time

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.runtime import openmp_workers
from torchfuser.runtime.device import get_device
from torchfuser.runtime.openmp_workers import RELEASE_MIN_SECONDS, release_openmp_workers

pytestmark = pytest.mark.skipif(get_device() is None, reason="needs an OpenCL device")

has_libgomp = openmp_workers._loaded_libgomp() is not None and torch.get_num_threads() > 1


def thread_ids() -> set:
    return set(os.listdir("/proc/self/task"))


def parallel_op(x):
    return x.sum()  # more elements than ATen's grain: its OpenMP threads share it


@pytest.fixture
def counted_releases(monkeypatch):
    """The releases the plans make, counted (and still made)."""
    made = []
    real = openmp_workers._find_pause()

    def pause(kind):
        made.append(kind)
        return real(kind) if real is not None else 0

    monkeypatch.setattr(openmp_workers, "_pause", [pause])
    return made


@pytest.mark.skipif(not has_libgomp, reason="PyTorch runs no libgomp pool with more than one thread here")
def test_released_workers_exit_and_pytorch_starts_new_ones_with_the_same_results():
    x = torch.randn(1 << 20)
    expected = parallel_op(x)
    with_pool = thread_ids()
    assert release_openmp_workers()
    deadline = time.monotonic() + 2.0
    while not with_pool - thread_ids() and time.monotonic() < deadline:  # they exit after the pause returns
        time.sleep(0.01)
    assert with_pool - thread_ids(), "no thread exited"
    left = thread_ids()
    assert torch.equal(parallel_op(x), expected)  # the same split, over new threads
    assert thread_ids() - left, "no thread started"


def test_switched_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("TORCHFUSER_RELEASE_OPENMP", "0")
    monkeypatch.setattr(openmp_workers, "_pause", [])
    assert not release_openmp_workers()


def test_only_plans_with_long_calls_on_the_workers_release_them(counted_releases):
    small = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).eval()
    big = nn.Linear(1024, 2048).eval()
    x_small, x_big = torch.randn(4, 64), torch.randn(256, 1024)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        f_small, f_big = torchfuser.compile(small), torchfuser.compile(big, autotune="off")
        for _ in range(5):
            assert_close(f_small(x_small), small(x_small))
        assert not counted_releases  # in the calling thread, microseconds
        for _ in range(5):
            assert_close(f_big(x_big), big(x_big), rtol=1e-4, atol=1e-4)
    plan = reports[-1].plan
    if plan.uses_workers and plan.counts.call_seconds >= RELEASE_MIN_SECONDS:
        assert len(counted_releases) >= 3  # from the call after the first profiled one on
    else:  # a machine fast enough to do it in less
        assert not counted_releases
