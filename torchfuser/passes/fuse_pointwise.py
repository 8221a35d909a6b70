"""fuse_pointwise: every connected elementwise subgraph becomes one OpenCL kernel.

Rule: walking the graph in order, an elementwise node (one with a lowering in lowering/from_aten.POINTWISE)
joins the groups of its elementwise producers that have the same output shape, or a smaller one that
broadcasts to it when the producer group is cheap to recompute (RECOMPUTE_MEMBERS), as long as the merged
group stays convex (no path leaves the group and comes back, which would need a cycle). Each group
becomes one `PointwiseKernel` node computing an SSA program; values used outside the group are its
outputs. A single elementwise op is a group too: it still saves eager's allocation and dispatch.

Concatenations and slices along any dim join too (ir/region.py lowers them as index remaps): a
`cat(..., dim=d)` is a member, and it or an elementwise node reaching a group through slices along d
(`x[..., a:b]` of a member) merges that group, the slices included, when the shapes agree outside d. All
cats and slices of one group run along the same dim (the kernel's indexed dim). A slice of a value from
outside stays a view the kernel reads; a slice is never a group by itself. Integer aranges are members
too (their value is their position). An embedding is a member that starts a group (it reads its table and
indices from outside: `GatherRead`), in groups without cats, slices or aranges.
Every output of a group must have the group's shape: a member of another shape used outside its group is
pinned (it may only join groups of its own shape) and the grouping runs again, until none is left.

Preconditions: core-ATen graph with `meta["val"]` on every node; dtypes among bool, int32, int64,
float32, float64. Broadcast inputs, strided inputs and scalars are the kernel's business (launch.py).

    before:  s = sigmoid(x); m = mul(x, s); y = mul(m, w); z = add(y, 1.5); return z
    after:   z = tf_pointwise_group0(x, w)           # in v0, v1; silu-like program; out v5
             return z

    before:  lo = slice(q, -1, 0, 32); hi = slice(q, -1, 32); n = neg(hi); r = cat([n, lo], -1)
             y = add(mul(q, cos), mul(r, sin)); return y                        # rotary, head dim 64
    after:   y = tf_pointwise_group0(q, cos, hi, lo, sin)   # one kernel: v2, v3 read at j and j - 32,
             return y                                      # where(j < 32, -v2, v3) selects the half

    before:  s = silu(x); m = mul(s, y); return m          # x [64, 1, 128], y [1, 32, 128]
    after:   m = tf_pointwise_group0(x, y)              # silu recomputed for each of the 32 rows it meets
             return m

    before:  e = lift_fresh_copy(c)                   # c = torch.tensor([]): eager's cat skips it
             k = cat([e, k_new], -2); return k        # KV cache append, k_new [B, H, T, D] strided
    after:   k = tf_pointwise_group1(k_new)           # a strided copy; index_dim -2 (a plain copy here)
             return k                                 # (the lift_fresh_copy kernel is left dead)
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from torchfuser.ir.kernels import PointwiseKernel
from torchfuser.lowering.from_aten import CONSTANT_OPS, POINTWISE, lowering_problem, tensor_meta
from torchfuser.lowering.region import (
    ARANGE, EMBEDDING, INDEX_OPS, arange_problem, cat_operands, embedding_problem, index_dim, index_op_problem,
    indices_in_range, is_index_slice, lower_region,
)
from torchfuser.passes.base import PassResult, count_ops, erase_nodes, insert_fused_node, next_group_id, record_unfused

aten = torch.ops.aten
# A producer group this small is recomputed at every element of a larger consumer it broadcasts to, rather
# than written out and read back (silu(x[64, 1, 128]) * y[1, 32, 128] is one kernel, as in inductor):
# elementwise work is cheap next to the memory round trip.
RECOMPUTE_MEMBERS = 8
# silu stays one op of a program rather than mul(x, sigmoid(x)): lowering keeps it whole
KEEP = (aten.silu.default, aten.silu_.default, aten.silu.out)
# non-elementwise ops that pointwise kernels take, in words for the reasons they were not taken
_REGION_OPS = {aten.cat.default: ("concatenation", index_op_problem), ARANGE: ("arange", arange_problem),
               EMBEDDING: ("embedding", embedding_problem)}
_CONSTANT = ("a constant made on the host, for readers outside pointwise kernels (those take it as a literal); "
             "it reads no data, so it waits for no kernel")
_NO_KERNEL = {
    aten.gather.default: "gather along a dim: no OpenCL kernel yet (kernels gather embedding rows only)",
    aten.index.Tensor: "advanced indexing: no OpenCL kernel yet (kernels gather embedding rows only)",
}


def handles(node: fx.Node) -> bool:
    return node.target in POINTWISE or node.target in _REGION_OPS


def fuse_pointwise(gm: fx.GraphModule) -> PassResult:
    nodes = list(gm.graph.nodes)
    position = {n: i for i, n in enumerate(nodes)}
    fusible = []
    for node in nodes:
        problem = _problem(node)
        if problem is None:
            fusible.append(node)
        elif problem:
            record_unfused(node, "fuse_pointwise", problem)
    # before any rewrite: the ranges come from the aten nodes that produce the indices
    in_range = frozenset(n for n in fusible if n.target is EMBEDDING and indices_in_range(n))
    pinned: set = set()  # members that must stay in groups of their own shape
    while True:
        group_of, shape_of = _grouping(fusible, position, pinned)
        misfits = {
            n for g in set(group_of.values()) for n in g
            if tuple(tensor_meta(n).shape) != shape_of[g] and any(u not in g for u in n.users)
        }
        if not misfits:
            break
        pinned |= misfits  # they cannot be outputs of another shape: group again without that merge

    before = count_ops(gm)
    groups = sorted(set(group_of.values()), key=lambda g: min(position[n] for n in g))
    first_group = next_group_id(gm)
    fused_ops = 0
    for offset, group in enumerate(groups):
        fused_ops += len(group)
        _replace_group(gm, sorted(group, key=position.__getitem__), first_group + offset, in_range)
    if groups:
        erase_nodes(gm, [n for g in groups for n in g])
    return PassResult(gm, bool(groups), {
        "pointwise_groups": len(groups), "fused_ops": fused_ops,
        "nodes_before": before, "nodes_after": count_ops(gm),
    })


def _problem(node: fx.Node) -> str | None:
    """None for a node this pass can put in a kernel, else why not ("" for nodes that are not its business)."""
    if node.target in _REGION_OPS:
        what, problem = _REGION_OPS[node.target]
        why = problem(node)
        return None if why is None else f"{what}, not fused: {why}"
    if node.target in CONSTANT_OPS:
        return _CONSTANT
    if node.target in _NO_KERNEL:
        return _NO_KERNEL[node.target]
    if node.target not in POINTWISE:
        return ""
    why = lowering_problem(node)
    return None if why is None else f"elementwise, but not lowerable: {why}"


def _grouping(fusible: list[fx.Node], position: dict, pinned: set) -> tuple[dict, dict]:
    """Greedy, in graph order: each node merges the groups it reads from where `_fits` and convexity allow.
    Returns node -> its group, and group -> its shape (that of the node that last grew it)."""
    group_of: dict[fx.Node, frozenset] = {}
    shape_of: dict[frozenset, tuple] = {}
    for node in fusible:
        merged = {node}
        shape = tuple(tensor_meta(node).shape)
        reindexes = node.target is aten.cat.default
        producers = {} if node.target is EMBEDDING else _producer_groups(node, group_of)  # it starts a group
        for group in sorted(producers, key=lambda g: min(position[n] for n in g)):
            via = producers[group]
            if _fits(merged | group | via, shape_of[group], shape, reindexes or bool(via), pinned, len(group)) \
                    and _is_convex(merged | group | via, position):
                merged |= group | via
        merged = frozenset(merged)
        shape_of[merged] = shape
        for member in merged:
            group_of[member] = merged
    return group_of, shape_of


def _producer_groups(node: fx.Node, group_of: dict) -> dict[frozenset, set]:
    """The groups node reads from, each with the slices it reads them through (often none)."""
    found: dict[frozenset, set] = {}
    for arg in cat_operands(node) if node.target is aten.cat.default else node.all_input_nodes:
        via = set()
        while arg not in group_of and is_index_slice(arg):
            via.add(arg)
            arg = arg.args[0]
        if arg in group_of:
            found.setdefault(group_of[arg], set()).update(via)
    return found


def _fits(members: set, group_shape: tuple, shape: tuple, reindexes: bool, pinned: set, producers: int) -> bool:
    """The merged cats and slices must run along one dim (a kernel indexes one); plain elementwise edges
    need equal shapes, or a cheap producer group (at most RECOMPUTE_MEMBERS ops) whose shape broadcasts to
    the consumer's; edges through a cat or a slice need equal shapes outside that dim; no pinned member of
    another shape either way."""
    dims = {index_dim(m) for m in members if m.target in INDEX_OPS}
    if len(dims) > 1:
        return False
    gathers = [m for m in members if m.target is EMBEDDING]
    if gathers and (dims or any(m.target is ARANGE for m in members)
                    or any(a in members for m in gathers for a in m.args[:2])):
        return False  # a gather reads its table and indices from outside, at the identity position
    if not reindexes:
        if group_shape == shape:
            return True
        return (producers <= RECOMPUTE_MEMBERS and _broadcasts(group_shape, shape) and not dims and not gathers
                and not any(m.target is ARANGE for m in members)
                and not any(m in pinned and tuple(tensor_meta(m).shape) != shape for m in members))
    dim = len(shape) + (dims.pop() if dims else -1)
    if len(group_shape) != len(shape) or any(a != b for k, (a, b) in enumerate(zip(group_shape, shape)) if k != dim):
        return False
    return not any(m in pinned and tuple(tensor_meta(m).shape) != shape for m in members)


def _broadcasts(small: tuple, shape: tuple) -> bool:
    return len(small) <= len(shape) and all(s in (1, t) for s, t in zip(reversed(small), reversed(shape)))


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


def _replace_group(gm: fx.GraphModule, group: list[fx.Node], group_id: int, in_range: frozenset) -> None:
    members = set(group)
    outputs = [n for n in group if any(u not in members for u in n.users)]
    if not outputs:
        return  # nothing reads the group: it is erased with the others
    meta = tensor_meta(outputs[-1])
    if any(tensor_meta(n).shape != meta.shape for n in outputs):
        raise RuntimeError(f"pointwise group {group_id}: outputs of different shapes")  # a grouping bug
    program, inputs, dim = lower_region(group, outputs, in_range)
    kernel = PointwiseKernel(program, tuple(meta.shape), tuple(meta.stride()), group_id, index_dim=dim)
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
