"""PyTorch ops a steady tape (steady_tape.py) runs between its launches: ops that write a graph input in place
(a static KV cache's `index_put_`, a counter's `copy_`), whose other operands stay where they are between calls;
and the host check of indices a kernel writes (an embedding's positions, computed from a KV cache's length).

A replay runs such an op on this call's input (or the same view of it) and on the very tensors the recorded call
passed otherwise: planned results (the same blocks every call), weights, constants. An op that reads a fresh
output (another block each call) or makes a new tensor is not taped: the plan walks its steps instead.
"""

from __future__ import annotations

import torch

from torchfuser.runtime.memory import storage_span

PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)  # these types exactly: no tensor subclass


def writes_input_in_place(target) -> bool:
    """target is an ATen op that writes its first argument and returns it (copy_, index_put_)."""
    schema = getattr(target, "_schema", None)
    if schema is None or not schema.arguments or len(schema.returns) != 1:
        return False
    written, returned = schema.arguments[0].alias_info, schema.returns[0].alias_info
    return written is not None and written.is_write and returned is not None \
        and returned.before_set == written.before_set


class GraphInput:
    """Stands for graph input `index` (or the view of it with this shape, stride and offset) in a HostOp's args."""

    __slots__ = ("index", "view")

    def __init__(self, index: int, view: tuple | None):
        self.index, self.view = index, view

    def of(self, args):
        a = args[self.index]
        return a if self.view is None else a.as_strided(*self.view)


class HostOp:
    """One recorded in-place op, run again on a call's inputs: `op(args)`."""

    __slots__ = ("target", "template", "kwargs")

    def __init__(self, target, template: list, kwargs: dict):
        self.target, self.template, self.kwargs = target, template, kwargs

    def __call__(self, args) -> None:
        self.target(*[_resolved(a, args) for a in self.template], **self.kwargs)


def host_op(target, given: tuple, kwargs: dict, inputs, input_of: dict, fresh_of: dict) -> HostOp | str:
    """The HostOp repeating `target(*given, **kwargs)` of a recorded call, or why it cannot be repeated.
    inputs: the call's graph inputs; input_of / fresh_of: storage address -> graph input / fresh output there."""
    why = []
    name = getattr(target, "__name__", str(target))
    made = [_template(a, inputs, input_of, fresh_of, why) for a in given]
    if kwargs and any(isinstance(v, torch.Tensor) for v in kwargs.values()):
        why.append("a tensor passed by keyword")
    if why:
        return f"{name} runs in PyTorch ({why[0]})"
    if not made or not isinstance(made[0], GraphInput):
        return f"{name} runs in PyTorch and writes a tensor that is not a graph input"
    return HostOp(target, made, dict(kwargs))


def host_check(launch, label: str, given: list, inputs, input_of: dict, fresh_of: dict) -> HostOp | str:
    """A HostOp checking the indices of a recorded launch that checks them on the host (an embedding's:
    Launch.prepare_checks_only), read from this call's inputs or where a kernel writes them (then run at the
    launch's place among the tape's launches, once the kernels before it are done). Or why it cannot be repeated."""
    why = []
    checked = {index for index, _ in launch.checks}
    made = [_template(a, inputs, input_of, fresh_of, why) if i in checked else None for i, a in enumerate(given)]
    if why:
        return f"{label} checks indices that are not a graph input ({why[0]})"
    return HostOp(lambda *tensors: launch.prepare(list(tensors)), made, {})


def _template(a, inputs, input_of: dict, fresh_of: dict, why: list):
    """What a HostOp keeps for operand `a` of the recorded call: a graph input stands as GraphInput, any other
    tensor as itself (the same every call); `why` gets the reason where none of these will do."""
    if isinstance(a, (list, tuple)):
        return type(a)(_template(b, inputs, input_of, fresh_of, why) for b in a)
    if a is None or isinstance(a, (bool, int, float)):
        return a
    if type(a) not in PLAIN_TENSORS:
        why.append(f"an operand of type {type(a).__name__}")
        return None
    address = storage_span(a)[0]
    if address in fresh_of:
        why.append("an operand is a fresh output (another block each call)")
    j = input_of.get(address)
    if j is None:
        return a  # a planned result, a weight, a constant: the same tensor every call
    return GraphInput(j, None if a is inputs[j] else (tuple(a.shape), a.stride(), a.storage_offset()))


def _resolved(a, args):
    if type(a) is GraphInput:
        return a.of(args)
    if isinstance(a, (list, tuple)):
        return type(a)(_resolved(b, args) for b in a)
    return a
