"""Row-reduction launches: schedule by device type, load layouts, launch arguments.

Rows are the last dim of `row_shape`; every load is broadcast to it and read through its own strides (the
outer dims collapse like a pointwise kernel's). Outputs are contiguous: element outputs shaped like the
rows, row outputs one value per row in row order. `ReductionLaunch.local_size` is the work-group size the
launch is shaped for; the kernels are correct under any size the runtime picks (checked in the tests), so
passing it is an optimisation the executor can make.
"""

from __future__ import annotations

import math

import numpy as np

from torchfuser.ir.dtypes import TORCH_DTYPES
from torchfuser.ir.kernels.reduction import GROUP_PER_ROW, ROW_PER_ITEM, ReductionKernel, ReductionSpec
from torchfuser.ir.layout import broadcast_strides, collapse, contiguous_strides, extent, index_type_for
from torchfuser.runtime.launch import Launch, vector_widths

GROUP_SIZES = (32, 256)  # a work-group per row: at least a warp, at most what most GPUs give freely


class ReductionLaunch(Launch):
    load_strides: list = []  # per load: (outer strides, column stride)

    def arguments(self, in_buffers, in_offsets, out_buffers):
        index = np.int64 if self.spec.index_type == "long" else np.int32
        args = []
        for buffer, offset, layout, (outer, column) in zip(in_buffers, in_offsets, self.spec.layouts, self.load_strides):
            args += [buffer, index(offset), *map(index, outer)]
            if layout == "strided":
                args.append(index(column))
        return args + list(out_buffers) + [index(x) for x in self.scalars]


def _row_layout(column_stride: int, n: int) -> str:
    if column_stride == 0 or n == 1:
        return "bcast" if column_stride == 0 else "contig"
    return "contig" if column_stride == 1 else "strided"


def cpu_rows_per_group(rows: int) -> int:
    """Small work-groups, 16+ per row set: PoCL's own choice for 12288 rows is 3 groups of 4096 on 2
    threads (one thread does two thirds), and a busy core then stalls the whole launch."""
    return max(1, min(64, 1 << max(rows // 16, 1).bit_length() - 1))


def group_size_for(n: int) -> int:
    return min(GROUP_SIZES[1], max(GROUP_SIZES[0], 1 << max(n - 1, 0).bit_length()))


def configure_reduction(kernel: ReductionKernel, inputs, device_type: str) -> ReductionLaunch:
    shape = kernel.row_shape
    n = shape[-1]
    rows = math.prod(shape[:-1])
    strides = [broadcast_strides(shape, t) for t in inputs]
    dims = collapse(list(shape[:-1]), [st[:-1] for st in strides])
    sizes = [s for s, _ in dims]
    outer = [[st[k] for _, st in dims] for k in range(len(inputs))]
    layouts = tuple(_row_layout(st[-1], n) for st in strides)
    reach = max([rows * n] + [extent(t) for t in inputs])
    index_type = index_type_for(reach)
    if device_type == "CPU":
        width = vector_widths().get(kernel.reduction.stages[0].acc_dtype, 1) if kernel.reduction.stages else 1
        spec = ReductionSpec(kernel.reduction, layouts, len(sizes), index_type, ROW_PER_ITEM, vector_width=width)
        local = cpu_rows_per_group(rows)
        global_size, local_size = (-(-max(rows, 1) // local) * local,), (local,)
    else:
        group = group_size_for(n)
        spec = ReductionSpec(kernel.reduction, layouts, len(sizes), index_type, GROUP_PER_ROW, 1, group)
        global_size, local_size = (max(rows, 1) * group,), (group,)
    outputs = [(shape, tuple(contiguous_strides(shape)), TORCH_DTYPES[d])
               for d in kernel.reduction.element_output_dtypes]
    outputs += [(s, tuple(contiguous_strides(s)), TORCH_DTYPES[d])
                for s, d in zip(kernel.row_output_shapes, kernel.reduction.row_output_dtypes)]
    empty = rows == 0 or (n == 0 and not kernel.reduction.row_outputs)
    launch = ReductionLaunch(spec, global_size, outputs, [rows, n, *sizes], empty=empty)
    launch.local_size = local_size
    launch.load_strides = [(o, st[-1]) for o, st in zip(outer, strides)]
    return launch
