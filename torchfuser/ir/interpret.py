"""Runs an SSA program with PyTorch ops: the reference meaning of a fused kernel and its fallback path."""

from __future__ import annotations

import torch

from torchfuser.ir.dtypes import TORCH_DTYPES
from torchfuser.ir.ops import OPS
from torchfuser.ir.program import Const, Program


_TENSOR_OPERANDS = frozenset({"maximum", "minimum", "logical_and", "logical_or"})  # torch takes no number there


def run_program(program: Program, inputs, out_shape=None) -> list[torch.Tensor]:
    """`out_shape` (the kernel's output shape) is needed only by programs that index the last dim."""
    if len(inputs) != program.n_inputs:
        raise ValueError(f"program takes {program.n_inputs} inputs, got {len(inputs)}")
    if program.indexes_last_dim and not out_shape:
        raise ValueError("this program indexes the last dim: give the output shape")
    width = out_shape[-1] if out_shape else 0
    values = [_read(t, program.read_of(i), width) for i, t in enumerate(inputs)]
    for i in range(program.n_inputs):
        if gather := program.gather_of(i):  # eager's embedding: it raises IndexError for rows out of range
            values[i] = torch.nn.functional.embedding(inputs[gather.index].long(), inputs[i])
    for i in program.gather_indices:  # read with a trailing dim of 1 (the kernel's view of the indices)
        values[i] = inputs[i].unsqueeze(-1)
    for ins in program.instrs:
        args = [a.value if isinstance(a, Const) else values[a] for a in ins.args]
        dtype = TORCH_DTYPES[ins.dtype]
        if ins.op == "last_index":
            result = torch.arange(width, dtype=dtype)
        elif ins.op == "cast":
            result = torch.as_tensor(args[0]).to(dtype)
        elif ins.op == "where":
            cond, a, b = args
            result = torch.where(torch.as_tensor(cond).to(torch.bool), a, b)
        else:
            if ins.op in _TENSOR_OPERANDS:  # a literal operand as a 0-d tensor: promotes as the Python number would
                args = [torch.as_tensor(a) for a in args]
            result = OPS[ins.op].torch_fn(*args)
        values.append(torch.as_tensor(result).to(dtype))
    return [values[v] for v in program.outputs]


def _read(t, read, width: int):
    """t gathered along its last dim as the kernel reads it: position clamp(offset + step * j) for each j."""
    if read is None:
        return t
    positions = (read.offset + read.step * torch.arange(width)).clamp(0, read.size - 1)
    return t.index_select(-1, positions)
