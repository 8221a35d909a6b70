"""Interleaved block timing: the steady speed of back-to-back calls, with machine noise shared by all candidates.

Each candidate is timed as a user who calls it in a loop sees it: `block` calls back to back, each result kept
until the next call returns (`y = f(x)`), the block's time divided by `block`. Blocks of the candidates
alternate, round after round, and the order of the candidates rotates by one each round, so that no
candidate always runs first in a round; the median over the rounds is the result. The block size is chosen per candidate from a calibration (the fastest of a few single calls says
how many calls last `block_seconds`), so that a 30 us call and a 30 ms call are both timed over a few ms, and
neither the timer's own cost nor one preempted call decides the result.

An earlier version slept 50 ms before every timed call: that timed a COLD call (threads asleep, caches cold),
not the steady state, and turned eager's 31 us MLP into 730 us.

Switching candidates is not free either, and a user who calls one model in a loop never pays for it: the first
calls after a switch run slow (PyTorch's OpenMP threads still spin after the previous candidate's ops and take
the cores, PoCL's worker threads have gone to sleep, caches hold the other candidate's data). On the
64->128->64 MLP, the median us of the 1st, 2nd, 3rd ... call after a switch were: torchfuser 2843 1615 658 417
334 ... 287 steady; inductor 305 127 98 85 ... 68; eager 235 49 37 ... 34. So each block starts with untimed
calls of the same candidate for `lead_seconds` (at least one call), and only then are calls timed.
"""

from __future__ import annotations

import math
import statistics
import time

# The autotuner's pause before each timed candidate (runtime/autotune.py imports it): longer than libgomp's
# default spin (300k pause loops, ~15-20 ms here) before it sleeps. The bench no longer sleeps between calls.
SETTLE_SECONDS = 0.05

BLOCK_SECONDS = 0.002  # a block lasts at least this long...
MAX_BLOCK = 1000       # ...but holds no more calls than this, and never fewer than one
LEAD_SECONDS = 0.03    # untimed calls before each block, at least one: the switch from another candidate
# (longer than libgomp's spin after the previous candidate's PyTorch ops, which otherwise takes a core from
# whichever candidate follows: torchfuser's 1M-element gelu read 0.92-1.88 ms after eager's and inductor's
# blocks with a 5 ms lead, 0.97 ms with 30 ms, as when called alone)
MAX_BLOCK_SECONDS = 0.1  # a block stops early (after at least one call) once it has run this long


class Timings(dict):
    """{name: median seconds per call}, plus how they were measured: `blocks` {name: calls per block},
    `samples` {name: [seconds per call of each round's block]}, `orders` [the candidate order of each round]."""

    blocks: dict
    samples: dict
    orders: list


def calibrate(fn, block_seconds: float = BLOCK_SECONDS, max_block: int = MAX_BLOCK, calls: int = 5) -> int:
    """Calls per block for fn: single calls timed until there are `calls` of them and they took block_seconds
    in all (or max_block calls were made); the fastest call then says how many calls last block_seconds.
    The fastest, not the total or the median: calls slowed by another process (these machines are shared)
    would shrink the block, down to one call; a block larger than needed only costs time.
    Also warms fn up (about 2 block_seconds' worth of calls, at least `calls`)."""
    times = []
    spent = 0.0
    while len(times) < max(1, calls) or (spent < block_seconds and len(times) < max_block):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    per_call = min(times)
    if per_call <= 0:
        return max_block
    return max(1, min(max_block, math.ceil(block_seconds / per_call)))


def rotated(names: list, round_: int) -> list:
    """The candidate order of round `round_`: the names rotated left by round_ (mod their number)."""
    k = round_ % len(names) if names else 0
    return names[k:] + names[:k]


def interleaved_medians(candidates: dict, repeats: int = 15, warmup: int = 3, min_seconds: float = 0.0,
                        block_seconds: float = BLOCK_SECONDS, max_block: int = MAX_BLOCK,
                        lead_seconds: float = LEAD_SECONDS, max_block_seconds: float = MAX_BLOCK_SECONDS,
                        blocks: dict | None = None) -> Timings:
    """{name: median seconds per call} of zero-argument callables in steady state (see the module docstring).

    warmup: untimed calls of each candidate first (then the calibration warms each up for ~block_seconds).
    repeats: rounds at least; min_seconds: keep adding rounds until the rounds took this long in all.
    block_seconds, max_block: the calibration's target; blocks: {name: calls per block} to skip calibrating.
    lead_seconds: before each timed block, untimed calls of the same candidate until this much time has passed
    (at least one call; 0: none), which absorbs the switch from the previous candidate.
    max_block_seconds: a block ends early, after at least one call, once it has lasted this long (the sample is
    then its time over the calls it made): calibrated in a quiet second, a 30 us candidate's 70-call block
    would otherwise last seconds each round while another process slows every call to milliseconds."""
    names = list(candidates)
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    sizes = {name: (blocks or {}).get(name) or calibrate(fn, block_seconds, max_block)
             for name, fn in candidates.items()}
    samples = {name: [] for name in names}
    orders = []
    started = time.perf_counter()
    round_ = 0
    while round_ < repeats or time.perf_counter() - started < min_seconds:
        order = rotated(names, round_)
        orders.append(order)
        for name in order:
            fn, n = candidates[name], sizes[name]
            # each call's result is kept until the next returns, as `y = f(x)` in a user's loop keeps it
            kept = None
            if lead_seconds > 0:
                lead_end = time.perf_counter() + lead_seconds
                kept = fn()
                while time.perf_counter() < lead_end:
                    kept = fn()
            t0 = time.perf_counter()
            stop = t0 + max_block_seconds
            done = 0
            while done < n:
                kept = fn()
                done += 1
                if done < n and time.perf_counter() > stop:
                    break
            samples[name].append((time.perf_counter() - t0) / done)
            del kept
        round_ += 1
    result = Timings({name: statistics.median(values) for name, values in samples.items()})
    result.blocks, result.samples, result.orders = sizes, samples, orders
    return result
