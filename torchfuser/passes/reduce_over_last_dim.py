"""reduce_over_last_dim: a reduction over any dims becomes the same reduction over the last dim of a view.

The reduction kernels (fuse_reductions) reduce rows: the last dim, read through any strides. A reduction over
other dims, several dims or all of them is one of those once the reduced dims are moved last (a permute: a
view, no data moves) and, when there are several, merged into one (a view where their strides allow it, else a
contiguous copy that fuse_pointwise makes a kernel). Global average pooling, a column sum, a batch mean and
a full sum all become row reductions this way.

Rule: `sum.dim_IntList`, `mean.dim`, `amax`, `amin`, `var.correction`, `prod.dim_int`, `argmax` and
`argmin` over dims D of x (rank r; D empty or None: every dim, where argmax's index is into the flattened x;
the full forms `sum.default`, `mean.default`, `max.default`, `min.default`, `prod.default` too), unless D
is the last dim alone, becomes

    y = permute(x, kept + D) [-> view or clone+view to kept_sizes + [prod(D sizes)]]
    r = op(y, [-1] (or -1), keepdim=False, ...)                     # the kept dims in order
    [out = unsqueeze(r, d) for d in D]                              # with keepdim

`var_mean` becomes its var and its mean first, `max.dim` / `min.dim` their amax / amin and argmax / argmin
(two row reductions), `any` / `all` the amax / amin of (x != 0) as 0.0 / 1.0; `linalg_vector_norm` over any dims becomes
sqrt(sum(x * x)), sum(abs(x)), amax / amin(abs(x)) (orders +-inf), the count of nonzeros (order 0) or
sum(abs(x) ** p) ** (1 / p) first, so it is reduced the same way. A 0-d x reduces
as a [1] view of it. Preconditions: a floating x (or, for a sum into int64, count_nonzero's, bools or
integers) with a static or symbolic shape; a full reduction of more
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
from torchfuser.lowering.from_aten import node_arg, tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, count_ops, replace_getitems, rewrites_done

aten = torch.ops.aten
NAME = "reduce_over_last_dim"
FULL_REDUCTION_LIMIT = 1 << 16

# op -> (index of the dims argument or None for the full forms, index of keepdim or None)
REDUCTIONS = {
    aten.sum.dim_IntList: (1, 2), aten.mean.dim: (1, 2), aten.amax.default: (1, 2), aten.amin.default: (1, 2),
    aten.prod.dim_int: (1, 2), aten.argmax.default: (1, 2), aten.argmin.default: (1, 2),
    aten.var.correction: (1, None), aten.sum.default: (None, None), aten.mean.default: (None, None),
    aten.max.default: (None, None), aten.min.default: (None, None), aten.prod.default: (None, None),
}
_FULL = {aten.sum.default: aten.sum.dim_IntList, aten.mean.default: aten.mean.dim, aten.max.default: aten.amax.default,
         aten.min.default: aten.amin.default, aten.prod.default: aten.prod.dim_int}
_ONE_DIM = (aten.prod.dim_int, aten.argmax.default, aten.argmin.default)  # they take an int dim, not a list
# max.dim / min.dim give (values, indices): the extreme and its first index, two reductions
_VALUES_AND_INDICES = {aten.max.dim: (aten.amax.default, aten.argmax.default),
                       aten.min.dim: (aten.amin.default, aten.argmin.default)}


# any / all: whether some / every element is nonzero, as the max / min of (x != 0) in 0.0 and 1.0
_TRUTH_REDUCTIONS = {aten.any.default: aten.amax.default, aten.any.dim: aten.amax.default,
                     aten.any.dims: aten.amax.default, aten.all.default: aten.amin.default,
                     aten.all.dim: aten.amin.default, aten.all.dims: aten.amin.default}


def handles(node: fx.Node) -> bool:
    return node.target in REDUCTIONS or node.target in (
        aten.linalg_vector_norm.default, aten.var_mean.correction, *_VALUES_AND_INDICES, *_TRUTH_REDUCTIONS)


def reduce_over_last_dim(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.linalg_vector_norm.default:
            node = _norm_as_reduction(gm.graph, node) or node
        elif node.target in _TRUTH_REDUCTIONS:
            node = _truth_as_extreme(gm.graph, node) or node
        if node.target is aten.var_mean.correction:
            parts = _split_var_mean(gm.graph, node)
        elif node.target in _VALUES_AND_INDICES:
            parts = _split_values_and_indices(gm.graph, node)
        else:
            parts = [node]
        rewritten += sum(1 for part in parts if part.target in REDUCTIONS and _rewrite(gm.graph, part))
    return rewrites_done(gm, before, "reductions", rewritten)


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
    counts = node.target in (aten.sum.dim_IntList, aten.sum.default) and result is not None and (
        result.dtype == torch.int64)  # count_nonzero's sum of bools
    if meta is None or result is None or not (meta.dtype.is_floating_point or counts):
        return False
    scalar = meta.dim() == 0  # a 0-d x reduces as the one element of a [1] view (any dim it names is that one)
    rank = max(meta.dim(), 1)
    dims = [0] if scalar else _reduced_dims(node, rank)
    if dims is None or (dims == [rank - 1] and _names_dims(node) and not scalar):
        return False  # already a row reduction for fuse_reductions
    if len(dims) == rank and (has_symbols(meta.shape) or math.prod(meta.shape) > FULL_REDUCTION_LIMIT):
        return False
    kept = [d for d in range(rank) if d not in dims]
    target = _FULL.get(node.target, node.target)
    with graph.inserting_before(node):
        rows = _rows(graph, call(aten.view.default, (x, [1])) if scalar else x, kept, dims)
        if target is aten.var.correction:  # its keepdim is keyword-only
            reduced = call(target, (rows, [-1]), {**_other_arguments(node), "keepdim": False})
        else:
            last = -1 if target in _ONE_DIM else [-1]
            reduced = call(target, (rows, last, False), _other_arguments(node))
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
    replace_getitems(graph, node, [var, mean])
    return [var, mean]


def _split_values_and_indices(graph: fx.Graph, node: fx.Node) -> list[fx.Node]:
    """max.dim / min.dim as amax / amin and argmax / argmin over the same dim, which its getitem users then
    read; [node] where a user is not a getitem."""
    if not all(u.target is operator.getitem for u in node.users):
        return [node]
    x, dim, keepdim = node.args[0], node.args[1], node_arg(node, 2, "keepdim", False)
    values_op, indices_op = _VALUES_AND_INDICES[node.target]
    with graph.inserting_before(node):
        values = call_with_value(graph, values_op, (x, [dim], keepdim))
        indices = call_with_value(graph, indices_op, (x, dim, keepdim))
    replace_getitems(graph, node, [values, indices])
    return [values, indices]


def _other_arguments(node: fx.Node) -> dict:
    """What the reduction keeps besides its input, dims and keepdim: var's correction, sum's or mean's dtype."""
    return {k: v for k, v in node.kwargs.items() if k not in ("dim", "keepdim")}


