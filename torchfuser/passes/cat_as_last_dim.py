"""cat_as_last_dim: a concatenation along an inner dim, as one along the last dim of views that flatten that dim
and every dim after it into one.

A cat along dim d (not the last) copies whole blocks of shape[d+1:] elements from each operand in turn: it is
the cat along the last dim of the operands viewed as [*shape[:d], -1], and its result is that cat's result
viewed back. A kernel then writes rows along the innermost dim (the row schedule: one division per row)
instead of moving the cat dim last through strides (divisions for every coordinate of every element, which
made a KV cache's append, the cat of [1, 8, 64, 64] and [1, 8, 1, 64] along dim 2, fifty times slower).
An operand computed by elementwise ops (LLaMA's rotary embedding of the new key) then becomes a kernel of its
own: it writes only that operand, which the cat reads back.

Rule: cat(xs, d) -> view(cat([view(x, [*x.shape[:d], -1]) for x in xs], -1), shape).
Preconditions: no user reads the cat elementwise (fuse_pointwise would join it into the cat's kernel, and the
flattening view would split it off: one more pass over the whole result); every operand has the result's
rank, and the view of it exists (its dims from d on are laid out as one run, dims of size 1 aside: no copy
is ever made); sizes from dim d on are static (a cat along a dynamic dim stays with PyTorch anyway); the
result is contiguous, as eager's cat is.

    before: c = cat([k_past, k_new], 2)          # [1, 8, 64, 64], [1, 8, 1, 64] -> [1, 8, 65, 64]
    after:  a = view(k_past, [1, 8, 4096]); b = view(k_new, [1, 8, 64])
            f = cat([a, b], -1)                   # [1, 8, 4160]
            c = view(f, [1, 8, 65, 64])
"""

from __future__ import annotations

import math

import torch
import torch.fx as fx

from torchfuser.ir.symbolic import has_symbols
from torchfuser.lowering.from_aten import POINTWISE, constant_value, node_arg, tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, constant_at, count_ops

aten = torch.ops.aten
NAME = "cat_as_last_dim"


def cat_as_last_dim(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    rewritten = 0
    for node in [n for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.cat.default]:
        dim = _inner_dim(node)
        if dim is None:
            continue
        graph, meta = gm.graph, tensor_meta(node)
        with graph.inserting_before(node):
            flat = [_flattened(graph, x, dim) for x in node.args[0]]
            joined = call_with_value(graph, aten.cat.default, (flat, -1))
            result = call_with_value(graph, aten.view.default, (joined, list(meta.shape)))
        for new in (*flat, joined, result):
            new.meta.update({k: v for k, v in node.meta.items() if k in ("stack_trace", "nn_module_stack")})
        node.replace_all_uses_with(result)
        graph.erase_node(node)
        rewritten += 1
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, rewritten > 0, {"cats": rewritten, "nodes_before": before, "nodes_after": count_ops(gm)})


def _flattened(graph: fx.Graph, x: fx.Node, dim: int) -> fx.Node:
    """x viewed with its dims from `dim` on as one; a `full` (a pooling's or convolution's padding) is made
    again at that shape instead, so it stays a constant the kernel takes as a literal."""
    meta = tensor_meta(x)
    if x.target is aten.full.default and constant_value(x) is not None:
        return constant_at(graph, x, [*meta.shape[:dim], math.prod(meta.shape[dim:])])
    return call_with_value(graph, aten.view.default, (x, [*meta.shape[:dim], -1]))


def _inner_dim(node: fx.Node) -> int | None:
    """The cat's dim when the rule applies (see the module docstring), else None."""
    meta = tensor_meta(node)
    operands = node.args[0]
    if meta is None or meta.dim() < 2 or not meta.is_contiguous() or not isinstance(operands, (list, tuple)):
        return None
    if any(user.target in POINTWISE for user in node.users):
        return None
    rank = meta.dim()
    dim = node_arg(node, 1, "dim", 0) % rank
    if dim == rank - 1 or has_symbols(meta.shape[dim:]):
        return None
    for x in operands:
        t = tensor_meta(x) if isinstance(x, fx.Node) else None
        if t is None or t.dim() != rank or has_symbols(t.shape[dim:]):
            return None
        try:
            t.view(*t.shape[:dim], -1)
        except (RuntimeError, ValueError):  # its dims from d on are not one run of memory: the view would need a copy
            return None
    return dim

