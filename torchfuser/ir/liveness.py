"""Which buffer each value of a graph lives in, and when that buffer is last used.

A view (and a tuple item, and any op whose schema says its result aliases an input, such as `copy_`)
allocates nothing: its value lives in the buffer of the node it views, for as long as it is used itself.
The report's memory figures and the executor's planned buffers both read this.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from torchfuser.ir.aten import VIEW_OPS


def aliases_an_input(node: fx.Node) -> bool:
    """The node's result is (a view of) its first argument's buffer."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], fx.Node):
        return False
    target = node.target
    if target is operator.getitem or target in VIEW_OPS:
        return True
    if isinstance(target, torch._ops.OpOverload):
        return any(r.alias_info is not None for r in target._schema.returns)
    return False


def buffer_owners(nodes: list[fx.Node]) -> dict[fx.Node, fx.Node]:
    """node -> the node that allocated the buffer its value lives in (itself when it allocates)."""
    owner: dict[fx.Node, fx.Node] = {}
    for node in nodes:
        source = node.args[0] if aliases_an_input(node) else None
        owner[node] = owner.get(source, source) if source is not None else node
    return owner


def last_uses(nodes: list[fx.Node], owner: dict[fx.Node, fx.Node]) -> dict[fx.Node, int]:
    """allocating node -> position of the last node that reads its buffer (through any view)."""
    last: dict[fx.Node, int] = {}
    for i, node in enumerate(nodes):
        for inp in node.all_input_nodes:
            last[owner[inp]] = i
    return last


def output_owners(nodes: list[fx.Node], owner: dict[fx.Node, fx.Node]) -> set[fx.Node]:
    """The allocating nodes whose buffers the graph's outputs live in."""
    return {owner[n] for node in nodes if node.op == "output" for n in node.all_input_nodes}
