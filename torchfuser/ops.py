"""torch.ops.torchfuser.*: the kernels for manual use, as custom ops (with fake kernels for tracing).

    torch.ops.torchfuser.linear_act(x, weight, bias, "gelu")          # act(x @ weight.T + bias)
    torch.ops.torchfuser.pointwise("in v0:float32\\nv1:float32 = silu(v0)\\nout v1", [x])
"""

from __future__ import annotations

import torch

from torchfuser import kinds  # noqa: F401  (the kinds these kernels run as)
from torchfuser.ir.dtypes import TORCH_DTYPES
from torchfuser.ir.kernels import GemmKernel, PointwiseKernel
from torchfuser.ir.program import ProgramBuilder, parse_program
from torchfuser.lowering.from_aten import NotLowerable  # noqa: F401  (re-exported for error handling)

ACTIVATIONS = ("none", "relu", "silu", "gelu", "gelu_tanh", "tanh", "sigmoid")
_kernels: dict = {}


def _linear_kernel(act: str, has_bias: bool) -> GemmKernel:
    key = ("linear", act, has_bias)
    if key not in _kernels:
        builder = ProgramBuilder(["float32", "float32"] if has_bias else ["float32"])
        value = builder.emit("add", (0, 1), "float32") if has_bias else 0
        if act != "none":
            value = builder.emit(act, (value,), "float32")
        _kernels[key] = GemmKernel(builder.build([value]), group=len(_kernels))
    return _kernels[key]


def _check_linear(x, weight, bias, act, trans_b):
    if act not in ACTIVATIONS:
        raise ValueError(f"linear_act: act must be one of {ACTIVATIONS}, got {act!r}")
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        raise TypeError(f"linear_act: float32 tensors only, got {x.dtype} and {weight.dtype}")
    if weight.dim() != 2 or x.dim() < 1:
        raise ValueError("linear_act: weight must be 2-D and x at least 1-D")
    k = weight.shape[1] if trans_b else weight.shape[0]
    if x.shape[-1] != k:
        raise ValueError(f"linear_act: x has {x.shape[-1]} features but weight expects {k}")


def _out_features(weight, trans_b):
    return weight.shape[0] if trans_b else weight.shape[1]


@torch.library.custom_op("torchfuser::linear_act", mutates_args=())
def linear_act(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, act: str,
               trans_b: bool = True) -> torch.Tensor:
    _check_linear(x, weight, bias, act, trans_b)
    b = weight.t() if trans_b else weight
    rows = x.reshape(-1, x.shape[-1])
    extras = [bias] if bias is not None else []
    out = _linear_kernel(act, bias is not None)(rows, b, *extras)
    return out.reshape(*x.shape[:-1], _out_features(weight, trans_b))


@linear_act.register_fake
def _(x, weight, bias, act, trans_b=True):
    _check_linear(x, weight, bias, act, trans_b)
    return x.new_empty((*x.shape[:-1], _out_features(weight, trans_b)))


def _pointwise_kernel(program_text: str, inputs) -> PointwiseKernel:
    program = parse_program(program_text)
    if len(inputs) != program.n_inputs:
        raise ValueError(f"pointwise: the program takes {program.n_inputs} inputs, got {len(inputs)}")
    for i, (t, dtype) in enumerate(zip(inputs, program.input_dtypes)):
        if str(t.dtype).replace("torch.", "") != dtype:
            raise TypeError(f"pointwise: input {i} is {t.dtype}, the program declares {dtype}")
    if len(program.outputs) != 1:
        raise ValueError("pointwise: the manual op returns one tensor; give the program one output")
    shape = torch.broadcast_shapes(*(t.shape for t in inputs))
    key = (program, tuple(shape))
    if key not in _kernels:
        stride = torch.empty(shape, device="meta").stride()
        _kernels[key] = PointwiseKernel(program, shape, stride, group=len(_kernels))
    return _kernels[key]


@torch.library.custom_op("torchfuser::pointwise", mutates_args=())
def pointwise(program: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    return _pointwise_kernel(program, inputs)(*inputs)


@pointwise.register_fake
def _(program, inputs):
    parsed = parse_program(program)
    shape = torch.broadcast_shapes(*(t.shape for t in inputs))
    return inputs[0].new_empty(shape, dtype=TORCH_DTYPES[parsed.output_dtypes[0]])
