"""symbol_operands: an integer graph input (a symbol's value) feeds elementwise ops as a 0-d int64 tensor.

With dynamic shapes Dynamo passes a size the code computes with as a Python int: HF's
`cache_position = arange(past, past + n)` arrives as `add(arange(n), s0)`, s0 an integer graph input. An
elementwise op with a number that is not a constant cannot join a kernel, and one run in PyTorch every call
keeps a plan's steady calls from replaying a tape (runtime/steady_tape.py). This pass hands the op
`symbol_tensor(s0)` instead: a 0-d int64 tensor that the plan keeps in its own memory and writes the call's
value into (runtime/executor.py). Kernels read it as one more broadcast input, so one build serves every value.

Rule: in an elementwise op whose operand slot takes a tensor, an operand that is an integer graph input
becomes symbol_tensor(that input) (one per input, shared by every use).
Precondition (equal results): every other tensor operand has at least one dim. A Python int and a 0-d int64
tensor then promote alike (neither outranks a dimensioned tensor: beside integers the op keeps their dtype,
beside floating point the floating dtype), so the op computes the same values in the same dtype.

    before:  a = arange(1); c = add(a, arg3_1)                    # arg3_1: s0, an integer input
    after:   t = symbol_tensor(arg3_1); c = add(a, t)              # t: [] int64
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.ir.symbolic import symbol_tensor
from torchfuser.lowering.from_aten import POINTWISE, tensor_meta
from torchfuser.passes.base import count_ops, rewrites_done

NAME = "symbol_operands"


def symbol_operands(gm: fx.GraphModule):
    before = count_ops(gm)
    tensors: dict[fx.Node, fx.Node] = {}  # an integer input -> its symbol_tensor node
    rewritten = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in POINTWISE:
            continue
        for position, operand in enumerate(node.args):
            if not (_integer_input(operand) and _takes_a_tensor(node, position)):
                continue
            if operand not in tensors:
                tensors[operand] = _tensor_of(gm.graph, operand, node)
            node.update_arg(position, tensors[operand])
            rewritten += 1
    return rewrites_done(gm, before, "operands", rewritten)


def _integer_input(operand) -> bool:
    return (isinstance(operand, fx.Node) and operand.op == "placeholder"
            and isinstance(operand.meta.get("val"), torch.SymInt))


def _takes_a_tensor(node: fx.Node, position: int) -> bool:
    """The op's schema takes a tensor at `position` (an `.Tensor` overload, not `.Scalar`), and every other tensor
    operand has dims (the precondition)."""
    arguments = node.target._schema.arguments
    if position >= len(arguments) or not isinstance(arguments[position].type, torch.TensorType):
        return False
    others = [a for i, a in enumerate(node.args) if i != position and isinstance(a, fx.Node)]
    return bool(others) and all((m := tensor_meta(a)) is not None and m.dim() > 0 for a in others)


def _tensor_of(graph: fx.Graph, number: fx.Node, user: fx.Node) -> fx.Node:
    """symbol_tensor(number), inserted before its first user, with a fake 0-d int64 value."""
    with graph.inserting_before(user):
        node = graph.call_function(symbol_tensor, (number,))
    node.meta["val"] = tensor_meta(next(a for a in user.args if tensor_meta(a) is not None)).new_empty(
        (), dtype=torch.int64)
    return node
