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

While they linger the workers also read ahead: the first AHEAD_BYTES of the next split launch's weights (a
GEMV's packed B panels; executor.Plan learns the order of its split launches from each call), one load per
cache line, until they are released. A decode step leaves the workers idle for about half of it (the calling
thread's own kernels and host work between split GEMVs), and a GEMV that starts on weights just read stalls
far less than one whose first lines come from memory. The tensor read stays referenced until its linger has
ended: a linger runs on after the call that enqueued it, on weights the caller may by then have replaced.
"""

from __future__ import annotations

import time

import numpy as np

from torchfuser.ir.layout import extent
from torchfuser.runtime.kernel_cache import build_quietly
from torchfuser.runtime.memory import ALIGNMENT

# Longer than the host work between a call's last split launch and the next call's first (Dynamo's guards and the
# call's preamble on caches a GEMV has just streamed through, a norm in the calling thread): in a loop of decoder
# blocks at one token the workers are still awake for the next call
LINGER_SECONDS = 500e-6
AHEAD_BYTES = 2 << 20  # about a worker core's L2: more would evict the first lines read
# `ahead`: the address of the bytes to read (zero-copy host memory, which a CPU device's kernels address
# directly), `lines` of 64 bytes; the flag is looked at every 8 lines
_SOURCE = """
__kernel void linger(volatile __global const int* flag, const int generation, const int polls, const ulong ahead,
                     const int lines) {
  volatile __global const float* next = (volatile __global const float*)ahead;
  for (int i = 0; i < lines && flag[0] == generation; i += 8) {
    for (int j = i; j < i + 8 && j < lines; ++j) { (void)next[j * 16]; }
  }
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
        self.kernel.set_scalar_arg_dtypes([None, np.int32, np.int32, np.uint64, np.int32])
        self.polls = polls
        self._buffer = buffer  # set_args does not keep it alive
        self.workers = device.cl_device.max_compute_units
        self.pending = False  # a linger was enqueued and no release has followed
        self._reading: list = []  # (linger event, the tensor it reads ahead), oldest first

    def follow(self, ahead=None) -> None:
        """Release the running linger (the workers take the part just enqueued) and enqueue the next one behind
        that part, reading `ahead` (a tensor: the next split launch's weights) while it waits. The caller does
        it before its own part, not after: an enqueue costs the calling thread several microseconds with its
        caches warm, several times that after a part that streamed megabytes."""
        import pyopencl as cl

        self.release()
        address = lines = 0
        if ahead is not None:  # the bytes from its first element to its last (a broadcast view repeats none)
            span = (extent(ahead) - ahead.storage_offset()) * ahead.element_size()
            address, lines = ahead.data_ptr(), max(0, min(span, AHEAD_BYTES)) // 64
        self.kernel.set_args(self._buffer, int(self.flag[0]), self.polls, address, lines)
        event = cl.enqueue_nd_range_kernel(self.device.queue, self.kernel, (self.workers,), (1,))
        self.pending = True
        complete = cl.command_execution_status.COMPLETE
        while self._reading and self._reading[0][0].command_execution_status == complete:
            del self._reading[0]  # lingers end in queue order
        if lines:
            self._reading.append((event, ahead))

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
        kernel.set_args(buffer, np.int32(int(self.flag[0])), np.int32(probe), np.uint64(0), np.int32(0))
        queue = self.device.inline.queue
        cl.enqueue_nd_range_kernel(queue, kernel, (1,), (1,))  # the first launch compiles the work-group function
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            cl.enqueue_nd_range_kernel(queue, kernel, (1,), (1,))
            best = min(best, time.perf_counter() - started)
        return max(1, int(probe * seconds / max(best, 1e-9)))
