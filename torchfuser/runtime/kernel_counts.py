"""A plan's launches and profiled seconds per kernel, and which of its calls are profiled.

A call that is not profiled only keeps its (label, event) pairs, counted when the stats are read or the next
call is profiled: no loop over its launches at its end.
"""

from __future__ import annotations

from torchfuser.runtime.call import KernelStats

PROFILE_FIRST_CALLS, PROFILE_EVERY = 20, 10
# ...and every PROFILE_EVERY_LATER-th once a plan has made PROFILE_SPARSE_AFTER calls: a profiled call runs each
# kernel on its own with an event, a few microseconds more than a small graph's chained replay
PROFILE_SPARSE_AFTER, PROFILE_EVERY_LATER = 1000, 100


class KernelCounts:
    __slots__ = ("_stats", "_unrecorded", "_next", "_at", "call_seconds")

    def __init__(self):
        self._stats: dict[str, KernelStats] = {}
        self._unrecorded: list[list] = []  # the events of the calls since the last profiled one
        self._next = 0  # calls still to profile whatever their number (profile_next)
        self._at = 1  # no call before this one is profiled, unless profile_next asks (a call number)
        self.call_seconds = 0.0  # the kernel time of the last profiled call

    def profile_next(self, calls: int) -> None:
        """Profile the next `calls` calls, whatever their number (by default the first PROFILE_FIRST_CALLS are, then
        every PROFILE_EVERY-th, then every PROFILE_EVERY_LATER-th)."""
        self._next, self._at = calls, 0

    def profiles(self, calls: int) -> bool:
        """Whether the call after `calls` calls is profiled: not the first (PoCL compiles each kernel's work-group
        function inside its first launch), those asked for, the next ones, then every PROFILE_EVERY-th, then every
        PROFILE_EVERY_LATER-th."""
        if calls < self._at:
            return False
        if self._next > 0 and calls > 0:
            self._next -= 1
            return True
        if calls < PROFILE_FIRST_CALLS:
            self._at = calls + 1
            return calls > 0
        every = PROFILE_EVERY if calls < PROFILE_SPARSE_AFTER else PROFILE_EVERY_LATER
        self._at = (calls // every + 1) * every
        return calls % every == 0

    @property
    def stats(self) -> dict[str, KernelStats]:
        self._count_unrecorded()
        return self._stats

    def count(self, events: list, profiled: bool) -> None:
        """Count a call's launches: (label, event) pairs, a profiled call's with their times now."""
        if not profiled:
            self._unrecorded.append(events)
            return
        self._count_unrecorded()
        total = 0.0
        for name, event in events:
            stats = self._kernel_stats(name)
            stats.launches += 1
            stats.profiled += 1
            seconds = (event.profile.end - event.profile.start) * 1e-9
            stats.seconds += seconds
            total += seconds
        self.call_seconds = total

    def _count_unrecorded(self) -> None:
        pending, self._unrecorded = self._unrecorded, []
        for events in pending:
            for name, _ in events:
                self._kernel_stats(name).launches += 1

    def _kernel_stats(self, name: str) -> KernelStats:
        stats = self._stats.get(name)
        if stats is None:
            stats = self._stats[name] = KernelStats()
        return stats
