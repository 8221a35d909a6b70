"""PointwiseSpec with `row_length` → OpenCL C: the row schedule for programs that index the last dim.

Each work-item computes one row along the output's last dim (innermost in memory), or one run of it where a
few long rows would leave most work-items idle (`row_chunks`). The row's outer coordinates and every input's
row base are computed once; then the row is split at compile time into segments where every
`lt(last_index, c)` is constant and every remapped read is in bounds (index-set splitting). Each segment
runs its own folded program: a cat's selects, the dead operand and the clamps disappear, so the loop body is
plain loads and arithmetic at base + position * last-dim stride, which PoCL vectorises (256-bit vectors on
AVX-512); a costly program (erf, exp, tanh ...: PoCL leaves a loop that calls them scalar) runs on explicit
vectors of VECTOR_LANES positions first, loading what is not contiguous lane by lane. (On PoCL, rotary over [1, 32, 512, 128]: ~1 ms this way, ~6 ms with per-element selects and
clamps, ~13 ms on the flat schedule that divides the linear index for every element.) A transposing copy
(`row_block`) computes a block of rows per work-item, position by position along them (see _block_lines).
"""

from __future__ import annotations

from torchfuser.codegen.opencl.op_c import C_TYPES, vector_type
from torchfuser.codegen.opencl.program_c import (PREAMBLE, costly, helpers_for, program_statements, vector_load,
                                                  vector_store, vectorisable)
from torchfuser.ir.program import Const, Program, ProgramBuilder
from torchfuser.ir.kernels.pointwise import SCALAR
from torchfuser.ir.kernels import PointwiseSpec


VECTOR_LANES = 16  # positions per explicit vector (costly programs): float16 is one AVX-512 register


def rows_source(spec: PointwiseSpec) -> str:
    program, idx, width = spec.program, spec.index_type, spec.row_length
    params = [f"__global const {C_TYPES[d]}* restrict in{i}, const {idx} off{i}"
              for i, d in enumerate(program.input_dtypes)]
    params += [f"__global {C_TYPES[d]}* restrict out{j}" for j, d in enumerate(program.output_dtypes)]
    params += [f"const {idx} nrows"] + [f"const {idx} size{d}" for d in range(spec.ndim)]
    params += [f"const {idx} st{i}_{d}" for i, layout in enumerate(spec.layouts) if layout != SCALAR
               for d in range(spec.ndim)]
    steps = spec.row_steps or (None,) * program.n_inputs
    params += [f"const {idx} lst{i}" for i, step in enumerate(steps) if step is None]
    lines = _block_lines(spec, steps) if spec.row_block > 1 else _row_lines(spec, steps)
    body, params = "\n  ".join(lines), ",\n    ".join(params)
    vectors = any(_on_vectors(specialise(program, lo, hi)[0]) for lo, hi in segments(program, width))
    return f"""{PREAMBLE}{helpers_for([program], VECTOR_LANES if vectors else 1)}
__kernel void {spec.kernel_name}(
    {params})
{{
  {body}
}}
"""


def _row_lines(spec: PointwiseSpec, steps: tuple) -> list[str]:
    """A work-item's row (or, with row_chunks, its run of one), segment by segment."""
    program, idx, width = spec.program, spec.index_type, spec.row_length
    chunks, span = spec.row_chunks, chunk_span(spec)
    if chunks == 1:
        lines = [f"const {idx} row = ({idx})get_global_id(0);", "if (row >= nrows) return;"]
    else:  # work-item k computes run k % chunks of row k / chunks
        lines = [f"const {idx} item = ({idx})get_global_id(0), row = item / {chunks};", "if (row >= nrows) return;",
                 f"const {idx} j0 = (item - row * {chunks}) * {span}, j1 = min(j0 + {span}, ({idx}){width});"]
    lines.append(f"{idx} rem = row;")
    for d in range(spec.ndim - 1, 0, -1):
        lines.append(f"const {idx} c{d} = rem % size{d}; rem /= size{d};")
    lines.append(f"const {idx} c0 = rem;")
    lines += _row_bases(spec)
    lines.append(f"const {idx} o = row * {width};")
    for lo, hi in segments(program, width):
        lines += _segment_loop(program, idx, lo, hi, steps, chunked=chunks > 1)
    return lines


