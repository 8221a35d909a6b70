"""PointwiseSpec → OpenCL C.

Scalar path: each work-item computes `items_per_thread` consecutive elements of the (collapsed,
output-ordered) iteration space; contiguous inputs index with the linear index, scalar inputs are loaded
once, row/column broadcasts (a bias, a per-row scale) take i % rowlen or i / rowlen, an input that varies
along one dim only (a per-channel scale of an NCHW tensor) takes (i / inner) % size, strided inputs
decompose the index into coordinates. A program that indexes the last dim (a cat or slice along it, see
ir/region.py) computes jlast, the output's last-dim coordinate, and reads remapped inputs at their clamped
last-dim position times that input's last-dim stride, on top of its other dims. A gathered input (an
embedding's table) adds its clamped row, the value its index input loaded, times its row stride.
Vector path (all inputs contiguous, scalar or broadcast in runs of whole vectors; one floating type): each
work-item loads, computes and stores one OpenCL vector (program_c.vector_load: element alignment suffices); the
last, partial vector (where n is not a multiple of the width) loads lane by lane and stores only the lanes
before the end. PoCL does not vectorise the transcendental ops of the scalar path: this is several times faster.
"""

from __future__ import annotations

from torchfuser.codegen.opencl.op_c import C_TYPES, vector_type
from torchfuser.codegen.opencl.pointwise_rows import rows_source
from torchfuser.codegen.opencl.program_c import PREAMBLE, helpers_for, program_statements, vector_load, vector_store
from torchfuser.ir.kernels.pointwise import CHANNEL, COLUMN, CONTIGUOUS, ROW, SCALAR, STRIDED
from torchfuser.ir.kernels import PointwiseSpec


def _parameters(spec: PointwiseSpec) -> list[str]:
    program, idx = spec.program, spec.index_type
    params = [f"__global const {C_TYPES[d]}* restrict in{i}, const {idx} off{i}"
              for i, d in enumerate(program.input_dtypes)]
    params += [f"__global {C_TYPES[d]}* restrict out{j}" for j, d in enumerate(program.output_dtypes)]
    params.append(f"const {idx} n")
    if ROW in spec.layouts or COLUMN in spec.layouts:
        params.append(f"const {idx} rowlen")
    strided = [i for i, layout in enumerate(spec.layouts) if layout == STRIDED]
    if strided:
        params += [f"const {idx} size{d}" for d in range(spec.ndim)]
        params += [f"const {idx} st{i}_{d}" for i in strided for d in range(spec.ndim)]
    params += [f"const {idx} chin{i}, const {idx} chsz{i}, const {idx} chst{i}"
               for i, layout in enumerate(spec.layouts) if layout == CHANNEL]
    if program.indexes_last_dim:
        params += [f"const {idx} lastinner", f"const {idx} lastsize"]
        params += [f"const {idx} lst{i}" for i in range(program.n_inputs) if program.read_of(i)]
    params += [f"const {idx} gst{i}" for i in range(program.n_inputs) if program.gather_of(i)]
    return params


def _element_index(spec: PointwiseSpec, i: int, at: str) -> str:
    """Input i's index of element `at` (a C expression; a strided input reads the coordinates of `i`)."""
    layout = spec.layouts[i]
    if layout == SCALAR:
        return f"off{i}"
    if layout == CONTIGUOUS:
        return f"off{i} + {at}"
    if layout == ROW:
        return f"off{i} + {at} % rowlen"
    if layout == COLUMN:
        return f"off{i} + {at} / rowlen"
    if layout == CHANNEL:
        return f"off{i} + (({at} / chin{i}) % chsz{i}) * chst{i}"
    return f"off{i} + " + (" + ".join(f"c{d} * st{i}_{d}" for d in range(spec.ndim)) or "0")


def _scalar_loop(spec: PointwiseSpec, start: str, end: str) -> list[str]:
    """for i in [start, end): load, compute, store, one element at a time."""
    program, idx = spec.program, spec.index_type
    loads = []
    for i in sorted(range(program.n_inputs), key=lambda i: program.gather_of(i) is not None):  # indices first
        dtype, index = program.input_dtypes[i], _element_index(spec, i, "i")
        if program.read_of(i):
            index += f" + {_last_position(program.read_of(i), idx)} * lst{i}"
        if gather := program.gather_of(i):  # clamped: a row out of range never loads (the launch checks)
            row = C_TYPES[program.input_dtypes[gather.index]]
            index += f" + ({idx})clamp(x{gather.index}, ({row})0, ({row}){gather.rows - 1}) * gst{i}"
        loads.append(f"const {C_TYPES[dtype]} x{i} = in{i}[{index}];")
    strided = STRIDED in spec.layouts
    coords = _coordinate_lines(spec.ndim, idx) if strided else []
    if program.indexes_last_dim:
        coords.append(f"const {idx} jlast = (i / lastinner) % lastsize;")
    body, outputs = program_statements(program, [f"x{i}" for i in range(program.n_inputs)])
    stores = [f"out{j}[i] = {name};" for j, name in enumerate(outputs)]
    inner = "\n    ".join(coords + loads + body + stores)
    return [f"for ({idx} i = {start}; i < {end}; ++i) {{", f"    {inner}", "}"]


