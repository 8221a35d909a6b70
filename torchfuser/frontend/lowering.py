"""The lowering of a torch-level graph to core ATen, and compiling once per input signature.

Lowering goes through aot_autograd (`aot_module_simplified`): it functionalises, lifts parameters to inputs,
decomposes to core ATen, keeps node provenance (stack_trace, nn_module_stack) and, when gradients are
needed, hands over a backward graph that takes the same passes. Ops a pass wants whole (passes.kept_ops:
silu, SDPA) are not decomposed.
"""

from __future__ import annotations

import time

import torch
from torch._decomp import core_aten_decompositions
from torch._functorch.aot_autograd import aot_module_simplified

from torchfuser.driver import compile_aten_graph
from torchfuser.options import Options
from torchfuser.passes import kept_ops
from torchfuser.report.snapshot import snapshot_graph


def decompositions() -> dict:
    """Core ATen's decompositions, less the ops some pass fuses whole."""
    keep = kept_ops()
    return {op: fn for op, fn in core_aten_decompositions().items() if op not in keep}


def lower_and_compile(gm, example_inputs, options: Options, *, title="graph"):
    """torch-level gm → aot_autograd → compiled forward (and backward); returns the aot callable."""
    started = time.perf_counter()
    captured = snapshot_graph(gm)

    def compiler_for(kind):
        def compile_graph(aten_gm, aten_inputs):
            compiled = compile_aten_graph(aten_gm, options, title=f"{title} {kind}", captured=captured,
                                          started=started)
            run = compiled.plan.run

            def boxed(args):  # aot_autograd's boxed convention (one list in) is what Plan.run takes
                return run(args)

            boxed._boxed_call = True
            boxed.compiled = compiled
            return boxed

        return compile_graph

    return aot_module_simplified(gm, list(example_inputs), fw_compiler=compiler_for("forward"),
                                 bw_compiler=compiler_for("backward"), decompositions=decompositions())


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
