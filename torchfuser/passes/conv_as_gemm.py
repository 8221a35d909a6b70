"""conv_as_gemm: a convolution becomes a GEMM over its input's patches, read in place (implicit im2col).

A convolution of x [N, C, H, W] with w [Cout, C, KH, KW] is, for every output position, a dot product of
w's rows with the patch of x under the kernel: a GEMM with M = N * OH * OW rows (positions), K = KH * KW * C
and N = Cout. With x channels-last, row m's patch is KH * KW runs of C floats, each at a constant offset from
the patch's corner, so the GEMM kernel reads A straight from the input (ir/window.Window;
fuse_gemm_epilogue takes the `tf_conv_patches` node into the GEMM) and no im2col copy is made (a 1x1
convolution's input is A as it is, and patches that tile the input, stride = kernel, are one reordering copy
of it, taken from an NCHW input directly in (C, KH, KW) order against the weight as it lies: both plain mms,
every GEMM schedule a candidate). A contiguous NCHW input that no convolution makes channels-last (a model's
input, of channels enough to read its padding as bounds) is read where it lies, each tap's channels a plane
apart (Window.channels_first): no channels-last copy of it. Zero padding is read as bounds: per tap, a row's run
of channels in the padding is a run of zeros (inputs of at least PADDING_AS_BOUNDS_CHANNELS channels; an
image's 3 channels get a padded copy, concatenations with zeros). The weight becomes the [K, Cout] matrix once
per weight version (ir/weights) and is packed as any GEMM's B. The GEMM's result is the output in
channels-last order, with the bias (a folded batch norm's too) as its epilogue; the copy into eager's layout
written here is dropped again by channels_last_between_convs (after it in the pipeline) wherever only
elementwise ops and other convolutions read the result. A 1x1, stride-1 convolution of a contiguous input
that no convolution makes channels-last is a bmm over the input as it lies, per image.

Rule: `convolution(x, w, b, stride, padding, dilation, transposed=False, output_padding, groups=1)` of 1 or
2 spatial dims, floating x and static shapes becomes

    xc = clone(permute(x, [0, 2, 3, 1]))                            # channels-last (a model's input: x)
    xp = cat([0, cat([0, xc, 0], W), 0], H)                         # padding, fewer than 8 channels only
    y = view(mm(tf_conv_patches(xp), tf_conv_weight_as_matrix(w)), [N, OH, OW, Cout])  [+ b]  # one GEMM kernel
    out = clone(permute(y, [0, 3, 1, 2]))                           # conv1d: [N, OW, Cout], permuted [0, 2, 1]

Grouped, transposed and 3-d convolutions are left to PyTorch, with the reason. The kernel reads patches
with the packed schedule: CPU devices.

In the default pipeline (after fold_batch_norm, before channels_last_between_convs and cat_as_last_dim), for
every dense convolution, patch embeddings (stride = kernel) included; `disable=["conv_as_gemm"]` leaves 1x1
stride-1 convolutions to pointwise_conv_as_gemm and the others to PyTorch. Off CPUs, the GEMM of a convolution's
patches has no schedule and runs in PyTorch (named in the report).

    before:  y = convolution(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)     # x [2, 3, 5, 5], w [8, 3, 3, 3]
    after:   xp = cat(... clone(permute(x)) ...)                                   # [2, 7, 7, 3]
             y = add(view(mm(tf_conv_patches(xp), tf_conv_weight_as_matrix(w)), [2, 5, 5, 8]), b)  # one kernel
             out = clone(permute(y, [0, 3, 1, 2]))
"""

from __future__ import annotations

import math
from functools import partial

import torch
import torch.fx as fx

from torchfuser.ir.kernels import ConvPatches
from torchfuser.ir.window import Window
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import (
    PassResult, call_with_value, constant_pad, conv_weight_matrix, convolution_problem, count_ops, record_unfused,
)
from torchfuser.passes import channels_last_between_convs

aten = torch.ops.aten
NAME = "conv_as_gemm"
# Inputs of at least this many channels read their zero padding as bounds (per kernel tap, each row's run of C
# channels or a run of zeros); fewer channels (an image's 3) pay more for the per-tap test than a padded copy
PADDING_AS_BOUNDS_CHANNELS = 8


def handles(node: fx.Node) -> bool:
    return node.target is aten.convolution.default


def conv_as_gemm(gm: fx.GraphModule) -> PassResult:
    return rewrite_convolutions(gm, NAME)


def rewrite_convolutions(gm: fx.GraphModule, name: str, precondition=None) -> PassResult:
    """Every convolution that the pass's own `precondition` (node -> reason or None; a pass that takes some of
    them) and `problem` find no reason against becomes its GEMM (rewrite); the others keep their reason,
    recorded under the pass `name`."""
    before = count_ops(gm)
    rewritten = 0
    for node in [n for n in gm.graph.nodes if n.target is aten.convolution.default]:
        why = (precondition and precondition(node)) or problem(node)
        if why is None:
            rewrite(gm.graph, node)
            rewritten += 1
        else:
            record_unfused(node, name, why)
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, rewritten > 0, {"convolutions": rewritten, "nodes_before": before,
                                          "nodes_after": count_ops(gm)})


