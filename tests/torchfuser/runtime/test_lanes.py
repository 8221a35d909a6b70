"""Where launches run: in the calling thread or split with the workers, chosen from measured rates; both agree."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.runtime.call import Runtime
from torchfuser.runtime.device import get_device
from torchfuser.runtime.lanes import (
    HOST_THREADS, INLINE, OPENMP_SPIN_SECONDS, SPLIT, THREADED, LaneRates, SplitEvents, plan_lanes, split_cut,
)

RATES = LaneRates(inline_bytes_per_s=25e9, inline_flops_per_s=100e9, split_bytes_per_s=45e9,
                  split_flops_per_s=200e9, wake_seconds=40e-6, inline_launch_seconds=1.5e-6,
                  split_launch_seconds=15e-6)
TINY, BIG = (0.0, 4e3), (2.0 * 768 * 3072, 9.4e6)


def lanes(works):
    return [lane for lane, _ in plan_lanes(RATES, works)]


def test_small_launches_run_in_the_calling_thread_and_big_ones_split():
    assert lanes([TINY]) == [INLINE]
    assert lanes([BIG]) == [SPLIT]
    assert lanes([TINY, BIG, None, TINY]) == [INLINE, SPLIT, INLINE]


def test_the_calling_threads_share_of_a_split_covers_the_workers_wake():
    alone = BIG[1] / RATES.inline_bytes_per_s
    assert RATES.inline_share(*BIG) == pytest.approx(0.5 + RATES.wake_seconds / (2 * alone))
    assert 0.5 < RATES.inline_share(*BIG) < 0.9 and RATES.inline_share(0.0, 1e3) == 0.9
    # a split launch takes at least half of its time alone plus the wake, and no less than both sides together
    assert RATES.seconds(SPLIT, *BIG) >= (alone + RATES.wake_seconds) / 2


def test_the_reasons_give_both_estimates():
    (lane, why), = plan_lanes(RATES, [BIG])
    assert lane == SPLIT and "in the calling thread alone" in why and "split" in why
    assert plan_lanes(None, [TINY, None, BIG]) == [(THREADED, "the device has no in-thread companion")] * 2


def test_launches_after_a_pytorch_op_on_its_threads_run_in_the_calling_thread_while_its_threads_spin():
    alone = RATES.seconds(INLINE, *BIG)
    assert alone < OPENMP_SPIN_SECONDS
    assert lanes([HOST_THREADS, BIG, None, BIG]) == [INLINE, INLINE]
    (lane, why), = plan_lanes(RATES, [HOST_THREADS, BIG])
    assert "OpenMP threads still spin" in why
    # the window is used up by the launches in it; a launch longer than what is left splits as before
    fill = int(OPENMP_SPIN_SECONDS / alone)
    assert lanes([HOST_THREADS] + [BIG] * (fill + 1)) == [INLINE] * fill + [SPLIT]
    huge = (BIG[0] * 100, BIG[1] * 100)
    assert lanes([HOST_THREADS, huge]) == [SPLIT]
    assert plan_lanes(None, [HOST_THREADS, BIG]) == [(THREADED, "the device has no in-thread companion")]


@pytest.mark.skipif(get_device() is None or get_device().inline is None, reason="needs PoCL's two devices")
def test_a_kernel_after_a_convolution_left_to_pytorch_runs_in_the_calling_thread(monkeypatch):
    monkeypatch.setattr(Runtime.for_device(get_device()), "_rates", RATES)  # where the GELU alone would split
    model = nn.Sequential(nn.Conv2d(16, 64, 3, padding=1), nn.GELU()).eval()
    x = torch.randn(2, 16, 40, 50)  # 256000 results: ATen runs the convolution on its threads
    assert lanes([(0.0, 2 * 4 * x.numel() * 4)]) == [SPLIT]
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        assert_close(torchfuser.compile(model, disable=["conv_as_gemm"])(x), model(x))  # the convolution to PyTorch
    (kernel,) = reports[-1].kernels
    assert [f.op for f in reports[-1].fallbacks] == ["aten.convolution.default"]
    assert kernel.lane == INLINE and "OpenMP" in kernel.lane_reason


@pytest.mark.skipif(get_device() is None or get_device().inline is None, reason="needs PoCL's two devices")
def test_a_small_cat_along_a_dynamic_dim_leaves_the_launches_after_it_free_to_split(monkeypatch):
    """A KV cache's cat at decode (its bounds vary) is a copy kernel, small enough for the calling thread: the
    big GEMV after it is placed by its own work."""
    monkeypatch.setattr(Runtime.for_device(get_device()), "_rates", RATES)
    weight = torch.randn(3072, 768) / 768 ** 0.5  # outputs of about 1: fp32 sums in another order agree

    def step(cache, new, x):
        return torch.cat([cache, new], dim=1), torch.nn.functional.linear(x, weight)

    torch._dynamo.reset()
    compiled = torch.compile(step, backend="torchfuser", dynamic=True)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for length in (5, 6):
            args = torch.randn(8, length, 64), torch.randn(8, 1, 64), torch.randn(1, 768)
            for got, want in zip(compiled(*args), step(*args)):
                assert_close(got, want)
    assert reports[-1].fallbacks == []
    (cat,) = [k for k in reports[-1].kernels if k.kind == "cat"]
    assert cat.lane == INLINE
    (gemv,) = [k for k in reports[-1].kernels if k.kind == "gemm"]
    assert gemv.lane == SPLIT and "OpenMP" not in gemv.lane_reason


@pytest.mark.skipif(get_device() is None or get_device().inline is None, reason="needs PoCL's two devices")
@pytest.mark.parametrize("lane", [INLINE, SPLIT])
def test_every_kind_computes_the_same_in_either_lane(lane, monkeypatch):
    """The same plan with every launch forced into one lane agrees with eager (and so with the other lane);
    a split launch's halves (the calling thread's and the workers') together compute every element."""
    monkeypatch.setattr(Runtime, "lanes", lambda self, launches: [(lane, "forced") for x in launches if x is not None])
    monkeypatch.setattr(Runtime, "lane", lambda self, launch: (lane, "forced"))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.proj, self.fc = nn.LayerNorm(64), nn.Linear(64, 192), nn.Linear(64, 64)

        def forward(self, x):
            q, k, v = self.proj(self.norm(x)).view(1, 7, 3, 4, 16).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            return torch.nn.functional.gelu(self.fc(a.transpose(1, 2).reshape(1, 7, 64))) + x

    torch.manual_seed(0)
    block, x = Block().eval(), torch.randn(1, 7, 64)
    with torch.no_grad():
        compiled = torchfuser.compile(block)
        for _ in range(3):  # the first call and the steady ones
            assert_close(compiled(x), block(x), atol=1e-5)
    report = torchfuser.last_report()
    assert {k.kind for k in report.kernels} >= {"gemm", "reduction", "attention"}
    assert {k.lane for k in report.kernels} == {lane}


