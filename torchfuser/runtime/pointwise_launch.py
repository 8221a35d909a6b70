"""Pointwise launches: from a PointwiseKernel and its inputs' layouts to the spec and kernel arguments.

Inputs are read broadcast to the output through their strides; dims collapse where every operand walks
them contiguously, and each input then takes the cheapest layout (contiguous, scalar, a row or column
broadcast in 2-D, or general strides). The flat schedule gives each work-item consecutive elements, a
vector of them where the program allows. Programs that index the last dim (cat / slice along it) take the
row schedule on CPU devices when the output's last dim is innermost in memory: each work-item computes one
whole row (codegen/opencl/pointwise_rows.py), and each input also passes its stride along the last dim (0
where it broadcasts). Otherwise (GPUs: neighbouring work-items should touch neighbouring elements; or
another output layout) the flat schedule runs, computing jlast per element.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch

from torchfuser.codegen.opencl.program_c import vectorisable
from torchfuser.ir.dtypes import TORCH_DTYPES
from torchfuser.ir.kernels.pointwise import (
    CHANNEL, COLUMN, CONTIGUOUS, ROW, SCALAR, STRIDED, PointwiseKernel, PointwiseSpec,
)
from torchfuser.ir.layout import (
    broadcast_strides, collapse, contiguous_strides, extent, index_type_for, strides_in_order,
)
from torchfuser.ir.symbolic import has_symbols
from torchfuser.runtime.launch import Launch

POINTWISE_GROUP = 64  # work-items per group: 1024 float32 elements on the vector path; PoCL's cost per group
# is a fifth of the kernel time at 16 items (a 1M-element silu*y+z in the calling thread: 631 us at 16, 526 at 64)
ROW_GROUP = 16  # rows per group on the row schedule (each item computes a whole row)
# fewer rows than a quarter of ROW_ITEMS_WANTED are cut into runs, a work-item each: enough items to keep every
# core busy and to split a launch finely, runs still long enough to pay for an item's row setup
ROW_ITEMS_WANTED, ROW_RUN_MIN = 256, 2048
ROW_BLOCK = 16  # rows per work-item where rows are short: a transposing copy's (16 pixels' channels, say)
# rows shorter than this, read along the row by every input, are computed ROW_BLOCK to a work-item too: the
# row's outer coordinates cost a division per dim, more than copying a row of 16 floats (a patch copy)
SHORT_ROW = 64
# A transposing read whose step along the row is at least this many bytes puts every element of a row on a line
# of its own: a whole row's lines outgrow L1 before the next row (the work-group's next item) comes back to them,
# so such rows take blocks too, each line read once for ROW_BLOCK rows (at steps of 1-1.5 KiB rows were as fast)
FAR_STEP_BYTES = 2048
# the largest last-dim step the row schedule writes into its source (PointwiseSpec.row_steps): a few kernels
# more at most, and no new kernel per size where a stride follows a symbolic size
MAX_ROW_STEP = 4
# Elements per vector on the flat schedule, on every device: 16 floats even where a register holds 8 (AVX2),
# as two registers per vector there ran faster than one (interleaved A/B on Zen 3, 1M elements: gelu(x*w+b)
# 0.79 vs 0.98 ms, silu(x)*y+z 0.58 vs 0.71 ms); reductions, GEMMs and attention take the native width.
POINTWISE_WIDTHS = {"float32": 16, "float64": 8}


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
    prepare_checks_only: ClassVar[bool] = True

    def prepare(self, inputs: list, call=None) -> list:
        for index, rows in self.checks:
            indices = inputs[index]
            if call is not None:
                call.before_host_read([indices])
            low, high = torch.aminmax(indices) if indices.numel() else (0, 0)  # one pass over the indices
            if not (0 <= int(low) and int(high) < rows):
                raise IndexError(f"index out of range in self (an embedding index is outside [0, {rows}))")
        return inputs


ROWS_MIN_DIMS, ROWS_MIN_LENGTH = 2, 8  # strided launches that take the row schedule instead (see below)


def configure_pointwise(kernel: PointwiseKernel, inputs, device_type: str) -> PointwiseLaunch:
    launch = _configure_in_frame(kernel, [kernel.in_frame(t) for t in inputs], device_type)
    if kernel.frame:
        launch.outputs = [(kernel.unpermute(shape), kernel.unpermute(stride), dtype)
                          for shape, stride, dtype in launch.outputs]
    return launch


def _configure_in_frame(kernel: PointwiseKernel, inputs, device_type: str) -> PointwiseLaunch:
    if kernel.program.indexes_last_dim:  # a cat or slice along the indexed dim: rows where they pay
        launch = configure_rows(kernel, inputs, device_type)
        if launch is not None:
            return launch
    shape = kernel.out_shape
    perm_shape = [shape[d] for d in kernel.order]
    program = kernel.program
    reads = [program.read_of(i) for i in range(len(inputs))]
    # a gathered table is laid out as its row 0 (the row term is added in the kernel); its indices have a
    # trailing dim of 1 (they broadcast along the table's row)
    views = [t[0] if program.gather_of(i) else t.unsqueeze(-1) if i in program.gather_indices else t
             for i, t in enumerate(inputs)]
    strides = [[_input_strides(shape, t, r)[d] for d in kernel.order] for t, r in zip(views, reads)]
    dims = collapse(perm_shape, strides)
    sizes = [s for s, _ in dims] or [1]
    per_input = [[st[i] for _, st in dims] or [0] for i in range(len(inputs))]
    contiguous = contiguous_strides(sizes)
    layouts = tuple(_layout(st, contiguous) for st in per_input)
    numel = int(np.prod(sizes))
    reach = max([numel] + [extent(t) for t in inputs])
    index_type = index_type_for(reach)
    width = 1
    plain = not program.indexes_last_dim and not program.gather_indices  # every input read at the element
    if STRIDED not in layouts and vectorisable(program) and plain:
        width = POINTWISE_WIDTHS[kernel.program.output_dtypes[0]]
        if {ROW, COLUMN} & set(layouts) and sizes[-1] % width:
            width = 1  # a vector would straddle two rows
        if any(layout == CHANNEL and _channel(st, sizes)[0] % width for st, layout in zip(per_input, layouts)):
            width = 1  # a vector would straddle two channels
    if STRIDED in layouts and len(sizes) >= ROWS_MIN_DIMS and kernel.static_last_dim and not program.gather_indices:
        # strided reads (a transpose, a per-channel broadcast, an im2col copy): the flat schedule divides the
        # index into every coordinate for every element; rows do it once per row, then step along the last dim
        launch = configure_rows(kernel, inputs, device_type, min_length=ROWS_MIN_LENGTH)
        if launch is not None:
            return launch
    spec = PointwiseSpec(kernel.program, layouts, len(sizes), index_type, vector_width=width,
                         whole_vectors=width > 1 and numel % width == 0)
    index = np.int64 if index_type == "long" else np.int32
    scalars = [index(numel)]
    if {ROW, COLUMN} & set(layouts):
        scalars.append(index(sizes[-1]))
    if STRIDED in layouts:
        scalars += [index(s) for s in sizes]
        scalars += [index(x) for st, layout in zip(per_input, layouts) if layout == STRIDED for x in st]
    scalars += [index(x) for st, layout in zip(per_input, layouts) if layout == CHANNEL for x in _channel(st, sizes)]
    if kernel.program.indexes_last_dim:  # jlast = (i / inner) % size; remapped reads add position * stride
        last = kernel.order.index(len(shape) - 1)
        scalars += [index(int(np.prod(perm_shape[last + 1:]))), index(shape[-1])]
        scalars += [index(t.stride(-1)) for t, r in zip(inputs, reads) if r is not None]
    gathers = [(i, program.gather_of(i)) for i in range(len(inputs)) if program.gather_of(i)]
    scalars += [index(inputs[i].stride(0)) for i, _ in gathers]  # the row stride of each gathered table
    out_stride = strides_in_order(shape, kernel.order)
    outputs = [(shape, out_stride, TORCH_DTYPES[d]) for d in kernel.program.output_dtypes]
    items = spec.elements_per_item
    groups = -(-numel // (items * POINTWISE_GROUP))
    checks = [(g.index, g.rows) for _, g in gathers if not g.in_range]
    kind, extra = (CheckedGatherLaunch, {"checks": checks}) if checks else (PointwiseLaunch, {})
    return kind(spec, (groups * POINTWISE_GROUP,), outputs, scalars, empty=numel == 0,
                local_size=(POINTWISE_GROUP,), **extra)


def configure_rows(kernel: PointwiseKernel, inputs, device_type: str, min_length: int = 1) -> PointwiseLaunch | None:
    """The row-schedule launch for a PointwiseKernel on these inputs; None where it does not apply or its rows
    would be shorter than min_length, unless some input reads them transposed: then each work-item computes a
    block of ROW_BLOCK such rows (an NCHW image copied channels-last: rows of 3 channels, read 16 pixels at a
    time). Longer rows run one per work-item, a work-group's 16 consecutive rows on one thread, which already
    keeps a transposing read's lines in L1 (blocks measured slower there), unless that read steps FAR_STEP_BYTES
    or more along the row: blocks then too (a large 2-D transpose, NHWC -> NCHW of many channels). Many short
    rows that every input reads along the row (a patch embedding's patches: rows of 16 pixels) take blocks too,
    computed row by row: the outer coordinates' divisions are then made once per block."""
    shape, order, program = kernel.out_shape, kernel.order, kernel.program
    numel = int(np.prod(shape)) if shape else 1
    if device_type != "CPU" or not shape or order[-1] != len(shape) - 1 or numel == 0:
        return None
    strides = [broadcast_strides(shape, t) for t in inputs]
    inner = _row_dims(kernel, strides)
    width, outer = int(np.prod(shape[-inner:])), order[:-inner]
    dims = collapse([shape[d] for d in outer], [[st[d] for d in outer] for st in strides])
    sizes = [s for s, _ in dims] or [1]
    per_input = [[st[i] for _, st in dims] or [0] for i in range(len(inputs))]
    layouts = tuple(STRIDED if any(st) else SCALAR for st in per_input)
    # a remapped read steps by the input's own last-dim stride; a plain one as it broadcasts
    last = [t.stride(-1) if program.read_of(i) else st[-1] for i, (t, st) in enumerate(zip(inputs, strides))]
    steps = tuple(x if 0 <= x <= MAX_ROW_STEP else None for x in last)
    plain = not program.indexes_last_dim and not program.gather_indices and sizes[-1] > 1
    # a transposing read: far along the row, contiguous across rows
    transposed = [plain and step is None and st[-1] == 1 for step, st in zip(steps, per_input)]
    if width < min_length and not any(transposed):  # short rows of a transposing read take blocks; others: None
        return None
    far = any(t and x * a.element_size() >= FAR_STEP_BYTES for t, x, a in zip(transposed, last, inputs))
    # short rows read along the row by every input: blocks of them, row after row (codegen: _block_lines)
    rows = numel // width
    along = plain and width < SHORT_ROW and None not in steps and rows >= ROW_BLOCK * ROW_ITEMS_WANTED
    block = ROW_BLOCK if width < min_length or along or far else 1
    reach = max([numel] + [extent(t) for t in inputs])
    index_type = index_type_for(reach)
    index = np.int64 if index_type == "long" else np.int32
    chunks = 1 if block > 1 or rows >= ROW_ITEMS_WANTED // 4 else max(
        1, min(-(-ROW_ITEMS_WANTED // rows), width // ROW_RUN_MIN))
    spec = PointwiseSpec(program, layouts, len(sizes), index_type, row_length=width, row_steps=steps,
                         row_chunks=chunks, row_block=block)
    items = rows * chunks if block == 1 else rows // sizes[-1] * -(-sizes[-1] // block)
    scalars = [index(items if block > 1 else rows)] + [index(s) for s in sizes]
    scalars += [index(x) for st, layout in zip(per_input, layouts) if layout == STRIDED for x in st]
    scalars += [index(x) for x, step in zip(last, steps) if step is None]
    outputs = [(shape, strides_in_order(shape, order), TORCH_DTYPES[d]) for d in program.output_dtypes]
    groups = -(-items // ROW_GROUP)
    return PointwiseLaunch(spec, (groups * ROW_GROUP,), outputs, scalars, local_size=(ROW_GROUP,))


def _row_dims(kernel: PointwiseKernel, strides) -> int:
    """How many of the output's innermost dims make one row: the last, and those before it that every operand
    walks contiguously with it (a patch copy's [.., 16, 3] read at strides (3, 1) runs in rows of 48, not 3).
    Programs that index the last dim, or gather, keep rows of the last dim."""
    shape, order, program = kernel.out_shape, kernel.order, kernel.program
    if program.indexes_last_dim or program.gather_indices:
        return 1
    n = 1
    while n < len(shape):
        d = len(shape) - 1 - n
        if order[d] != d or has_symbols([shape[d]]):
            break
        if shape[d] != 1 and any(st[d] != st[d + 1] * shape[d + 1] for st in strides):
            break
        n += 1
    return n


def _input_strides(shape, t, read) -> list[int]:
    """Per output dim; a last-dim remapped read adds its own last-dim term, so that dim counts 0 here."""
    strides = broadcast_strides(shape, t)
    if read is not None:
        strides[-1] = 0
    return strides


def _layout(strides, contiguous) -> str:
    if not any(strides):
        return SCALAR
    if strides == contiguous:
        return CONTIGUOUS
    if len(strides) == 2 and strides in ([0, 1], [1, 0]):
        return ROW if strides == [0, 1] else COLUMN
    if sum(1 for s in strides if s) == 1:
        return CHANNEL
    return STRIDED


def _channel(strides, sizes) -> tuple[int, int, int]:
    """(elements per step, size, stride) of the one dim a CHANNEL input varies along."""
    d = next(d for d, s in enumerate(strides) if s)
    return int(np.prod(sizes[d + 1:])), sizes[d], strides[d]
