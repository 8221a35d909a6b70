"""pool_as_windows: max pooling of a channels-last batch becomes a window kernel; other pooling, elementwise ops
over one strided view per window tap.

Rule, max pooling of a float32 batch whose channels are innermost in memory (a channels-last model, or between
conv_as_gemm's convolutions: this pass runs after channels_last_between_convs, which decides that): one window
kernel (ir/kernels/window.py, a max) over x's NHWC view, NaN propagating; taps in the padding are skipped, so
no padded copy is made; what follows joins its epilogue (fuse_gemm_epilogue).

    before:  y = getitem(max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1]), 0)      # x [4, 64, 56, 56] NHWC
    after:   k = tf_window_group0(permute(x, [0, 2, 3, 1])); y = permute(view(k, [4, 28, 28, 64]), [0, 3, 1, 2])

Rule, other pooling: a window of KH x KW taps at stride s reads, for tap (i, j), the input at (oh * s0 + i * d0,
ow * s1 + j * d1): a strided view of the (padded) input, the same shape as the output. The max (or the sum) of
those views is the pooling, and it is elementwise, so fuse_pointwise makes it one kernel that reads the input
in place and takes in the activation before it or the ops after it. Padding is a concatenation with -inf (max:
eager skips padded taps, and -inf never wins) or 0 (average with count_include_pad), a literal in the kernel.
`getitem(max_pool2d_with_indices(x, k, s, p, d, ceil_mode=False), 0)` (the indices unused) and
`avg_pool2d(x, k, s, p, ceil_mode=False, count_include_pad=True or p = 0, divisor_override=None)` on x [N, C,
H, W] or [C, H, W] with at most MAX_TAPS taps become

    xp = cat([c, cat([c, x, c], -1), c], -2)                  # with padding only
    tap(i, j) = xp[..., i*d0 : i*d0 + s0*(OH-1) + 1 : s0, j*d1 : j*d1 + s1*(OW-1) + 1 : s1]
    y = maximum(maximum(tap(0, 0), tap(0, 1)), ...)          # NaN propagates, as in eager's max pooling
    y = (tap(0, 0) + tap(0, 1) + ...) / (KH * KW)            # average, taps summed in eager's order

Preconditions: a floating x, static sizes. ceil_mode, count_include_pad=False over padding, a divisor
override and larger windows stay in PyTorch, with the reason.

    before:  y = getitem(max_pool2d_with_indices(x, [3, 3], [2, 2], [1, 1]), 0)      # x [4, 64, 56, 56]
    after:   xp = cat(... -inf ...); y = maximum(... 9 slices of xp ...)            # y [4, 64, 28, 28]
"""

from __future__ import annotations

import math
import operator
from functools import partial

import torch
import torch.fx as fx

from torchfuser.ir.kernels.window import Window, bias_epilogue
from torchfuser.ir.layout import channels_innermost
from torchfuser.ir.symbolic import has_symbols
from torchfuser.lowering.from_aten import node_arg, tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, constant_pad, count_ops, record_unfused, rewrites_done
from torchfuser.passes.depthwise_conv_as_windows import window_kernel_over_nhwc

aten = torch.ops.aten
NAME = "pool_as_windows"
MAX_TAPS = 49  # a 7x7 window: each tap is one more input read of the kernel
MAX_POOL, AVG_POOL = aten.max_pool2d_with_indices.default, aten.avg_pool2d.default


def handles(node: fx.Node) -> bool:
    return node.target in (MAX_POOL, AVG_POOL)


def pool_as_windows(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    rewritten = 0
    for node in [n for n in gm.graph.nodes if n.target in (MAX_POOL, AVG_POOL)]:
        why = _problem(node)
        if why is not None:
            record_unfused(node, NAME, why)
            continue
        result = node if node.target is AVG_POOL else next(iter(node.users))
        if _as_kernel(node):
            kernel, stride, padding, dilation = _window(node)
            window = Window.over(tensor_meta(node.args[0]).shape, kernel, stride, padding, dilation)
            window_kernel_over_nhwc(gm, result, node.args[0], [], window, "max", bias_epilogue(False),
                                    covers=(node,) if result is not node else ())
            if result is not node:
                gm.graph.erase_node(node)
        else:
            _rewrite(gm.graph, node, result)
        rewritten += 1
    return rewrites_done(gm, before, "poolings", rewritten)


def _window(node: fx.Node):
    """(kernel, stride, padding, dilation) as pairs; an empty stride means the kernel size."""
    pair = lambda v: [v, v] if isinstance(v, int) else list(v) * (2 // len(v))  # noqa: E731
    kernel = pair(node.args[1])
    stride = pair(node_arg(node, 2, "stride", []) or kernel)
    padding = pair(node_arg(node, 3, "padding", 0))
    dilation = pair(node_arg(node, 4, "dilation", 1)) if node.target is MAX_POOL else [1, 1]
    return kernel, stride, padding, dilation


def _problem(node: fx.Node) -> str | None:
    x = tensor_meta(node.args[0])
    if x is None or not x.dtype.is_floating_point or x.dim() not in (3, 4) or has_symbols(list(x.shape)):
        return "pooling of a non-floating or symbolic-sized input"
    kernel, _, padding, _ = _window(node)
    if math.prod(kernel) > MAX_TAPS:
        return f"a pooling window of more than {MAX_TAPS} taps"
    if node.target is MAX_POOL:
        if node_arg(node, 5, "ceil_mode", False):
            return "max pooling with ceil_mode"
        users = list(node.users)
        if len(users) != 1 or users[0].target is not operator.getitem or users[0].args[1] != 0:
            return "max pooling whose indices are used"
        return None
    if node_arg(node, 4, "ceil_mode", False) or node_arg(node, 6, "divisor_override", None) is not None:
        return "average pooling with ceil_mode or a divisor override"
    if any(padding) and not node_arg(node, 5, "count_include_pad", True):
        return "average pooling over padding that the divisor does not count"
    return None


def _as_kernel(node: fx.Node) -> bool:
    """Max pooling of a float32 channels-last batch: the window kernel."""
    x = tensor_meta(node.args[0])
    return node.target is MAX_POOL and x.dtype == torch.float32 and x.dim() == 4 and channels_innermost(x)


def _rewrite(graph: fx.Graph, node: fx.Node, result: fx.Node) -> None:
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x = node.args[0]
    kernel, stride, padding, dilation = _window(node)
    out_h, out_w = tensor_meta(result).shape[-2:]
    is_max = node.target is MAX_POOL
    with graph.inserting_before(result):
        for dim, pad in ((-1, padding[1]), (-2, padding[0])):
            if pad:
                x = constant_pad(graph, x, dim, pad, -math.inf if is_max else 0.0)
        y = None
        for i in range(kernel[0]):
            for j in range(kernel[1]):
                tap = x
                for dim, start, step, count in ((-2, i * dilation[0], stride[0], out_h),
                                                (-1, j * dilation[1], stride[1], out_w)):
                    tap = call(aten.slice.Tensor, (tap, dim, start, start + step * (count - 1) + 1, step))
                y = tap if y is None else call(aten.maximum.default if is_max else aten.add.Tensor, (y, tap))
        if not is_max:
            y = call(aten.div.Tensor, (y, float(math.prod(kernel))))
    y.meta.update({k: v for k, v in result.meta.items() if k != "val"})
    result.replace_all_uses_with(y)
    graph.erase_node(result)
    if result is not node:
        graph.erase_node(node)
