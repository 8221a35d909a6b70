"""Frozen, hashable descriptions of what a kernel computes: the SSA program and the kernel specs."""

from torchfuser.ir.program import Const, Instr, Program, ProgramBuilder, parse_program
from torchfuser.ir.specs import GemmSpec, PointwiseSpec

__all__ = ["Const", "Instr", "Program", "ProgramBuilder", "parse_program", "PointwiseSpec", "GemmSpec"]