def problem(node: fx.Node) -> str | None:
    """Why this convolution cannot run as a GEMM; None when it can."""
    groups = node.args[8]
    if groups != 1:
        return f"a grouped convolution ({groups} groups: not lowered yet)"
    return convolution_problem(node)


def _patch_rows(call, x: fx.Node, window: Window) -> fx.Node:
    """A, the patches as GEMM rows: a 1x1 stride-1 convolution's input is A already ([N*H*W, C]), and patches
    that tile the input exactly (stride = kernel, ViT's patch embedding) are one reordering copy of it; both
    then run as plain mms (every GEMM schedule, the host BLAS too). Other windows are read in place."""
    w = window
    if w.padded or w.channels_first:
        return call(ConvPatches(window), (x,))
    if w.kernel_h == w.kernel_w == w.stride_h == w.stride_w == 1:
        return call(aten.view.default, (x, [w.rows, w.channels]))
    if ((w.kernel_h, w.kernel_w) == (w.stride_h, w.stride_w) and w.dilation_h == w.dilation_w == 1
            and (w.height, w.width) == (w.out_h * w.kernel_h, w.out_w * w.kernel_w)):
        tiles = call(aten.view.default, (x, [w.batch, w.out_h, w.kernel_h, w.out_w, w.kernel_w, w.channels]))
        ordered = call(aten.clone.default, (call(aten.permute.default, (tiles, [0, 1, 3, 2, 4, 5])),),
                       {"memory_format": torch.contiguous_format})
        return call(aten.view.default, (ordered, [w.rows, w.depth]))
    return call(ConvPatches(window), (x,))


def rewrite(graph: fx.Graph, node: fx.Node) -> None:
    """Replace the convolution `node` with its GEMM (the module docstring's rule)."""
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, w, bias, stride, padding, dilation = node.args[:6]
    one_d = tensor_meta(x).dim() == 3
    if one_d:  # conv1d as conv2d over [N, C, 1, L]
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
    with graph.inserting_before(node):
        if _reads_input_in_place(node):
            y = _per_image_gemm(call, graph, node)
        elif _tiles_input_in_place(node):
            y = _tile_gemm(call, node, one_d)
        else:
            y = _patch_gemm(call, graph, x, w, stride, padding, dilation, one_d)
        # the bias after the view: fuse_gemm_epilogue takes the elementwise ops after one reshape of the GEMM,
        # and channels_last_between_convs moves the activation next to it
        if bias is not None:
            y = call(aten.add.Tensor, (y, bias))
        out = call(aten.permute.default, (y, [0, 2, 1] if one_d else [0, 3, 1, 2]))
        # eager's layout (channels-last for a channels-last input): views after it (flatten) need it;
        # fuse_pointwise joins the copy to what follows, and channels_last_between_convs drops it where only
        # elementwise ops and convolutions read the result
        out = call(aten.clone.default, (out,), {"memory_format": _eager_format(node)})
        out.meta[channels_last_between_convs.LAYOUT_EXIT] = True
    out.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(out)
    graph.erase_node(node)


def _reads_input_in_place(conv: fx.Node) -> bool:
    """A 1x1, stride-1, unpadded convolution of a contiguous (NCHW / NCL) input that no convolution before it
    makes channels-last (channels_last_between_convs would): per image, its GEMM's A is the input transposed,
    [H * W, C], which the kernel reads where it lies (no channels-last copy)."""
    x, w = tensor_meta(conv.args[0]), tensor_meta(conv.args[1])
    return (all(k == 1 for k in w.shape[2:]) and all(s == 1 for s in conv.args[3]) and not any(conv.args[4])
            and x.is_contiguous() and not _after_convolution(conv.args[0]))


def _tiles_input_in_place(conv: fx.Node) -> bool:
    """Patches that tile a contiguous NCHW (NCL) input exactly (stride = kernel > 1, no padding or dilation: ViT's
    patch embedding, Whisper-style strided stems) that no convolution before it makes channels-last: A is one
    copy of the input in (C, KH, KW) order, whose runs of KW floats lie contiguous in both, and B the weight as
    it lies (no channels-last copy, no weight transform)."""
    x, w = tensor_meta(conv.args[0]), tensor_meta(conv.args[1])
    kernel, stride, padding, dilation = list(w.shape[2:]), list(conv.args[3]), conv.args[4], conv.args[5]
    return (kernel == stride and not all(k == 1 for k in kernel) and not any(padding) and all(d == 1 for d in dilation)
            and all(size % k == 0 for size, k in zip(x.shape[2:], kernel)) and x.is_contiguous()
            and w.is_contiguous() and not _after_convolution(conv.args[0]))


