"""Capture by FX symbolic trace (`trace_module`), with errors that say what and where.

(torchfuser.compile captures with Dynamo instead: frontend/dynamo.py.)
"""

from __future__ import annotations

import os
import traceback

import torch
import torch.fx as fx


class CaptureError(RuntimeError):
    """The model could not be turned into a graph; the message says what and where."""


_LIBRARY_DIRS = (os.path.dirname(torch.__file__), os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
