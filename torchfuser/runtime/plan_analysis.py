"""What each node of a plan's graph becomes, decided once from the graph: which results live in planned blocks
(liveness), which values have layouts the graph's input layouts fix, which views stay metadata (virtual) or are
the kernel's result reshaped, and which weight transforms read what kernels rewrite every call."""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from torchfuser.ir.aten import VIEW_OPS
from torchfuser.ir.kernels import FusedKernel
from torchfuser.ir.liveness import output_owners
from torchfuser.ir.symbolic import has_symbols, symbol_tensor, tensor_has_symbols
from torchfuser.runtime.memory import OutputLayout
from torchfuser.runtime.virtual_views import VIRTUAL_OPS


def reshaped_results(nodes, blocks, virtual: set) -> dict:
    """View nodes that only reshape a kernel's fresh result (contiguous to contiguous, offset 0: the same bytes),
    its only reader -> the view's shape. The kernel's output is allocated in that shape and the step passes it on:
    a view op right after a kernel that streamed the caches costs tens of microseconds (a block's output)."""
    found = {}
    for node in nodes:
        source = node.args[0] if node.op == "call_function" and node.args else None
        if (node.target not in VIEW_OPS or node.kwargs or node in virtual or not isinstance(source, fx.Node)
                or not isinstance(source.target, FusedKernel) or len(source.users) != 1 or source in blocks.of):
            continue
        made, viewed = source.meta.get("val"), node.meta.get("val")
        if (isinstance(made, torch.Tensor) and isinstance(viewed, torch.Tensor) and not tensor_has_symbols(made)
                and not tensor_has_symbols(viewed) and made.dtype == viewed.dtype and made.numel() == viewed.numel()
                and made.is_contiguous() and viewed.is_contiguous() and viewed.storage_offset() == 0):
            found[node] = tuple(viewed.shape)
    return found


def reads_kernel_results(node: fx.Node, owner) -> bool:
    """node reads what a kernel of the plan writes (a planned block, rewritten each call with no new version:
    a weight transform of it is made anew every call, as a fallback, never kept by version)."""
    return any(isinstance(owner[a].target, FusedKernel) for a in node.all_input_nodes)


def trusted_values(nodes, owner) -> set:
    """Values whose layout follows from the graph's input layouts: inputs, constants, kernel results, the plan's
    0-d tensors of integer inputs (passes/symbol_operands.py) and views of them (a PyTorch fallback's result is
    not counted: its layout is the op's business)."""
    return {n for n in nodes if owner[n].op in ("placeholder", "get_attr")
            or isinstance(owner[n].target, FusedKernel) or owner[n].target is symbol_tensor}


def virtual_view_nodes(nodes, owner, to_output, blocks) -> set:
    """View nodes that only kernels read (directly or through other such views), kept as metadata
    (runtime/virtual_views.py). Views of constants (get_attr) stay tensors, and so do views of planned results
    by constant arguments, which the view cache gives at no cost. Views of weights (graph inputs) are virtual:
    a GEMM finds its packed copy of one from the view's root and layout (gemm_launch.PackedWeights)."""
    found: set = set()
    for node in reversed(nodes):
        root = owner[node]
        if (node.op != "call_function" or node.target not in VIRTUAL_OPS or node.kwargs or not node.users
                or node in to_output or root.op == "get_attr"
                or not all(u in found or isinstance(u.target, FusedKernel) for u in node.users)):
            continue
        if root in blocks.of and not any(isinstance(a, fx.Node) for a in node.args[1:]):
            continue
        found.add(node)
    return found


def reaching_output(nodes) -> set:
    """Nodes whose value is an output or viewed by one (such views are made fresh every call, as eager does)."""
    found = set()
    for node in reversed(nodes):
        if node.op == "output" or any(u in found for u in node.users if u.op == "output" or
                                      u.target is operator.getitem or u.target in VIEW_OPS):
            found.add(node)
    return found


class PlannedLayout:
    def __init__(self):
        self.capacities: list[int] = []
        self.of: dict = {}  # kernel node -> [block per output]


def plan_blocks(nodes, owner, last_use) -> PlannedLayout:
    """Blocks for the results of kernels that no output reaches: best fit among the blocks free at the node
    (a node's own inputs are released only after its outputs are placed, since it reads them as it writes)."""
    outputs = output_owners(nodes, owner)
    blocks = PlannedLayout()
    free: list[int] = []
    release: dict[int, list[int]] = {}
    for i, node in enumerate(nodes):
        if isinstance(node.target, FusedKernel) and owner[node] is node and node not in outputs and node.users:
            values = node.meta.get("val")
            values = values if isinstance(values, (tuple, list)) else [values]
            if any(isinstance(v, torch.Tensor) and has_symbols(v.shape) for v in values):
                continue  # sizes that change between calls: fresh outputs, as for graph outputs
            placed = []
            for value in values:
                need = OutputLayout.of(value.shape, value.stride(), value.dtype).nbytes if isinstance(
                    value, torch.Tensor) else 0
                fits = [b for b in free if blocks.capacities[b] >= need]
                if fits:
                    block = min(fits, key=blocks.capacities.__getitem__)
                    free.remove(block)
                else:
                    block = len(blocks.capacities)
                    blocks.capacities.append(need)
                placed.append(block)
            blocks.of[node] = placed
            release.setdefault(last_use.get(node, i), []).extend(placed)
        free += release.pop(i, [])
    return blocks
