"""Concatenation launches: from a CatKernel and its operands' layouts to the spec and kernel arguments.

The result is contiguous. Each operand must be one run of memory from the cat dim on (dims of size 1 aside),
which views of contiguous tensors along the way (a transposed KV head, a KV cache) are; an operand that is not
is copied into a contiguous tensor first (`prepare`). The dims before the cat dim collapse where the result and
every operand walk them contiguously; what is left indexes the rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from torchfuser.ir.dtypes import DTYPE_NAMES
from torchfuser.ir.kernels.cat import CatKernel, CatSpec, skipped_by_cat
from torchfuser.ir.layout import collapse, contiguous_strides, extent, index_type_for
from torchfuser.runtime.launch import Launch

# Elements per work-item: long enough that a run pays for the item's setup, short enough that a few rows still
# give every thread work (SPREAD items wanted at least)
SPAN_MAX, SPAN_MIN, SPREAD = 4096, 256, 16
CAT_GROUP = 8


@dataclass
class CatLaunch(Launch):
    operand_scalars: list = field(default_factory=list)  # per operand: its run length and outer strides

    def arguments(self, in_buffers, in_offsets, out_buffers):
        index = np.int64 if self.spec.index_type == "long" else np.int32
        args = []
        for buffer, offset, scalars in zip(in_buffers, in_offsets, self.operand_scalars):
            args += [buffer, index(offset), *map(index, scalars)]
        return args + list(out_buffers) + [index(x) for x in self.scalars]


@dataclass
class CopyingCatLaunch(CatLaunch):
    """A launch with operands that are not one run from the cat dim on: they are copied contiguous first."""

    copies: tuple = ()  # the operands to copy

    fresh_prepared = True

    def prepare(self, inputs: list, call=None) -> list:
        if call is not None:
            call.before_host_read([inputs[i] for i in self.copies])
        return [t.contiguous() if i in self.copies else t for i, t in enumerate(inputs)]


def configure_cat(kernel: CatKernel, inputs, device_type: str) -> CatLaunch:
    present = [t for t in inputs if not skipped_by_cat(t)]
    rank = present[0].dim()
    d = kernel.dim % rank
    shape = list(present[0].shape)
    shape[d] = sum(t.shape[d] for t in present)
    outer, inner = shape[:d], math.prod(shape[d + 1:])
    width = shape[d] * inner
    copies, runs, strides = [], [], []
    for i, t in enumerate(inputs):
        if skipped_by_cat(t) or t.numel() == 0:
            runs.append(0)
            strides.append([0] * d)
            continue
        layout = list(t.stride())
        if not _one_run(t.shape[d:], layout[d:]):
            copies.append(i)
            layout = contiguous_strides(list(t.shape))
        runs.append(t.shape[d] * inner)
        strides.append(layout[:d])
    out_outer = [s * width for s in contiguous_strides(outer)]
    dims = collapse(outer, [out_outer, *strides]) or [(1, [0] * (len(inputs) + 1))]
    rows = math.prod(outer)
    numel = rows * width
    runs_per_row = -(-SPREAD // max(rows, 1))  # enough items over all rows for every thread
    span = min(SPAN_MAX, max(SPAN_MIN, -(-width // runs_per_row)))
    span = -(-span // 16) * 16  # whole 16-float vectors
    chunks = max(1, -(-width // span))
    reach = max([numel] + [extent(t) for t in inputs])
    spec = CatSpec(DTYPE_NAMES[present[0].dtype], len(inputs), len(dims), index_type_for(reach))
    items = rows * chunks
    scalars = [rows, width, span, chunks, *[size for size, _ in dims]]
    operand_scalars = [[runs[i], *[st[i + 1] for _, st in dims]] for i in range(len(inputs))]
    kind, extra = (CopyingCatLaunch, {"copies": tuple(copies)}) if copies else (CatLaunch, {})
    return kind(spec, (-(-items // CAT_GROUP) * CAT_GROUP,), [(tuple(shape), tuple(contiguous_strides(shape)),
                                                                present[0].dtype)],
                scalars, empty=numel == 0, local_size=(CAT_GROUP,), operand_scalars=operand_scalars, **extra)


def _one_run(sizes, strides) -> bool:
    """The dims (sizes, strides) walk one run of consecutive elements."""
    dims = collapse(list(sizes), [list(strides)])
    return not dims or (len(dims) == 1 and dims[0][1][0] == 1)
