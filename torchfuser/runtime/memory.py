"""Host memory for kernel outputs, and binding torch tensors to OpenCL buffers.

HostArena: outputs must be fresh tensors on every call, as in eager, but fresh large allocations are mmap'd
pages whose first touch faults (as costly as the kernel itself). The arena keeps 64-byte aligned blocks
and hands a block out again once nothing refers to it any more: the tensor holds a reference to the
block's numpy array, so the block is free exactly when that array's refcount is back to the arena's own.

Binders turn a tensor into (cl.Buffer, element offset). On devices that share host memory the buffer is
a USE_HOST_PTR view of the tensor's storage (zero-copy; cached by address, and built over a non-owning
array so the cache never keeps user memory alive). Elsewhere data is uploaded, kernel results stay on the
device, and `to_host()` reads back what the host needs.
"""

from __future__ import annotations

import ctypes
import sys
import weakref
from collections import OrderedDict

import numpy as np
import torch

ALIGNMENT = 64
_POOL_PER_SIZE = 8
_POOL_BYTES_LIMIT = 4 << 30


def _refcount_when_free() -> int:
    probe = [np.empty(1, np.uint8)]
    return sys.getrefcount(probe[0])


_FREE_REFCOUNT = _refcount_when_free()


class HostArena:
    def __init__(self):
        self._blocks: dict[int, list[np.ndarray]] = {}
        self._bytes = 0

    def empty_strided(self, shape, stride, dtype: torch.dtype) -> torch.Tensor:
        numel_span = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 0
        nbytes = numel_span * torch.empty((), dtype=dtype).element_size() if numel_span else 0
        if nbytes == 0:
            return torch.empty_strided(shape, stride, dtype=dtype)
        block = self._take(nbytes)
        if block is None:  # pool full: an ordinary (still 64-byte aligned) torch allocation
            return torch.empty_strided(shape, stride, dtype=dtype)
        return torch.from_numpy(block).view(dtype).as_strided(shape, stride)

    def _take(self, nbytes: int):
        blocks = self._blocks.setdefault(nbytes, [])
        for i in range(len(blocks)):
            if sys.getrefcount(blocks[i]) == _FREE_REFCOUNT:
                return blocks[i]
        if len(blocks) >= _POOL_PER_SIZE or self._bytes + nbytes > _POOL_BYTES_LIMIT:
            return None
        raw = np.empty(nbytes + ALIGNMENT, np.uint8)
        start = (-raw.ctypes.data) % ALIGNMENT
        blocks.append(raw[start : start + nbytes])
        self._bytes += nbytes
        return blocks[-1]

    def clear(self) -> None:
        self._blocks.clear()
        self._bytes = 0


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    """(address, bytes) of the storage under t."""
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class ZeroCopyBinder:
    """USE_HOST_PTR buffers over torch storages; cached by (address, bytes), never owning the memory."""

    def __init__(self, device, capacity: int = 4096):
        self.device = device
        self._buffers: OrderedDict = OrderedDict()
        self._capacity = capacity

    def begin_call(self):
        return self

    def bind(self, t: torch.Tensor):
        address, nbytes = storage_span(t)
        if address % ALIGNMENT:
            return None  # the caller copies the tensor into aligned memory first
        key = (address, max(nbytes, 1))
        buffer = self._buffers.get(key)
        if buffer is None:
            import pyopencl as cl

            view = np.ctypeslib.as_array((ctypes.c_uint8 * key[1]).from_address(address))
            flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
            buffer = cl.Buffer(self.device.context, flags, hostbuf=view)
            self._buffers[key] = buffer
            if len(self._buffers) > self._capacity:
                self._buffers.popitem(last=False)
        else:
            self._buffers.move_to_end(key)
        return buffer

    def output_buffer(self, t: torch.Tensor):
        return self.bind(t)

    def wrote(self, t: torch.Tensor, buffer) -> None:
        """Kernels write straight into host memory here."""

    def to_host(self) -> None:
        self.device.queue.finish()


class CopyingBinder:
    """For devices with their own memory: upload inputs, keep results on the device, read back on demand.

    Tensors whose object is seen again (weights) keep their device copy while their version is unchanged.
    """

    def __init__(self, device):
        self.device = device
        self._resident: dict[tuple, tuple] = {}  # (address, bytes) -> (weakref to tensor, version, buffer)

    def begin_call(self):
        return _CopyingCall(self)


class _CopyingCall:
    def __init__(self, owner: CopyingBinder):
        self.owner, self.device = owner, owner.device
        self._produced: dict[int, tuple] = {}  # storage address -> (buffer, host tensor)
        self._dirty: set[int] = set()

    def bind(self, t: torch.Tensor):
        import pyopencl as cl

        address, nbytes = storage_span(t)
        if address in self._produced:
            return self._produced[address][0]
        key = (address, nbytes)
        held = self.owner._resident.get(key)
        if held is not None and held[0]() is t and held[1] == t._version:
            return held[2]
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        host = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).numpy()
        buffer = cl.Buffer(self.device.context, flags, hostbuf=host) if nbytes else None
        if isinstance(t, torch.nn.Parameter):
            self.owner._resident[key] = (weakref.ref(t), t._version, buffer)
        return buffer

    def wrote(self, t: torch.Tensor, buffer) -> None:
        address = storage_span(t)[0]
        self._produced[address] = (buffer, t)
        self._dirty.add(address)

    def output_buffer(self, t: torch.Tensor):
        import pyopencl as cl

        nbytes = storage_span(t)[1]
        return cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE, size=max(nbytes, 1))

    def to_host(self) -> None:
        import pyopencl as cl

        for address in self._dirty:
            buffer, t = self._produced[address]
            host = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).numpy()
            cl.enqueue_copy(self.device.queue, host, buffer, is_blocking=False)
        self._dirty.clear()
        self.device.queue.finish()
