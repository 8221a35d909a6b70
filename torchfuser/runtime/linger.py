"""Keeping PoCL's worker threads awake for a moment after their part of a split launch.

A worker that finds no work sleeps at once; the next enqueue must wake it, and on a virtual machine whose
idle vCPU has halted that wake blocks the enqueuing (calling) thread for tens of microseconds, every time,
before it can start its own part. Host work between two split launches (a plan's Python, an in-thread
kernel) is usually longer than that, so nearly every split launch paid it.

OpenMP's answer is to spin: its threads wait a while for the next parallel region before they sleep. Ours
is the same, done with a kernel: behind each worker part the queue holds a `linger` launch that polls a
flag in host memory for up to LINGER_SECONDS. The next worker part is enqueued behind it and then the flag
changes, so the linger returns and the workers, still awake, take the part at once; the next linger is
enqueued behind that part before the calling thread runs its own. A linger nobody releases ends by itself; host work
that needs the workers' cores (a PyTorch op on its OpenMP threads) releases it first.

Each linger polls while the flag holds the generation it was enqueued with; a release moves the flag to the
next generation, which ends every linger enqueued before it, started or not, and no later one (a flag that
flipped between two values ended a linger only if it started before the next flip: one that a late worker
reached two releases on saw its value back and spun its full length).
"""

from __future__ import annotations

import time

import numpy as np

from torchfuser.runtime.kernel_cache import build_quietly
from torchfuser.runtime.memory import ALIGNMENT

# Longer than the host work between a call's last split launch and the next call's first (Dynamo's guards and the
# call's preamble on caches a GEMV has just streamed through, a norm in the calling thread): in a loop of decoder
# blocks at one token the workers are still awake for the next call
LINGER_SECONDS = 500e-6
_SOURCE = """
__kernel void linger(volatile __global const int* flag, const int generation, const int polls) {
  for (int i = 0; i < polls && flag[0] == generation; ++i) { }
}
"""


class WorkerLinger:
    """The linger launches of one device's worker threads (a device with an in-thread companion)."""

    def __init__(self, device):
        import pyopencl as cl

        self.device = device
        raw = np.zeros(2 * ALIGNMENT // 4, np.int32)  # the flag's cache line, 64-byte aligned for PoCL
        start = (-raw.ctypes.data) % ALIGNMENT // 4
        self.flag = raw[start:start + ALIGNMENT // 4]  # a view: it keeps `raw` alive
        buffer = cl.Buffer(device.context, cl.mem_flags.READ_ONLY | cl.mem_flags.USE_HOST_PTR, hostbuf=self.flag)
        program = build_quietly(cl.Program(device.context, _SOURCE), [device.cl_device, device.inline.cl_device],
                                options="")
        polls = self._polls_for(program, buffer, LINGER_SECONDS)
        self.kernel = cl.Kernel(program, "linger")
        # declared scalar types: pyopencl's untyped set_arg of a scalar first tries it as a buffer and
        # catches the C++ exception, microseconds on every enqueue
        self.kernel.set_scalar_arg_dtypes([None, np.int32, np.int32])
        self.polls = polls
        self._buffer = buffer  # set_args does not keep it alive
        self.workers = device.cl_device.max_compute_units
        self.pending = False  # a linger was enqueued and no release has followed

    def follow(self) -> None:
        """Release the running linger (the workers take the part just enqueued) and enqueue the next one behind
        that part. The caller does it before its own part, not after: an enqueue costs the calling thread
        several microseconds with its caches warm, several times that after a part that streamed megabytes."""
        import pyopencl as cl

        self.release()
        self.kernel.set_args(self._buffer, int(self.flag[0]), self.polls)  # an enqueue takes the arguments as they are then
        cl.enqueue_nd_range_kernel(self.device.queue, self.kernel, (self.workers,), (1,))
        self.pending = True

    def release(self) -> None:
        """End the lingers enqueued so far, running or not: the workers go back to sleep, or on to what is
        queued behind them."""
        if self.pending:
            self.flag[0] = (int(self.flag[0]) + 1) & 0x7FFFFFFF
            self.pending = False

    def _polls_for(self, program, buffer, seconds: float) -> int:
        """Polls that take about `seconds`, timed in the calling thread (the flag never changes there)."""
        import pyopencl as cl

        kernel = cl.Kernel(program, "linger")
        probe = 4096
        kernel.set_args(buffer, np.int32(int(self.flag[0])), np.int32(probe))
        queue = self.device.inline.queue
        cl.enqueue_nd_range_kernel(queue, kernel, (1,), (1,))  # the first launch compiles the work-group function
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            cl.enqueue_nd_range_kernel(queue, kernel, (1,), (1,))
            best = min(best, time.perf_counter() - started)
        return max(1, int(probe * seconds / max(best, 1e-9)))