def _truth_as_extreme(graph: fx.Graph, node: fx.Node) -> fx.Node | None:
    """any / all as amax / amin of (x != 0) cast to float32, then != 0 again (NaN counts as true, as in
    eager), leaving the extreme to _rewrite."""
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, meta = node.args[0], tensor_meta(node.args[0])
    if meta is None or meta.dtype not in (torch.bool, torch.float32, torch.float64, torch.int32, torch.int64):
        return None
    dims, keepdim = node_arg(node, 1, "dim", None), node_arg(node, 2, "keepdim", False)
    dims = [] if dims is None else [dims] if isinstance(dims, int) else list(dims)
    with graph.inserting_before(node):
        truth = x if meta.dtype == torch.bool else call(aten.ne.Scalar, (x, 0))
        ones = call(aten._to_copy.default, (truth,), {"dtype": torch.float32})
        extreme = call(_TRUTH_REDUCTIONS[node.target], (ones, dims, keepdim))
        result = call(aten.ne.Scalar, (extreme, 0))
    result.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    return extreme


def _norm_as_reduction(graph: fx.Graph, node: fx.Node) -> fx.Node | None:
    """vector_norm of order 1, 2 or inf as the reduction it is, leaving the result to _rewrite."""
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, meta = node.args[0], tensor_meta(node.args[0])
    order = node_arg(node, 1, "ord", 2)
    dims, keepdim = node_arg(node, 2, "dim", None), node_arg(node, 3, "keepdim", False)
    if meta is None or not meta.dtype.is_floating_point or node_arg(node, 4, "dtype", None) not in (None, meta.dtype):
        return None
    if not isinstance(order, (int, float)) or (meta.numel() == 0 and order < 0):
        return None  # eager raises for a negative order over an empty input
    dims = list(range(meta.dim())) if dims is None else dims
    with graph.inserting_before(node):
        if order == 2:
            summed = call(aten.sum.dim_IntList, (call(aten.mul.Tensor, (x, x)), dims, keepdim))
            result = call(aten.sqrt.default, (summed,))
            reduction = summed
        elif order == 0:  # how many elements are nonzero
            nonzero = call(aten._to_copy.default, (call(aten.ne.Scalar, (x, 0)),), {"dtype": meta.dtype})
            result = reduction = call(aten.sum.dim_IntList, (nonzero, dims, keepdim))
        elif order in (1, math.inf, -math.inf):
            op = {1: aten.sum.dim_IntList, math.inf: aten.amax.default, -math.inf: aten.amin.default}[order]
            result = reduction = call(op, (call(aten.abs.default, (x,)), dims, keepdim))
        else:  # (sum |x|^p)^(1/p)
            powered = call(aten.pow.Tensor_Scalar, (call(aten.abs.default, (x,)), float(order)))
            reduction = call(aten.sum.dim_IntList, (powered, dims, keepdim))
            result = call(aten.pow.Tensor_Scalar, (reduction, 1.0 / float(order)))
    result.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(result)
    graph.erase_node(node)
    return reduction
