"""SSA program → OpenCL C statements. Shared by pointwise kernels and GEMM epilogues."""

from __future__ import annotations

from torchfuser.codegen.pointwise_ops import C_TYPES, HELPERS_C, c_expression
from torchfuser.ir.program import Const, Program

PREAMBLE = "#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n"


def const_c(const: Const) -> str:
    """An exact C literal: hex floats (C99), INFINITY/NAN, cast to the operand's type."""
    return f"(({C_TYPES[const.dtype]}){const.exact_text()})"


def program_statements(program: Program, input_names: list[str], prefix: str = "v") -> tuple[list[str], list[str]]:
    """C declarations computing every instruction; returns (lines, C names of the outputs)."""
    names = list(input_names)
    lines = []
    for i, ins in enumerate(program.instrs, start=program.n_inputs):
        operands = [const_c(a) if isinstance(a, Const) else names[a] for a in ins.args]
        name = f"{prefix}{i}"
        lines.append(f"const {C_TYPES[ins.dtype]} {name} = {c_expression(ins.op, operands, ins.dtype)};")
        names.append(name)
    return lines, [names[v] for v in program.outputs]


def helpers_for(programs) -> str:
    """The helper functions (erf, NaN-propagating max, ...) that these programs' C types need."""
    c_types = set()
    for program in programs:
        c_types.update(C_TYPES[d] for d in program.input_dtypes)
        c_types.update(C_TYPES[ins.dtype] for ins in program.instrs)
    return "".join(HELPERS_C[t] for t in ("float", "double") if t in c_types)
