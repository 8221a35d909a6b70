"""The SSA op vocabulary: every op's arity, dtype rule and PyTorch meaning.

The torch column is the reference semantics: the program interpreter (fallback path and tests) uses it, so
a kernel and its fallback mean the same thing. How each op is spelled in OpenCL C is codegen's business
(codegen/opencl/op_c.py), which has one template per op named here.

NaN rules follow PyTorch: maximum/minimum/clamp/relu propagate NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class OpDef:
    arity: int
    torch_fn: Callable | None  # None: interpreted by dtype or shape (cast, last_index)
    float_only: bool = False  # the op is only defined for floating results


OPS: dict[str, OpDef] = {
    "add": OpDef(2, torch.add),
    "sub": OpDef(2, torch.sub),
    "mul": OpDef(2, torch.mul),
    "div": OpDef(2, torch.div, True),
    "neg": OpDef(1, torch.neg),
    "abs": OpDef(1, torch.abs),
    "relu": OpDef(1, torch.relu),
    "sigmoid": OpDef(1, torch.sigmoid, True),
    "silu": OpDef(1, F.silu, True),
    "gelu": OpDef(1, F.gelu, True),
    "gelu_tanh": OpDef(1, lambda x: F.gelu(x, approximate="tanh"), True),
    "tanh": OpDef(1, torch.tanh, True),
    "exp": OpDef(1, torch.exp, True),
    "log": OpDef(1, torch.log, True),
    "log1p": OpDef(1, torch.log1p, True),
    "expm1": OpDef(1, torch.expm1, True),
    "sqrt": OpDef(1, torch.sqrt, True),
    "rsqrt": OpDef(1, torch.rsqrt, True),
    "reciprocal": OpDef(1, torch.reciprocal, True),
    "erf": OpDef(1, torch.erf, True),
    "sin": OpDef(1, torch.sin, True),
    "cos": OpDef(1, torch.cos, True),
    "floor": OpDef(1, torch.floor, True),
    "ceil": OpDef(1, torch.ceil, True),
    "round": OpDef(1, torch.round, True),
    "pow": OpDef(2, torch.pow, True),
    # integer forms take a divisor that is neither 0 nor -1 (the lowering only passes such constants)
    "floor_divide": OpDef(2, lambda a, b: torch.div(a, b, rounding_mode="floor")),
    "trunc_divide": OpDef(2, lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    "remainder": OpDef(2, torch.remainder),
    "maximum": OpDef(2, torch.maximum),
    "minimum": OpDef(2, torch.minimum),
    "where": OpDef(3, torch.where),
    "eq": OpDef(2, torch.eq),
    "ne": OpDef(2, torch.ne),
    "lt": OpDef(2, torch.lt),
    "le": OpDef(2, torch.le),
    "gt": OpDef(2, torch.gt),
    "ge": OpDef(2, torch.ge),
    "logical_not": OpDef(1, torch.logical_not),
    "logical_and": OpDef(2, torch.logical_and),
    "logical_or": OpDef(2, torch.logical_or),
    "bitwise_and": OpDef(2, torch.bitwise_and),
    "bitwise_or": OpDef(2, torch.bitwise_or),
    "bitwise_xor": OpDef(2, torch.bitwise_xor),
    "cast": OpDef(1, None),
    # the output's coordinate along its last dim (pointwise kernels define jlast); interpreted by shape
    "last_index": OpDef(0, None),
}