def _tile_gemm(call, conv: fx.Node, one_d: bool) -> fx.Node:
    """y [N, OH, OW, Cout] (conv1d: [N, OW, Cout]) = mm(the tiles of x as rows [N * OH * OW, C * KH * KW],
    w viewed [Cout, C * KH * KW] and transposed)."""
    x, w = conv.args[:2]
    n, c, *spatial = tensor_meta(x).shape
    cout, _, *kernel = tensor_meta(w).shape
    (h, width), (kh, kw) = ([1, *spatial], [1, *kernel]) if one_d else (spatial, kernel)
    oh, ow, depth = h // kh, width // kw, c * kh * kw
    tiles = call(aten.view.default, (x, [n, c, oh, kh, ow, kw]))
    rows = call(aten.clone.default, (call(aten.permute.default, (tiles, [0, 2, 4, 1, 3, 5])),),
                {"memory_format": torch.contiguous_format})
    a = call(aten.view.default, (rows, [n * oh * ow, depth]))
    b = call(aten.t.default, (call(aten.view.default, (w, [cout, depth])),))
    product = call(aten.mm.default, (a, b))
    return call(aten.view.default, (product, [n, ow, cout] if one_d else [n, oh, ow, cout]))


def _after_convolution(value: fx.Node) -> bool:
    """value is a convolution's result (one this pass rewrote already: its copy to eager's layout), or computed
    from one by ops that keep its layout."""
    seen, frontier = set(), [value]
    while frontier:
        node = frontier.pop()
        if node.meta.get(channels_last_between_convs.LAYOUT_EXIT):
            return True
        if node in seen or node.op != "call_function" or node.target not in channels_last_between_convs.FOLLOWS_LAYOUT:
            continue
        if node.target is aten.convolution.default:
            return True
        seen.add(node)
        frontier += node.all_input_nodes
    return False


def _per_image_gemm(call, graph: fx.Graph, conv: fx.Node) -> fx.Node:
    """y [N, *S, Cout] = bmm(x as [N, H * W, C], w as [C, Cout] shared by every image): channels-last."""
    x, w = conv.args[:2]
    n, c, *spatial = tensor_meta(x).shape
    positions = math.prod(spatial)
    a = call(aten.permute.default, (call(aten.view.default, (x, [n, c, positions])), [0, 2, 1]))
    weight = conv_weight_matrix(graph, w)
    cout = weight.meta["val"].shape[1]
    b = call(aten.expand.default, (weight, [n, c, cout]))
    return call(aten.view.default, (call(aten.bmm.default, (a, b)), [n, *spatial, cout]))


def _patch_gemm(call, graph: fx.Graph, x, w, stride, padding, dilation, one_d: bool) -> fx.Node:
    """y [N, OH, OW, Cout] (conv1d: [N, OW, Cout]) = the GEMM over the patches of x, read where x lies (a
    contiguous NCHW x that no convolution makes channels-last: a model's input) or copied channels-last."""
    cout, _, *kernel = tensor_meta(w).shape
    bounds = tensor_meta(x).shape[1] >= PADDING_AS_BOUNDS_CHANNELS  # else a copy of x with zeros around it
    channels_first = bounds and tensor_meta(x).is_contiguous() and not _after_convolution(x)
    if channels_first:
        x = call(aten.unsqueeze.default, (x, 2)) if one_d else x  # conv1d's [N, C, L] as [N, C, 1, L]
        n, c, h, width = tensor_meta(x).shape
    else:
        # channels-last, contiguous (a patch row is then a run of memory, and the padding concatenations are
        # row kernels: cat_as_last_dim); conv1d's [N, L, C] as [N, 1, L, C]
        x = call(aten.clone.default, (call(aten.permute.default, (x, [0, 2, 1] if one_d else [0, 2, 3, 1])),),
                 {"memory_format": torch.contiguous_format})
        if one_d:
            x = call(aten.unsqueeze.default, (x, 1))
        if not bounds:
            for dim, pad in ((2, padding[1]), (1, padding[0])):
                if pad:
                    x = constant_pad(graph, x, dim, pad, 0.0)
        n, h, width, c = tensor_meta(x).shape
    window = Window(n, h, width, c, *((1, *kernel) if one_d else kernel), *stride, *(padding if bounds else (0, 0)),
                    *dilation, channels_first)
    product = call(aten.mm.default, (_patch_rows(call, x, window), conv_weight_matrix(graph, w)))
    out = [n, window.out_w, cout] if one_d else [n, window.out_h, window.out_w, cout]
    return call(aten.view.default, (product, out))


def _eager_format(conv: fx.Node) -> torch.memory_format:
    """The memory format of eager's result of this convolution (oneDNN's rule: channels-last stays so)."""
    value = tensor_meta(conv)
    if value.dim() == 4 and not value.is_contiguous() and value.is_contiguous(memory_format=torch.channels_last):
        return torch.channels_last
    return torch.contiguous_format
