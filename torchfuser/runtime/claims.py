"""The host side of claimed split launches (codegen/opencl/claimed.py): each launch's counter cell, and its span.

A claimed launch is enqueued on the workers (one work-item per worker thread) and then run in the calling thread
(one work-item), both taking slices from the launch's cell until none is left. The calling thread knows the launch
is done when the cell's count of finished slices reaches the slice total: no driver call, and no waiting for a
worker that found nothing left to take. The cell is reset before each launch of its bound, once the bound's
previous worker part has ended (a worker still in its last claim would otherwise take from the new launch).
"""

from __future__ import annotations

import time

import numpy as np

from torchfuser.codegen.opencl.claimed import CELL_INTS
from torchfuser.runtime.lanes import wait_complete
from torchfuser.runtime.memory import ALIGNMENT

_CELLS_PER_BLOCK = 256


class ClaimCells:
    """Counter cells in host memory that one device's kernels update (USE_HOST_PTR buffers, 64-byte aligned)."""

    def __init__(self, device):
        self.device = device
        self._blocks: list[tuple[np.ndarray, object]] = []  # (ints, cl.Buffer over them)
        self._used = _CELLS_PER_BLOCK

    def take(self) -> "Cell":
        import pyopencl as cl

        if self._used == _CELLS_PER_BLOCK:
            raw = np.zeros(_CELLS_PER_BLOCK * CELL_INTS + ALIGNMENT // 4, np.int32)
            start = (-raw.ctypes.data) % ALIGNMENT // 4
            ints = raw[start:start + _CELLS_PER_BLOCK * CELL_INTS]  # a view: it keeps `raw` alive
            flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
            self._blocks.append((ints, cl.Buffer(self.device.context, flags, hostbuf=ints)))
            self._used = 0
        ints, buffer = self._blocks[-1]
        index, self._used = self._used, self._used + 1
        return Cell(ints[index * CELL_INTS:(index + 1) * CELL_INTS], buffer, index)


class Cell:
    """One launch's counters: [next slice to claim, slices done]; `index` is its place in `buffer`."""

    __slots__ = ("ints", "buffer", "index", "worker_event")

    def __init__(self, ints: np.ndarray, buffer, index: int):
        self.ints, self.buffer, self.index = ints, buffer, index
        self.worker_event = None  # the workers' part of the last launch that used the cell

    def reset(self) -> None:
        """Make the cell ready for the next launch, once the workers have left the last one."""
        if self.worker_event is not None:  # normally long over: it was the call before this one
            wait_complete(self.worker_event)
        self.ints[0] = self.ints[1] = 0


class ClaimedSpan:
    """A claimed launch's time, in host clock nanoseconds (profiled like an event: `profile.start`,
    `profile.end`): from its enqueue to the end of the calling thread's part, or to the moment the calling
    thread sees the workers' last slice done if it has to wait for it (when it looks later, after other host
    work, and finds them done, they are taken to have ended with the calling thread's part)."""

    __slots__ = ("start", "end", "cell", "slices")

    def __init__(self, cell: Cell, slices: int):
        self.start, self.end, self.cell, self.slices = time.perf_counter_ns(), None, cell, slices

    @property
    def profile(self) -> "ClaimedSpan":
        return self

    def here_done(self) -> None:
        """The calling thread has run out of slices to claim."""
        self.end = time.perf_counter_ns()

    def wait(self) -> None:
        """Spin until every slice is done."""
        done, slices = self.cell.ints, self.slices
        if done[1] < slices:
            while done[1] < slices:
                pass
            self.end = time.perf_counter_ns()
