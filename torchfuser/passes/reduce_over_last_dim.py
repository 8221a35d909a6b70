"""reduce_over_last_dim: a reduction over any dims becomes the same reduction over the last dim of a view.

The reduction kernels (fuse_reductions) reduce rows: the last dim, read through any strides. A reduction over
other dims, several dims or all of them is one of those once the reduced dims are moved last (a permute: a
view, no data moves) and, when there are several, merged into one (a view where their strides allow it, else a
contiguous copy that fuse_pointwise makes a kernel). Global average pooling, a column sum, a batch mean and
a full sum all become row reductions this way.

Rule: `sum.dim_IntList`, `mean.dim`, `amax`, `var.correction` and, as `-amax(-x)`, `amin` over dims D of
x (rank r; D empty or None: every dim; the full forms `sum.default`, `mean.default`, `max.default`,
`min.default` too), unless D is the last dim alone, becomes

    y = permute(x, kept + D) [-> view or clone+view to kept_sizes + [prod(D sizes)]]
    r = op(y, [-1], keepdim=False, ...)                             # the kept dims in order
    [out = unsqueeze(r, d) for d in D]                              # with keepdim

`var_mean` becomes its var and its mean first; `linalg_vector_norm` of order 1, 2 or inf over any dims
becomes sum(abs(x)), sqrt(sum(x * x)) or amax(abs(x)) first, so it is reduced the same way. A 0-d x reduces
as a [1] view of it. Preconditions: a floating x with a static or symbolic shape; a full reduction of more
than FULL_REDUCTION_LIMIT elements stays as it is (a single row runs on one thread, slower than eager's
parallel sum). The rewrite is plain ATen: where no kernel takes it, it still computes what the original did.

    before:  m = mean.dim(x, [2, 3], True)                 # x [N, C, H, W]: global average pooling
    after:   v = view(x, [N, C, -1]); r = mean.dim(v, [-1]); m = unsqueeze(unsqueeze(r, 2), 3)
"""

from __future__ import annotations

import math
import operator
from functools import partial

import torch
import torch.fx as fx

from torchfuser.ir.symbolic import has_symbols
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, count_ops, node_arg

aten = torch.ops.aten
NAME = "reduce_over_last_dim"
FULL_REDUCTION_LIMIT = 1 << 16

# op -> (index of the dims argument or None for the full forms, index of keepdim or None)
REDUCTIONS = {
    aten.sum.dim_IntList: (1, 2), aten.mean.dim: (1, 2), aten.amax.default: (1, 2), aten.amin.default: (1, 2),
    aten.var.correction: (1, None), aten.sum.default: (None, None), aten.mean.default: (None, None),
    aten.max.default: (None, None), aten.min.default: (None, None),
}
_FULL = {aten.sum.default: aten.sum.dim_IntList, aten.mean.default: aten.mean.dim, aten.max.default: aten.amax.default,
         aten.min.default: aten.amin.default}


def handles(node: fx.Node) -> bool:
    return node.target in REDUCTIONS or node.target in (aten.linalg_vector_norm.default, aten.var_mean.correction)


def reduce_over_last_dim(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.linalg_vector_norm.default:
            node = _norm_as_reduction(gm.graph, node) or node
        parts = _split_var_mean(gm.graph, node) if node.target is aten.var_mean.correction else [node]
        rewritten += sum(1 for part in parts if part.target in REDUCTIONS and _rewrite(gm.graph, part))
    if rewritten:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, rewritten > 0, {"reductions": rewritten, "nodes_before": before,
                                          "nodes_after": count_ops(gm)})


def _dims_argument(node: fx.Node):
    """The dims the reduction was given (None for the full forms)."""
    dims_at, _ = REDUCTIONS[node.target]
    return None if dims_at is None else node_arg(node, dims_at, "dim", None)


def _reduced_dims(node: fx.Node, rank: int) -> list[int] | None:
    dims = _dims_argument(node)
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    if not all(isinstance(d, int) for d in dims):
        return None
    return sorted({d % rank for d in dims})


