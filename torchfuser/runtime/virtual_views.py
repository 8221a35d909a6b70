"""Views that only kernels read, kept as metadata: no tensor is made for them.

A view op in a plan (a reshape before a GEMM, the permutes around attention) costs a call into PyTorch: a few
microseconds warm, and several times that as the first thing after a kernel that streamed megabytes through the
core's caches; a decode step has a hundred of them. A kernel needs none of that: it reads its inputs through a
buffer, an offset and the layout its launch was configured for. So a view whose every reader is a kernel (or
another such view) is computed here as (root tensor, shape, strides, offset), with PyTorch's own rules, and
handed to the kernel step as a `VirtualView`, which answers what binding and launching ask of a tensor.
Anything else (a configuration for a new layout, a PyTorch fallback, a launch's host-side preparation) gets the
real view, made on demand (`real`). A view these rules do not cover (a reshape of a layout that is not
viewable as asked, an index out of range) is made by PyTorch itself, which also raises its own errors.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten


class VirtualView:
    """A view of `root` (a real tensor) that is not made: its shape, strides and storage offset."""

    __slots__ = ("root", "shape", "strides", "offset", "__weakref__")

    def __init__(self, root: torch.Tensor, shape: tuple, strides: tuple, offset: int):
        self.root, self.shape, self.strides, self.offset = root, shape, strides, offset

    @property
    def dtype(self) -> torch.dtype:
        return self.root.dtype

    def stride(self) -> tuple:
        return self.strides

    def storage_offset(self) -> int:
        return self.offset

    def untyped_storage(self):
        return self.root.untyped_storage()

    def data_ptr(self) -> int:  # the root's own address and offset: no storage object made
        root = self.root
        return root.data_ptr() + (self.offset - root.storage_offset()) * root.element_size()

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        return math.prod(self.shape)

    def real(self) -> torch.Tensor:
        return self.root.as_strided(self.shape, self.strides, self.offset)


def real(value):
    """The tensor itself, with a VirtualView made real."""
    return value.real() if type(value) is VirtualView else value


def virtual_view(op, base, *args):
    """op(base, *args) as a VirtualView where the rules below give its layout, else PyTorch's own view."""
    rule = _RULES.get(op)
    if type(base) is VirtualView:
        root, shape, strides, offset = base.root, base.shape, base.strides, base.offset
    else:
        root, shape, strides, offset = base, tuple(base.shape), base.stride(), base.storage_offset()
    layout = rule(shape, strides, offset, *args) if rule is not None else None
    if layout is None:
        return op(real(base), *args)
    return VirtualView(root, *layout)


def _dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


def _view(shape, strides, offset, size):
    size = list(size)
    numel = math.prod(shape)
    if -1 in size:
        known = math.prod(s for s in size if s != -1)
        if known == 0 or size.count(-1) > 1:
            return None
        size[size.index(-1)] = numel // known
    if math.prod(size) != numel or numel == 0 or not shape:
        return None
    new_strides = _view_strides(shape, strides, size)
    return None if new_strides is None else (tuple(size), tuple(new_strides), offset)


