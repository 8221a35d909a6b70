"""Runs an SSA program with PyTorch ops: the reference meaning of a fused kernel and its fallback path."""

from __future__ import annotations

import torch

from torchfuser.codegen.pointwise_ops import OPS, TORCH_DTYPES
from torchfuser.ir.program import Const, Program


def run_program(program: Program, inputs) -> list[torch.Tensor]:
    if len(inputs) != program.n_inputs:
        raise ValueError(f"program takes {program.n_inputs} inputs, got {len(inputs)}")
    values = list(inputs)
    for ins in program.instrs:
        args = [a.value if isinstance(a, Const) else values[a] for a in ins.args]
        dtype = TORCH_DTYPES[ins.dtype]
        if ins.op == "cast":
            result = torch.as_tensor(args[0]).to(dtype)
        elif ins.op == "where":
            cond, a, b = args
            result = torch.where(torch.as_tensor(cond).to(torch.bool), a, b)
        else:
            result = OPS[ins.op].torch_fn(*args)
        values.append(torch.as_tensor(result).to(dtype))
    return [values[v] for v in program.outputs]
