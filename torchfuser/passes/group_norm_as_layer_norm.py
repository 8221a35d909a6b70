"""group_norm_as_layer_norm: group norm becomes a layer norm over each group's row, then its per-channel affine.

Group norm normalises x [N, C, *] over each group of C / G channels and all their positions: with x viewed
as [N, G, (C / G) * prod(*)] that is a layer norm over the last dim, without weight or bias, whose mean and
rstd are group norm's own ([N, G]). fuse_reductions makes the layer norm one row kernel; the per-channel
weight and bias are elementwise ops on the result (fuse_pointwise), as eager's formulation has them.

Rule: `native_group_norm(x, w, b, N, C, HxW, G, eps)` with a float32, contiguous x of static shape becomes

    r = native_layer_norm(view(x, [N, G, -1]), [L], None, None, eps)
    out = view(getitem(r, 0), x.shape) [* view(w, [1, C, 1, ...])] [+ view(b, [1, C, 1, ...])]
    mean, rstd = view(getitem(r, 1), [N, G]), view(getitem(r, 2), [N, G])

Preconditions: nothing reads the op but getitems. The view needs x contiguous (any other layout stays as
it is).

Opt-in (`register()` puts it in PIPELINE before batch_norm_as_affine): a separate layer-norm kernel and
per-channel affine kernel (two passes over the data) still leave a group norm slower than eager's (figures
in the notes).

    before:  g = native_group_norm(x, w, b, 2, 8, 9, 4, 1e-05); y = getitem(g, 0)        # x [2, 8, 3, 3]
    after:   r = native_layer_norm(view(x, [2, 4, -1]), [18], None, None, 1e-05)
             y = add(mul(view(getitem(r, 0), [2, 8, 3, 3]), view(w, [1, 8, 1, 1])), view(b, [1, 8, 1, 1]))
"""

from __future__ import annotations

import operator
from functools import partial

import torch
import torch.fx as fx

from torchfuser.ir.symbolic import has_symbols
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, replace_getitems, rewrite_each
from torchfuser.passes.pipeline import register_pass

aten = torch.ops.aten
NAME = "group_norm_as_layer_norm"
GROUP_NORM = aten.native_group_norm.default


def register() -> None:
    """Run group norms as layer-norm rows from now on (unregister_pass(NAME) undoes it)."""
    register_pass(NAME, group_norm_as_layer_norm, after="pool_as_windows", handles=handles)


def handles(node: fx.Node) -> bool:
    return node.target is GROUP_NORM


def group_norm_as_layer_norm(gm: fx.GraphModule) -> PassResult:
    return rewrite_each(gm, GROUP_NORM, "group_norms", _rewrite)


def _applies(node: fx.Node) -> bool:
    meta = tensor_meta(node.args[0])
    return (meta is not None and meta.dtype == torch.float32 and meta.dim() >= 2 and meta.numel() > 0
            and meta.is_contiguous() and not has_symbols(list(meta.shape))
            and all(u.target is operator.getitem for u in node.users))


def _rewrite(graph: fx.Graph, node: fx.Node) -> bool:
    if not _applies(node):
        return False
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, weight, bias, n, c, _positions, groups, eps = node.args
    shape = list(tensor_meta(x).shape)
    per_channel = [1, c] + [1] * (len(shape) - 2)
    with graph.inserting_before(node):
        rows = call(aten.view.default, (x, [n, groups, -1]))
        normed = call(aten.native_layer_norm.default, (rows, [tensor_meta(rows).shape[-1]], None, None, eps))
        parts = [call(operator.getitem, (normed, i)) for i in range(3)]
        out = call(aten.view.default, (parts[0], shape))
        if weight is not None:
            out = call(aten.mul.Tensor, (out, call(aten.view.default, (weight, per_channel))))
        if bias is not None:
            out = call(aten.add.Tensor, (out, call(aten.view.default, (bias, per_channel))))
        results = [out] + [call(aten.view.default, (p, [n, groups])) for p in parts[1:]]
    replace_getitems(graph, node, results)
    return True
