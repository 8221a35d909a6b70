"""depthwise_conv_as_windows: a depthwise convolution becomes a weighted sum of one strided view per tap.

A depthwise convolution (groups = input channels = output channels) filters each channel on its own: output
channel c at (oh, ow) is the sum over taps (i, j) of x[c] at (oh * s0 + i * d0, ow * s1 + j * d1) times w[c,
0, i, j], plus b[c]. Each tap's reads are a strided view of the (zero-padded) input with the output's shape,
as in pool_as_windows, and its weight is a per-channel operand [C, 1, 1]; the sum is elementwise, so
fuse_pointwise makes the whole convolution one kernel that reads the input in place, with what follows (a
folded batch norm's shift is the bias already; ReLU6, a residual add) in the same kernel. This is the direct
schedule for depthwise convolutions: no GEMM, since each output reads only KH x KW inputs and as many weights.

Rule: `convolution(x, w, b, stride, padding, dilation, transposed=False, output_padding, groups=C)` with x [N,
C, *S] (1 or 2 spatial dims), w [C, 1, *K] and at most MAX_TAPS taps becomes

    xp = cat([0, cat([0, x, 0], -1), 0], -2)                                    # with padding only
    tap(i, j) = xp[..., i*d0 : i*d0 + s0*(OH-1) + 1 : s0, j*d1 : j*d1 + s1*(OW-1) + 1 : s1]
    y = tap(0, 0) * w[:, 0, 0, 0, None, None] + tap(0, 1) * w[:, 0, 0, 1, None, None] + ... [+ b[:, None, None]]

An input whose channels are innermost in memory (channels-last, as between conv_as_gemm's convolutions) is
summed over its NHWC view instead: each tap's run of channels is contiguous and its weights are row t of w
as a [KH * KW, C] matrix (made once per weight version), broadcast along it; the result is viewed back.

Preconditions: floating x and w of one dtype, static sizes, at most MAX_TAPS taps, stride 1 where x is NCHW.
Larger windows, strided ones over NCHW, depth multipliers (C_out a multiple of C), other grouped, transposed
and 3-d convolutions stay in PyTorch, with the reason. Runs after fold_batch_norm, so a batch norm after the
convolution is in w and b already.

    before:  y = convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 192)   # x [4, 192, 56, 56]
    after:   xp = cat(... 0 ...); y = add(... 9 products of a slice of xp and a select of w ...)
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.fx as fx

from torchfuser.ir.layout import channels_innermost
from torchfuser.ir.weights import ConvWeightAsMatrix
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import (
    PassResult, call_with_value, constant_pad, convolution_problem, count_ops, record_unfused,
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
        _rewrite(gm.graph, node)
        rewritten += 1
    if rewritten:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, rewritten > 0, {"convolutions": rewritten, "nodes_before": before,
                                          "nodes_after": count_ops(gm)})


def _problem(node: fx.Node) -> str | None:
    why = convolution_problem(node)
    if why is not None:
        return why
    x, w, groups = tensor_meta(node.args[0]), tensor_meta(node.args[1]), node.args[8]
    channels = x.shape[1]
    if groups != channels or w.shape[0] != channels:
        what = "a depth multiplier" if groups == channels else f"{groups} groups of {channels // groups} channels"
        return f"a grouped convolution with {what} (depthwise with one output per channel is lowered)"
    if math.prod(w.shape[2:]) > MAX_TAPS:
        return f"a depthwise convolution of more than {MAX_TAPS} taps (slower as windows than in PyTorch)"
    if any(s != 1 for s in node.args[3]) and not channels_innermost(x):
        return "a strided depthwise convolution of an NCHW input (slower as windows than in PyTorch)"
    return None


def _rewrite(graph: fx.Graph, node: fx.Node) -> None:
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, w, bias, stride, padding, dilation = node.args[:6]
    spatial = tensor_meta(x).dim() - 2
    kernel, out_sizes = tensor_meta(w).shape[2:], tensor_meta(node).shape[2:]
    # channels-last memory (between conv_as_gemm's convolutions): the sum is made over the NHWC view, where a
    # tap's run of channels is contiguous and the weights broadcast along it; else over NCHW
    nhwc = channels_innermost(tensor_meta(x))
    to_nhwc = [0, *range(2, spatial + 2), 1]
    dims = list(range(1, spatial + 1)) if nhwc else list(range(-spatial, 0))
    with graph.inserting_before(node):
        if nhwc:
            x = call(aten.permute.default, (x, to_nhwc))
        for dim, pad in zip(reversed(dims), reversed(padding)):
            if pad:
                x = constant_pad(graph, x, dim, pad, 0.0)
        if nhwc:  # per tap a contiguous run of C weights: [KH * KW, C], made once per weight version
            per_tap = graph.call_function(ConvWeightAsMatrix(), (w,))
            per_tap.meta["val"] = ConvWeightAsMatrix().make(tensor_meta(w))
        else:
            per_channel = call(aten.select.int, (w, 1, 0))  # [C, *K]
        y = None
        for number, taps in enumerate(_taps(kernel)):
            view, weight = x, None if nhwc else per_channel
            for dim, tap, step, dilate, count in zip(dims, taps, stride, dilation, out_sizes):
                start = tap * dilate
                view = call(aten.slice.Tensor, (view, dim, start, start + step * (count - 1) + 1, step))
                if not nhwc:
                    weight = call(aten.select.int, (weight, 1, tap))
            weight = call(aten.select.int, (per_tap, 0, number)) if nhwc else _per_channel(call, weight, spatial)
            term = call(aten.mul.Tensor, (view, weight))
            y = term if y is None else call(aten.add.Tensor, (y, term))
        if bias is not None:
            y = call(aten.add.Tensor, (y, bias if nhwc else _per_channel(call, bias, spatial)))
        if nhwc:
            y = call(aten.permute.default, (y, [to_nhwc.index(d) for d in range(spatial + 2)]))
    y.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(y)
    graph.erase_node(node)
    if nhwc:  # the activation after it on the NHWC sum too, so fuse_pointwise makes them one kernel
        views, frontier = {y}, [y]
        while frontier:
            for user in list(frontier.pop().users):
                back = elementwise_in_nhwc(graph, user, views)
                if back is not None:
                    frontier.append(back)


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
