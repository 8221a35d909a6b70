"""channels_last_between_convs: values between convolutions stay channels-last; eager's layout only at the edges.

conv_as_gemm computes a convolution channels-last (its GEMM's rows are output positions, its columns
channels) and copies the result back into eager's NCHW layout; the next convolution copies its input into
channels-last again. Between two convolutions there are only elementwise ops (a bias, an activation, a
residual add) and pooling (max pooling's values and indices, average pooling), which compute in whatever
layout their inputs have, so both copies are waste. This pass drops the copy back, keeps the NCHW-shaped
channels-last view, and recomputes the fake value of every op that follows the layout (elementwise ops,
slices, permutes, pooling): their outputs are channels-last too (TensorIterator's rule: an output follows its
inputs' memory order), and so are the kernels fuse_pointwise makes of them; pool_as_windows, after this pass,
makes a channels-last max pooling a window kernel. A concatenation (a convolution's zero padding) becomes the
concatenation of the NHWC views, viewed back, which cat_as_last_dim makes a row copy. A convolution whose input
is such a value reads it as it lies (the permute to NHWC is then contiguous and its copy is dropped). Any other
reader (a view that needs eager's strides, a reduction, the graph's output) gets one copy back to eager's
layout, made once per value.

Rule, with conv_as_gemm's forms:

    y = clone(permute(view(mm(...), [N, OH, OW, C]), [0, 3, 1, 2]))      ->  y = permute(view(...))
    z = relu(y + b)                                                      ->  z channels-last
    x2 = clone(permute(z, [0, 2, 3, 1]))                                 ->  x2 = permute(z, [0, 2, 3, 1])
    p = cat([0, z, 0], 3)                           ->  p = permute(cat([0, permute(z, [0, 2, 3, 1]), 0], 2), [0, 3, 1, 2])
    out = view(z, [N, -1])                                               ->  view(clone(z, contiguous), ...)

Preconditions: runs right after the passes that make conv_as_gemm's forms (pointwise_conv_as_gemm, and
conv_as_gemm where registered), on static shapes; a recomputed value must keep its shape and dtype, else the
reader is treated as any other.

    before:  c1 = clone(permute(...)); r = relu(c1); x2 = clone(permute(r, [0, 2, 3, 1])); ... 4 copies
    after:   c1 = permute(...); r = relu(c1); x2 = permute(r, [0, 2, 3, 1])                  ... 2 copies
"""

from __future__ import annotations

import operator
from functools import partial

import torch
import torch.fx as fx

from torchfuser.ir.layout import channels_innermost
from torchfuser.lowering.from_aten import POINTWISE, tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, constant_at, copies_nothing, count_ops, fake_result

aten = torch.ops.aten
NAME = "channels_last_between_convs"
LAYOUT_EXIT = "torchfuser_channels_last_exit"  # node.meta key: conv_as_gemm's copy of its result to eager's layout
TO_NCHW, TO_NHWC, SWAP_NCL = [0, 3, 1, 2], [0, 2, 3, 1], [0, 2, 1]  # conv1d: [N, C, L] <-> [N, L, C]
COPIES = (aten.clone.default, aten._to_copy.default)  # elementwise, but they choose their result's layout
# ops whose result is laid out after their inputs (or is a view of them), so they pass channels-last on; a
# convolution left to PyTorch or to depthwise_conv_as_windows reads channels-last as it lies and writes it too
FOLLOWS_LAYOUT = frozenset(POINTWISE) | {aten.slice.Tensor, aten.cat.default, aten.permute.default,
                                        aten.convolution.default, aten.max_pool2d_with_indices.default,
                                        aten.avg_pool2d.default, operator.getitem}


