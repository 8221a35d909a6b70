"""batch_norm_as_affine: inference batch norm becomes the per-channel affine it is, as elementwise ops.

With running statistics, batch norm is y = x * scale + shift per channel, scale = weight / sqrt(var + eps)
and shift = bias - mean * scale (eager's CPU kernel computes it so). As elementwise ATen ops on [C] values
viewed to broadcast along the channel dim (dim 1), fuse_pointwise joins it with what surrounds it (the
activation after it, a residual add) instead of leaving `_native_batch_norm_legit_no_training` in PyTorch.

Rule: `getitem(_native_batch_norm_legit_no_training(x, w, b, mean, var, momentum, eps), 0)` on a floating
x [N, C] (BatchNorm1d after a Linear: the channel is the last dim, a vectorised row broadcast) with [C]
statistics becomes the affine above (w or b None: 1 or 0); the op's other results
(empty in inference) must be unused. Preconditions: none beyond the graph's own shapes.

    before:  bn = _native_batch_norm_legit_no_training(x, w, b, mean, var, 0.1, 1e-5); y = getitem(bn, 0)
    after:   scale = mul(rsqrt(add(var, 1e-5)), w); shift = sub(b, mul(mean, scale))
             y = add(mul(x, view(scale, [1, C])), view(shift, [1, C]))          # x [N, C]
"""

from __future__ import annotations

import operator
from functools import partial

import torch
import torch.fx as fx

from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, record_unfused, rewrite_each

aten = torch.ops.aten
NAME = "batch_norm_as_affine"
BATCH_NORM = aten._native_batch_norm_legit_no_training.default
# Over spatial dims the per-channel values broadcast along a middle dim: the pointwise kernels read them
# through strides, slower than PyTorch's own batch norm (measured on ResNet-18), so those stay in PyTorch.
SPATIAL_REASON = ("batch norm over spatial dims: a per-channel affine along a middle dim is slower in the "
                  "pointwise kernels (strided broadcast) than PyTorch's batch norm")


def handles(node: fx.Node) -> bool:
    return node.target is BATCH_NORM


def batch_norm_as_affine(gm: fx.GraphModule) -> PassResult:
    return rewrite_each(gm, BATCH_NORM, "batch_norms", _rewrite)


def _only_result(node: fx.Node) -> fx.Node | None:
    """The getitem of the normalised output, when nothing reads the op's other results."""
    users = list(node.users)
    if len(users) != 1 or users[0].target is not operator.getitem or users[0].args[1] != 0:
        return None
    return users[0]


def _rewrite(graph: fx.Graph, node: fx.Node) -> bool:
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, weight, bias, mean, var, _momentum, eps = node.args
    meta = tensor_meta(x)
    if meta is not None and meta.dim() > 2:
        record_unfused(node, NAME, SPATIAL_REASON)
        return False
    result = _only_result(node)
    if result is None or meta is None or meta.dim() < 2 or not meta.dtype.is_floating_point:
        return False
    if any(tensor_meta(t) is None or tensor_meta(t).dim() != 1 for t in (mean, var)):
        return False
    shape = [1, -1] + [1] * (meta.dim() - 2)  # a [C] value along the channel dim
    with graph.inserting_before(result):
        scale = call(aten.rsqrt.default, (call(aten.add.Tensor, (var, float(eps))),))
        if weight is not None:
            scale = call(aten.mul.Tensor, (scale, weight))
        shift = call(aten.neg.default, (call(aten.mul.Tensor, (mean, scale)),))
        if bias is not None:
            shift = call(aten.add.Tensor, (shift, bias))
        scaled = call(aten.mul.Tensor, (x, call(aten.view.default, (scale, shape))))
        out = call(aten.add.Tensor, (scaled, call(aten.view.default, (shift, shape))))
    out.meta.update({k: v for k, v in result.meta.items() if k != "val"})
    result.replace_all_uses_with(out)
    graph.erase_node(result)
    graph.erase_node(node)
    return True
