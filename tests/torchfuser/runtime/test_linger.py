"""The workers' lingers: released by the next worker part or by host work, ending by themselves otherwise."""

import time

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.runtime.call import Runtime
from torchfuser.runtime.device import get_device
from torchfuser.runtime.lanes import HOST_THREADS, SPLIT
import torchfuser.runtime.linger as linger_module
from torchfuser.runtime.linger import LINGER_SECONDS, WorkerLinger

pytestmark = pytest.mark.skipif(get_device() is None or get_device().inline is None,
                                reason="needs PoCL's two devices")


def test_a_release_moves_the_flag_once_and_a_linger_nobody_releases_ends_by_itself():
    runtime = Runtime.for_device(get_device())
    linger = runtime.linger
    runtime.release_workers()
    generation = int(linger.flag[0])
    linger.follow()  # enqueued polling while the flag holds `generation`
    assert linger.pending and int(linger.flag[0]) == generation
    linger.release()
    linger.release()  # nothing pending: the flag stays
    assert not linger.pending and int(linger.flag[0]) == generation + 1
    linger.follow()
    started = time.perf_counter()
    get_device().queue.finish()  # waits for the unreleased linger: its polls are bounded
    assert time.perf_counter() - started < 1000 * LINGER_SECONDS
    linger.release()


def test_lingers_released_before_they_start_end_at_once(monkeypatch):
    """Two lingers enqueued and released before the workers start either (nothing flushed): each ends at its
    first poll. With a flag flipped between two values the first saw its value back after the second release
    and polled to its end (0.4 s here)."""
    monkeypatch.setattr(linger_module, "LINGER_SECONDS", 0.4)
    device = get_device()
    Runtime.for_device(device).release_workers()
    device.queue.finish()
    linger = WorkerLinger(device)  # its own flag, polls for 0.4 s
    for _ in range(2):
        linger.follow()
        linger.release()
    started = time.perf_counter()
    device.queue.finish()
    assert time.perf_counter() - started < 0.1


@pytest.fixture
def split_everything(monkeypatch):
    """Every launch split, whatever this machine's rates would choose."""
    monkeypatch.setattr(Runtime, "lanes", lambda self, launches: [(SPLIT, "forced") for x in launches
                                                                  if x is not None and x != HOST_THREADS])
    monkeypatch.setattr(Runtime, "lane", lambda self, launch: (SPLIT, "forced"))


def linger_after_each_call(fn, calls: int, atol: float) -> list[bool]:
    """fn compiled and called on fresh [1, 768] inputs, each result checked against eager; whether a linger
    was pending after each call."""
    runtime = Runtime.for_device(get_device())
    pending = []
    with torch.no_grad():
        compiled = torchfuser.compile(fn)
        for _ in range(calls):
            x = torch.randn(1, 768)
            assert_close(compiled(x), fn(x), rtol=1e-4, atol=atol)
            pending.append(runtime.linger.pending)
    return pending


def test_split_launches_leave_a_linger_that_a_pytorch_fallback_releases(split_everything):
    """A GEMV splits (a linger follows its workers' part); the cumsum after it runs in PyTorch, so the linger
    is released before it; results agree with eager on every call."""
    torch.manual_seed(0)
    weight = nn.Linear(768, 3072).eval()

    def fn(x):
        return torch.cumsum(weight(x), -1)

    assert linger_after_each_call(fn, 4, atol=1e-3) == [False] * 4  # released for the cumsum
    report = torchfuser.last_report()
    assert [k.lane for k in report.kernels if k.kind == "gemm"] == [SPLIT]
    assert [f.op for f in report.fallbacks] == ["aten.cumsum.default"]


def test_a_split_launch_leaves_its_workers_lingering_after_the_call(split_everything):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(768, 3072), nn.Linear(3072, 768)).eval()
    assert linger_after_each_call(model, 3, atol=1e-4) == [True] * 3  # behind the last split's workers' part
    assert [k.lane for k in torchfuser.last_report().kernels] == [SPLIT, SPLIT]
    Runtime.for_device(get_device()).release_workers()


