"""tensor_scalar_operands: a number that Dynamo passes in as a 0-d tensor feeds elementwise ops as that tensor.

With dynamic shapes Dynamo does not specialise Python floats (an RMSNorm's epsilon, an attention scale): each
arrives as a 0-d float64 graph input that `_local_scalar_dense` reads back into a number on the host, and
the ops using that number cannot join a kernel. This pass hands them the 0-d tensor instead: kernels read it
as one more (broadcast) input, so the value stays a runtime argument and nothing is specialised.

Rule: in an elementwise op, an operand `_local_scalar_dense(t)` (t a 0-d floating tensor) becomes t.
Precondition (equal results): every other tensor operand has at least one dim and the op's floating result
dtype. A Python number and a 0-d tensor then promote alike (neither outranks a dimensioned tensor of its
category), so the op computes in the result dtype with the value rounded to it, as eager does.

    before:  eps = _local_scalar_dense(arg4_1); a = add(var, eps)        # var [s0, s1, 1] float32
    after:   a = add(var, arg4_1)                                        # arg4_1 [] float64
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.lowering.from_aten import POINTWISE, tensor_meta
from torchfuser.passes.base import PassResult, count_ops

aten = torch.ops.aten
NAME = "tensor_scalar_operands"


def tensor_scalar_operands(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    rewritten = 0
    for read in [n for n in gm.graph.nodes if n.target is aten._local_scalar_dense.default]:
        source = read.args[0]
        meta = tensor_meta(source)
        if meta is None or meta.dim() != 0 or not meta.dtype.is_floating_point:
            continue
        for user in list(read.users):
            if _takes_a_tensor(user, read):
                user.replace_input_with(read, source)
                rewritten += 1
        if not read.users:
            gm.graph.erase_node(read)
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, rewritten > 0, {"operands": rewritten, "nodes_before": before,
                                          "nodes_after": count_ops(gm)})


def _takes_a_tensor(user: fx.Node, read: fx.Node) -> bool:
    """user is elementwise and computes the same with the 0-d tensor in place of the number."""
    result = tensor_meta(user)
    if user.op != "call_function" or user.target not in POINTWISE or result is None:
        return False
    if not result.dtype.is_floating_point or read in user.kwargs.values():
        return False
    others = [a for a in user.all_input_nodes if a is not read]
    return all((m := tensor_meta(a)) is not None and m.dim() > 0 and m.dtype == result.dtype for a in others)
