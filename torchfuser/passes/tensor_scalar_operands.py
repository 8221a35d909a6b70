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

The number may first go through host arithmetic (GPT-2's gelu_new scales by math.sqrt(2.0 / math.pi), and
with dynamic shapes pi arrives as a 0-d tensor): `+ - * /`, negation and sqrt of such numbers and Python
constants become the same ATen ops on the 0-d float64 tensors, when every use of the result ends in an
elementwise op that takes the tensor. Both sides compute in float64 with correctly rounded operations, so
the values are the host's exactly.

    before:  pi = _local_scalar_dense(arg24_1); r = truediv(2.0, pi); c = _sym_sqrt(r); y = mul(x, c)
    after:   two = full([], 2.0, float64); r = div(two, arg24_1); c = sqrt(r); y = mul(x, c)
"""

from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx

from torchfuser.lowering.from_aten import POINTWISE, tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, count_ops

aten = torch.ops.aten
NAME = "tensor_scalar_operands"


# host arithmetic on numbers -> the ATen op computing the same on 0-d tensors (unary: one operand)
_ARITHMETIC = {operator.add: aten.add.Tensor, operator.sub: aten.sub.Tensor, operator.mul: aten.mul.Tensor,
               operator.truediv: aten.div.Tensor, operator.neg: aten.neg.default, torch._sym_sqrt: aten.sqrt.default,
               math.sqrt: aten.sqrt.default}


def tensor_scalar_operands(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    tensors: dict[fx.Node, fx.Node] = {}  # a number on the host -> the 0-d tensor that holds it
    made: list[fx.Node] = []  # the ATen ops this pass adds for host arithmetic
    for node in list(gm.graph.nodes):
        if node.target is aten._local_scalar_dense.default:
            meta = tensor_meta(node.args[0])
            if meta is not None and meta.dim() == 0 and meta.dtype.is_floating_point:
                tensors[node] = node.args[0]
        elif node.target in _ARITHMETIC and _all_uses_take_tensors(node):
            as_tensor = _carried(gm.graph, node, tensors, made)
            if as_tensor is not None:
                tensors[node] = as_tensor
    rewritten = 0
    for number, tensor in tensors.items():
        for user in list(number.users):
            if _takes_a_tensor(user, number):
                user.replace_input_with(number, tensor)
                rewritten += 1
    carried = 0  # host operations now computed on tensors
    for node in reversed([*tensors, *made]):  # users before what they use
        if not node.users:
            carried += node.target in _ARITHMETIC
            gm.graph.erase_node(node)
    if rewritten or made:
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, rewritten > 0, {"operands": rewritten, "host_arithmetic": carried,
                                          "nodes_before": before, "nodes_after": count_ops(gm)})


def _all_uses_take_tensors(node: fx.Node) -> bool:
    """Every use of this number is more host arithmetic of the kind carried over, or an elementwise op that
    takes a tensor in its place (a use as a size or an index keeps the number)."""
    return bool(node.users) and all(
        _all_uses_take_tensors(user) if user.target in _ARITHMETIC else _takes_a_tensor(user, node)
        for user in node.users)


def _carried(graph: fx.Graph, node: fx.Node, tensors: dict, made: list) -> fx.Node | None:
    """The ATen op computing `node` on the 0-d tensors of its carried operands (inserted after node), or None
    when an operand is neither a carried number nor a Python number."""
    operands = []
    for a in node.args:
        if isinstance(a, fx.Node) and a in tensors:
            operands.append(tensors[a])
        elif isinstance(a, (int, float)) and not isinstance(a, bool):
            operands.append(float(a))
        else:
            return None
    some = next((a for a in operands if isinstance(a, fx.Node)), None)
    if some is None:
        return None
    anchor = node
    if not isinstance(operands[0], fx.Node):  # number op tensor: the number as a 0-d constant of that tensor
        meta = some.meta["val"]
        with graph.inserting_after(anchor):
            anchor = graph.call_function(aten.full.default, ([], operands[0]), {
                "dtype": meta.dtype, "device": meta.device, "pin_memory": False})
        anchor.meta["val"] = meta.new_full([], operands[0])
        operands[0] = anchor
        made.append(anchor)
    with graph.inserting_after(anchor):
        result = call_with_value(graph, _ARITHMETIC[node.target], operands)
    made.append(result)
    return result


def _takes_a_tensor(user: fx.Node, read: fx.Node) -> bool:
    """user is elementwise and computes the same with the 0-d tensor in place of the number."""
    result = tensor_meta(user)
    if user.op != "call_function" or user.target not in POINTWISE or result is None:
        return False
    if not result.dtype.is_floating_point or read in user.kwargs.values():
        return False
    others = [a for a in user.all_input_nodes if a is not read]
    return all((m := tensor_meta(a)) is not None and m.dim() > 0 and m.dtype == result.dtype for a in others)
