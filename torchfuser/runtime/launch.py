"""Fused kernels as graph targets: what a fused FX node calls, and how it becomes an OpenCL launch.

`PointwiseKernel` (here) and `GemmKernel` (gemm_launch.py) are the `call_function` targets that the fusion passes put into the
graph. Each knows (1) its reference meaning in PyTorch (the fallback path), and (2) `configure(inputs)`:
from the inputs' shapes and strides (real or fake tensors), the frozen spec to build, the launch size,
the scalar arguments and the output layouts. Configurations are memoised by input layout, so a steady
call costs one dict lookup per launch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from torchfuser.codegen.pointwise_ops import DTYPE_NAMES, TORCH_DTYPES
from torchfuser.codegen.program_c import vectorisable
from torchfuser.ir.interpret import run_program
from torchfuser.ir.program import Program
from torchfuser.ir.specs import COLUMN, CONTIGUOUS, ROW, SCALAR, STRIDED, PointwiseSpec

INT32_MAX = 2**31 - 1
VECTOR_WIDTHS = {"float32": 16, "float64": 8}  # one 512-bit register's worth on AVX-512 CPUs
POINTWISE_GROUP = 16  # work-items per group: 256 float32 elements on the vector path


@dataclass
class Launch:
    spec: object
    global_size: tuple[int, ...]
    outputs: list[tuple[tuple, tuple, torch.dtype]]  # (shape, stride, dtype) of each fresh output
    scalars: list = field(default_factory=list)  # trailing scalar kernel arguments
    empty: bool = False  # nothing to compute (zero-size): outputs are allocated, no launch
    # Work-group size. Left to PoCL it picks groups of up to 4096 items, and a launch of one group
    # leaves all but one CPU thread idle: the kernels choose small groups (global sizes are padded).
    local_size: tuple | None = None
    # arguments() only places the buffers it is given (never looks at them), and everything else in it
    # follows from the input layout and offsets: the executor then builds the list once and swaps in
    # buffers per call. A subclass whose arguments change otherwise sets this False.
    static_arguments: ClassVar[bool] = True

    def prepare(self, inputs: list, call=None) -> list:
        """The tensors the kernel reads (e.g. a weight in its pre-packed layout); default: the inputs.
        Host work that reads tensors must first call `call.before_host_read(tensors)`."""
        return inputs

    def arguments(self, in_buffers, in_offsets, out_buffers) -> list:
        raise NotImplementedError


def extent(t) -> int:
    """One past the furthest element of t's storage that t can reach."""
    return t.storage_offset() + sum((s - 1) * abs(x) for s, x in zip(t.shape, t.stride())) + 1 if t.numel() else 0


def layout_signature(tensors) -> tuple:
    """What a configuration depends on (torch.Size is a tuple: no conversion needed)."""
    return tuple([(t.shape, t.stride(), t.storage_offset(), t.dtype) for t in tensors])


class FusedKernel:
    """Base of the graph targets: a readable __name__ for FX printing, memoised configure()."""

    kind = "fused"

    def __init__(self, group: int):
        self.group = group
        self.__name__ = f"tf_{self.kind}_group{group}"
        self.__module__ = "torchfuser.fused"
        self._configs: dict[tuple, Launch] = {}

    def __repr__(self) -> str:
        return self.__name__

    def configure(self, inputs, device_type: str = "CPU") -> Launch:
        key = (layout_signature(inputs), device_type)
        launch = self._configs.get(key)
        if launch is None:
            launch = self._configs[key] = self._configure(inputs, device_type)
        return launch

    def __call__(self, *inputs):
        """Standalone run (e.g. calling the fused GraphModule directly): one launch, synchronised."""
        from torchfuser.runtime.executor import run_single

        return run_single(self, list(inputs))


# ---------------------------------------------------------------- pointwise


class PointwiseLaunch(Launch):
    def arguments(self, in_buffers, in_offsets, out_buffers):
        index = np.int64 if self.spec.index_type == "long" else np.int32
        args = []
        for buffer, offset in zip(in_buffers, in_offsets):
            args += [buffer, index(offset)]
        return args + list(out_buffers) + self.scalars