def _view_strides(shape, strides, size) -> list | None:
    """The strides of `size` viewing a tensor of this shape and strides, or None where no view can (ATen's
    computeStride: dims are taken in chunks that are contiguous with each other)."""
    new_strides = [0] * len(size)
    view_d = len(size) - 1
    chunk_base_stride = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        if tensor_d == 0 or (shape[tensor_d - 1] != 1 and strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or size[view_d] == 1):
                new_strides[view_d] = view_numel * chunk_base_stride
                view_numel *= size[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    return new_strides if view_d == -1 else None


def _permute(shape, strides, offset, dims):
    dims = [_dim(d, len(shape)) for d in dims]
    if sorted(dims) != list(range(len(shape))):
        return None
    return tuple(shape[d] for d in dims), tuple(strides[d] for d in dims), offset


def _transpose(shape, strides, offset, d0, d1):
    n = len(shape)
    if n == 0:
        return None
    d0, d1 = _dim(d0, n), _dim(d1, n)
    if not (0 <= d0 < n and 0 <= d1 < n):
        return None
    order = list(range(n))
    order[d0], order[d1] = d1, d0
    return _permute(shape, strides, offset, order)


def _t(shape, strides, offset):
    return _transpose(shape, strides, offset, 0, 1) if len(shape) == 2 else (shape, strides, offset)


def _unsqueeze(shape, strides, offset, d):
    n = len(shape)
    d = _dim(d, n + 1)
    if not 0 <= d <= n:
        return None
    stride = shape[d] * strides[d] if d < n else 1
    return shape[:d] + (1,) + shape[d:], tuple(strides[:d]) + (stride,) + tuple(strides[d:]), offset


def _squeeze(shape, strides, offset, dims=None):
    n = len(shape)
    dims = range(n) if dims is None else [_dim(d, n) for d in ([dims] if isinstance(dims, int) else dims)]
    if any(not 0 <= d < max(n, 1) for d in dims):
        return None
    drop = {d for d in dims if d < n and shape[d] == 1}
    keep = [d for d in range(n) if d not in drop]
    return tuple(shape[d] for d in keep), tuple(strides[d] for d in keep), offset


def _expand(shape, strides, offset, size, implicit=False):
    size = list(size)
    lead = len(size) - len(shape)
    if lead < 0:
        return None
    new_shape, new_strides = [], []
    for i, s in enumerate(size):
        old = i - lead
        if old < 0:
            if s < 0:
                return None
            new_shape.append(s)
            new_strides.append(0)
        elif s == -1 or s == shape[old]:
            new_shape.append(shape[old])
            new_strides.append(strides[old])
        elif shape[old] == 1:
            new_shape.append(s)
            new_strides.append(0)
        else:
            return None
    return tuple(new_shape), tuple(new_strides), offset


def _slice(shape, strides, offset, dim=0, start=None, end=None, step=1):
    n = len(shape)
    dim = _dim(dim, n)
    if not 0 <= dim < n or step < 1:
        return None
    size = shape[dim]
    start = 0 if start is None else start + size if start < 0 else start
    end = size if end is None else end + size if end < 0 else end
    start, end = min(max(start, 0), size), min(max(end, 0), size)
    end = max(end, start)
    length = (end - start + step - 1) // step
    new_shape = shape[:dim] + (length,) + shape[dim + 1:]
    new_strides = tuple(strides[:dim]) + (strides[dim] * step,) + tuple(strides[dim + 1:])
    return new_shape, new_strides, offset + start * strides[dim]


def _select(shape, strides, offset, dim, index):
    n = len(shape)
    dim = _dim(dim, n)
    if not 0 <= dim < n:
        return None
    index = index + shape[dim] if index < 0 else index
    if not 0 <= index < shape[dim]:
        return None  # PyTorch raises its own IndexError
    return shape[:dim] + shape[dim + 1:], tuple(strides[:dim]) + tuple(strides[dim + 1:]), offset + index * strides[dim]


def _unflatten(shape, strides, offset, dim, sizes):
    dim = _dim(dim, len(shape))
    if not 0 <= dim < len(shape):
        return None
    return _view(shape, strides, offset, list(shape[:dim]) + list(sizes) + list(shape[dim + 1:]))


def _same(shape, strides, offset):
    return shape, strides, offset


_RULES = {
    aten.view.default: _view, aten._unsafe_view.default: _view, aten.permute.default: _permute,
    aten.transpose.int: _transpose, aten.t.default: _t, aten.unsqueeze.default: _unsqueeze,
    aten.squeeze.dim: _squeeze, aten.squeeze.dims: _squeeze, aten.squeeze.default: _squeeze,
    aten.expand.default: _expand, aten.slice.Tensor: _slice, aten.select.int: _select,
    aten.unflatten.int: _unflatten, aten.alias.default: _same,
}
VIRTUAL_OPS = frozenset(_RULES)