def _row_bases(spec: PointwiseSpec) -> list[str]:
    """Each input's offset at the row's (or block's first row's) outer coordinates c0 .. c{ndim - 1}."""
    lines = []
    for i, layout in enumerate(spec.layouts):
        outer = " + ".join(f"c{d} * st{i}_{d}" for d in range(spec.ndim)) if layout != SCALAR else ""
        lines.append(f"const {spec.index_type} b{i} = off{i}{' + ' + outer if outer else ''};")
    return lines


def _block_lines(spec: PointwiseSpec, steps: tuple) -> list[str]:
    """A work-item's block of row_block rows, consecutive along the innermost outer dim, computed position by
    position along the row and, inside, row by row: an input that walks that dim contiguously reads a run of
    it per position, and every line of the tile, read or written, stays in L1 while the tile is done. Where
    every input reads along the row (no transposing read: short rows blocked for the sake of their index
    arithmetic), the tile is computed row by row instead, each row a contiguous run."""
    idx, width, block, last = spec.index_type, spec.row_length, spec.row_block, spec.ndim - 1
    lines = [f"const {idx} item = ({idx})get_global_id(0);", "if (item >= nrows) return;",
             f"const {idx} blocks = (size{last} + {block - 1}) / {block};", f"{idx} rem = item / blocks;",
             f"const {idx} c{last} = (item - rem * blocks) * {block};"]
    for d in range(last - 1, 0, -1):
        lines.append(f"const {idx} c{d} = rem % size{d}; rem /= size{d};")
    if last:
        lines.append(f"const {idx} c0 = rem;")
    lines += _row_bases(spec)
    first_row = "c0"
    for d in range(1, spec.ndim):
        first_row = f"({first_row}) * size{d} + c{d}"
    lines += [f"const {idx} o = ({first_row}) * {width};",
              f"const {idx} rows = min(({idx}){block}, size{last} - c{last});"]
    program = spec.program
    loads = []
    for i, layout in enumerate(spec.layouts):
        step = f"lst{i}" if steps[i] is None else steps[i]
        address = f"b{i}" + (f" + r * st{i}_{last}" if layout != SCALAR else "") + (
            "" if step == 0 else " + jlast" if step == 1 else f" + jlast * {step}")
        loads.append(f"const {C_TYPES[program.input_dtypes[i]]} x{i} = in{i}[{address}];")
    body, outputs = program_statements(program, [f"x{i}" for i in range(program.n_inputs)], width=1)
    stores = [f"out{j}[o + r * {width} + jlast] = {name};" for j, name in enumerate(outputs)]
    inner = "\n      ".join(loads + body + stores)
    loops = [f"for ({idx} jlast = 0; jlast < {width}; ++jlast) {{", f"  for ({idx} r = 0; r < rows; ++r) {{"]
    if None not in steps:  # every input reads along the row: row after row, each a contiguous run
        loops.reverse()
    return lines + loops + [f"      {inner}", "  }", "}"]


