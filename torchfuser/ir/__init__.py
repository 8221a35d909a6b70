"""The IR: op vocabulary, dtypes, ATen facts, SSA programs, row reductions and the fused-node kinds.

Everything here is frozen, hashable and free of OpenCL: the layers above (lowering, passes, codegen, runtime)
build on it and it imports none of them.
"""

from torchfuser.ir.program import Const, Instr, Program, ProgramBuilder, parse_program

__all__ = ["Const", "Instr", "Program", "ProgramBuilder", "parse_program"]
