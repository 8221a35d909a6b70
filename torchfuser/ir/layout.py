"""Shapes and strides: the arithmetic that kernels' reference meanings and launch configurations share."""

from __future__ import annotations

import torch

INT32_MAX = 2**31 - 1


def extent(t) -> int:
    """One past the furthest element of t's storage that t can reach."""
    n = t.numel()
    if not n:
        return 0
    if type(t) is torch.Tensor and t.is_contiguous():  # a real tensor (no symbolic sizes to guard on)
        return t.storage_offset() + n
    return t.storage_offset() + sum((s - 1) * abs(x) for s, x in zip(t.shape, t.stride())) + 1


def layout_signature(tensors) -> tuple:
    """What a configuration depends on (torch.Size is a tuple: no conversion needed)."""
    return tuple([(t.shape, t.stride(), t.storage_offset(), t.dtype) for t in tensors])


def index_type_for(reach: int) -> str:
    """The C index type kernels address elements with: 32-bit unless an offset needs more."""
    return "int" if reach <= INT32_MAX else "long"


def broadcast_strides(shape, t) -> list[int]:
    """t's strides as it is read broadcast to `shape` (0 along broadcast dims)."""
    nd, tnd = len(shape), t.dim()
    strides = [0] * nd
    for d in range(tnd):
        if t.shape[d] != 1:
            strides[nd - tnd + d] = t.stride(d)
    return strides


def collapse(sizes, strides) -> list[tuple[int, list[int]]]:
    """Drop size-1 dims; merge neighbours that every operand walks contiguously."""
    dims: list[tuple[int, list[int]]] = []
    for d, size in enumerate(sizes):
        if size == 1:
            continue
        here = [st[d] for st in strides]
        if dims and all(prev == cur * size for prev, cur in zip(dims[-1][1], here)):
            dims[-1] = (dims[-1][0] * size, here)
        else:
            dims.append((size, here))
    return dims


def contiguous_strides(sizes) -> list[int]:
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= s
    return strides[::-1]


def strides_in_order(shape, order) -> tuple:
    """Dense strides with `order` listing the dims outermost first."""
    strides = [0] * len(shape)
    acc = 1
    for d in reversed(order):
        strides[d] = acc
        acc *= max(shape[d], 1)
    return tuple(strides)


def is_dense(shape, stride, order) -> bool:
    return len(stride) == len(shape) and all(
        shape[d] == 1 or stride[d] == s for d, s in zip(range(len(shape)), strides_in_order(shape, order))
    )


def channels_innermost(value) -> bool:
    """A 3-d or 4-d tensor whose channels (dim 1) are innermost in memory: channels-last NCHW or NLC memory
    of an NCL tensor, or a view of such memory."""
    if value is None or value.dim() not in (3, 4) or value.shape[1] == 1:
        return False
    strides = value.stride()
    return strides[1] < min(s for d, s in enumerate(strides) if d != 1)