def channels_last_between_convs(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    graph = gm.graph
    if not any(node.meta.get(LAYOUT_EXIT) for node in graph.nodes):  # no convolution computed channels-last
        return PassResult(gm, False, {"copies_dropped": 0, "nodes_before": before, "nodes_after": before})
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    eager_strides = [getattr(tensor_meta(a), "stride", lambda: None)() for a in _results(output)]
    last: set[fx.Node] = set()  # values now NCHW-shaped (conv1d: NCL) over channels-last memory
    entered: set[fx.Node] = set()  # NHWC (NLC) permutes of such values: contiguous already
    copies_back: dict[fx.Node, fx.Node] = {}
    dropped = cats = sunk = restored = 0
    for node in list(graph.nodes):
        if node.meta.get(LAYOUT_EXIT) and channels_innermost(tensor_meta(node.args[0])):
            view = node.args[0]
            node.replace_all_uses_with(view)
            graph.erase_node(node)
            last.add(view)
            dropped += 1
        elif _entry_copy(node, entered):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
            dropped += 1
        elif node is output:
            restored = _keep_eager_strides(graph, node, eager_strides)
        elif any(a in last for a in node.all_input_nodes):
            if node.target is aten.cat.default and _cat_in_nhwc(graph, node, last):
                cats += 1
                continue
            if elementwise_in_nhwc(graph, node, last) is not None:
                sunk += 1
                continue
            value = _recomputed(node) if node.op == "call_function" and node.target in FOLLOWS_LAYOUT else None
            if value is None:
                for a in [a for a in node.all_input_nodes if a in last]:
                    node.replace_input_with(a, _copy_back(graph, a, copies_back))
                continue
            node.meta["val"] = value
            if (node.target is aten.permute.default and list(node.args[1]) in (TO_NHWC, SWAP_NCL)
                    and value.is_contiguous()):
                entered.add(node)
            elif channels_innermost(value[0] if isinstance(value, tuple) else value):  # max pooling: (values, indices)
                last.add(node)
    if dropped or copies_back or cats or sunk or restored:
        graph.lint()
        gm.recompile()
    return PassResult(gm, dropped > 0, {"copies_dropped": dropped, "copies_back": len(copies_back),
                                        "results_restored": restored, "cats_in_nhwc": cats,
                                        "elementwise_in_nhwc": sunk, "nodes_before": before,
                                        "nodes_after": count_ops(gm)})


def elementwise_in_nhwc(graph: fx.Graph, node: fx.Node, last: set) -> fx.Node | None:
    """An elementwise op whose tensor operands are all NCHW views of NHWC results (in `last`; one at least the
    permute of such a result, the others possibly channels-last values of their own, a max pooling's), computed
    on those results and viewed back: the op then follows a GEMM's result in memory order, so fuse_gemm_epilogue takes
    it into the GEMM (and fuse_pointwise into a depthwise sum), and chains of such ops stay in the NHWC frame.
    Returns the view back (added to `last`), or None where the op is not such."""
    if node.op != "call_function" or node.target not in POINTWISE or node.target in COPIES:
        return None
    operands = node.all_input_nodes
    permutes = [a for a in operands if a.target is aten.permute.default]
    order = list(permutes[0].args[1]) if permutes else None
    if order not in (TO_NCHW, SWAP_NCL) or not all(a in last for a in operands) or any(
            list(a.args[1]) != order for a in permutes):
        return None
    if tensor_meta(node).shape != tensor_meta(operands[0]).shape or any(
            tensor_meta(a).shape != tensor_meta(node).shape for a in operands):
        return None  # broadcasting between operands: their frames would differ
    with graph.inserting_before(node):
        # another channels-last operand that is not a view back (a max pooling's result: a residual) is viewed
        unpermuted = {a: a.args[0] if a.target is aten.permute.default else
                      call_with_value(graph, aten.permute.default, (a, [order.index(d) for d in range(len(order))]))
                      for a in operands}
        args = fx.node.map_arg(node.args, lambda a: unpermuted[a])
        kwargs = fx.node.map_arg(node.kwargs, lambda a: unpermuted[a])
        inner = call_with_value(graph, node.target, args, kwargs)
        back = call_with_value(graph, aten.permute.default, (inner, order))
    back.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(back)
    graph.erase_node(node)
    for a in set(operands):  # a view nothing reads any more would count as a second reader of its result
        if not a.users and a.target is aten.permute.default:
            graph.erase_node(a)
            last.discard(a)
    last.add(back)
    return back


def _entry_copy(node: fx.Node, entered: set) -> bool:
    """A contiguous clone of a permute that is contiguous already (a convolution's copy of its input): one of
    a channels-last result, or of a channels-last graph input (a channels-last model's), that no graph output is."""
    if not (node.op == "call_function" and node.target is aten.clone.default
            and node.kwargs.get("memory_format", torch.contiguous_format) is torch.contiguous_format):
        return False
    source = node.args[0]
    if source in entered:
        return True
    return (source.target is aten.permute.default and source.args[0].op == "placeholder" and copies_nothing(node)
            and all(user.op != "output" for user in node.users))


def _results(output: fx.Node) -> list:
    """The graph's results in order (nodes, or constants)."""
    found = []
    fx.node.map_aggregate(output.args[0], found.append)
    return [r for r in found if not isinstance(r, (tuple, list))]


def _keep_eager_strides(graph: fx.Graph, output: fx.Node, eager_strides: list) -> int:
    """Each graph result whose strides are no longer eager's (a channels-last value, a permute of one) is copied
    into eager's memory order: a convolution's result is NCHW again, conv1d's result transposed to [N, L, C]
    stays a transposed view, and a channels-last result of a channels-last input stays as it is, as in eager."""
    restored = {}
    for a, strides in zip(_results(output), eager_strides):
        value = tensor_meta(a) if isinstance(a, fx.Node) else None
        if value is None or strides is None or value.stride() == strides or a in restored:
            continue
        order = sorted(range(value.dim()), key=lambda d: -strides[d])  # eager's memory order, outermost first
        with graph.inserting_before(output):
            moved = call_with_value(graph, aten.permute.default, (a, order))
            copied = call_with_value(graph, aten.clone.default, (moved,), {"memory_format": torch.contiguous_format})
            restored[a] = call_with_value(graph, aten.permute.default,
                                          (copied, [order.index(d) for d in range(len(order))]))
    output.args = fx.node.map_arg(output.args, lambda a: restored.get(a, a))
    return len(restored)


def _cat_in_nhwc(graph: fx.Graph, node: fx.Node, last: set) -> bool:
    """A cat of channels-last values and padding constants (a pooling's or convolution's padding) as the cat of
    their NHWC views, viewed back: cat_as_last_dim then makes it a row copy along NHWC memory. Instead, the
    cat of NCHW dims would either walk channels-last memory through strides or make an NCHW result."""
    parts, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
    if not all(p in last or p.target is aten.full.default for p in parts) or tensor_meta(node).dim() != 4:
        return False
    call = partial(call_with_value, graph)
    with graph.inserting_before(node):
        nhwc = []
        for p in parts:
            if p in last:
                nhwc.append(call(aten.permute.default, (p, TO_NHWC)))
            else:  # the constant made at the NHWC shape
                nhwc.append(constant_at(graph, p, [tensor_meta(p).shape[d] for d in TO_NHWC]))
        joined = call(aten.cat.default, (nhwc, TO_NHWC.index(dim % 4)))
        view = call(aten.permute.default, (joined, TO_NCHW))
    view.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(view)
    graph.erase_node(node)
    last.add(view)
    return True


def _recomputed(node: fx.Node):
    """The node's fake value (a tensor, or a tuple of them) from its operands' current ones; None where it fails
    or changes a shape or dtype."""
    old = node.meta.get("val")
    try:
        new = fake_result(node.target, node.args, node.kwargs)
    except Exception:  # noqa: BLE001 - an op that cannot take the new layout is simply not followed
        return None
    olds, news = (old, new) if isinstance(old, tuple) and isinstance(new, tuple) else ((old,), (new,))
    if len(olds) != len(news) or not all(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and
                                         a.shape == b.shape and a.dtype == b.dtype for a, b in zip(olds, news)):
        return None
    return new


def _copy_back(graph: fx.Graph, value: fx.Node, made: dict) -> fx.Node:
    """`value` in eager's (contiguous) layout: one copy per value, right after it."""
    copy = made.get(value)
    if copy is None:
        with graph.inserting_after(value):
            copy = made[value] = call_with_value(graph, aten.clone.default, (value,),
                                                 {"memory_format": torch.contiguous_format})
    return copy