def chunk_span(spec: PointwiseSpec) -> int:
    """Elements of a row one work-item computes: the row cut into row_chunks runs of whole 16-float vectors."""
    span = -(-spec.row_length // spec.row_chunks)
    return -(-span // 16) * 16


def segments(program: Program, width: int) -> list[tuple[int, int]]:
    """[lo, hi) ranges of the last dim over which every comparison with last_index and every read's
    in-bounds test is constant."""
    cuts = {0, width}
    for ins in program.instrs:
        if _compares_last_index(program, ins):
            cuts.add(ins.args[1].value)
    for read in program.input_reads:
        if read is not None and read.step > 0:
            cuts.add(-(read.offset // read.step))  # ceil(-offset / step): first in-bounds position
            cuts.add((read.size - 1 - read.offset) // read.step + 1)  # one past the last
    cuts = sorted(c for c in cuts if 0 <= c <= width)
    return [(lo, hi) for lo, hi in zip(cuts, cuts[1:]) if lo < hi]


def specialise(program: Program, lo: int, hi: int) -> tuple[Program, list[int]]:
    """The program over positions [lo, hi): constant comparisons folded, the selects they drive resolved,
    dead values dropped. Returns it and, per new input, the original input it is."""
    n = program.n_inputs
    folded: dict[int, object] = {}  # value id -> the value (id or Const) it resolves to

    def resolve(a):
        return folded.get(a, a) if isinstance(a, int) else a

    for v, ins in enumerate(program.instrs, start=n):
        args = [resolve(a) for a in ins.args]
        if _compares_last_index(program, ins) and v not in program.outputs:
            bound = ins.args[1].value
            if hi <= bound or lo >= bound:
                folded[v] = Const(hi <= bound, "bool")
        elif ins.op == "where" and isinstance(args[0], Const) and isinstance(args[1 if args[0].value else 2], int):
            folded[v] = args[1 if args[0].value else 2]
    live, stack = set(), [resolve(v) for v in program.outputs]
    while stack:
        v = stack.pop()
        if isinstance(v, int) and v not in live:
            live.add(v)
            if v >= n:
                stack += [resolve(a) for a in program.instrs[v - n].args]
    inputs = sorted(v for v in live if v < n)
    builder = ProgramBuilder([program.input_dtypes[i] for i in inputs])
    new = {old: i for i, old in enumerate(inputs)}
    for v, ins in enumerate(program.instrs, start=n):
        if v in live and v not in folded:
            args = [resolve(a) for a in ins.args]
            with builder.producing(program.origins[v] if program.origins else ()):
                new[v] = builder.emit(ins.op, [new[a] if isinstance(a, int) else a for a in args], ins.dtype)
    outputs = [resolve(v) for v in program.outputs]
    return builder.build([new[v] for v in outputs]), inputs


def _segment_loop(program: Program, idx: str, lo: int, hi: int, steps: tuple, chunked: bool) -> list[str]:
    """The loop over positions [lo, hi) of the row; a costly program (PoCL leaves a loop calling erf, exp ...
    scalar) first runs on explicit vectors of VECTOR_LANES positions, gathering what is not contiguous."""
    part, inputs = specialise(program, lo, hi)
    start, end = (f"max(({idx}){lo}, j0)", f"min(({idx}){hi}, j1)") if chunked else (lo, hi)
    lines = ["{", f"{idx} jlast = {start};"]  # a block per segment: each has its own jlast
    if _on_vectors(part):
        vector = _iteration(program, part, inputs, steps, lo, VECTOR_LANES)
        lines += [f"for (; jlast + {VECTOR_LANES} <= {end}; jlast += {VECTOR_LANES}) {{", f"  {vector}", "}"]
    scalar = _iteration(program, part, inputs, steps, lo, 1)
    return lines + [f"for (; jlast < {end}; ++jlast) {{", f"  {scalar}", "}", "}"]


def _on_vectors(part: Program) -> bool:
    return costly(part) and vectorisable(part) and all(ins.op != "last_index" for ins in part.instrs)


def _iteration(program: Program, part: Program, inputs: list, steps: tuple, lo: int, lanes: int) -> str:
    """Loads, program and stores for positions jlast .. jlast + lanes - 1 (lanes 1: one element) of the segment
    from lo."""
    loads = []
    for k, i in enumerate(inputs):
        read = program.read_of(i)
        first = read.offset + read.step * lo if read else 0
        step = f"lst{i}" if steps[i] is None else steps[i]

        def address(lane: int) -> str:
            j = f"(jlast + {lane})" if lane else "jlast"
            if read is None:
                position = j
            elif read.step == 0 or not 0 <= first < read.size:
                position = str(min(max(first, 0), read.size - 1))  # clamped all through the segment: constant
            else:
                position = f"({read.offset} + {read.step} * {j})"
            return f"b{i}" if step == 0 else f"b{i} + {position}" if step == 1 else f"b{i} + {position} * {step}"

        c_type = C_TYPES[program.input_dtypes[i]]
        if lanes == 1:
            value = f"in{i}[{address(0)}]"
        elif step == 0:
            value = f"({c_type}{lanes})(in{i}[{address(0)}])"
        elif step == 1 and (read is None or read.step == 1):
            value = vector_load(f"{c_type}{lanes}", f"in{i} + {address(0)}")
        else:
            value = f"({c_type}{lanes})(" + ", ".join(f"in{i}[{address(u)}]" for u in range(lanes)) + ")"
        loads.append(f"const {vector_type(program.input_dtypes[i], lanes)} x{k} = {value};")
    body, outputs = program_statements(part, [f"x{k}" for k in range(len(inputs))], width=lanes)
    stores = [vector_store(vector_type(d, lanes), name, f"out{j} + o + jlast") if lanes > 1
              else f"out{j}[o + jlast] = {name};" for j, (d, name) in enumerate(zip(program.output_dtypes, outputs))]
    return "\n    ".join(loads + body + stores)


def _compares_last_index(program: Program, ins) -> bool:
    first = ins.args[0] if ins.args else None
    return (
        ins.op == "lt" and isinstance(first, int) and first >= program.n_inputs
        and program.instrs[first - program.n_inputs].op == "last_index" and isinstance(ins.args[1], Const)
    )
