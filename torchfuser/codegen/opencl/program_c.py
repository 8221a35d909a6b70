"""SSA program → OpenCL C statements. Shared by pointwise kernels and GEMM epilogues."""

from __future__ import annotations

from contextvars import ContextVar

from torchfuser.codegen.opencl.op_c import VECTOR_SAFE, VECTOR_WIDTHS, c_expression, helpers_c, vector_type
from torchfuser.ir.program import Const, Program

_SCALAR_BYTES = {"uchar": 1, "int": 4, "long": 8, "float": 4, "double": 8}  # the C types of op_c.C_TYPES

# Vector types aligned as their scalar (`float16_u`): a load or store through one is what vloadN/vstoreN mean,
# and PoCL's LLVM makes it one full-width move, where its vloadN often becomes N/2 two-element loads and the
# arithmetic on them runs two lanes at a time (when they feed a separate multiply or add).
PREAMBLE = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n" + "".join(
    f"typedef {t}{w} __attribute__((aligned({size}))) {t}{w}_u;\n"
    for t, size in _SCALAR_BYTES.items() for w in VECTOR_WIDTHS)


def vector_load(vtype: str, pointer: str) -> str:
    """The vector of C type `vtype` (e.g. float16) at a __global pointer aligned to its scalar only."""
    return f"(*(const __global {vtype}_u *)({pointer}))"


def vector_store(vtype: str, value: str, pointer: str) -> str:
    """Store `value` (C type `vtype`) at a __global pointer aligned to its scalar only."""
    return f"*(__global {vtype}_u *)({pointer}) = {value};"

# While codegen/source_lines.py traces a generation: the origins of each tagged line, by tag number.
LINE_TAGS: ContextVar[list | None] = ContextVar("torchfuser_line_tags", default=None)


def const_c(const: Const, width: int = 1) -> str:
    """An exact C literal: hex floats (C99), INFINITY/NAN, cast to the operand's (vector) type."""
    return f"(({vector_type(const.dtype, width)}){const.exact_text()})"


def program_statements(program: Program, input_names: list[str], prefix: str = "v", width: int = 1):
    """C declarations computing every instruction; returns (lines, C names of the outputs)."""
    names = list(input_names)
    lines = []
    for i, ins in enumerate(program.instrs, start=program.n_inputs):
        operands = [const_c(a, width) if isinstance(a, Const) else names[a] for a in ins.args]
        name = f"{prefix}{i}"
        expression = c_expression(ins.op, operands, ins.dtype, width)
        lines.append(tagged(f"const {vector_type(ins.dtype, width)} {name} = {expression};", program, i))
        names.append(name)
    return lines, [names[v] for v in program.outputs]


def tagged(line: str, program: Program, value: int) -> str:
    """The line computing `value`, marked with the nodes it came from while a trace is on."""
    tags = LINE_TAGS.get()
    if tags is None or not program.origins or not program.origins[value]:
        return line
    tags.append(program.origins[value])
    return f"{line} /*@tf{len(tags) - 1}*/"  # stripped again by the tracer: never in a built source


# ops that cost tens of instructions (PoCL does not vectorise a loop that calls them: explicit vectors do)
COSTLY_OPS = frozenset({"exp", "log", "log1p", "expm1", "tanh", "erf", "gelu", "gelu_tanh", "sigmoid", "silu",
                        "pow", "sin", "cos"})


def costly(program: Program) -> bool:
    return any(ins.op in COSTLY_OPS for ins in program.instrs)


def vectorisable(program: Program) -> bool:
    """All values of one floating type and every op valid on vector types."""
    dtypes = set(program.input_dtypes) | {ins.dtype for ins in program.instrs}
    return len(dtypes) == 1 and dtypes <= {"float32", "float64"} and all(
        ins.op in VECTOR_SAFE for ins in program.instrs
    )


def helpers_for(programs, width: int = 1, *more_widths: int) -> str:
    """The helper functions (erf, NaN-propagating max, ...) that these programs' C types need, for scalars and
    vectors of each width."""
    scalars = set()
    for program in programs:
        dtypes = set(program.input_dtypes) | {ins.dtype for ins in program.instrs}
        scalars |= {"float" for d in dtypes if d == "float32"} | {"double" for d in dtypes if d == "float64"}
    widths = sorted({1, width, *more_widths})
    return "".join(helpers_c(s, w) for s in ("float", "double") if s in scalars for w in widths)