@dataclass
class CheckedGatherLaunch(PointwiseLaunch):
    """A launch that gathers rows (an embedding): before it is enqueued, the indices are checked on the host
    and an index out of range raises IndexError, as eager's embedding does (the kernel clamps, so it never
    reads outside the table, but must not return rows eager would refuse). Indices a pending kernel writes
    are waited for: the check costs a sync then, which graph-proven indices (`GatherRead.in_range`) skip."""

    checks: list = field(default_factory=list)  # (index input, rows)

    def prepare(self, inputs: list, call=None) -> list:
        for index, rows in self.checks:
            indices = inputs[index]
            if call is not None:
                call.before_host_read([indices])
            low, high = torch.aminmax(indices) if indices.numel() else (0, 0)  # one pass over the indices
            if not (0 <= int(low) and int(high) < rows):
                raise IndexError(f"index out of range in self (an embedding index is outside [0, {rows}))")
        return inputs


class PointwiseKernel(FusedKernel):
    """`index_dim`: the output dim (counted from the end) that the program's last-dim reads and `last_index`
    mean (the dim its cats and slices run along). The kernel computes in a frame where that dim is last:
    inputs and output are permuted views there (strides only), so one program and one codegen serve every
    dim; out_shape and order are in that frame."""

    kind = "pointwise"

    def __init__(self, program: Program, out_shape, out_stride, group: int, index_dim: int = -1):
        super().__init__(group)
        self.program = program
        rank = len(out_shape)
        moved = rank + index_dim
        self.frame = [d for d in range(rank) if d != moved] + [moved] if 0 <= moved < rank - 1 else None
        self.out_shape, out_stride = self._permute(out_shape), self._permute(out_stride)
        # iterate in the output's memory order (outermost first), as TensorIterator does
        order = sorted(range(len(out_shape)), key=lambda d: -out_stride[d]) if out_stride else []
        self.order = order if _is_dense(self.out_shape, out_stride, order) else list(range(len(out_shape)))

    def _permute(self, dims) -> tuple:
        return tuple(dims[d] for d in self.frame) if self.frame else tuple(dims)

    def _unpermute(self, dims) -> tuple:
        if not self.frame:
            return tuple(dims)
        out = [0] * len(dims)
        for k, d in enumerate(self.frame):
            out[d] = dims[k]
        return tuple(out)

    def _in_frame(self, t):
        """t as the program sees it: broadcast up to the output's rank, the indexed dim last (a view)."""
        if not self.frame:
            return t
        return t.reshape((1,) * (len(self.frame) - t.dim()) + tuple(t.shape)).permute(self.frame)

    def reference(self, *inputs):
        outs = run_program(self.program, [self._in_frame(t) for t in inputs], self.out_shape)
        shape, stride = self._unpermute(self.out_shape), self._unpermute(_strides_in_order(self.out_shape, self.order))
        outs = [torch.empty_strided(shape, stride, dtype=o.dtype).copy_(self._unpermute_view(o)) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _unpermute_view(self, t):
        t = torch.broadcast_to(t, self.out_shape)
        return t.permute(self._unpermute(range(t.dim()))) if self.frame else t

    def _configure(self, inputs, device_type) -> Launch:
        launch = self._configure_in_frame([self._in_frame(t) for t in inputs], device_type)
        if self.frame:
            launch.outputs = [(self._unpermute(shape), self._unpermute(stride), dtype)
                              for shape, stride, dtype in launch.outputs]
        return launch

    def _configure_in_frame(self, inputs, device_type) -> Launch:
        if self.program.indexes_last_dim:  # a cat or slice along the indexed dim: rows where they pay
            from torchfuser.runtime import row_launch  # it builds on this module

            launch = row_launch.configure_rows(self, inputs, device_type)
            if launch is not None:
                return launch
        shape = self.out_shape
        perm_shape = [shape[d] for d in self.order]
        program = self.program
        reads = [program.read_of(i) for i in range(len(inputs))]
        # a gathered table is laid out as its row 0 (the row term is added in the kernel); its indices have a
        # trailing dim of 1 (they broadcast along the table's row)
        views = [t[0] if program.gather_of(i) else t.unsqueeze(-1) if i in program.gather_indices else t
                 for i, t in enumerate(inputs)]
        strides = [[_input_strides(shape, t, r)[d] for d in self.order] for t, r in zip(views, reads)]
        dims = _collapse(perm_shape, strides)
        sizes = [s for s, _ in dims] or [1]
        per_input = [[st[i] for _, st in dims] or [0] for i in range(len(inputs))]
        contiguous = _contiguous_strides(sizes)
        layouts = tuple(_layout(st, contiguous) for st in per_input)
        numel = int(np.prod(sizes))
        reach = max([numel] + [extent(t) for t in inputs])
        index_type = "int" if reach <= INT32_MAX else "long"
        width = 1
        plain = not program.indexes_last_dim and not program.gather_indices  # every input read at the element
        if STRIDED not in layouts and vectorisable(program) and plain:
            width = VECTOR_WIDTHS[self.program.output_dtypes[0]]
            if {ROW, COLUMN} & set(layouts) and sizes[-1] % width:
                width = 1  # a vector would straddle two rows
        spec = PointwiseSpec(self.program, layouts, len(sizes), index_type, vector_width=width)
        index = np.int64 if index_type == "long" else np.int32
        scalars = [index(numel)]
        if {ROW, COLUMN} & set(layouts):
            scalars.append(index(sizes[-1]))
        if STRIDED in layouts:
            scalars += [index(s) for s in sizes]
            scalars += [index(x) for st, layout in zip(per_input, layouts) if layout == STRIDED for x in st]
        if self.program.indexes_last_dim:  # jlast = (i / inner) % size; remapped reads add position * stride
            last = self.order.index(len(shape) - 1)
            scalars += [index(int(np.prod(perm_shape[last + 1:]))), index(shape[-1])]
            scalars += [index(t.stride(-1)) for t, r in zip(inputs, reads) if r is not None]
        gathers = [(i, program.gather_of(i)) for i in range(len(inputs)) if program.gather_of(i)]
        scalars += [index(inputs[i].stride(0)) for i, _ in gathers]  # the row stride of each gathered table
        out_stride = _strides_in_order(shape, self.order)
        outputs = [(shape, out_stride, TORCH_DTYPES[d]) for d in self.program.output_dtypes]
        items = spec.elements_per_item
        groups = -(-numel // (items * POINTWISE_GROUP))
        checks = [(g.index, g.rows) for _, g in gathers if not g.in_range]
        kind, extra = (CheckedGatherLaunch, {"checks": checks}) if checks else (PointwiseLaunch, {})
        return kind(spec, (groups * POINTWISE_GROUP,), outputs, scalars, empty=numel == 0,
                    local_size=(POINTWISE_GROUP,), **extra)


def broadcast_strides(shape, t) -> list[int]:
    nd, tnd = len(shape), t.dim()
    strides = [0] * nd
    for d in range(tnd):
        if t.shape[d] != 1:
            strides[nd - tnd + d] = t.stride(d)
    return strides


def _input_strides(shape, t, read) -> list[int]:
    """Per output dim; a last-dim remapped read adds its own last-dim term, so that dim counts 0 here."""
    strides = broadcast_strides(shape, t)
    if read is not None:
        strides[-1] = 0
    return strides


def _collapse(sizes, strides) -> list[tuple[int, list[int]]]:
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


def _layout(strides, contiguous) -> str:
    if not any(strides):
        return SCALAR
    if strides == contiguous:
        return CONTIGUOUS
    if len(strides) == 2 and strides in ([0, 1], [1, 0]):
        return ROW if strides == [0, 1] else COLUMN
    return STRIDED


def _contiguous_strides(sizes) -> list[int]:
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.append(acc)
        acc *= s
    return strides[::-1]


def _strides_in_order(shape, order) -> tuple:
    strides = [0] * len(shape)
    acc = 1
    for d in reversed(order):
        strides[d] = acc
        acc *= max(shape[d], 1)
    return tuple(strides)


def _is_dense(shape, stride, order) -> bool:
    return len(stride) == len(shape) and all(
        shape[d] == 1 or stride[d] == s for d, s in zip(range(len(shape)), _strides_in_order(shape, order))
    )