def _vector_block(spec: PointwiseSpec) -> list[str]:
    program, width = spec.program, spec.vector_width
    loads = []
    for i, (dtype, layout) in enumerate(zip(program.input_dtypes, spec.layouts)):
        vtype = vector_type(dtype, width)
        value = {
            SCALAR: f"({vtype})(in{i}[off{i}])",
            COLUMN: f"({vtype})(in{i}[off{i} + base / rowlen])",  # rowlen % width == 0: one row per vector
            # chin % width == 0: one value per vector
            CHANNEL: f"({vtype})(in{i}[off{i} + ((base / chin{i}) % chsz{i}) * chst{i}])",
            ROW: vector_load(vtype, f"in{i} + off{i} + base % rowlen"),
        }.get(layout, vector_load(vtype, f"in{i} + off{i} + base"))
        loads.append(f"const {vtype} x{i} = {value};")
    body, outputs = program_statements(program, [f"x{i}" for i in range(program.n_inputs)], width=width)
    stores = [vector_store(vector_type(d, width), name, f"out{j} + base")
              for j, (d, name) in enumerate(zip(program.output_dtypes, outputs))]
    return loads + body + stores


def _vector_tail(spec: PointwiseSpec) -> list[str]:
    """The last vector when n is not a multiple of the width: lanes past the end load element n - 1 (in bounds)
    and are not stored. No loop here: PoCL compiles this branch into every work-item's code, and with a scalar
    loop in it the full vectors ran slower."""
    program, width = spec.program, spec.vector_width
    positions = [f"min(base + {k}, n - 1)" for k in range(width)]
    loads = []
    for i, dtype in enumerate(program.input_dtypes):
        vtype = vector_type(dtype, width)
        count = 1 if spec.layouts[i] == SCALAR else width  # a scalar input: one load, broadcast
        lanes = ", ".join(f"in{i}[{_element_index(spec, i, f'({at})')}]" for at in positions[:count])
        loads.append(f"const {vtype} x{i} = ({vtype})({lanes});")
    body, outputs = program_statements(program, [f"x{i}" for i in range(program.n_inputs)], width=width)
    stores = [f"if (base + {k} < n) out{j}[base + {k}] = {name}.s{k:x};"
              for j, name in enumerate(outputs) for k in range(width)]
    return loads + body + stores


def pointwise_source(spec: PointwiseSpec) -> str:
    if spec.row_length:
        return rows_source(spec)
    idx, per_item = spec.index_type, spec.elements_per_item
    params = (",\n    ").join(_parameters(spec))
    if spec.vector_width > 1:
        vector = "\n    ".join(_vector_block(spec))
        # work-items past the end (the grid is whole work-groups) do nothing
        tail = "" if spec.whole_vectors else " else {\n    " + "\n    ".join(_vector_tail(spec)) + "\n  }"
        body = f"""  const {idx} base = ({idx})get_global_id(0) * {per_item};
  if (base + {per_item} <= n) {{
    {vector}
  }}{tail}"""
    else:
        loop = "\n  ".join(_scalar_loop(spec, "start", "end"))
        body = f"""  const {idx} start = ({idx})get_global_id(0) * {per_item};
  const {idx} end = start + {per_item} < n ? start + {per_item} : n;
  {loop}"""
    return f"""{PREAMBLE}{helpers_for([spec.program], spec.vector_width)}
__kernel void {spec.kernel_name}(
    {params})
{{
{body}
}}
"""


def _coordinate_lines(ndim: int, idx: str) -> list[str]:
    """Decompose the linear index i into coordinates c0..c{ndim-1} (row-major)."""
    lines = [f"{idx} rem = i;"]
    for d in range(ndim - 1, 0, -1):
        lines.append(f"const {idx} c{d} = rem % size{d}; rem /= size{d};")
    lines.append("const " + idx + " c0 = rem;")
    return lines


def _last_position(read, idx: str) -> str:
    """Clamped into the input (lanes a cat does not select still load in bounds)."""
    if read.step == 0:
        return f"(({idx}){min(max(read.offset, 0), read.size - 1)})"
    return f"min(max(({idx})({read.offset}) + ({idx}){read.step} * jlast, ({idx})0), ({idx}){read.size - 1})"
