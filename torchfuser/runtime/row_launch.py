"""The row schedule's launch for pointwise programs that index the last dim (cat / slice along it).

On CPU devices, when the output's last dim is innermost in memory, each work-item computes one whole row
(codegen/pointwise_rows.py): outer dims collapse as for the flat schedule, and each input also passes its
stride along the last dim (0 where it broadcasts). Otherwise (GPUs: neighbouring work-items should touch
neighbouring elements; or another output layout) the flat schedule runs, computing jlast per element.
"""

from __future__ import annotations

import numpy as np

from torchfuser.codegen.pointwise_ops import TORCH_DTYPES
from torchfuser.ir.specs import SCALAR, STRIDED, PointwiseSpec
from torchfuser.runtime.launch import (
    INT32_MAX, POINTWISE_GROUP, PointwiseLaunch, _collapse, _strides_in_order, broadcast_strides, extent,
)


def configure_rows(kernel, inputs, device_type: str) -> PointwiseLaunch | None:
    """The row-schedule launch for a PointwiseKernel on these inputs; None where it does not apply."""
    shape, order, program = kernel.out_shape, kernel.order, kernel.program
    numel = int(np.prod(shape)) if shape else 1
    if device_type != "CPU" or not shape or order[-1] != len(shape) - 1 or numel == 0:
        return None
    width, outer = shape[-1], order[:-1]
    strides = [broadcast_strides(shape, t) for t in inputs]
    dims = _collapse([shape[d] for d in outer], [[st[d] for d in outer] for st in strides])
    sizes = [s for s, _ in dims] or [1]
    per_input = [[st[i] for _, st in dims] or [0] for i in range(len(inputs))]
    layouts = tuple(STRIDED if any(st) else SCALAR for st in per_input)
    # a remapped read steps by the input's own last-dim stride; a plain one as it broadcasts
    last = [t.stride(-1) if program.read_of(i) else st[-1] for i, (t, st) in enumerate(zip(inputs, strides))]
    reach = max([numel] + [extent(t) for t in inputs])
    index_type = "int" if reach <= INT32_MAX else "long"
    index = np.int64 if index_type == "long" else np.int32
    spec = PointwiseSpec(program, layouts, len(sizes), index_type, row_length=width)
    rows = numel // width
    scalars = [index(rows)] + [index(s) for s in sizes]
    scalars += [index(x) for st, layout in zip(per_input, layouts) if layout == STRIDED for x in st]
    scalars += [index(x) for x in last]
    outputs = [(shape, _strides_in_order(shape, order), TORCH_DTYPES[d]) for d in program.output_dtypes]
    groups = -(-rows // POINTWISE_GROUP)
    return PointwiseLaunch(spec, (groups * POINTWISE_GROUP,), outputs, scalars, local_size=(POINTWISE_GROUP,))
