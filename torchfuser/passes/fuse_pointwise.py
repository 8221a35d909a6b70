"""fuse_pointwise: every connected elementwise subgraph becomes one OpenCL kernel.

Rule: walking the graph in order, an elementwise node (one with a lowering in ir/from_aten.POINTWISE)
joins the groups of its elementwise producers that have the same output shape, as long as the merged
group stays convex (no path leaves the group and comes back, which would need a cycle). Each group
becomes one `PointwiseKernel` node computing an SSA program; values used outside the group are its
outputs. A single elementwise op is a group too: it still saves eager's allocation and dispatch.

Preconditions: core-ATen graph with `meta["val"]` on every node; dtypes among bool, int32, int64,
float32, float64. Broadcast inputs, strided inputs and scalars are the kernel's business (launch.py).

    before:  s = sigmoid(x); m = mul(x, s); y = mul(m, w); z = add(y, 1.5); return z
    after:   z = tf_pointwise_group0(x, w)           # in v0, v1; silu-like program; out v5
             return z
"""

from __future__ import annotations

import operator

import torch.fx as fx

from torchfuser.ir.from_aten import Lowerer, dtype_name, lowering_problem, tensor_meta
from torchfuser.ir.program import ProgramBuilder
from torchfuser.passes.base import PassResult, count_ops, erase_nodes, insert_fused_node, next_group_id
from torchfuser.runtime.launch import PointwiseKernel


def fuse_pointwise(gm: fx.GraphModule) -> PassResult:
    nodes = list(gm.graph.nodes)
    position = {n: i for i, n in enumerate(nodes)}
    group_of: dict[fx.Node, frozenset] = {}
    for node in nodes:
        if lowering_problem(node) is not None:
            continue
        merged = {node}
        shape = tensor_meta(node).shape
        producer_groups = {group_of[i] for i in node.all_input_nodes if i in group_of}
        for group in sorted(producer_groups, key=lambda g: min(position[n] for n in g)):
            if tensor_meta(next(iter(group))).shape == shape and _is_convex(merged | group, position):
                merged |= group
        merged = frozenset(merged)
        for member in merged:
            group_of[member] = merged

    before = count_ops(gm)
    groups = sorted(set(group_of.values()), key=lambda g: min(position[n] for n in g))
    first_group = next_group_id(gm)
    fused_ops = 0
    for offset, group in enumerate(groups):
        fused_ops += len(group)
        _replace_group(gm, sorted(group, key=position.__getitem__), first_group + offset)
    if groups:
        erase_nodes(gm, [n for g in groups for n in g])
    return PassResult(gm, bool(groups), {
        "pointwise_groups": len(groups), "fused_ops": fused_ops,
        "nodes_before": before, "nodes_after": count_ops(gm),
    })


def _is_convex(members: set, position: dict) -> bool:
    """False when a path leaves `members` and re-enters it (fusing them would need a cycle)."""
    last = max(position[m] for m in members)
    stack = [u for m in members for u in m.users if u not in members]
    seen = set()
    while stack:
        node = stack.pop()
        if node in seen or position.get(node, last + 1) > last:
            continue
        seen.add(node)
        for user in node.users:
            if user in members:
                return False
            stack.append(user)
    return True


def _replace_group(gm: fx.GraphModule, group: list[fx.Node], group_id: int) -> None:
    members = set(group)
    builder = ProgramBuilder()
    inputs: list[fx.Node] = []
    values: dict[fx.Node, int] = {}
    for node in group:
        for arg in node.all_input_nodes:
            if arg not in members and arg not in values:
                values[arg] = builder.add_input(dtype_name(arg))
                inputs.append(arg)
    lowerer = Lowerer(builder, values)
    for node in group:
        values[node] = lowerer.lower(node)
    outputs = [n for n in group if any(u not in members for u in n.users)]
    program = builder.build([values[n] for n in outputs])
    meta = tensor_meta(outputs[-1])
    kernel = PointwiseKernel(program, tuple(meta.shape), tuple(meta.stride()), group_id)
    out_vals = tuple(n.meta["val"] for n in outputs)
    fused = insert_fused_node(gm, kernel, inputs, group, out_vals[0] if len(outputs) == 1 else out_vals)
    if len(outputs) == 1:
        _replace_outside_uses(outputs[0], fused, members)
        return
    for index, node in enumerate(outputs):
        with gm.graph.inserting_after(fused):
            item = gm.graph.call_function(operator.getitem, (fused, index))
        item.meta.update(val=node.meta["val"], stack_trace=node.meta.get("stack_trace"))
        _replace_outside_uses(node, item, members)


def _replace_outside_uses(old: fx.Node, new: fx.Node, members: set) -> None:
    old.replace_all_uses_with(new, delete_user_cb=lambda user: user not in members)
