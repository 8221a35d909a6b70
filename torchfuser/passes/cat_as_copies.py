"""cat_as_copies: a concatenation that no fusion took becomes a kernel that copies each operand into its part of
the result (ir/kernels/cat.py), with every size a kernel argument.

fuse_pointwise computes a cat inside an elementwise kernel, its bounds compiled in; it leaves a cat along a dim
Dynamo marks dynamic (a KV cache's append: the cached length changes every call) to PyTorch. As a copy kernel
that cat stays with the plan's other launches: no wait for them before PyTorch reads their results, and one
build serves every length.

Rule: cat(xs, d) -> tf_cat(*xs), where no earlier pass fused the cat.
Preconditions: runs after fuse_pointwise (it takes the cats it can compute; this pass takes what is left);
every operand is a tensor of the result's dtype (among the kernels' dtypes) and rank, or an empty 1-d tensor
(eager skips those), and at least one is not.

    before: k = cat([k_past, k_new], 2)        # [1, 8, s0, 64], [1, 8, 1, 64] -> [1, 8, s0 + 1, 64]: PyTorch
    after:  k = tf_cat_group9(k_past, k_new)   # one launch, at every s0
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.ir.dtypes import DTYPE_NAMES
from torchfuser.ir.kernels import CatKernel
from torchfuser.lowering.from_aten import node_arg, tensor_meta
from torchfuser.lowering.region import cat_operands
from torchfuser.passes.base import PassResult, count_ops, erase_nodes, insert_fused_node, next_group_id, record_unfused

aten = torch.ops.aten
NAME = "cat_as_copies"


def handles(node: fx.Node) -> bool:
    return node.target is aten.cat.default


def cat_as_copies(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    group = next_group_id(gm)
    replaced = []
    for node in [n for n in gm.graph.nodes if n.op == "call_function" and handles(n)]:
        why = cat_problem(node)
        if why is not None:
            record_unfused(node, NAME, f"concatenation left to PyTorch: {why}")
            continue
        meta = tensor_meta(node)
        kernel = CatKernel(node_arg(node, 1, "dim", 0) % meta.dim(), group)
        group += 1
        fused = insert_fused_node(gm, kernel, list(node.args[0]), [node], meta)
        node.replace_all_uses_with(fused)
        replaced.append(node)
    if replaced:
        erase_nodes(gm, replaced)
    return PassResult(gm, bool(replaced), {"cats": len(replaced), "nodes_before": before,
                                           "nodes_after": count_ops(gm)})


def cat_problem(node: fx.Node) -> str | None:
    """None when the cat can be a copy kernel, else why not."""
    meta = tensor_meta(node)
    operands = node.args[0]
    if meta is None or meta.dim() == 0 or not isinstance(operands, (list, tuple)):
        return "the result is not a tensor with dims"
    if meta.dtype not in DTYPE_NAMES:
        return f"dtype {meta.dtype} is not supported by the kernels"
    values = [tensor_meta(x) if isinstance(x, fx.Node) else None for x in operands]
    if any(t is None or t.dtype != meta.dtype for t in values):
        return "an operand of another dtype than the result (eager promotes it)"
    present = cat_operands(node)
    if any(tensor_meta(x).dim() != meta.dim() for x in present):
        return "an operand of another rank than the result"
    return None if present else "every operand is an empty 1-d tensor"
