"""Interleaved timing: candidates run in turn, round after round, so machine noise hits them alike.

A short pause before each timed call lets the previous candidate's threads go idle: after a PyTorch op,
OpenMP's threads keep spinning on the cores for a while, and whatever runs next on other threads (our
OpenCL kernels) would pay for it, so without the pause the order of the candidates would decide part of
the result (an attention kernel: 2.9 ms alone, 6.4 ms right after an eager call).
"""

from __future__ import annotations

import statistics
import time

SETTLE_SECONDS = 0.05  # longer than libgomp's default spin (300k pause loops, ~15-20 ms here) before it sleeps


def interleaved_medians(candidates: dict, repeats: int = 15, warmup: int = 3, min_seconds: float = 0.0,
                        settle: float = SETTLE_SECONDS, warm_calls: int = 0) -> dict:
    """{name: median seconds per call} for zero-argument callables, timed round-robin.

    warm_calls > 0 runs each candidate that many times untimed right before its timed call: the steady speed
    of back-to-back calls, where the default (0) times a call that starts on idle cores, as a single
    inference does (here idle vCPUs wake slowly: a 16 ms GEMM runs ~10 % slower right after 50 ms idle)."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in candidates}
    started = time.perf_counter()
    rounds = 0
    while rounds < repeats or time.perf_counter() - started < min_seconds:
        for name, fn in candidates.items():
            if settle:
                time.sleep(settle)
            for _ in range(warm_calls):
                fn()
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
        rounds += 1
    return {name: statistics.median(values) for name, values in samples.items()}
