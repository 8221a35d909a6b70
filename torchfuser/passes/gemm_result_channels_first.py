"""gemm_result_channels_first: a convolution's GEMM whose result is only copied into eager's NCHW (NCL) layout
stores it so, and the copy goes.

Rule: `tf_gemm` (a plain mm, [M, N] with M = images x pixels, or a bmm of one image per product) read only
through `view` to [B, H, W, N] ([B, L, N]) and `permute`s that make NCHW (NCL) of it, where every reader of that
permute is a pointwise kernel that only copies it into a contiguous result (channels_last_between_convs' copy of
a convolution's result for the graph's output or a reader that needs eager's strides). The GEMM then stores
C[m / HW][n][m % HW] (GemmSpec.out_images) and the copies' readers read the GEMM's result. A pointwise kernel that
does more than copy (a residual add against an NCHW input) keeps reading the channels-last result: storing a
column of pixels at a time costs the GEMM more than that kernel's transposing read (MobileNetV2's last
projection: +250 us in the GEMM for -110 us in the add).

Preconditions: float32 (the kernels' own); static sizes; K of at most MAX_DEPTH: the packed schedule then runs K in
one block (partial sums of K blocks would go through C in rows), its B panel streamed from L2 rather than L1.

    before:  g = tf_gemm_group0(a, b, bias); v = view(g, [4, 56, 56, 192]); p = permute(v, [0, 3, 1, 2])
             y = tf_pointwise_group1(p)                                               # a copy: NCHW result
    after:   y = tf_gemm_group0(a, b, bias)                                           # [4, 192, 56, 56]
"""

from __future__ import annotations

import math

import torch
import torch.fx as fx

from torchfuser.ir.aten import RESHAPES
from torchfuser.ir.kernels import GemmKernel, PointwiseKernel
from torchfuser.ir.symbolic import has_symbols
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import PassResult, count_ops, erase_nodes, insert_fused_node

aten = torch.ops.aten
ORDERS = {2: [0, 3, 1, 2], 1: [0, 2, 1]}  # spatial dims -> the permute from channels-last to eager's order
# The deepest K run in one block: a 32-column panel of 4096 rows (512 KiB) stays in L2. Convolutions of K = 1152
# (Whisper's second conv1d) and 3072 ran faster in one block than in K blocks followed by the transposing copy.
MAX_DEPTH = 4096


def gemm_result_channels_first(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    rewritten, dropped, erased = 0, 0, []
    for node in list(gm.graph.nodes):
        match = _match(node)
        if match is None:
            continue
        views, permute, spatial, copies = match
        gemm: GemmKernel = node.target
        kernel = GemmKernel(gemm.epilogue, gemm.group, gemm.window, gemm.producer, channels_first=spatial)
        result = insert_fused_node(gm, kernel, list(node.args), [node, *views, *copies],
                                   torch.empty_like(tensor_meta(permute), memory_format=torch.contiguous_format))
        for copy in copies:
            copy.replace_all_uses_with(result)
        erased += [node, *views, *copies]
        rewritten, dropped = rewritten + 1, dropped + len(copies)
    if erased:
        erase_nodes(gm, erased)
    return PassResult(gm, rewritten > 0, {"results_channels_first": rewritten, "copies_dropped": dropped,
                                          "nodes_before": before, "nodes_after": count_ops(gm)})


def _match(node: fx.Node) -> tuple | None:
    """(the view and permutes after node, the last permute, spatial sizes, its copies) where node is such a GEMM,
    else None."""
    if not (node.op == "call_function" and isinstance(node.target, GemmKernel) and node.target.channels_first is None):
        return None
    meta = tensor_meta(node)
    if meta is None or meta.dim() not in (2, 3) or meta.dtype != torch.float32 or len(node.users) != 1:
        return None
    inputs = [tensor_meta(a) for a in node.all_input_nodes]
    if has_symbols([*meta.shape, *(d for t in inputs if t is not None for d in t.shape)]):
        return None  # sizes known at run time only: the spec's out_images is a constant, and no guard is added
    if _depth(node) > MAX_DEPTH:
        return None  # K in blocks: their partial sums go through C in rows
    (view,) = node.users
    if view.target not in RESHAPES or len(view.users) != 1:
        return None
    shape = list(tensor_meta(view).shape)
    spatial = shape[1:-1]
    # rows are whole images: a plain mm's M, or each of a bmm's per-image products
    if (len(spatial) not in ORDERS or shape[-1] != meta.shape[-1] or math.prod(shape[:-1]) != meta.shape[:-1].numel()
            or meta.shape[-2] % math.prod(spatial)):
        return None
    permutes, order = [], list(range(len(shape)))
    (permute,) = view.users
    while permute.target is aten.permute.default:  # a chain of permutes (to NCL, back, again ...) composed
        permutes.append(permute)
        order = [order[d] for d in permute.args[1]]
        if len(permute.users) != 1 or next(iter(permute.users)).target is not aten.permute.default:
            break
        (permute,) = permute.users
    if not permutes or order != ORDERS[len(spatial)]:
        return None
    permute = permutes[-1]
    target = tensor_meta(permute)
    copies = list(permute.users)
    if not copies or not all(_contiguous_pointwise(r, target) and _copies(r) for r in copies):
        return None
    return [view, *permutes], permute, tuple(spatial), copies


def _depth(node: fx.Node) -> int:
    """K of a GEMM node: its A's last dim, a convolution's window depth, a producer's channels."""
    gemm: GemmKernel = node.target
    if gemm.producer is not None:
        return gemm.producer.window.channels
    if gemm.window is not None:
        return gemm.window.depth
    return tensor_meta(node.args[0]).shape[-1]


def _contiguous_pointwise(node: fx.Node, shape_of: torch.Tensor) -> bool:
    """A pointwise kernel whose result is contiguous with the permuted GEMM result's shape."""
    if node.op != "call_function" or not isinstance(node.target, PointwiseKernel):
        return False
    results = node.meta.get("val")
    results = results if isinstance(results, (tuple, list)) else [results]
    return all(isinstance(r, torch.Tensor) and r.shape == shape_of.shape and r.is_contiguous() for r in results)


def _copies(node: fx.Node) -> bool:
    """A pointwise kernel that only copies its one input (into eager's layout)."""
    program = node.target.program
    return (program.n_inputs == 1 and not program.instrs and list(program.outputs) == [0]
            and len(node.args) == 1 and program.output_dtypes[0] == program.input_dtypes[0])
