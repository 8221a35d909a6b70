"""How much of the machine other processes took while this one timed something (Linux: /proc/stat).

A measurement taken while another process (a build, a test suite, a second benchmark) shares the cores says
little about the quiet machine the result is kept for: the GEMM tuner still uses such a search's winner, but
does not keep it in the tuning database (runtime/autotune.py).
"""

from __future__ import annotations

import os

_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _sample() -> tuple[int, int, float] | None:
    """(machine busy ticks, machine total ticks, this process's ticks: every thread, user and system) or None
    where /proc/stat is not there. Steal time counts as busy: the hypervisor gave the CPU to someone else."""
    try:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return None
    if len(fields) < 5:
        return None
    idle = fields[3] + fields[4]  # idle, iowait
    total = sum(fields)
    times = os.times()
    return total - idle, total, (times.user + times.system) * _TICKS_PER_SECOND


class OtherLoad:
    """Started at construction; `share()`: the fraction of all CPUs' time since then that went to other processes
    (or was stolen by the hypervisor), None where it cannot be known."""

    def __init__(self):
        self._start = _sample()

    def share(self) -> float | None:
        end = _sample()
        if self._start is None or end is None:
            return None
        (busy0, total0, own0), (busy1, total1, own1) = self._start, end
        if total1 <= total0:
            return None
        return min(1.0, max(0.0, (busy1 - busy0) - (own1 - own0)) / (total1 - total0))
