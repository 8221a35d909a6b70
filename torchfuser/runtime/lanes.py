"""Where a launch runs on a CPU device: in the calling thread alone, or shared with PoCL's worker threads.

Waking PoCL's worker threads and waiting for them costs tens of microseconds per launch (more on a virtual
machine, whose idle vCPUs sleep); a kernel that takes less than that on one core is done sooner in the calling
thread (PoCL's basic device, `Device.inline`, runs a kernel inside the call that enqueues it). A bigger
launch is split (SPLIT): its first work-groups run in the calling thread while the workers (one core fewer
than the machine has, so the calling thread keeps one) run the rest, started first; the calling thread
starts at once, and its share is larger by what the workers lose to their wake. Where there is no in-thread
device (GPUs, or TORCHFUSER_INLINE=0), everything runs on the device (THREADED).

PyTorch's own ops run on its intra-op (OpenMP) threads, which keep spinning on the cores for a while after
each op (libgomp's spin before it sleeps; see runtime/timing.py). A split launch started in that window
waits for workers that share their core with a spinning thread; so a launch that follows such an op (a
convolution left to PyTorch, the host BLAS of an extern GEMM) runs in the calling thread when it is done
within the window, where the split would gain nothing.

A launch is placed by its work (the bytes it moves, the FLOPs it computes) and the rates measured on this
machine: copy bandwidth and FMA throughput of the calling thread alone and of a split launch, the cost of an
empty launch each way, and the wake of idle workers. They are measured once per process and device (a
fraction of a second) and merged into the tuning database, keeping the best rates and the cheapest costs
seen: other work on a shared machine only ever makes them look worse, so the merged figures approach what
the machine can do.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

from torchfuser.runtime.kernel_cache import build_quietly
from torchfuser.runtime.tuning_db import TuningDatabase

INLINE, SPLIT, THREADED = "inline", "split", "threaded"
HOST_THREADS = "host threads"  # in a plan's sequence: a PyTorch op on its OpenMP threads
# the work ATen splits over its threads (at::internal::GRAIN_SIZE, in elements): smaller ops run in the
# calling thread and leave no thread spinning
PARALLEL_GRAIN = 32768
OPENMP_SPIN_SECONDS = 0.015  # how long OpenMP's threads stay spinning after an op (libgomp's default spin)
_RATES_KEY = "lane rates v5"  # v5: the FMA probe on the device's native vectors (float16 spilled on AVX2)
_COPY_BYTES = 64 << 20  # twice the L3 of the machines we see: the copy streams from memory
_FMA_CHAINS = 8  # independent FMA chains per item: enough to cover the FMA latency on two pipes
CLAIMED_INTENSITY = 0.25  # claimed splits for launches at most this share of the ridge point's FLOPs per byte
CUT_ESTIMATES = 5  # a split launch's cut: the median of this many recent balanced-cut estimates


def _probes(width: int) -> str:
    """The probe kernels on vectors of `width` floats (the device's native width)."""
    chains = ", ".join(f"c{i} = a + {i}" for i in range(_FMA_CHAINS))
    steps = " ".join(f"c{i} = fma(c{i}, b, a);" for i in range(_FMA_CHAINS))
    total = " + ".join(f"c{i}" for i in range(_FMA_CHAINS))
    return f"""
__kernel void copy16(__global const float16* src, __global float16* dst) {{
  dst[get_global_id(0)] = src[get_global_id(0)];
}}
__kernel void fma_probe(__global float* out, const int n) {{
  float{width} a = (float{width})(get_global_id(0) * 1e-9f), b = (float{width})(0.999f);
  float{width} {chains};
  for (int i = 0; i < n; ++i) {{ {steps} }}
  vstore{width}({total}, get_global_id(0), out);
}}
__kernel void nothing(__global float* out) {{ }}
"""


@dataclass(frozen=True)
class LaneRates:
    inline_bytes_per_s: float
    inline_flops_per_s: float
    split_bytes_per_s: float  # the calling thread and the workers on one launch together
    split_flops_per_s: float
    wake_seconds: float  # an empty launch on idle workers, and the wait for it
    inline_launch_seconds: float  # an empty kernel in the calling thread
    split_launch_seconds: float  # an empty split launch, workers awake

    def seconds(self, lane: str, flops: float, nbytes: float) -> float:
        """The time a launch of this work is expected to take in `lane`, from the call to its result."""
        alone = max(flops / self.inline_flops_per_s, nbytes / self.inline_bytes_per_s)
        if lane == INLINE:
            return alone + self.inline_launch_seconds
        together = max(flops / self.split_flops_per_s, nbytes / self.split_bytes_per_s)
        return max(together, (alone + self.wake_seconds) / 2) + self.split_launch_seconds

    def inline_share(self, flops: float, nbytes: float) -> float:
        """The calling thread's share of a split launch: half, and what the workers lose to their wake."""
        alone = max(flops / self.inline_flops_per_s, nbytes / self.inline_bytes_per_s)
        return min(0.9, 0.5 + self.wake_seconds / (2 * alone)) if alone > 0 else 0.9


def plan_lanes(rates: LaneRates | None, works: list) -> list[tuple[str, str]]:
    """(lane, why in words) for each launch of a sequence; works: (flops, bytes) per launch, None for a host
    step between launches (it does not change a launch's lane: each pays for its own workers), HOST_THREADS
    for a PyTorch op on its OpenMP threads: the launches after it that are done, in the calling thread,
    within OPENMP_SPIN_SECONDS of it run there."""
    launches = [w for w in works if w is not None and w != HOST_THREADS]
    if rates is None:
        return [(THREADED, "the device has no in-thread companion") for _ in launches]
    chosen, spin_left = [], 0.0
    for work in works:
        if work is None:
            continue
        if work == HOST_THREADS:
            spin_left = OPENMP_SPIN_SECONDS
            continue
        lane, why = choose_lane(rates, *work)
        alone = rates.seconds(INLINE, *work)
        if lane != INLINE and alone <= spin_left:
            lane, why = INLINE, (f"in the calling thread: PyTorch's OpenMP threads still spin on the other cores "
                                 f"after the op before it; expected {alone * 1e6:.1f} us here")
        spin_left = max(0.0, spin_left - rates.seconds(lane, *work))
        chosen.append((lane, why))
    return chosen


def choose_lane(rates: LaneRates | None, flops: float, nbytes: float) -> tuple[str, str]:
    """(lane, why in words) for a launch of this work."""
    if rates is None:
        return THREADED, "the device has no in-thread companion"
    inline, split = rates.seconds(INLINE, flops, nbytes), rates.seconds(SPLIT, flops, nbytes)
    lane = INLINE if inline <= split else SPLIT
    where = ("in the calling thread" if lane == INLINE else
             f"split: {100 * rates.inline_share(flops, nbytes):.0f} % in the calling thread, the rest on the workers")
    return lane, (f"{where}: expected {inline * 1e6:.1f} us in the calling thread alone, {split * 1e6:.1f} us "
                  f"split (the workers' wake: {rates.wake_seconds * 1e6:.0f} us)")


def lane_rates(device) -> LaneRates | None:
    """The rates for a device with an in-thread companion: measured now, merged with the stored ones."""
    if device.inline is None:
        return None
    database = TuningDatabase()
    rates = _measure(device)
    stored = database.get(device.identity, _RATES_KEY)
    try:
        rates = _best_of(rates, LaneRates(**stored)) if stored is not None else rates
    except TypeError:
        pass  # another layout: the new measurement replaces it
    database.put(device.identity, _RATES_KEY, asdict(rates))
    return rates


def _best_of(a: LaneRates, b: LaneRates) -> LaneRates:
    rates, costs = ("inline_bytes_per_s", "inline_flops_per_s", "split_bytes_per_s", "split_flops_per_s"), (
        "wake_seconds", "inline_launch_seconds", "split_launch_seconds")
    best = {k: max(getattr(a, k), getattr(b, k)) for k in rates} | {k: min(getattr(a, k), getattr(b, k)) for k in costs}
    return LaneRates(**best)


def _measure(device) -> LaneRates:
    import pyopencl as cl

    context = device.context
    width = device.vector_widths["float32"]
    program = build_quietly(cl.Program(context, _probes(width)), [device.cl_device, device.inline.cl_device],
                            options="")
    src = cl.Buffer(context, cl.mem_flags.READ_WRITE, _COPY_BYTES)
    dst = cl.Buffer(context, cl.mem_flags.READ_WRITE, _COPY_BYTES)
    fma_items, loops = 64 * (device.cl_device.max_compute_units + 1), 2000
    out = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, 4 * width * fma_items)

    def kernels(name, *args):
        pair = cl.Kernel(program, name), cl.Kernel(program, name)
        for kernel in pair:
            kernel.set_args(*args)
        return pair

    copy, nothing = kernels("copy16", src, dst), kernels("nothing", out)
    fma = kernels("fma_probe", out, np.int32(loops))
    copy_items = _COPY_BYTES // 64
    inline_copy = _best(lambda: _inline(device, copy, copy_items, 16))
    inline_fma = _best(lambda: _inline(device, fma, fma_items, 1))
    split_copy = _best(lambda: _split(device, copy, copy_items, 16, 0.5))
    split_fma = _best(lambda: _split(device, fma, fma_items, 1, 0.5))
    wakes = []
    for _ in range(11):
        time.sleep(0.002)  # long enough for the workers to go to sleep, as they do between calls
        started = time.perf_counter()
        cl.enqueue_nd_range_kernel(device.queue, nothing[0], (1,), (1,))
        device.queue.finish()
        wakes.append(time.perf_counter() - started)
    flops = fma_items * loops * _FMA_CHAINS * width * 2
    return LaneRates(
        inline_bytes_per_s=2 * _COPY_BYTES / inline_copy, inline_flops_per_s=flops / inline_fma,
        split_bytes_per_s=2 * _COPY_BYTES / split_copy, split_flops_per_s=flops / split_fma,
        # the lower quartile: a machine shared with other work makes some wakes slower, not faster
        wake_seconds=statistics.quantiles(wakes, n=4)[0],
        inline_launch_seconds=_best(lambda: _inline(device, nothing, 2, 1), 20),
        split_launch_seconds=_best(lambda: _split(device, nothing, 2, 1, 0.5), 20))


