"""Peak intermediate memory of a graph run in order, freeing each buffer after its last use.

Used for the report: the fused graph's peak beside the eager (aten) graph's. Buffers and their lifetimes
come from ir/liveness.py; graph inputs and outputs are not intermediates.
"""

from __future__ import annotations

import math

import torch
import torch.fx as fx

from torchfuser.ir.liveness import buffer_owners, last_uses, output_owners
from torchfuser.ir.symbolic import hints


def _nbytes(val) -> int:
    if isinstance(val, torch.Tensor):  # symbolic sizes count at the example's values
        return math.prod(hints(val.shape)) * val.element_size()
    if isinstance(val, (tuple, list)):
        return sum(_nbytes(v) for v in val)
    return 0


def peak_intermediate_bytes(gm: fx.GraphModule) -> int:
    nodes = list(gm.graph.nodes)
    owner = buffer_owners(nodes)
    last_use = last_uses(nodes, owner)
    outputs = output_owners(nodes, owner)
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
