"""What every pass shares: the PassResult, the reasons a pass leaves a node unfused, fused-node bookkeeping."""

from __future__ import annotations

import torch
import torch.fx as fx
from torch.fx.passes.infra.pass_base import PassResult as FxPassResult
from torch.fx.passes.tools_common import stable_topological_sort

from torchfuser.ir.kernels import FusedKernel
from torchfuser.ir.symbolic import has_symbols
from torchfuser.ir.weights import ConvWeightAsMatrix

aten = torch.ops.aten
UNFUSED = "torchfuser_unfused"  # node.meta key: {pass name: why the pass left the node to PyTorch}


class PassResult(FxPassResult):
    """torch.fx's PassResult (graph_module, modified) with the pass's counts: TorchFuser's passes also run in
    torch.fx's PassManager, and its passes (PassBase) in TorchFuser's pipeline."""

    def __new__(cls, gm: fx.GraphModule, modified: bool, stats: dict | None = None):
        result = super().__new__(cls, gm, modified)
        result.stats = dict(stats or {})
        return result

    @property
    def gm(self) -> fx.GraphModule:
        return self.graph_module


def record_unfused(node: fx.Node, by: str, reason: str) -> None:
    """Say why pass `by` left `node` unfused (inductor's WhyNoFuse): the report's fallback reasons come from
    here. A new dict each time: graph copies share meta values."""
    node.meta[UNFUSED] = {**node.meta.get(UNFUSED, {}), by: reason}


def unfused_reasons(node: fx.Node) -> dict[str, str]:
    return dict(node.meta.get(UNFUSED, {}))


def call_with_value(graph: fx.Graph, target, args, kwargs=None) -> fx.Node:
    """A new call node (at the graph's insert point) with its fake value computed from its operands' (symbolic
    shapes stay symbolic): the meta every later pass and the lowering read."""
    kwargs = kwargs or {}
    node = graph.call_function(target, tuple(args), kwargs)
    node.meta["val"] = fake_result(target, args, kwargs)
    return node


def fake_result(target, args, kwargs):
    """target applied to the fake values of its operands (graph nodes; lists of them)."""

    def value(a):
        if isinstance(a, fx.Node):
            return a.meta["val"]
        return [value(b) for b in a] if isinstance(a, (list, tuple)) else a

    return target(*[value(a) for a in args], **{k: value(v) for k, v in kwargs.items()})


def constant_at(graph: fx.Graph, fill: fx.Node, shape) -> fx.Node:
    """The constant `full` node `fill` made again at another shape (a padding a kernel takes as a literal), at
    the graph's insert point."""
    again = graph.call_function(aten.full.default, (list(shape), fill.args[1]), dict(fill.kwargs))
    again.meta["val"] = fill.meta["val"].new_full(list(shape), fill.args[1])
    return again


def convolution_problem(node: fx.Node) -> str | None:
    """Why a convolution node cannot be rewritten into kernels at all (the passes add their own conditions)."""
    x, w = node.args[0].meta.get("val"), node.args[1].meta.get("val")
    if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or not x.dtype.is_floating_point \
            or x.dtype != w.dtype:
        return "a convolution of non-floating or mixed dtypes"
    if node.args[6]:
        return "a transposed convolution (not lowered yet)"
    if x.dim() not in (3, 4):
        return f"a convolution over {x.dim() - 2} spatial dims (1 or 2 are lowered)"
    if has_symbols(list(x.shape) + list(w.shape) + list(x.stride())):
        return "a convolution with symbolic sizes (not lowered yet)"
    return None


def constant_pad(graph: fx.Graph, x: fx.Node, dim: int, pad: int, value: float) -> fx.Node:
    """x with `pad` elements of `value` on both sides of dim: a concatenation with a constant (a literal in the
    kernel), at the graph's insert point."""
    meta = x.meta["val"]
    shape = list(meta.shape)
    shape[dim] = pad
    fill = graph.call_function(aten.full.default, (shape, value), {"dtype": meta.dtype, "device": meta.device,
                                                                  "pin_memory": False})
    fill.meta["val"] = meta.new_full(shape, value)
    return call_with_value(graph, aten.cat.default, ([fill, x, fill], dim))


