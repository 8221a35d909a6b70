"""fuse_window_into_gemm: a window kernel whose result only a GEMM reads, as A, is computed inside that GEMM.

Rule: `tf_gemm(a, b, extras...)` (a plain mm, A not a convolution's patches) where a is, through view ops and
copies that move nothing, exactly the [M, C] result of a `tf_window` kernel (a depthwise convolution or a
pooling, with its epilogue: bias, ReLU6, ...) that nothing else reads. The GEMM then takes the window's input
and operands and makes A in registers, a chunk of channels at a time, right before the K steps that read it:
MobileNet's depthwise-then-project pair no longer writes and reads back the expanded activation between them.
Each panel of columns makes its rows of A itself, so the window's work is repeated once per panel of N (a
projection to few channels has one or two).

Preconditions: float32 (the kernels' own); the view chain's result has A's shape [M, C], strides (C, 1) and
offset 0, so it is the window's result element for element; the GEMM runs the packed schedule (CPU devices):
on other devices the node runs as its reference, the window and the matmul in PyTorch.

    before:  w = tf_window_group2(x, taps, bias); v = view(w, [4, 56, 56, 192]); p = permute(v, [0, 3, 1, 2])
             q = permute(p, [0, 2, 3, 1]); a = view(q, [12544, 192]); y = tf_gemm_group3(a, b, bias2)
    after:   y = tf_gemm_group4(x, b, bias2, taps, bias)
"""

from __future__ import annotations

import torch.fx as fx

from torchfuser.ir.aten import VIEW_OPS
from torchfuser.ir.kernels import GemmKernel, WindowKernel
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import (PassResult, copies_nothing, count_ops, erase_nodes, insert_fused_node,
                                    next_group_id, record_unfused, rewrites_done)

NAME = "fuse_window_into_gemm"


def fuse_window_into_gemm(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    group = next_group_id(gm)
    fused, erased = 0, []
    for node in list(gm.graph.nodes):
        if not _plain_gemm(node):
            continue
        match = _producer_chain(node)
        if isinstance(match, str):
            if match:
                record_unfused(node, NAME, match)
            continue
        window, views = match
        gemm: GemmKernel = node.target
        producer = window.target
        kernel = GemmKernel(gemm.epilogue, group + fused, producer=producer)
        x, *window_operands = window.args
        inputs = [x, *node.args[1:], *window_operands]
        result = insert_fused_node(gm, kernel, inputs, [window, *views, node], tensor_meta(node))
        node.replace_all_uses_with(result)
        erased += [window, *views, node]
        fused += 1
    if erased:
        erase_nodes(gm, erased)
    return rewrites_done(gm, before, "windows_in_gemms", fused)


def _plain_gemm(node: fx.Node) -> bool:
    """A GEMM kernel that reads a plain A (not patches, not already a producer's)."""
    target = node.target
    return (node.op == "call_function" and isinstance(target, GemmKernel) and target.window is None
            and target.producer is None)


def _producer_chain(gemm: fx.Node) -> tuple[fx.Node, list[fx.Node]] | str:
    """(the window node, the view nodes from it to A in graph order), or why not ("" when A is no window's)."""
    views = []
    a = gemm.args[0]
    while isinstance(a, fx.Node) and a.op == "call_function" and (a.target in VIEW_OPS or copies_nothing(a)):
        if len(a.users) != 1:
            return ""
        views.append(a)
        a = a.args[0]
    if not (isinstance(a, fx.Node) and isinstance(a.target, WindowKernel)):
        return ""
    window = a
    if len(window.users) != 1:
        return "the window kernel's result is also read elsewhere: it is stored once for all its readers"
    win = window.target.window
    meta = tensor_meta(gemm.args[0])
    if meta is None or meta.dim() != 2:
        return "a batched GEMM: a window kernel's result is made inside plain mms only"
    if (tuple(meta.shape) != (win.rows, win.channels) or tuple(meta.stride()) != (win.channels, 1)
            or meta.storage_offset() != 0):
        return "A is not the window kernel's [M, C] result as it lies (a view that reorders or slices it)"
    return window, views[::-1]