def _rewrite(graph: fx.Graph, node: fx.Node) -> bool:
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, result = node.args[0], tensor_meta(node)
    meta = tensor_meta(x)
    if meta is None or result is None or not meta.dtype.is_floating_point:
        return False
    scalar = meta.dim() == 0  # a 0-d x reduces as the one element of a [1] view (any dim it names is that one)
    rank = max(meta.dim(), 1)
    dims = [0] if scalar else _reduced_dims(node, rank)
    if dims is None or (dims == [rank - 1] and _names_dims(node) and not scalar
                        and node.target not in (aten.amin.default, aten.min.default)):
        return False  # already a row reduction for fuse_reductions
    if len(dims) == rank and (has_symbols(meta.shape) or math.prod(meta.shape) > FULL_REDUCTION_LIMIT):
        return False
    kept = [d for d in range(rank) if d not in dims]
    target = _FULL.get(node.target, node.target)
    negate = target is aten.amin.default  # amin(x) = -amax(-x): the kernels reduce with max
    with graph.inserting_before(node):
        rows = _rows(graph, call(aten.view.default, (x, [1])) if scalar else x, kept, dims)
        if negate:
            rows = call(aten.neg.default, (rows,))
        if target is aten.var.correction:  # its keepdim is keyword-only
            reduced = call(target, (rows, [-1]), {**_other_arguments(node), "keepdim": False})
        else:
            reduced = call(aten.amax.default if negate else target, (rows, [-1], False), _other_arguments(node))
        if negate:
            reduced = call(aten.neg.default, (reduced,))
        out = reduced  # the kept dims in order: the result without keepdim
        if result.dim() == rank:  # keepdim: the reduced dims come back as 1s
            for d in dims:
                out = call(aten.unsqueeze.default, (out, d))
    out.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(out)
    graph.erase_node(node)
    return True


def _names_dims(node: fx.Node) -> bool:
    """The reduction names its dims (an empty list or None means every dim, which fuse_reductions does not
    read as the last one)."""
    dims = _dims_argument(node)
    return isinstance(dims, int) or bool(dims)


def _rows(graph: fx.Graph, x: fx.Node, kept: list[int], dims: list[int]) -> fx.Node:
    """x with the reduced dims last and merged into one: a view where strides allow, else a copy."""
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    meta = tensor_meta(x)
    order = kept + dims
    rows = x if order == list(range(meta.dim())) else call(aten.permute.default, (x, order))
    if len(dims) == 1:
        return rows
    # a symbolic kept size is read from x at run time (a sym_size node); the merged dim is the -1
    sizes = [call(aten.sym_size.int, (x, d)) if has_symbols([meta.shape[d]]) else int(meta.shape[d])
             for d in kept] + [-1]
    if not _mergeable([meta.shape[d] for d in dims], [meta.stride()[d] for d in dims]):
        rows = call(aten.clone.default, (rows,), {"memory_format": torch.contiguous_format})
    return call(aten.view.default, (rows, sizes))


def _mergeable(sizes, strides) -> bool:
    """Dims in this order form one dim of a view: each stride is the next one times the next size (symbolic
    ones are not compared: that would add a guard after Dynamo's)."""
    if has_symbols(list(sizes) + list(strides)):
        return False
    pairs = [(s, st) for s, st in zip(sizes, strides) if s != 1]
    return all(a_st == b_st * b_s for (_, a_st), (b_s, b_st) in zip(pairs, pairs[1:]))


def _split_var_mean(graph: fx.Graph, node: fx.Node) -> list[fx.Node]:
    """var_mean as its two reductions, var and mean, which its getitem users then read (the row-reduction
    kernels compute one result each); [node] where a user is not a getitem."""
    if not all(u.target is operator.getitem for u in node.users):
        return [node]
    x, dims = node.args[0], node_arg(node, 1, "dim", None)
    keepdim = node.kwargs.get("keepdim", False)
    with graph.inserting_before(node):
        var = call_with_value(graph, aten.var.correction, (x, dims), dict(node.kwargs))
        mean = call_with_value(graph, aten.mean.dim, (x, dims if dims is not None else [], keepdim))
    for part in (var, mean):
        part.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    for user in list(node.users):
        user.replace_all_uses_with(var if user.args[1] == 0 else mean)
        graph.erase_node(user)
    graph.erase_node(node)
    return [var, mean]


def _other_arguments(node: fx.Node) -> dict:
    """What the reduction keeps besides its input, dims and keepdim: var's correction, sum's or mean's dtype."""
    return {k: v for k, v in node.kwargs.items() if k not in ("dim", "keepdim")}


def _norm_as_reduction(graph: fx.Graph, node: fx.Node) -> fx.Node | None:
    """vector_norm of order 1, 2 or inf as the reduction it is, leaving the result to _rewrite."""
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, meta = node.args[0], tensor_meta(node.args[0])
    order = node_arg(node, 1, "ord", 2)
    dims, keepdim = node_arg(node, 2, "dim", None), node_arg(node, 3, "keepdim", False)
    if meta is None or not meta.dtype.is_floating_point or node_arg(node, 4, "dtype", None) is not None:
        return None
    if order not in (1, 2, math.inf, float("inf")):
        return None
    dims = list(range(meta.dim())) if dims is None else dims
    with graph.inserting_before(node):
        if order == 2:
            summed = call(aten.sum.dim_IntList, (call(aten.mul.Tensor, (x, x)), dims, keepdim))
            result = call(aten.sqrt.default, (summed,))
            reduction = summed
        else:
            op = aten.sum.dim_IntList if order == 1 else aten.amax.default
            result = reduction = call(op, (call(aten.abs.default, (x,)), dims, keepdim))
    result.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    return reduction