def conv_weight_matrix(graph: fx.Graph, w: fx.Node) -> fx.Node:
    """A convolution's weight as a [KH * KW * C, Cout] matrix (ir/weights.ConvWeightAsMatrix, made once per weight
    version), at the graph's insert point."""
    matrix = graph.call_function(ConvWeightAsMatrix(), (w,))
    matrix.meta["val"] = ConvWeightAsMatrix().make(w.meta["val"])
    return matrix


def copies_nothing(node: fx.Node) -> bool:
    """A clone whose result lies as its input does (a convolution's copy of an input that is channels-last
    already): in a functional graph, readers that do not return it may read the input itself."""
    if not (node.op == "call_function" and node.target is aten.clone.default):
        return False
    source, result = node.args[0].meta.get("val"), node.meta.get("val")
    return (isinstance(source, torch.Tensor) and isinstance(result, torch.Tensor) and source.dtype == result.dtype
            and source.shape == result.shape and source.stride() == result.stride())


def count_ops(gm: fx.GraphModule) -> int:
    """Nodes that do work or name a value: everything but placeholders and the output."""
    return sum(1 for n in gm.graph.nodes if n.op not in ("placeholder", "output"))


def rewrites_done(gm: fx.GraphModule, before: int, stat: str, count: int) -> PassResult:
    """The result of a pass that rewrote `count` nodes: if any, the graph without what nothing reads any more,
    checked and recompiled; stats: the count under `stat`, and the ops before and after."""
    if count:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, count > 0, {stat: count, "nodes_before": before, "nodes_after": count_ops(gm)})


def rewrite_each(gm: fx.GraphModule, target, stat: str, rewrite) -> PassResult:
    """A pass that offers every call of `target` to rewrite(graph, node), which rewrites it and says True, or
    leaves it and says False; those it rewrote are counted under `stat` (rewrites_done)."""
    before = count_ops(gm)
    rewritten = sum(bool(rewrite(gm.graph, node)) for node in [n for n in gm.graph.nodes if n.target is target])
    return rewrites_done(gm, before, stat, rewritten)


def replace_getitems(graph: fx.Graph, node: fx.Node, results: list[fx.Node]) -> None:
    """Replace a multi-result op whose users are all getitems: `getitem(node, i)` by results[i], each result
    taking the op's meta and then its getitem's (but not their values); the op and its getitems are erased."""
    for result in results:
        result.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    for user in list(node.users):
        result = results[user.args[1]]
        result.meta.update({k: v for k, v in user.meta.items() if k != "val"})
        user.replace_all_uses_with(result)
        graph.erase_node(user)
    graph.erase_node(node)


def next_group_id(gm: fx.GraphModule) -> int:
    groups = [n.target.group for n in gm.graph.nodes if isinstance(n.target, FusedKernel)]
    return max(groups, default=-1) + 1


def insert_fused_node(gm: fx.GraphModule, kernel: FusedKernel, inputs, covered: list[fx.Node], out_vals) -> fx.Node:
    """Add `kernel(*inputs)` after the last covered node, carrying provenance for the report."""
    graph = gm.graph
    with graph.inserting_after(covered[-1]):
        fused = graph.call_function(kernel, tuple(inputs))
    fused.meta["val"] = out_vals
    # a covered node that is itself a fused kernel (an epilogue fused into it) passes on what it covers
    fused.meta["torchfuser_covers"] = [c for n in covered for c in n.meta.get("torchfuser_covers", [n.name])]
    fused.meta["torchfuser_sources"] = [
        s for n in covered for s in n.meta.get("torchfuser_sources", [
            {"stack_trace": n.meta.get("stack_trace"), "nn_module_stack": n.meta.get("nn_module_stack")}])
    ]
    for key in ("stack_trace", "nn_module_stack"):
        value = next((n.meta[key] for n in reversed(covered) if n.meta.get(key)), None)
        if value is not None:
            fused.meta[key] = value
    return fused


def erase_nodes(gm: fx.GraphModule, nodes) -> None:
    """Erase nodes whose uses were all replaced, users first; then restore a topological order."""
    for node in sorted(nodes, key=_position(gm), reverse=True):
        gm.graph.erase_node(node)
    if not _in_topological_order(gm.graph):  # (a fused node may have been inserted before an input of it)
        stable_topological_sort(gm)
    gm.recompile()


def _in_topological_order(graph: fx.Graph) -> bool:
    seen = set()
    for node in graph.nodes:
        if any(i not in seen for i in node.all_input_nodes):
            return False
        seen.add(node)
    return True


def _position(gm):
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    return order.__getitem__