def test_the_next_linger_is_enqueued_before_the_calling_threads_part(split_everything, monkeypatch):
    """Worker part, then its linger, then the calling thread's part: after that part (a GEMV streams its weights
    through the caches) the linger's enqueue would cost the calling thread several times more."""
    import pyopencl as cl

    device = get_device()
    runtime = Runtime.for_device(device)
    order = []
    enqueue = cl.enqueue_nd_range_kernel

    def recording(queue, kernel, *args, **kwargs):
        if kernel is runtime.linger.kernel:
            order.append("linger")
        else:
            order.append("here" if queue is device.inline.queue else "workers")
        return enqueue(queue, kernel, *args, **kwargs)

    torch.manual_seed(0)
    model = nn.Linear(768, 3072).eval()
    with torch.no_grad():
        compiled = torchfuser.compile(model)
        x = torch.randn(1, 768)
        compiled(x)
        monkeypatch.setattr(cl, "enqueue_nd_range_kernel", recording)
        assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-3)
    assert order == ["workers", "linger", "here"]
    runtime.release_workers()


def test_a_linger_reads_ahead_until_released_and_keeps_what_it_reads_alive_until_it_ends(monkeypatch):
    monkeypatch.setattr(linger_module, "LINGER_SECONDS", 0.4)
    device = get_device()
    Runtime.for_device(device).release_workers()
    device.queue.finish()
    linger = WorkerLinger(device)
    weights = torch.randn(4 << 20)  # 16 MiB: more than it reads (AHEAD_BYTES)
    linger.follow(weights)
    assert linger._reading[-1][1] is weights  # referenced while the workers may still read it
    device.queue.flush()
    linger.release()
    started = time.perf_counter()
    device.queue.finish()
    assert time.perf_counter() - started < 0.1  # released: it stops reading and polling at once
    linger.follow()
    assert linger._reading == []  # the linger that read it has ended: the reference goes
    linger.release()
    device.queue.finish()


def test_a_broadcast_view_is_read_ahead_only_as_far_as_its_memory_reaches():
    """extent, not numel: a stride-0 view of one float spans 4 bytes (less than a line: nothing to read)."""
    device = get_device()
    Runtime.for_device(device).release_workers()
    linger = WorkerLinger(device)
    linger.follow(torch.zeros(1).expand(1 << 22))
    assert linger._reading == []
    linger.release()
    device.queue.finish()


def test_each_split_gemm_lingers_reading_the_next_ones_weights(split_everything, monkeypatch):
    """Three split GEMMs: behind each one's workers' part the linger reads the next one's weights (B) as the
    call before ran them, the last one the first's (the next call's); results agree with eager on every call."""
    runtime = Runtime.for_device(get_device())
    read = []
    follow = WorkerLinger.follow

    def recording(self, ahead=None):
        read.append(ahead)
        return follow(self, ahead)

    monkeypatch.setattr(WorkerLinger, "follow", recording)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(768, 1024), nn.ReLU(), nn.Linear(1024, 512), nn.Linear(512, 768)).eval()
    with torch.no_grad():
        compiled = torchfuser.compile(model)
        for _ in range(3):
            read.clear()
            x = torch.randn(1, 768)
            assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    plan = torchfuser.last_report().plan
    weights = list(plan._ahead.values())  # the next call's: the second, the third, then the first GEMM's B
    assert len(read) == 3 and all(a is not None for a in read)
    assert [a.data_ptr() for a in read] == [w.data_ptr() for w in weights]
    assert [w.shape[-2] for w in weights] == [1024, 512, 768]  # K of the GEMM each one feeds
    runtime.release_workers()


def test_weights_replaced_between_calls_while_lingers_read_the_old_ones(split_everything):
    """Each call's lingers read the next GEMM's packed weights; the caller then gives the layers new weight
    storage (the old packed copies go): results follow the new weights, as eager's do, on every call."""
    import gc

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(768, 3072), nn.Linear(3072, 768)).eval()
    with torch.no_grad():
        compiled = torchfuser.compile(model)
        for _ in range(4):
            x = torch.randn(1, 768)
            assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-3)
            model[0].weight.data = torch.randn(3072, 768) * 0.02
            model[1].weight.data = torch.randn(768, 3072) * 0.02
            gc.collect()
    assert [k.lane for k in torchfuser.last_report().kernels] == [SPLIT, SPLIT]
    Runtime.for_device(get_device()).release_workers()