class _Grid:
    def __init__(self, global_size, local_size, indexes_by_group=False):
        self.global_size, self.local_size = global_size, local_size
        self.spec = SimpleNamespace(indexes_by_group=indexes_by_group)


def test_a_split_divides_the_dim_with_the_most_work_groups():
    assert split_cut(_Grid((96,), (1,)), 0.5) == (0, 48)
    assert split_cut(_Grid((1, 196, 1), (1, 1, 1)), 0.5) == (1, 98)  # a GEMM of one panel: its row stacks
    assert split_cut(_Grid((6, 196, 1), (1, 1, 1)), 0.25) == (1, 49)
    assert split_cut(_Grid((64, 4), (64, 1)), 0.5) == (1, 2)  # one group of 64 along dim 0
    assert split_cut(_Grid((16,), (16,)), 0.5) is None  # one work-group: nothing to divide
    assert split_cut(_Grid((8, 8), (1, 1)), 0.99) == (0, 7)  # each side keeps at least one group
    assert split_cut(_Grid((96,), (1,), indexes_by_group=True), 0.5) is None  # its work found by group id


@pytest.mark.skipif(get_device() is None or get_device().inline is None, reason="needs PoCL's two devices")
def test_a_gemm_of_one_panel_splits_its_rows_between_the_threads(monkeypatch):
    """N = 24 columns make one packed panel: the split divides the row stacks (grid dim 1), both halves agree
    with eager (2999 rows: the last stack is ragged), and the cut moves with the measured balance without
    leaving the grid."""
    monkeypatch.setattr(Runtime.for_device(get_device()), "_rates", RATES)
    torch.manual_seed(0)
    model = nn.Linear(96, 24).eval()
    with torch.no_grad():
        compiled = torchfuser.compile(model)
        for _ in range(25):  # the first calls are profiled: each moves the cut
            x = torch.randn(2999, 96)
            assert_close(compiled(x), model(x))
    plan = torchfuser.last_report().plan
    bounds = [b for step in plan.steps if hasattr(step[2], "bound") for b in step[2].bound.values()]
    split = [b for b in bounds if b.lane == SPLIT]
    assert split and all(b.split_dim == 1 and 0 < b.cut < b.launch.global_size[1] for b in split)
    (kernel,) = torchfuser.last_report().kernels
    assert kernel.lane == SPLIT and "divided along grid dim 1" in kernel.lane_reason


