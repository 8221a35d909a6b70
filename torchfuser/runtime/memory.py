"""Host memory for kernel outputs, and binding torch tensors to OpenCL buffers.

HostArena: outputs must be fresh tensors on every call, as in eager, but fresh large allocations are mmap'd
pages whose first touch faults (as costly as the kernel itself). The arena keeps 64-byte aligned blocks
and hands a block out again once nothing refers to it any more. A block carries a numpy view with the last
layout asked of it; a tensor made from that view holds a reference to it, so the block is free exactly
when the view's refcount is back to the arena's own. Steady calls ask for the same layouts, so handing a
block out is one `torch.from_numpy` (no view/as_strided chain), and the first free block of its class is
taken, so a steady loop gets the same addresses back and its kernels keep their arguments. Blocks come in
size classes (at most 1/8 apart), so a KV cache that grows by a token per call finds the blocks of the calls
before it: the cache the model holds, the one it passes in and the one being made are three per layer, all
alive at once. Free blocks of other classes are given back when the arena would outgrow its byte budget.

Binders turn a tensor into (cl.Buffer, element offset). On devices that share host memory the buffer is
a USE_HOST_PTR view of the tensor's storage (zero-copy; cached by (address, bytes), and built over a
non-owning array so the cache never keeps user memory alive: memory freed and reallocated at the same
address with the same size is the same bytes, and any other size is another key). Elsewhere data is
uploaded, kernel results stay on the device, and `to_host()` reads back what the host needs.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from sys import getrefcount
from typing import NamedTuple

import numpy as np
import torch

from torchfuser.ir.weights import version_of

ALIGNMENT = 64
_POOL_PER_CLASS = 64  # blocks per size class: a 24-layer model's K and V, three generations of each, and more
_POOL_BYTES_LIMIT = 2 << 30
_NUMPY_DTYPES = {
    torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16, torch.int64: np.int64,
    torch.int32: np.int32, torch.int16: np.int16, torch.int8: np.int8, torch.uint8: np.uint8, torch.bool: np.bool_,
}


def _refs(container, key) -> int:
    return getrefcount(container[key])


def _refcount_when_free() -> int:
    """What _refs reads for an object only the arena holds (calibrated: it differs across Pythons)."""
    return _refs([np.empty(1, np.uint8)], 0)


_FREE_REFCOUNT = _refcount_when_free()


class OutputLayout(NamedTuple):
    """A kernel output as the arena allocates it; computed once per launch configuration."""

    shape: tuple
    stride: tuple
    dtype: torch.dtype
    nbytes: int  # storage bytes the layout reaches (0: nothing to allocate)

    @classmethod
    def of(cls, shape, stride, dtype) -> "OutputLayout":
        shape, stride = tuple(shape), tuple(stride)
        span = 1 + sum((s - 1) * st for s, st in zip(shape, stride)) if all(shape) else 0
        return cls(shape, stride, dtype, span * dtype.itemsize)


def host_bytes(nbytes: int) -> np.ndarray:
    """nbytes of uninitialised host memory as a numpy array, allocated by PyTorch: numpy asks the kernel for huge
    pages for arrays of 4 MiB and more (madvise), and where a virtual machine backs memory lazily, a huge page's
    first touch costs many times its 512 small pages (a first call at a new size would pay it in its kernels)."""
    return torch.empty(nbytes, dtype=torch.uint8).numpy()


def size_class(nbytes: int) -> int:
    """The block size that serves `nbytes`: whole cache lines up to 4 KiB, then steps of 1/8 of the power of two
    below (at most 12.5 % unused)."""
    if nbytes <= 4096:
        return -(-nbytes // ALIGNMENT) * ALIGNMENT
    step = 1 << (nbytes.bit_length() - 4)
    return -(-nbytes // step) * step


class _Block:
    __slots__ = ("raw", "start", "slot")

    def __init__(self, nbytes: int):
        self.raw = host_bytes(nbytes + ALIGNMENT)
        self.start = (-self.raw.ctypes.data) % ALIGNMENT
        self.slot = [None, None]  # [layout, numpy view]: a list, so _refs reads the view like the calibration

    @property
    def free(self) -> bool:
        return self.slot[1] is None or _refs(self.slot, 1) == _FREE_REFCOUNT


class HostArena:
    def __init__(self, byte_budget: int = _POOL_BYTES_LIMIT):
        self._classes: dict[int, list[_Block]] = {}  # size class -> its blocks
        self._bytes = 0
        self._budget = byte_budget

    @property
    def bytes(self) -> int:
        """What the arena's blocks hold, free or not."""
        return self._bytes

    def empty_strided(self, shape, stride, dtype: torch.dtype) -> torch.Tensor:
        return self.allocate(OutputLayout.of(shape, stride, dtype))

    def allocate(self, layout: OutputLayout) -> torch.Tensor:
        """A fresh tensor with this layout, in a block no live tensor uses."""
        np_dtype = _NUMPY_DTYPES.get(layout.dtype)
        if not layout.nbytes or np_dtype is None:
            return torch.empty_strided(layout.shape, layout.stride, dtype=layout.dtype)
        nbytes = size_class(layout.nbytes)
        blocks = self._classes.get(nbytes)
        if blocks is None:
            blocks = self._classes[nbytes] = []
        for block in blocks:  # (block.free, inline: a KV cache's class holds dozens of blocks, most of them in use)
            slot = block.slot
            if slot[1] is None or getrefcount(slot[1]) == _FREE_REFCOUNT:
                if slot[0] is not layout and slot[0] != layout:  # (a tape asks with the same layout each call)
                    slot[0], slot[1] = layout, self._view(block, layout, np_dtype)
                return torch.from_numpy(slot[1])
        if len(blocks) >= _POOL_PER_CLASS or not self._room_for(nbytes):
            return torch.empty_strided(layout.shape, layout.stride, dtype=layout.dtype)  # still 64-byte aligned
        block = _Block(nbytes)
        blocks.append(block)
        self._bytes += nbytes
        block.slot[:] = [layout, self._view(block, layout, np_dtype)]
        return torch.from_numpy(block.slot[1])

    def _room_for(self, nbytes: int) -> bool:
        """Whether a new block of nbytes fits the budget, after giving back free blocks (other classes' first: a
        grown KV cache never asks for its old sizes again)."""
        if self._bytes + nbytes <= self._budget:
            return True
        for size in sorted(self._classes, key=lambda c: c == nbytes):
            blocks = self._classes[size]
            kept = [b for b in blocks if not b.free]
            self._bytes -= size * (len(blocks) - len(kept))
            if kept:
                self._classes[size] = kept
            else:
                del self._classes[size]
            if self._bytes + nbytes <= self._budget:
                return True
        return False

    @staticmethod
    def _view(block: _Block, layout: OutputLayout, np_dtype) -> np.ndarray:
        item = layout.dtype.itemsize
        return np.ndarray(layout.shape, np_dtype, buffer=block.raw, offset=block.start,
                          strides=tuple(s * item for s in layout.stride))

    def clear(self) -> None:
        self._classes.clear()
        self._bytes = 0


