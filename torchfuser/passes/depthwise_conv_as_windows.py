"""depthwise_conv_as_windows: a depthwise convolution becomes a direct kernel, or a weighted sum of its windows.

A depthwise convolution (groups = input channels = output channels) filters each channel on its own: output
channel c at (oh, ow) is the sum over taps (i, j) of x[c] at (oh * s0 - p0 + i * d0, ow * s1 - p1 + j * d1)
times w[c, 0, i, j], plus b[c]. No GEMM: each output reads only KH x KW inputs and as many weights.

Rule, float32 x whose channels are innermost in memory (channels-last, as between conv_as_gemm's
convolutions): one window kernel (ir/kernels/window.py, a sum) over x's NHWC view, any window, stride and
dilation; taps that fall in the padding are skipped, so no padded copy of x is made. Its weights are w as a
[KH * KW, C] matrix (made once per weight version), its bias the start of its epilogue, into which
fuse_gemm_epilogue takes what follows (ReLU6, a residual add: moved onto the NHWC view here).

    before:  y = convolution(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 192)   # x [4, 192, 56, 56] NHWC
    after:   t = tf_conv_weight_as_matrix(w); k = tf_window_group0(permute(x, [0, 2, 3, 1]), t, b)
             y = permute(view(k, [4, 56, 56, 192]), [0, 3, 1, 2])

Rule, any other x (NCHW): each tap's reads are a strided view of the zero-padded input with the output's
shape, as in pool_as_windows, and its weight a per-channel operand [C, 1, 1]; the sum is elementwise, so
fuse_pointwise makes the whole convolution one kernel with what follows:

    xp = cat([0, cat([0, x, 0], -1), 0], -2)                                    # with padding only
    tap(i, j) = xp[..., i*d0 : i*d0 + s0*(OH-1) + 1 : s0, j*d1 : j*d1 + s1*(OW-1) + 1 : s1]
    y = tap(0, 0) * w[:, 0, 0, 0, None, None] + tap(0, 1) * w[:, 0, 0, 1, None, None] + ... [+ b[:, None, None]]

Preconditions: floating x and w of one dtype, static sizes; for the window sum at most MAX_TAPS taps and stride
1. Larger or strided windows over NCHW, depth multipliers (C_out a multiple of C), other grouped, transposed
and 3-d convolutions stay in PyTorch, with the reason. Runs after fold_batch_norm, so a batch norm after the
convolution is in w and b already.
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.fx as fx

from torchfuser.ir.kernels.window import WindowKernel, Window, bias_epilogue
from torchfuser.ir.layout import channels_innermost
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import (
    PassResult, call_with_value, constant_pad, conv_weight_matrix, convolution_problem, count_ops, insert_fused_node,
    next_group_id, record_unfused, rewrites_done,
)
from torchfuser.passes.channels_last_between_convs import elementwise_in_nhwc

aten = torch.ops.aten
NAME = "depthwise_conv_as_windows"
# Each tap is two more inputs of the fused kernel. Beyond 9 taps, or with strided taps, this form ran slower
# than oneDNN's depthwise convolution (figures in the notes): those stay in PyTorch until a direct kernel.
MAX_TAPS = 9


def handles(node: fx.Node) -> bool:
    return node.target is aten.convolution.default and _is_grouped(node)


def _is_grouped(node: fx.Node) -> bool:
    return len(node.args) > 8 and node.args[8] != 1


def depthwise_conv_as_windows(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    rewritten = 0
    for node in [n for n in gm.graph.nodes if n.target is aten.convolution.default and _is_grouped(n)]:
        why = _problem(node)
        if why is not None:
            record_unfused(node, NAME, why)
            continue
        if _as_kernel(node):
            _rewrite_as_kernel(gm, node)
        else:
            _rewrite(gm.graph, node)
        rewritten += 1
    return rewrites_done(gm, before, "convolutions", rewritten)


def _problem(node: fx.Node) -> str | None:
    why = convolution_problem(node)
    if why is not None:
        return why
    x, w, groups = tensor_meta(node.args[0]), tensor_meta(node.args[1]), node.args[8]
    channels = x.shape[1]
    if groups != channels or w.shape[0] != channels:
        what = "a depth multiplier" if groups == channels else f"{groups} groups of {channels // groups} channels"
        return f"a grouped convolution with {what} (depthwise with one output per channel is lowered)"
    if _as_kernel(node):
        return None  # the window kernel takes any window
    if math.prod(w.shape[2:]) > MAX_TAPS:
        return f"a depthwise convolution of more than {MAX_TAPS} taps (slower as windows than in PyTorch)"
    if any(s != 1 for s in node.args[3]):
        return "a strided depthwise convolution of an NCHW input (slower as windows than in PyTorch)"
    return None


def _as_kernel(node: fx.Node) -> bool:
    x = tensor_meta(node.args[0])
    return x.dtype == torch.float32 and channels_innermost(x)


def _rewrite_as_kernel(gm: fx.GraphModule, node: fx.Node) -> None:
    """A channels-last input: one window kernel (a sum) over its NHWC view."""
    x, w, bias, stride, padding, dilation = node.args[:6]
    window = Window.over(tensor_meta(x).shape, tensor_meta(w).shape[2:], stride, padding, dilation)
    with gm.graph.inserting_before(node):
        taps = conv_weight_matrix(gm.graph, w)
    window_kernel_over_nhwc(gm, node, x, [taps] + ([bias] if bias is not None else []), window, "sum",
                            bias_epilogue(bias is not None))


def window_kernel_over_nhwc(gm: fx.GraphModule, replaced: fx.Node, x: fx.Node, operands: list, window: Window,
                            reduction: str, epilogue, covers: tuple = ()) -> fx.Node:
    """`replaced` (an NCHW- or NCL-shaped result over x's windows) computed by a window kernel over x's
    channels-last view: [M, C], viewed back as channels-last memory of replaced's shape; the elementwise ops
    after it move onto the NHWC view (so fuse_gemm_epilogue takes them into the kernel). Returns that view.
    `covers`: the nodes before `replaced` that the kernel computes too (for the report)."""
    graph = gm.graph
    call = partial(call_with_value, graph)
    spatial = tensor_meta(x).dim() - 2
    to_nhwc = [0, *range(2, spatial + 2), 1]
    out = tensor_meta(replaced)
    with graph.inserting_before(replaced):
        nhwc = call(aten.permute.default, (x, to_nhwc))
        if spatial == 1:  # [N, L, C] as [N, 1, L, C]
            nhwc = call(aten.unsqueeze.default, (nhwc, 1))
    kernel = WindowKernel(window, reduction, epilogue, next_group_id(gm))
    result = tensor_meta(x).new_empty((window.rows, window.channels))
    fused = insert_fused_node(gm, kernel, [nhwc, *operands], [*covers, replaced], result)
    with graph.inserting_after(fused):
        y = call(aten.view.default, (fused, [out.shape[0], *out.shape[2:], out.shape[1]]))
        with graph.inserting_after(y):
            y = call(aten.permute.default, (y, [to_nhwc.index(d) for d in range(spatial + 2)]))
    y.meta.update({k: v for k, v in replaced.meta.items() if k != "val"})
    replaced.replace_all_uses_with(y)
    graph.erase_node(replaced)
    _activation_in_nhwc(graph, y)
    return y


def _activation_in_nhwc(graph: fx.Graph, y: fx.Node) -> None:
    """The elementwise ops after the result onto its NHWC view, where they follow the kernel's memory order (so
    fuse_gemm_epilogue takes them into it, and fuse_pointwise into a window sum)."""
    views, frontier = {y}, [y]
    while frontier:
        for user in list(frontier.pop().users):
            back = elementwise_in_nhwc(graph, user, views)
            if back is not None:
                frontier.append(back)


def _rewrite(graph: fx.Graph, node: fx.Node) -> None:
    """An NCHW input: the sum of one strided view of the padded input per tap, weights per channel."""
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, w, bias, stride, padding, dilation = node.args[:6]
    spatial = tensor_meta(x).dim() - 2
    kernel, out_sizes = tensor_meta(w).shape[2:], tensor_meta(node).shape[2:]
    dims = list(range(-spatial, 0))
    with graph.inserting_before(node):
        for dim, pad in zip(reversed(dims), reversed(padding)):
            if pad:
                x = constant_pad(graph, x, dim, pad, 0.0)
        per_channel = call(aten.select.int, (w, 1, 0))  # [C, *K]
        y = None
        for taps in _taps(kernel):
            view, weight = x, per_channel
            for dim, tap, step, dilate, count in zip(dims, taps, stride, dilation, out_sizes):
                start = tap * dilate
                view = call(aten.slice.Tensor, (view, dim, start, start + step * (count - 1) + 1, step))
                weight = call(aten.select.int, (weight, 1, tap))
            term = call(aten.mul.Tensor, (view, _per_channel(call, weight, spatial)))
            y = term if y is None else call(aten.add.Tensor, (y, term))
        if bias is not None:
            y = call(aten.add.Tensor, (y, _per_channel(call, bias, spatial)))
    y.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(y)
    graph.erase_node(node)


def _per_channel(call, value: fx.Node, spatial: int) -> fx.Node:
    """[C] -> [C, 1(, 1)]: broadcast over an NCHW output's positions."""
    for _ in range(spatial):
        value = call(aten.unsqueeze.default, (value, -1))
    return value


def _taps(kernel) -> list[tuple[int, ...]]:
    """Every tap of a window, row-major: (i,) in 1-d, (i, j) in 2-d."""
    taps = [()]
    for size in kernel:
        taps = [(*t, k) for t in taps for k in range(size)]
    return taps
