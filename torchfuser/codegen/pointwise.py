"""PointwiseSpec → OpenCL C.

Each work-item computes `items_per_thread` consecutive elements of the (collapsed, output-ordered)
iteration space. Contiguous inputs index with the linear index (PoCL vectorises across work-items), scalar
inputs are loaded once, strided inputs decompose the index into coordinates.
"""

from __future__ import annotations

from torchfuser.codegen.pointwise_ops import C_TYPES
from torchfuser.codegen.program_c import PREAMBLE, helpers_for, program_statements
from torchfuser.ir.specs import CONTIGUOUS, SCALAR, STRIDED, PointwiseSpec


def pointwise_source(spec: PointwiseSpec) -> str:
    program, idx = spec.program, spec.index_type
    params, loads, hoisted = [], [], []
    for i, (dtype, layout) in enumerate(zip(program.input_dtypes, spec.layouts)):
        c_type = C_TYPES[dtype]
        params.append(f"__global const {c_type}* restrict in{i}, const {idx} off{i}")
        if layout == SCALAR:
            hoisted.append(f"const {c_type} x{i} = in{i}[off{i}];")
        elif layout == CONTIGUOUS:
            loads.append(f"const {c_type} x{i} = in{i}[off{i} + i];")
        else:
            offset = " + ".join(f"c{d} * st{i}_{d}" for d in range(spec.ndim)) or "0"
            loads.append(f"const {c_type} x{i} = in{i}[off{i} + {offset}];")
    for j, dtype in enumerate(program.output_dtypes):
        params.append(f"__global {C_TYPES[dtype]}* restrict out{j}")
    params.append(f"const {idx} n")
    strided = [i for i, layout in enumerate(spec.layouts) if layout == STRIDED]
    if strided:
        params += [f"const {idx} size{d}" for d in range(spec.ndim)]
        params += [f"const {idx} st{i}_{d}" for i in strided for d in range(spec.ndim)]

    body, outputs = program_statements(program, [f"x{i}" for i in range(program.n_inputs)])
    stores = [f"out{j}[i] = {name};" for j, name in enumerate(outputs)]
    coords = _coordinate_lines(spec.ndim, idx) if strided else []
    inner = "\n    ".join(coords + loads + body + stores)
    hoist = "\n  ".join(hoisted)
    return f"""{PREAMBLE}{helpers_for([program])}
__kernel void {spec.kernel_name}(
    {(","+chr(10)+"    ").join(params)})
{{
  const {idx} start = ({idx})get_global_id(0) * {spec.items_per_thread};
  const {idx} end = start + {spec.items_per_thread} < n ? start + {spec.items_per_thread} : n;
  {hoist}
  for ({idx} i = start; i < end; ++i) {{
    {inner}
  }}
}}
"""


def _coordinate_lines(ndim: int, idx: str) -> list[str]:
    """Decompose the linear index i into coordinates c0..c{ndim-1} (row-major)."""
    lines = [f"{idx} rem = i;"]
    for d in range(ndim - 1, 0, -1):
        lines.append(f"const {idx} c{d} = rem % size{d}; rem /= size{d};")
    lines.append("const " + idx + " c0 = rem;")
    return lines
