"""Peak intermediate memory of a graph run in order, freeing each buffer after its last use.

Used for the report: the fused graph's peak beside the eager (aten) graph's. A view (and a tuple item)
allocates nothing and keeps the buffer it views alive for as long as it is used itself; graph inputs and
outputs are not intermediates.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from torchfuser.ir.aten import VIEW_OPS


def _nbytes(val) -> int:
    if isinstance(val, torch.Tensor):
        return val.numel() * val.element_size()
    if isinstance(val, (tuple, list)):
        return sum(_nbytes(v) for v in val)
    return 0


def peak_intermediate_bytes(gm: fx.GraphModule) -> int:
    nodes = list(gm.graph.nodes)
    owner: dict[fx.Node, fx.Node] = {}  # node -> the allocating node whose buffer it uses
    for node in nodes:
        aliases = node.op == "call_function" and (node.target in VIEW_OPS or node.target is operator.getitem)
        source = node.args[0] if aliases and isinstance(node.args[0], fx.Node) else None
        owner[node] = owner.get(source, source) if source is not None else node
    last_use: dict[fx.Node, int] = {}
    outputs = set()
    for i, node in enumerate(nodes):
        for inp in node.all_input_nodes:
            last_use[owner[inp]] = i
        if node.op == "output":
            outputs |= {owner[n] for n in node.all_input_nodes}
    live = peak = 0
    frees: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        if owner[node] is node and node.op == "call_function" and node not in outputs:
            size = _nbytes(node.meta.get("val"))
            live += size
            peak = max(peak, live)
            frees.setdefault(last_use.get(node, i), []).append(size)
        live -= sum(frees.pop(i, []))
    return peak
