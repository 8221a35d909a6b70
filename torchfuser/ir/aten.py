"""Facts about ATen ops that every layer reads: which ops only make views, which only reshape."""

from __future__ import annotations

import torch

aten = torch.ops.aten

# Ops that only make a new view of existing data: they read nothing, so they need no sync.
VIEW_OPS = frozenset({
    aten.view.default, aten._unsafe_view.default, aten.t.default, aten.permute.default,
    aten.transpose.int, aten.expand.default, aten.slice.Tensor, aten.select.int, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.as_strided.default, aten.alias.default,
    aten.detach.default, aten.unflatten.int, aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int,
})
RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
# node.meta key: the placeholder is a parameter of the model (lowering marks it; a weight changes between
# calls only by an optimiser step or an in-place update, which bumps its version)
WEIGHT = "torchfuser_weight"
INPUT_NAME = "torchfuser_input"  # node.meta key of a graph input: the user's name for it (frontend/input_names.py)
