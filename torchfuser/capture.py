"""Capture: FX symbolic trace for modules, and the lowering of a torch-level graph to core ATen.

Lowering goes through aot_autograd (`aot_module_simplified`): it functionalises, lifts parameters to
inputs, decomposes to core ATen, keeps node provenance (stack_trace, nn_module_stack) and, when gradients
are needed, hands us a backward graph that takes the same passes.
"""

from __future__ import annotations

import os
import traceback

import torch
import torch.fx as fx
from torch._decomp import core_aten_decompositions

aten = torch.ops.aten

# Ops we fuse as they are, so they must not be decomposed: silu is one epilogue op, not mul(x, sigmoid(x));
# SDPA is one attention kernel (decomposed, it is bmm, softmax, a masked-row fix-up and bmm).
KEEP = (aten.silu.default, aten.silu_.default, aten.silu.out, aten._scaled_dot_product_flash_attention_for_cpu.default)
DECOMPOSITIONS = {op: fn for op, fn in core_aten_decompositions().items() if op not in KEEP}


class CaptureError(RuntimeError):
    """The model could not be turned into a graph; the message says what and where."""


_LIBRARY_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.abspath(__file__)))


def user_frame(error: BaseException) -> str:
    """'file:line in function: code' of the innermost frame outside torch and torchfuser."""
    frames = traceback.extract_tb(error.__traceback__)
    for frame in reversed(frames):
        if not os.path.abspath(frame.filename).startswith(_LIBRARY_DIRS):
            return f"{frame.filename}:{frame.lineno} in {frame.name}: {(frame.line or '').strip()}"
    return "unknown location"


def trace_module(model) -> fx.GraphModule:
    """FX symbolic trace of an nn.Module or function, with a clear error when it cannot be traced."""
    if not (isinstance(model, torch.nn.Module) or callable(model)):
        raise TypeError(f"trace_module needs an nn.Module or a function, got {type(model).__name__}")
    try:
        return fx.symbolic_trace(model)
    except Exception as error:
        name = type(model).__name__ if isinstance(model, torch.nn.Module) else getattr(model, "__name__", "function")
        raise CaptureError(
            f"cannot capture {name} with FX symbolic tracing: {type(error).__name__}: {error}\n"
            f"  at {user_frame(error)}\n"
            "  (data-dependent control flow cannot be traced symbolically; torchfuser.compile(model) uses "
            "Dynamo, which splits the graph there instead)"
        ) from error
