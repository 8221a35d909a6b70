"""The ways in: `compile` and `jit` (Dynamo capture) and `compile_fx` (an FX graph you already have)."""

from __future__ import annotations

import copy
import functools

import torch

from torchfuser.backend import compiled_per_signature, lower_and_compile, make_backend
from torchfuser.passes import check_pass_names
from torchfuser.runtime.device import get_device


def _title(model_or_fn) -> str:
    if isinstance(model_or_fn, torch.nn.Module):
        return type(model_or_fn).__name__
    return getattr(model_or_fn, "__name__", type(model_or_fn).__name__)


def compile(model_or_fn, *, disable=(), device=None):
    """A callable like `model_or_fn` whose graphs run as fused OpenCL kernels.

    disable: pass names (see torchfuser.passes.PIPELINE) to switch off; device: "P:D" or a name substring
    (default TORCHFUSER_DEVICE, else the first GPU, else the first OpenCL device).
    """
    if not callable(model_or_fn):
        raise TypeError(f"torchfuser.compile needs an nn.Module or a function, got {type(model_or_fn).__name__}")
    disable = check_pass_names(disable)
    if device is not None:
        get_device(device)  # a bad name fails here, listing the devices there are
    backend = make_backend(disable, device, _title(model_or_fn))
    return torch.compile(model_or_fn, backend=backend, dynamic=False)


def jit(fn=None, *, disable=(), device=None):
    """Decorator form of `compile`: `@torchfuser.jit` or `@torchfuser.jit(disable=[...])`."""
    if fn is None:
        return functools.partial(jit, disable=disable, device=device)
    return compile(fn, disable=disable, device=device)


def compile_fx(gm: torch.fx.GraphModule, example_inputs=None, disable=(), device=None):
    """Compile a torch-level FX GraphModule (e.g. from `trace_module`). Without example inputs the graph
    is compiled at its first call, and again for each new input signature."""
    disable = check_pass_names(disable)
    if example_inputs is not None:
        return _compile_now(gm, list(example_inputs), disable, device)
    return functools.wraps(gm.forward)(compiled_per_signature(lambda args: _compile_now(gm, args, disable, device)))


def _compile_now(gm, example_inputs, disable, device):
    """aot_autograd wants tuple outputs: a graph returning one value is given a 1-tuple, and unwrapped."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    single = not isinstance(output.args[0], (tuple, list))
    if single:
        gm = copy.deepcopy(gm)
        output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        output.args = ((output.args[0],),)
        gm.recompile()
    compiled = lower_and_compile(gm, example_inputs, disable=disable, device=device, title=type(gm).__name__)
    return (lambda *args: compiled(*args)[0]) if single else compiled
