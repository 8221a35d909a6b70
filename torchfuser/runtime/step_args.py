"""How a plan's steps get their arguments each call (executor.Plan): fetchers that read them from the call's
values, the Tensor methods view steps call, and the views kept from call to call."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch.fx.immutable_collections import immutable_list

from torchfuser.runtime.virtual_views import VirtualView


class ViewCache:
    """The view a step made of a tensor last time: the same tensor object with the same storage gives the same
    view, in any call (a call with new symbolic sizes too: a planned result's shape is static, and a new view
    of a weight each call would defeat the weight transforms' memos). Only views of weights (parameters) and
    of planned results are kept, virtual views (runtime/virtual_views.py) as well as real ones: a kept view
    keeps its base alive, which must never be the user's memory."""

    __slots__ = ("base", "address", "view", "planned")

    def __init__(self, planned: bool):
        self.base = self.address = self.view = None
        self.planned = planned  # the base is a planned result

    def holds(self, base) -> bool:
        """The kept view is this base's: the same object at the same address."""
        return self.base is base and self.address == base.data_ptr()

    def keep(self, base, view) -> None:
        """Keep the view of a weight (or of a virtual view of one) or of a planned result."""
        root = base.root if type(base) is VirtualView else base
        if self.planned or isinstance(root, torch.nn.Parameter):
            self.base, self.address, self.view = base, base.data_ptr(), view


def fetcher(value, index):
    """env -> value with graph nodes replaced by their values; flat argument tuples take a fast path."""
    nested = any(isinstance(x, fx.Node) for v in value if isinstance(v, (tuple, list, dict)) for x in flatten(v))
    if isinstance(value, tuple) and not nested:
        if all(isinstance(v, fx.Node) for v in value):  # the common case: every argument is a node
            slots = [index[v] for v in value]
            if len(slots) > 1:
                return operator.itemgetter(*slots)  # a tuple of them, made in C
            return (lambda env: (env[slots[0]],)) if slots else (lambda env: ())
        slots = [(index[v], None) if isinstance(v, fx.Node) else (None, v) for v in value]
        return lambda env: [env[s] if s is not None else v for s, v in slots]
    return lambda env: fx.node.map_arg(value, lambda n: env[index[n]])


def output_fetcher(value, index):
    """env -> the graph's output structure: a flat tuple or list of nodes and constants as one of the same
    type (what fx.node.map_arg makes of it), anything else (a named tuple, nesting) through the general path."""
    if type(value) in (tuple, immutable_list) and not any(isinstance(v, (tuple, list, dict)) for v in value):
        fetch, kind = fetcher(tuple(value), index), type(value)
        return lambda env: kind(fetch(env))
    fetch = fetcher((value,), index)
    return lambda env: fetch(env)[0]


def flatten(value):
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in flatten(v)]
    if isinstance(value, dict):
        return flatten(list(value.values()))
    return [value]



aten = torch.ops.aten
# View ops whose Tensor method takes the same positional arguments and makes the same view: the method skips
# the OpOverload's Python wrapper and schema-driven argument parsing. That path is short when warm, but the first
# op after a kernel that streamed megabytes through this core's caches runs it from cold caches: its code
# costs there what a decode step's small kernels do.
_VIEW_METHODS = {
    aten.view.default: torch.Tensor.view, aten.permute.default: torch.Tensor.permute, aten.t.default: torch.Tensor.t,
    aten.transpose.int: torch.Tensor.transpose, aten.unsqueeze.default: torch.Tensor.unsqueeze,
    aten.squeeze.dim: torch.Tensor.squeeze, aten.squeeze.dims: torch.Tensor.squeeze,
    aten.squeeze.default: torch.Tensor.squeeze, aten.select.int: torch.Tensor.select,
    aten.split_with_sizes.default: torch.Tensor.split_with_sizes, aten.unbind.int: torch.Tensor.unbind,
    aten.unflatten.int: torch.Tensor.unflatten, aten.as_strided.default: torch.Tensor.as_strided,
}


def view_function(node: fx.Node):
    """What a view step calls: the Tensor method for node's op where it is the same call, else the op."""
    method = _VIEW_METHODS.get(node.target)
    return method if method is not None and not node.kwargs else node.target