def _inline(device, pair, items: int, local: int) -> None:
    import pyopencl as cl

    cl.enqueue_nd_range_kernel(device.inline.queue, pair[1], (items,), (local,))


def _split(device, pair, items: int, local: int, share: float) -> None:
    import pyopencl as cl

    cut = int(items * share) // local * local
    event = cl.enqueue_nd_range_kernel(device.queue, pair[0], (items - cut,), (local,), global_work_offset=(cut,))
    device.queue.flush()
    cl.enqueue_nd_range_kernel(device.inline.queue, pair[1], (cut,), (local,))
    wait_for_worker(device, event)


def group_size(launch, dim: int) -> int:
    """Work-items per work-group along dim (1 where the launch leaves the local size to the driver)."""
    return launch.local_size[dim] if launch.local_size else 1


def work_groups(launch, dim: int) -> int:
    return launch.global_size[dim] // group_size(launch, dim)


def claimable(launch, rates: LaneRates) -> bool:
    """A split of this launch runs its kernel's claimed form (codegen/opencl/claimed.py): work-groups of one
    work-item, which the claimed form's loop replaces (larger groups are what PoCL vectorises across), and work
    that streams memory. A compute-bound tile schedule runs slower in the claimed form (measured on packed
    GEMMs; see the bench's GEMM rows): it keeps the fixed cut."""
    ridge = rates.inline_flops_per_s / rates.inline_bytes_per_s  # FLOPs per byte where compute starts to bound
    return (all(size == 1 for size in launch.local_size or (1,))
            and launch.flops <= CLAIMED_INTENSITY * ridge * launch.nbytes)


