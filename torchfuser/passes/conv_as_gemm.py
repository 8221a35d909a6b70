"""conv_as_gemm: a convolution becomes a GEMM over its input's patches (im2col), so the GEMM kernels run it.

A convolution of x [N, C, H, W] with w [Cout, C, KH, KW] is, for every output position, a dot product of
w's rows with the patch of x under the kernel: a GEMM with M = N * OH * OW rows (positions), K = C * KH *
KW and N = Cout. The patches are a strided view of the (padded) input, copied once into a [K, M] matrix by
a pointwise kernel (the GEMM reads it transposed); the weight is a view of itself ([Cout, K], transposed:
the GEMM packs it once). The GEMM's result is the output in channels-last order, with the bias as its
epilogue (fuse_gemm_epilogue); it is copied into eager's contiguous layout by the pointwise kernel of what
follows (a batch norm's affine, an activation, a residual add), or by a copy of its own. Zero padding is two
concatenations with zeros (pointwise kernels).

Rule: `convolution(x, w, b, stride, padding, dilation, transposed=False, output_padding, groups=1)` of 1 or
2 spatial dims, floating x and static shapes becomes

    xp = cat([0, cat([0, x, 0], W), 0], H)                          # only with padding
    patches = clone(as_strided(xp, [C, KH, KW, N, OH, OW], strides of taps and positions))
    y = mm(t(view(patches, [K, M])), t(view(w, [Cout, K])))  [+ b]
    out = clone(permute(view(y, [N, OH, OW, Cout]), [0, 3, 1, 2]))  # conv1d: the same with H = 1

Grouped, transposed and 3-d convolutions are left to PyTorch, with the reason.

Opt-in (`register()` puts it in PIPELINE after fold_batch_norm and pool_as_windows, before cat_as_last_dim,
which makes its zero-padding concatenations row kernels): with explicit im2col copies, zero
padding as copies and GEMMs well short of the FMA ceiling, a CNN runs slower this way than with oneDNN's
convolutions in PyTorch (figures in the notes), and a default path must never be slower than eager.

    before:  y = convolution(x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)     # x [2, 3, 5, 5], w [8, 3, 3, 3]
    after:   ... patches [27, 50] ... y = add(mm(patches, t(view(w, [8, 27]))), b) -> [2, 8, 5, 5] (a view)
"""

from __future__ import annotations

from functools import partial

import torch
import torch.fx as fx

from torchfuser.ir.symbolic import has_symbols
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import PassResult, call_with_value, constant_pad, count_ops, record_unfused
from torchfuser.passes.pipeline import register_pass

aten = torch.ops.aten
NAME = "conv_as_gemm"


def register() -> None:
    """Run convolutions as GEMMs from now on (unregister_pass(NAME) undoes it)."""
    register_pass(NAME, conv_as_gemm, after="pool_as_windows", handles=handles)


def handles(node: fx.Node) -> bool:
    return node.target is aten.convolution.default


def conv_as_gemm(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    rewritten = 0
    for node in [n for n in gm.graph.nodes if n.target is aten.convolution.default]:
        why = _problem(node)
        if why is None:
            _rewrite(gm.graph, node)
            rewritten += 1
        else:
            record_unfused(node, NAME, why)
    if rewritten:
        gm.graph.lint()
        gm.recompile()
    return PassResult(gm, rewritten > 0, {"convolutions": rewritten, "nodes_before": before,
                                          "nodes_after": count_ops(gm)})


def _problem(node: fx.Node) -> str | None:
    x, w = tensor_meta(node.args[0]), tensor_meta(node.args[1])
    transposed, groups = node.args[6], node.args[8]
    if x is None or w is None or not x.dtype.is_floating_point or x.dtype != w.dtype:
        return "a convolution of non-floating or mixed dtypes"
    if transposed:
        return "a transposed convolution (not lowered yet)"
    if groups != 1:
        return f"a grouped convolution ({groups} groups: not lowered yet)"
    if x.dim() not in (3, 4):
        return f"a convolution over {x.dim() - 2} spatial dims (1 or 2 are lowered)"
    if has_symbols(list(x.shape) + list(w.shape) + list(x.stride())):
        return "a convolution with symbolic sizes (not lowered yet)"
    return None


def _rewrite(graph: fx.Graph, node: fx.Node) -> None:
    call = partial(call_with_value, graph)  # a node with its fake value, at the insert point
    x, w, bias, stride, padding, dilation = node.args[:6]
    one_d = tensor_meta(x).dim() == 3
    if one_d:  # conv1d as conv2d over [N, C, 1, L]
        stride, padding, dilation = [1, *stride], [0, *padding], [1, *dilation]
    with graph.inserting_before(node):
        if one_d:
            x = call(aten.unsqueeze.default, (x, 2))
        n, c, h, width = tensor_meta(x).shape
        cout, _, *kernel = tensor_meta(w).shape
        kh, kw = (1, *kernel) if one_d else kernel
        for dim, pad in ((3, padding[1]), (2, padding[0])):
            if pad:
                x = constant_pad(graph, x, dim, pad, 0.0)
        hp, wp = tensor_meta(x).shape[2:]
        oh = (hp - dilation[0] * (kh - 1) - 1) // stride[0] + 1
        ow = (wp - dilation[1] * (kw - 1) - 1) // stride[1] + 1
        sn, sc, sh, sw = tensor_meta(x).stride()
        # taps outermost, positions innermost: the copy's rows run along an input row (contiguous at stride 1)
        windows = call(aten.as_strided.default, (x, [c, kh, kw, n, oh, ow], [
            sc, sh * dilation[0], sw * dilation[1], sn, sh * stride[0], sw * stride[1]]))
        patches = call(aten.clone.default, (windows,), {"memory_format": torch.contiguous_format})
        rows = call(aten.t.default, (call(aten.view.default, (patches, [c * kh * kw, n * oh * ow])),))
        weight = call(aten.t.default, (call(aten.view.default, (w, [cout, c * kh * kw])),))
        y = call(aten.mm.default, (rows, weight))
        if bias is not None:
            y = call(aten.add.Tensor, (y, bias))
        out = call(aten.permute.default, (call(aten.view.default, (y, [n, oh, ow, cout])),
                                                  [0, 3, 1, 2]))
        if one_d:
            out = call(aten.squeeze.dim, (out, 2))
        # eager's layout: views after it (flatten) need it; fuse_pointwise joins the copy to what follows
        out = call(aten.clone.default, (out,), {"memory_format": torch.contiguous_format})
    out.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(out)
    graph.erase_node(node)