def storage_span(t: torch.Tensor) -> tuple[int, int]:
    """(address, bytes) of the storage under t."""
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.nbytes()


class _HostSpan:
    """Bytes at an address, as numpy reads them (`np.asarray`): an array that does not own or keep alive the
    memory, without a ctypes array type per size (ctypes keeps every one it makes, and np.ctypeslib's view
    of them slowed to ~0.1 ms once thousands of sizes had been bound, as a growing KV cache does)."""

    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, nbytes: int):
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}


class ZeroCopyBinder:
    """USE_HOST_PTR buffers over torch storages; cached by (address, bytes), never owning the memory."""

    tracks_writes = False  # kernels write straight into host memory: nothing to read back

    def __init__(self, device, capacity: int = 4096):
        self.device = device
        self._buffers: OrderedDict = OrderedDict()
        self._capacity = capacity

    def begin_call(self):
        return self

    def bind(self, t: torch.Tensor):
        storage = t.untyped_storage()
        address = storage.data_ptr()
        if address % ALIGNMENT:
            return None  # the caller copies the tensor into aligned memory first
        key = (address, storage.nbytes() or 1)
        buffer = self._buffers.get(key)
        if buffer is None:
            return self._create(key)
        self._buffers.move_to_end(key)
        return buffer

    def _create(self, key):
        import pyopencl as cl

        if key[0] == 0:  # an empty storage has no memory: a buffer of its own stands for it (nothing reads it)
            buffer = self._buffers[key] = cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE, size=ALIGNMENT)
        else:
            flags = cl.mem_flags.READ_WRITE | cl.mem_flags.USE_HOST_PTR
            buffer = self._buffers[key] = cl.Buffer(self.device.context, flags, hostbuf=np.asarray(_HostSpan(*key)))
        if len(self._buffers) > self._capacity:
            self._buffers.popitem(last=False)
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
    tracks_writes = True  # results stay on the device until to_host()

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
        if held is not None and held[0]() is t and held[1] == version_of(t):
            return held[2]
        flags = cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR
        host = torch.empty(0, dtype=torch.uint8).set_(t.untyped_storage()).numpy()
        buffer = cl.Buffer(self.device.context, flags, hostbuf=host) if nbytes else None
        if isinstance(t, torch.nn.Parameter):
            self.owner._resident[key] = (weakref.ref(t), version_of(t), buffer)
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


# The tensors of planned blocks: kernels write them in place call after call and their version counters never move,
# so nothing may be kept by version for them (a GEMM's packed copy of one as its B). By id: a WeakSet would compare
# tensors with ==
REWRITTEN_BY_KERNELS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


class PlannedBlocks:
    """Host memory for a plan's intermediate results, assigned once by liveness (two values whose lives do
    not overlap share a block) and kept from call to call: a steady call allocates nothing for them, and the
    kernels keep the same buffers bound. Tensors are handed out per (value, layout) and reused."""

    def __init__(self, capacities: list[int]):
        self.capacities = capacities
        self._raw: list[np.ndarray | None] = [None] * len(capacities)
        self._tensors: dict[tuple, torch.Tensor] = {}

    def tensor(self, block: int, layout: OutputLayout) -> torch.Tensor | None:
        """A tensor with this layout at the start of the block; None when it does not fit (or the dtype has no
        numpy twin): the caller allocates it elsewhere."""
        key = (block, layout)
        found = self._tensors.get(key)
        if found is not None:
            return found
        np_dtype = _NUMPY_DTYPES.get(layout.dtype)
        if np_dtype is None or not layout.nbytes or layout.nbytes > self.capacities[block]:
            return None
        if self._raw[block] is None:
            self._raw[block] = host_bytes(self.capacities[block] + ALIGNMENT)
        raw = self._raw[block]
        start = (-raw.ctypes.data) % ALIGNMENT
        item = layout.dtype.itemsize
        view = np.ndarray(layout.shape, np_dtype, buffer=raw, offset=start, strides=tuple(s * item for s in layout.stride))
        found = self._tensors[key] = torch.from_numpy(view)
        REWRITTEN_BY_KERNELS[id(found)] = found
        return found

    def storages(self) -> set:
        """The storage addresses of the tensors handed out (each at a block's start)."""
        return {storage_span(t)[0] for t in self._tensors.values()}
