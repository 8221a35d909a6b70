"""The "torchfuser" Dynamo backend, also declared as a `torch_dynamo_backends` entry point.

Dynamo hands over a torch-level FX graph; aot_autograd lowers it to core ATen (forward, and backward when
gradients are needed) and each aten graph is compiled by the driver. `torch.compile(m, backend="torchfuser",
options={...})` and `mode=` take the same options as `torchfuser.compile` (options.py).
"""

from __future__ import annotations

import functools
import itertools
import warnings

import torch

from torchfuser.frontend.lowering import compiled_per_signature, lower_and_compile, needs_autograd, symbolic_inputs
from torchfuser.ir.symbolic import is_symbolic
from torchfuser.options import Options
from torchfuser.runtime.executor import UnboundSize

_graph_numbers = itertools.count()


def _symbolic_tensors(gm) -> list[int]:
    """Positions of the graph inputs whose sizes are symbolic (Dynamo's example tensors show one concrete
    hint; the placeholders' fake values show the symbols)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = [n.meta.get("example_value") for n in placeholders]
    return [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)
            and any(isinstance(d, torch.SymInt) for d in v.shape)]


def _recompile_reason() -> str | None:
    """Why Dynamo is compiling this frame again (its first failed guard), from the metrics it keeps for the
    compile in progress; None for a first compile, or where this torch keeps no such record."""
    metrics = getattr(torch._dynamo.utils.get_metrics_context(), "_metrics", None)
    return metrics.get("recompile_reason") if isinstance(metrics, dict) else None


@functools.lru_cache(maxsize=None)
def _backend(options: Options, title: str | None):
    def torchfuser(gm, example_inputs):
        number, reason = next(_graph_numbers), _recompile_reason()
        symbolic = _symbolic_tensors(gm)  # Dynamo makes sizes symbolic after a shape change (dynamic=None)
        if symbolic or any(isinstance(a, torch.SymInt) for a in example_inputs):
            if not needs_autograd(example_inputs):  # one plan for every size: sizes are bound per call
                try:
                    fakes = symbolic_inputs(example_inputs)
                    symbols = sorted({str(d) for f in fakes for d in getattr(f, "shape", [f]) if is_symbolic(d)})
                    return lower_and_compile(gm, example_inputs, options, fakes=fakes, recompile_reason=reason,
                                             title=f"{title or 'graph'} #{number} [dynamic {', '.join(symbols)}]")
                except UnboundSize as why:
                    warnings.warn(f"torchfuser: {why}", RuntimeWarning)

            # training graphs (aot_autograd's symbolic wrappers are not ours yet): a plan per concrete signature
            def compile_for(args):
                shapes = ", ".join("x".join(map(str, args[i].shape)) for i in symbolic)
                return lower_and_compile(gm, args, options, title=f"{title or 'graph'} #{number} [{shapes}]",
                                         recompile_reason=reason)

            return compiled_per_signature(compile_for)
        return lower_and_compile(gm, example_inputs, options, title=f"{title or 'graph'} #{number}",
                                 recompile_reason=reason)

    return torchfuser


def make_backend(options: Options = Options(), title: str | None = None):
    """A Dynamo backend with these options. The same options give the same backend object, so compiling one
    function again reuses Dynamo's cache entry instead of piling up new ones until Dynamo's recompile limit."""
    return _backend(options, title)


def torchfuser_backend(gm, example_inputs, *, mode: str | None = None, options: dict | None = None):
    """The backend `torch.compile(backend="torchfuser")` finds; torch.compile passes it `mode=` and `options=`."""
    return make_backend(Options.make(mode, **(options or {})))(gm, example_inputs)


def register() -> None:
    """Make torch.compile(backend="torchfuser") work (the entry point does it too, without any import)."""
    from importlib.metadata import entry_points

    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    # An installed package is found through its entry point; registering as well would be a duplicate.
    if "torchfuser" in entry_points(group="torch_dynamo_backends").names:
        return
    if "torchfuser" not in _COMPILER_FNS:
        register_backend(torchfuser_backend, name="torchfuser")
