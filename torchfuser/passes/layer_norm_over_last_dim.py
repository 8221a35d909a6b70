"""layer_norm_over_last_dim: a layer norm over several trailing dims becomes one over the last dim of a view.

The row kernels (fuse_reductions) normalise the last dim. A layer norm over the trailing dims S = [d1 .. dk]
(k > 1: `nn.LayerNorm([C, H, W])`) normalises each run of prod(S) elements, which is the last dim of x viewed
[*outer, prod(S)] when those dims lie contiguous; the weight and bias are the same views of theirs.

Rule: `native_layer_norm(x, S, w, b, eps)` with len(S) > 1, a floating x of static shape whose trailing dims
view as one, and w, b (where given) contiguous, becomes

    r = native_layer_norm(view(x, [*outer, L]), [L], view(w, [L]), view(b, [L]), eps)     # L = prod(S)
    out = view(getitem(r, 0), x.shape)
    mean, rstd = view(getitem(r, 1), [*outer, 1, ..., 1]), view(getitem(r, 2), [*outer, 1, ..., 1])

Preconditions: nothing reads the op but getitems; x's trailing dims viewable as one run (any other layout stays
as it is, with fuse_reductions' reason).

    before:  r = native_layer_norm(x, [4, 5], w, b, 1e-05); y = getitem(r, 0)        # x [2, 3, 4, 5]
    after:   r = native_layer_norm(view(x, [2, 3, 20]), [20], view(w, [20]), view(b, [20]), 1e-05)
             y = view(getitem(r, 0), [2, 3, 4, 5])
"""

from __future__ import annotations

import math
import operator
from functools import partial

import torch
import torch.fx as fx

from torchfuser.ir.symbolic import has_symbols
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, replace_getitems, rewrite_each

aten = torch.ops.aten
NAME = "layer_norm_over_last_dim"
LAYER_NORM = aten.native_layer_norm.default


def handles(node: fx.Node) -> bool:
    return node.target is LAYER_NORM


def layer_norm_over_last_dim(gm: fx.GraphModule) -> PassResult:
    return rewrite_each(gm, LAYER_NORM, "layer_norms", _rewrite)


def _applies(node: fx.Node) -> bool:
    x, shape, weight, bias = node.args[:4]
    meta = tensor_meta(x)
    if (meta is None or not meta.dtype.is_floating_point or len(shape) < 2 or has_symbols(list(meta.shape))
            or not all(u.target is operator.getitem for u in node.users)):
        return False
    if any(p is not None and not tensor_meta(p).is_contiguous() for p in (weight, bias)):
        return False
    k = len(shape)  # the trailing dims view as one run where each steps over the next's whole extent
    sizes, strides = list(meta.shape[-k:]), list(meta.stride()[-k:])
    return all(sizes[i] == 1 or strides[i] == strides[i + 1] * sizes[i + 1] for i in range(k - 1))


def _rewrite(graph: fx.Graph, node: fx.Node) -> bool:
    if not _applies(node):
        return False
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, shape, weight, bias, eps = node.args
    full = list(tensor_meta(x).shape)
    outer, length = full[:-len(shape)], math.prod(shape)
    with graph.inserting_before(node):
        row = [call(aten.view.default, (p, [length])) if p is not None else None for p in (weight, bias)]
        normed = call(LAYER_NORM, (call(aten.view.default, (x, [*outer, length])), [length], *row, eps))
        parts = [call(operator.getitem, (normed, i)) for i in range(3)]
        results = [call(aten.view.default, (parts[0], full))]
        results += [call(aten.view.default, (p, [*outer] + [1] * len(shape))) for p in parts[1:]]
    replace_getitems(graph, node, results)
    return True