def split_cut(launch, share: float) -> tuple[int, int] | None:
    """(dim, cut): the dim with the most work-groups (a GEMM of one panel splits its row stacks) and the first
    global index of the workers' part along it (a work-group boundary); None if no dim holds two groups, or the
    kernel finds its work by work-group id (two parts would both start at group 0)."""
    if launch.spec.indexes_by_group:
        return None
    dim = max(range(len(launch.global_size)), key=lambda d: (work_groups(launch, d), -d))
    groups = work_groups(launch, dim)
    if groups < 2:
        return None
    return dim, min(groups - 1, max(1, round(groups * share))) * group_size(launch, dim)


class SplitEvents:
    """A split launch's two events, profiled as one (from the earlier start to the later end); reading them
    also moves the launch's split point towards the one where both parts would have ended together."""

    __slots__ = ("worker", "here", "bound", "_span")

    def __init__(self, worker, here, bound):
        # bound: the launch's call.Bound (its cut); None for a launch at another cut than the bound's
        self.worker, self.here, self.bound = worker, here, bound
        self._span = None

    @property
    def profile(self):
        if self._span is None:  # read once: a second reading must not count the same sample again
            worker, here = self.worker.profile, self.here.profile
            if self.bound is not None:
                self._rebalance(worker, here)
            self._span = _Span(min(worker.start, here.start), max(worker.end, here.end))
        return self._span

    def _rebalance(self, worker, here) -> None:
        """Each side's rate this time, and the delay before the workers started, give the cut where both
        would have ended at once; the bound takes the median of the last few such cuts (one call whose
        workers woke late, or were interrupted, would throw a single estimate far off)."""
        bound, dim = self.bound, self.bound.split_dim
        local, size = group_size(bound.launch, dim), bound.launch.global_size[dim]
        mine, theirs = here.end - here.start, worker.end - worker.start
        if mine <= 0 or theirs <= 0:
            return
        rate_here, rate_there = bound.cut / mine, (size - bound.cut) / theirs
        delay = worker.start - here.start
        balanced = (rate_here * rate_there * delay + rate_here * size) / (rate_here + rate_there)
        recent = bound.recent_cuts
        recent.append(balanced)
        if len(recent) > CUT_ESTIMATES:
            del recent[0]
        if len(recent) < 3:
            return  # a median of fewer is as easily thrown as one estimate
        groups = round(statistics.median(recent) / local)
        bound.cut = min(size // local - 1, max(1, groups)) * local


class _Span:
    __slots__ = ("start", "end")

    def __init__(self, start, end):
        self.start, self.end = start, end


def wait_complete(event) -> None:
    """Spin until the workers finished `event` (a blocked thread on an idle vCPU wakes tens of us late)."""
    import pyopencl as cl

    complete = cl.command_execution_status.COMPLETE
    while event.command_execution_status != complete:
        pass


def wait_for_worker(device, event, finish: bool = True) -> None:
    """wait_complete(event), then finish the queue (which holds nothing more by then, unless a linger follows:
    linger.py)."""
    wait_complete(event)
    if finish:
        device.queue.finish()


def _best(run, repeats: int = 5) -> float:
    """The fastest of a few timed runs after one untimed (the first compiles the work-group function): the
    rate the machine can do, which other work on a shared machine only ever lowers."""
    run()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)
