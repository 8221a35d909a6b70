"""Interleaved timing: candidates run in turn, round after round, so machine noise hits them alike."""

from __future__ import annotations

import statistics
import time


def interleaved_medians(candidates: dict, repeats: int = 15, warmup: int = 3, min_seconds: float = 0.0) -> dict:
    """{name: median seconds per call} for zero-argument callables, timed round-robin."""
    for fn in candidates.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in candidates}
    started = time.perf_counter()
    rounds = 0
    while rounds < repeats or time.perf_counter() - started < min_seconds:
        for name, fn in candidates.items():
            t0 = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - t0)
        rounds += 1
    return {name: statistics.median(values) for name, values in samples.items()}
