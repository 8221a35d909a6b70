"""CatSpec → OpenCL C: each work-item copies one run of one result row, operand by operand.

Work-item k copies positions [j0, j1) of row k / chunks (j0 = (k % chunks) · span). The row's outer coordinates
give each operand's base; an operand occupies positions [start, start + w) of the row, so the item copies the
part of it that falls in [j0, j1): a plain loop over consecutive elements, which PoCL vectorises.
"""

from __future__ import annotations

from torchfuser.codegen.opencl.op_c import C_TYPES
from torchfuser.ir.kernels.cat import CatSpec


def cat_source(spec: CatSpec) -> str:
    idx, t, dims = spec.index_type, C_TYPES[spec.dtype], range(spec.outer_ndim)
    params = []
    for k in range(spec.n_inputs):
        params.append(f"__global const {t}* restrict in{k}, const {idx} off{k}, const {idx} w{k}")
        params += [f"const {idx} st{k}_{d}" for d in dims]
    params += [f"__global {t}* restrict out", f"const {idx} rows", f"const {idx} width", f"const {idx} span",
               f"const {idx} chunks"] + [f"const {idx} size{d}" for d in dims]
    lines = [f"const {idx} item = ({idx})get_global_id(0), row = item / chunks;",
             "if (row >= rows) return;",
             f"const {idx} j0 = (item - row * chunks) * span, j1 = min(j0 + span, width);",
             f"{idx} rem = row;"]
    for d in reversed(dims[1:]):
        lines.append(f"const {idx} c{d} = rem % size{d}; rem /= size{d};")
    lines += [f"const {idx} c0 = rem;", f"__global {t}* restrict o = out + row * width;", f"{idx} start = 0;"]
    for k in range(spec.n_inputs):
        outer = " + ".join(f"c{d} * st{k}_{d}" for d in dims)
        lines += [
            "{",
            f"  const {idx} lo = max(start, j0), hi = min(start + w{k}, j1);",
            f"  const {idx} base = off{k} + {outer} - start;",
            f"  for ({idx} j = lo; j < hi; ++j) o[j] = in{k}[base + j];",
            f"  start += w{k};",
            "}",
        ]
    body, params = "\n  ".join(lines), ",\n    ".join(params)
    return f"""__kernel void {spec.kernel_name}(
    {params})
{{
  {body}
}}
"""
