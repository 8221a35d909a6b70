"""The "torchfuser" Dynamo backend, also declared as a `torch_dynamo_backends` entry point.

Dynamo hands us a torch-level FX graph; aot_autograd lowers it to core ATen (forward, and backward when
gradients are needed) and each aten graph is compiled by `compile_aten_graph`.
"""

from __future__ import annotations

import functools
import itertools
import time

import torch

from torchfuser.capture import DECOMPOSITIONS
from torchfuser.compiler import compile_aten_graph
from torchfuser.graph_snapshot import snapshot_graph
from torchfuser.passes import check_pass_names

_graph_numbers = itertools.count()


def lower_and_compile(gm, example_inputs, *, disable=(), device=None, title="graph"):
    """torch-level gm → aot_autograd → compiled forward (and backward); returns the aot callable."""
    from torch._functorch.aot_autograd import aot_module_simplified

    started = time.perf_counter()
    captured = snapshot_graph(gm)

    def compiler_for(kind):
        def compile_graph(aten_gm, aten_inputs):
            compiled = compile_aten_graph(aten_gm, disable=disable, device=device, title=f"{title} {kind}",
                                          captured=captured, started=started)
            run = compiled.plan.run

            def boxed(args):  # aot_autograd's boxed convention (one list in) is what Plan.run takes
                return run(args)

            boxed._boxed_call = True
            boxed.compiled = compiled
            return boxed

        return compile_graph

    return aot_module_simplified(gm, list(example_inputs), fw_compiler=compiler_for("forward"),
                                 bw_compiler=compiler_for("backward"), decompositions=DECOMPOSITIONS)


def input_signature(args) -> tuple:
    """What a shape-specialised compile depends on: each tensor's shape, dtype and grad flag, other values."""
    return tuple((tuple(a.shape), a.dtype, a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args)


def compiled_per_signature(compile_for):
    """A callable that compiles `compile_for(args)` at the first call with each new input signature."""
    compiled: dict = {}

    def run(*args):
        key = input_signature(args)
        if key not in compiled:
            compiled[key] = compile_for(list(args))
        return compiled[key](*args)

    return run


def _symbolic_tensors(gm) -> list[int]:
    """Positions of the graph inputs whose sizes are symbolic (Dynamo's example tensors show one concrete
    hint; the placeholders' fake values show the symbols)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    values = [n.meta.get("example_value") for n in placeholders]
    return [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)
            and any(isinstance(d, torch.SymInt) for d in v.shape)]


@functools.lru_cache(maxsize=None)
def _backend(disable: tuple, device, title):
    def torchfuser(gm, example_inputs):
        number = next(_graph_numbers)
        symbolic = _symbolic_tensors(gm)  # Dynamo makes sizes symbolic after a shape change (dynamic=None)
        if symbolic or any(isinstance(a, torch.SymInt) for a in example_inputs):
            # kernels, GEMM tiles and memory plans are specialised to shapes: compile per concrete signature
            def compile_for(args):
                shapes = ", ".join("x".join(map(str, args[i].shape)) for i in symbolic)
                return lower_and_compile(gm, args, disable=disable, device=device,
                                         title=f"{title or 'graph'} #{number} [{shapes}]")

            return compiled_per_signature(compile_for)
        return lower_and_compile(gm, example_inputs, disable=disable, device=device, title=f"{title or 'graph'} #{number}")

    return torchfuser


def make_backend(disable=(), device=None, title: str | None = None):
    """A Dynamo backend with these options; `torchfuser_backend` is the default one. The same options give
    the same backend object, so compiling one function again reuses Dynamo's cache entry instead of
    piling up new ones until Dynamo's recompile limit."""
    return _backend(tuple(check_pass_names(disable)), device, title)



torchfuser_backend = make_backend()


def register() -> None:
    """Make torch.compile(backend="torchfuser") work (the entry point does it too, without any import)."""
    from importlib.metadata import entry_points

    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend

    # An installed package is found through its entry point; registering as well would be a duplicate.
    if "torchfuser" in entry_points(group="torch_dynamo_backends").names:
        return
    if "torchfuser" not in _COMPILER_FNS:
        register_backend(torchfuser_backend, name="torchfuser")