def test_a_plans_first_split_gives_the_workers_all_but_one_group(monkeypatch):
    """PoCL keeps a work-group function per kernel and widest part launched, 128 per process: the workers' first
    part runs at its widest (offset: one group), so the function it loads serves every later, narrower part;
    later parts start at the bound's cut. Results agree with eager on every call."""
    import pyopencl as cl

    monkeypatch.setattr(Runtime.for_device(get_device()), "_rates", RATES)
    worker_queue = get_device().queue
    offsets = []
    enqueue = cl.enqueue_nd_range_kernel

    def recording(queue, kernel, global_size, local_size, global_work_offset=None, **kwargs):
        if queue is worker_queue and global_work_offset is not None:
            offsets.append(tuple(global_work_offset))
        return enqueue(queue, kernel, global_size, local_size, global_work_offset=global_work_offset, **kwargs)

    monkeypatch.setattr(cl, "enqueue_nd_range_kernel", recording)
    torch.manual_seed(0)
    model = nn.Linear(96, 24).eval()
    with torch.no_grad():
        compiled = torchfuser.compile(model)
        for _ in range(4):
            x = torch.randn(2999, 96)
            assert_close(compiled(x), model(x))
    plan = torchfuser.last_report().plan
    (split,) = [b for step in plan.steps if hasattr(step[2], "bound") for b in step[2].bound.values()
                if b.lane == SPLIT]
    group = split.launch.local_size[1] if split.launch.local_size else 1
    assert split.widened and offsets[0][1] == group  # the first call: everything but one group on the workers
    assert len(offsets) == 4 and offsets[1][1] > group  # then at the bound's cut (which the profiles move)


class _Profile:
    def __init__(self, start, end):
        self.start, self.end = start, end


class _Event:
    def __init__(self, start, end):
        self.profile = _Profile(start, end)


class _SplitBound:
    def __init__(self, cut):
        self.launch, self.split_dim, self.cut, self.recent_cuts = _Grid((96,), (1,)), 0, cut, []


def _sample(bound, here_ns_per_item, there_ns_per_item, delay_ns=0):
    """A profile of one split launch of `bound` at these per-item times, read twice as the executor does."""
    here = _Event(0, bound.cut * here_ns_per_item)
    worker = _Event(delay_ns, delay_ns + (96 - bound.cut) * there_ns_per_item)
    events = SplitEvents(worker, here, bound)
    first = events.profile
    assert events.profile is first  # read again: the same span, and the sample is not counted twice
    return first


def test_the_cut_follows_the_median_of_recent_samples_and_shrugs_off_one_outlier():
    bound = _SplitBound(60)
    for _ in range(2):
        _sample(bound, 1000, 1000)
    assert bound.cut == 60 and len(bound.recent_cuts) == 2  # two samples: too few to move on
    _sample(bound, 1000, 1000)
    assert bound.cut == 48  # equal rates, no delay: half each
    _sample(bound, 1000, 1000, delay_ns=500_000)  # one call whose workers woke 0.5 ms late
    assert bound.cut == 48
    for _ in range(3):  # the workers now steadily half as fast: they should take a third
        _sample(bound, 1000, 2000)
    assert bound.cut == 64


def test_kernels_that_index_by_work_group_never_split(monkeypatch):
    """A work-group per block of C (the tiled GEMM) or per row (a group reduction) finds its work by
    get_group_id, which a part at a global offset starts at 0 again: such launches run whole. A split tiled GEMM
    left a quarter of C unwritten (flaky in CI, where the measured rates sometimes chose to split)."""
    import torch.nn.functional as F

    import torchfuser.runtime.gemm_launch as gemm_launch
    from torchfuser.ir.kernels import GemmKernel
    from torchfuser.ir.program import ProgramBuilder
    from torchfuser.runtime.device import Device
    from torchfuser.runtime.launch import configure

    if get_device() is None or get_device().inline is None:
        pytest.skip("needs PoCL's two devices")
    monkeypatch.setattr(Device, "type_name", property(lambda self: "GPU"))  # the tiled schedule
    monkeypatch.setattr(Runtime, "lane", lambda self, launch: (SPLIT, "forced") if self.split_point(launch)
                        else (INLINE, "forced"))
    builder = ProgramBuilder(["float32"] * 2)
    kernel = GemmKernel(builder.build([builder.emit("add", (0, 1), "float32")]), group=0)
    a, b, bias = torch.randn(769, 7), torch.randn(7, 127), torch.randn(127)
    assert split_cut(configure(kernel, [a, b, bias], "GPU"), 0.5) is None
    assert configure(kernel, [a, b, bias], "GPU").spec.schedule == "tiled"
    assert_close(kernel(a, b, bias), a @ b + bias, rtol=1e-4, atol=1e-4)
