"""merge_sibling_gemms: GEMMs that read one input through different weights become one GEMM (horizontal fusion).

Rule: `mm(a, b_i)` nodes that share the input `a` (2-D, float32), whose `b_i` are the model's weights or views of
them (placeholders the lowering marks as parameters, ir/aten.WEIGHT) with one K, become one
`mm(a, tf_concat_weights(b_1, ..., b_k))` over the weights concatenated along N, made once per weight version
(ir/weights.ConcatWeights); each old result is a slice of the new one. `addmm` siblings (bias, beta = alpha
= 1) merge among themselves the same way, their biases concatenated too. The q/k/v projections of an
attention (or any siblings whose results no elementwise chain joins) then take one launch. Siblings whose
results an elementwise op joins (SwiGLU's gate and up) stay apart: one GEMM's epilogue takes that op in.

Preconditions: a core-ATen graph from the inference lowering (the weight marks); the weights' views are
hoisted to the top of the graph (they read nothing but a weight), the merged GEMM is placed right after
`a`. Runs before fuse_attention and fuse_gemm_epilogue, which see the merged GEMM and the slices (views: the
kernels read them through their strides). A sibling's own epilogue (an activation on one slice) is then a
pointwise kernel over its slice rather than part of the GEMM.

    before:  q = mm(x, t(wq)); k = mm(x, t(wk)); v = mm(x, t(wv))           # wq [768, 768], wk, wv [256, 768]
    after:   w = tf_concat_weights(t(wq), t(wk), t(wv)); qkv = mm(x, w)     # qkv [M, 1280]
             q = slice(qkv, 1, 0, 768); k = slice(qkv, 1, 768, 1024); v = slice(qkv, 1, 1024, 1280)
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.ir.aten import VIEW_OPS, WEIGHT
from torchfuser.ir.weights import ConcatWeights
from torchfuser.lowering.from_aten import lowering_problem, tensor_meta
from torchfuser.passes.base import PassResult, count_ops

aten = torch.ops.aten
NAME = "merge_sibling_gemms"


def handles(node: fx.Node) -> bool:
    return node.target in (aten.mm.default, aten.addmm.default)


def merge_sibling_gemms(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    merged = gemms = 0
    for a, family in _sibling_families(gm):
        _merge(gm, a, family)
        merged += 1
        gemms += len(family)
    if merged:
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, merged > 0, {"merged_gemms": merged, "gemms_merged": gemms, "nodes_before": before,
                                       "nodes_after": count_ops(gm)})


def _weight_view(node) -> bool:
    """node is a weight, or a chain of views of one."""
    while isinstance(node, fx.Node) and node.op == "call_function" and node.target in VIEW_OPS:
        node = node.args[0]
    return isinstance(node, fx.Node) and node.op == "placeholder" and bool(node.meta.get(WEIGHT))


def _operands(gemm: fx.Node) -> tuple | None:
    """(bias or None, b) of a GEMM this pass can merge, else None."""
    if gemm.target is aten.mm.default:
        bias, b = None, gemm.args[1]
    elif gemm.target is aten.addmm.default and gemm.kwargs.get("beta", 1) == 1 and gemm.kwargs.get("alpha", 1) == 1:
        bias, b = gemm.args[0], gemm.args[2]
        if not (_weight_view(bias) and tensor_meta(bias) is not None and tensor_meta(bias).dim() == 1):
            return None
    else:
        return None
    metas = [tensor_meta(n) for n in (gemm, b)]
    if any(m is None or m.dtype != torch.float32 or m.dim() != 2 for m in metas) or not _weight_view(b):
        return None
    return bias, b


def _sibling_families(gm: fx.GraphModule) -> list[tuple[fx.Node, list[fx.Node]]]:
    """(a, GEMMs reading it) that merge: plain mms together, addmms together, by K, two or more each. Each
    Linear views its input on its own (x.view(-1, K)): equal views of one value count as one input, the first
    of them standing for the rest."""
    families: dict[tuple, list[fx.Node]] = {}
    first: dict = {}
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in (aten.mm.default, aten.addmm.default):
            continue
        operands = _operands(node)
        if operands is None:
            continue
        a = node.args[1 if node.target is aten.addmm.default else 0]
        source = _value_key(a)
        first.setdefault(source, a)
        families.setdefault((source, node.target, tensor_meta(operands[1]).shape[0]), []).append(node)
    return [(first[key[0]], family) for key, family in families.items() if len(family) > 1 and not _joined(family)]


def _joined(family: list[fx.Node]) -> bool:
    """Some node reads two siblings' results (SwiGLU's silu(gate) * up): separate, one GEMM's epilogue takes that
    node in with the other's result; merged, it would be a kernel of its own over two slices (measured: a
    LLaMA layer at 8x128 ran 18 % slower with gate/up merged, at one token 5 %)."""
    reached: dict[fx.Node, int] = {}
    for k, gemm in enumerate(family):
        stack, seen = [gemm], set()
        while stack:
            node = stack.pop()
            for user in node.users:
                if user in seen:
                    continue
                seen.add(user)
                elementwise = lowering_problem(user) is None
                if elementwise and reached.setdefault(user, k) != k:
                    return True
                if elementwise or user.target in VIEW_OPS:
                    stack.append(user)
    return False


def _value_key(node):
    """The same key for nodes that are the same view of the same value."""
    if isinstance(node, fx.Node) and node.op == "call_function" and node.target in VIEW_OPS:
        return (node.target, _value_key(node.args[0]), tuple(node.args[1:]), tuple(sorted(node.kwargs.items())))
    return node


def _merge(gm: fx.GraphModule, a: fx.Node, family: list[fx.Node]) -> None:
    graph = gm.graph
    operands = [_operands(g) for g in family]
    weights, biases = [b for _, b in operands], [bias for bias, _ in operands if bias is not None]
    top = next(n for n in reversed(graph.nodes) if n.op == "placeholder")
    for node in weights + biases:  # views of weights read nothing else: hoist them where every node sees them
        top = _hoist(node, top)
    fake = tensor_meta(weights[0]).fake_mode
    with graph.inserting_after(top):
        cat_w = graph.call_function(ConcatWeights(1), tuple(weights))
    cat_w.meta["val"] = _faked(fake, lambda: torch.cat([tensor_meta(w) for w in weights], 1))
    top = cat_w
    if biases:
        with graph.inserting_after(top):
            cat_b = graph.call_function(ConcatWeights(0), tuple(biases))
        cat_b.meta["val"] = _faked(fake, lambda: torch.cat([tensor_meta(b) for b in biases], 0))
        top = cat_b
    order = {n: i for i, n in enumerate(graph.nodes)}
    with graph.inserting_after(max(a, top, key=order.__getitem__)):  # a may be a placeholder before the weights
        args = (cat_b, a, cat_w) if biases else (a, cat_w)
        gemm = graph.call_function(family[0].target, args)
    gemm.meta.update({k: v for k, v in family[0].meta.items() if k != "val"})
    gemm.meta["val"] = _faked(fake, lambda: torch.mm(tensor_meta(a), tensor_meta(cat_w)))
    offset, anchor = 0, gemm
    for old in family:
        n = tensor_meta(old).shape[1]
        with graph.inserting_after(anchor):
            part = graph.call_function(aten.slice.Tensor, (gemm, 1, offset, offset + n))
        part.meta.update({k: v for k, v in old.meta.items() if k != "val"})
        part.meta["val"] = _faked(fake, lambda: tensor_meta(gemm)[:, offset:offset + n])
        old.replace_all_uses_with(part)
        graph.erase_node(old)
        offset, anchor = offset + n, part


def _hoist(node: fx.Node, after: fx.Node) -> fx.Node:
    """Move node's chain of views (not the weight itself) to just after `after`; returns the last moved node."""
    chain = []
    while node.op == "call_function":
        chain.append(node)
        node = node.args[0]
    for view in reversed(chain):
        after.append(view)
        after = view
    return after


def _faked(fake_mode, make):
    """A fake value made in the graph's fake mode (a plain meta value where there is none)."""
    if fake_mode is None:
        return make()
    with fake_mode:
        return make()
