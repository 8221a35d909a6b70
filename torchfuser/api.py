"""The ways in: `compile` and `jit` (Dynamo capture) and `compile_fx` (an FX graph you already have).

All take the options of options.py: disable, device, autotune (and `mode=` as torch.compile spells it).
"""

from __future__ import annotations

import copy
import functools

import torch

from torchfuser.frontend.dynamo import make_backend
from torchfuser.frontend.lowering import compiled_per_signature, lower_and_compile
from torchfuser.frontend.replay import with_replay
from torchfuser.options import Options


def _title(model_or_fn) -> str:
    if isinstance(model_or_fn, torch.nn.Module):
        return type(model_or_fn).__name__
    return getattr(model_or_fn, "__name__", type(model_or_fn).__name__)


def compile(model_or_fn, *, disable=(), device=None, autotune=None, mode=None):
    """A callable like `model_or_fn` whose graphs run as fused OpenCL kernels. Steady calls replay Dynamo's
    translation of the frame without its frame evaluation (frontend/replay.py).

    disable: pass names (see torchfuser.passes.PIPELINE) to switch off; device: "P:D" or a name substring
    (default TORCHFUSER_DEVICE, else the first GPU, else the first OpenCL device); autotune: "off",
    "default" or "max" (True / False too; default TORCHFUSER_AUTOTUNE); mode: as torch.compile's
    ("max-autotune" searches every GEMM).
    """
    if not callable(model_or_fn):
        raise TypeError(f"torchfuser.compile needs an nn.Module or a function, got {type(model_or_fn).__name__}")
    options = Options.make(mode, disable=disable, device=device, autotune=autotune)
    backend = make_backend(options, _title(model_or_fn))
    return with_replay(torch.compile(model_or_fn, backend=backend, dynamic=False), backend)


def jit(fn=None, **options):
    """Decorator form of `compile`: `@torchfuser.jit` or `@torchfuser.jit(disable=[...])`."""
    if fn is None:
        return functools.partial(jit, **options)
    return compile(fn, **options)


def compile_fx(gm: torch.fx.GraphModule, example_inputs=None, disable=(), device=None, autotune=None, mode=None):
    """Compile a torch-level FX GraphModule (e.g. from `trace_module`). Without example inputs the graph
    is compiled at its first call, and again for each new input signature."""
    options = Options.make(mode, disable=disable, device=device, autotune=autotune)
    if example_inputs is not None:
        return _compile_now(gm, list(example_inputs), options)
    return functools.wraps(gm.forward)(compiled_per_signature(lambda args: _compile_now(gm, args, options)))


def _compile_now(gm, example_inputs, options: Options):
    """aot_autograd wants tuple outputs: a graph returning one value is given a 1-tuple, and unwrapped."""
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    single = not isinstance(output.args[0], (tuple, list))
    if single:
        gm = copy.deepcopy(gm)
        output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
        output.args = ((output.args[0],),)
        gm.recompile()
    compiled = lower_and_compile(gm, example_inputs, options, title=type(gm).__name__)
    return (lambda *args: compiled(*args)[0]) if single else compiled
