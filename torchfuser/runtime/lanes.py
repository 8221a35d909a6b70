"""Where a launch runs on a CPU device: in the calling thread, or on PoCL's worker threads.

Waking the threaded device's workers and waiting for them costs tens of microseconds per call; a kernel
that takes less than that on one core is done sooner in the calling thread (PoCL's basic device,
`Device.inline`). A plan's launches are placed together (`plan_lanes`): each by its work (the bytes it
moves, the FLOPs it computes) and the rates measured on this machine (copy bandwidth and FMA throughput of
one thread and of all workers, the cost of a launch on each), and every run of consecutive threaded
launches pays one wake-and-wait of the workers, so a small kernel between two big ones may join them. They are measured once per process and device
(a fraction of a second) and merged into the tuning database, keeping the best rates and the cheapest wake
seen: other work on a shared machine only ever makes them look worse, so the merged figures approach what
the machine can do.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass

import numpy as np

from torchfuser.runtime.tuning_db import TuningDatabase

INLINE, THREADED = "inline", "threaded"
_RATES_KEY = "lane rates v3"
_COPY_BYTES = 64 << 20  # twice the L3 of the machines we see: the copy streams from memory
_PROBES = """
__kernel void copy16(__global const float16* src, __global float16* dst) {
  dst[get_global_id(0)] = src[get_global_id(0)];
}
__kernel void fma16(__global float* out, const int n) {
  float16 a = (float16)(get_global_id(0) * 1e-9f), b = (float16)(0.999f);
  float16 c0 = a, c1 = a + 1, c2 = a + 2, c3 = a + 3, c4 = a + 4, c5 = a + 5, c6 = a + 6, c7 = a + 7;
  for (int i = 0; i < n; ++i) {
    c0 = fma(c0, b, a); c1 = fma(c1, b, a); c2 = fma(c2, b, a); c3 = fma(c3, b, a);
    c4 = fma(c4, b, a); c5 = fma(c5, b, a); c6 = fma(c6, b, a); c7 = fma(c7, b, a);
  }
  vstore16(c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7, get_global_id(0), out);
}
__kernel void nothing(__global float* out) { }
"""


@dataclass(frozen=True)
class LaneRates:
    inline_bytes_per_s: float
    inline_flops_per_s: float
    threaded_bytes_per_s: float
    threaded_flops_per_s: float
    wake_seconds: float  # one launch of an empty kernel on the threaded device, idle before, and the wait for it
    inline_launch_seconds: float  # an empty kernel in the calling thread
    threaded_launch_seconds: float  # one more empty kernel on the workers, once they are awake

    def seconds(self, lane: str, flops: float, nbytes: float) -> float:
        """The time a launch of this work is expected to take in `lane`, not counting the wake."""
        if lane == INLINE:
            return max(flops / self.inline_flops_per_s, nbytes / self.inline_bytes_per_s) + self.inline_launch_seconds
        return (max(flops / self.threaded_flops_per_s, nbytes / self.threaded_bytes_per_s)
                + self.threaded_launch_seconds)


def plan_lanes(rates: LaneRates | None, works: list) -> list[tuple[str, str]]:
    """(lane, why in words) for each launch of a sequence. works: (flops, bytes) per launch, or None for a host
    step that waits for every launch before it. The sequence's expected time is the least over lane choices
    of each launch's time in its lane plus one wake per run of consecutive threaded launches (a host step
    ends a run); threaded everywhere where there is no in-thread device."""
    if rates is None:
        return [(THREADED, "the device has no in-thread companion") for w in works if w is not None]
    # best[lane]: (least expected time of the launches so far, ending in that lane, with the choices)
    best = {INLINE: (0.0, ()), THREADED: (float("inf"), ())}
    for work in works:
        if work is None:  # a host read: the workers are idle after it, as at the start
            total, choices = min(best.values(), key=lambda b: b[0])
            best = {INLINE: (total, choices), THREADED: (float("inf"), choices)}
            continue
        inline, threaded = rates.seconds(INLINE, *work), rates.seconds(THREADED, *work)
        from_inline, from_threaded = best[INLINE], best[THREADED]
        stay = from_threaded[0] + threaded
        wake = from_inline[0] + rates.wake_seconds + threaded
        joined = (stay, from_threaded[1]) if stay <= wake else (wake, from_inline[1])
        into_inline = min(best.values(), key=lambda b: b[0])
        best = {INLINE: (into_inline[0] + inline, into_inline[1] + ((INLINE, inline, threaded),)),
                THREADED: (joined[0], joined[1] + ((THREADED, inline, threaded),))}
    _, choices = min(best.values(), key=lambda b: b[0])
    return [(lane, _why(lane, inline, threaded, rates.wake_seconds)) for lane, inline, threaded in choices]


def choose_lane(rates: LaneRates | None, flops: float, nbytes: float) -> tuple[str, str]:
    """(lane, why in words) for one launch on its own."""
    return plan_lanes(rates, [(flops, nbytes)])[0]


def _why(lane: str, inline: float, threaded: float, wake: float) -> str:
    where = "in the calling thread" if lane == INLINE else "on the worker threads"
    return (f"{where}: expected {inline * 1e6:.1f} us in the calling thread, {threaded * 1e6:.1f} us on the "
            f"workers, plus {wake * 1e6:.0f} us to wake them once per run of threaded launches")


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
    return LaneRates(max(a.inline_bytes_per_s, b.inline_bytes_per_s), max(a.inline_flops_per_s, b.inline_flops_per_s),
                     max(a.threaded_bytes_per_s, b.threaded_bytes_per_s),
                     max(a.threaded_flops_per_s, b.threaded_flops_per_s), min(a.wake_seconds, b.wake_seconds),
                     min(a.inline_launch_seconds, b.inline_launch_seconds),
                     min(a.threaded_launch_seconds, b.threaded_launch_seconds))


def _measure(device) -> LaneRates:
    import pyopencl as cl

    context = device.context
    program = cl.Program(context, _PROBES).build(devices=[device.cl_device, device.inline.cl_device])
    src = cl.Buffer(context, cl.mem_flags.READ_WRITE, _COPY_BYTES)
    dst = cl.Buffer(context, cl.mem_flags.READ_WRITE, _COPY_BYTES)
    fma_items, loops = 64 * device.cl_device.max_compute_units, 2000
    out = cl.Buffer(context, cl.mem_flags.WRITE_ONLY, 64 * fma_items)
    rates = []
    for dev in (device.inline, device):
        copy, fma = cl.Kernel(program, "copy16"), cl.Kernel(program, "fma16")
        copy.set_args(src, dst)
        fma.set_args(out, np.int32(loops))
        copy_s = _best(dev.queue, copy, (_COPY_BYTES // 64,), (16,))
        fma_s = _best(dev.queue, fma, (fma_items,), (1,))
        rates += [2 * _COPY_BYTES / copy_s, fma_items * loops * 8 * 16 * 2 / fma_s]
    nothing = cl.Kernel(program, "nothing")
    nothing.set_args(out)
    launches = []
    for dev in (device.inline, device):
        cl.enqueue_nd_range_kernel(dev.queue, nothing, (1,), (1,))
        dev.queue.finish()
        started = time.perf_counter()
        for _ in range(20):
            cl.enqueue_nd_range_kernel(dev.queue, nothing, (1,), (1,))
        dev.queue.finish()
        launches.append((time.perf_counter() - started) / 20)
    wakes = []
    for _ in range(11):
        time.sleep(0.002)  # long enough for the workers to go to sleep, as they do between calls
        started = time.perf_counter()
        cl.enqueue_nd_range_kernel(device.queue, nothing, (1,), (1,))
        device.queue.finish()
        wakes.append(time.perf_counter() - started)
    # the lower quartile: a machine shared with other work makes some wakes slower, not faster
    return LaneRates(*rates, wake_seconds=statistics.quantiles(wakes, n=4)[0], inline_launch_seconds=launches[0],
                     threaded_launch_seconds=launches[1])


def _best(queue, kernel, global_size, local_size, repeats: int = 5) -> float:
    """Best profiled time of a few launches (the first one compiles the work-group function): the rate the
    machine can do, which other work on a shared machine only ever lowers."""
    import pyopencl as cl

    cl.enqueue_nd_range_kernel(queue, kernel, global_size, local_size).wait()
    times = []
    for _ in range(repeats):
        event = cl.enqueue_nd_range_kernel(queue, kernel, global_size, local_size)
        event.wait()
        times.append((event.profile.end - event.profile.start) * 1e-9)
    return min(times)
