"""pointwise_conv_as_gemm: a 1x1, stride-1 convolution runs as a plain GEMM over its channels-last input.

Such a convolution mixes channels at every position and nothing else: with x channels-last, x viewed as
[N * H * W, C] is A as it lies, and the output is A @ W^T, channels-last. This pass applies conv_as_gemm's
rewrite to these convolutions only: a plain mm has every GEMM schedule as a candidate, the host BLAS included,
so the autotuner never picks a GEMM slower than the host's, and its bias and activation join the GEMM's
epilogue. conv_as_gemm, before it in the default pipeline, takes them already (the same rewrite); with
conv_as_gemm disabled, this pass alone runs convolutions as GEMMs. channels_last_between_convs, right after
it, keeps the result channels-last for the next convolution (a depthwise one in MobileNet's blocks) and drops
the layout copies between them.

Rule: `convolution(x, w, b, stride=1, padding=0, dilation, transposed=False, output_padding, groups=1)` with
every kernel size 1, 1 or 2 spatial dims, floating x and static shapes becomes (conv_as_gemm's rule)

    y = view(mm(view(clone(permute(x, [0, 2, 3, 1])), [N*H*W, C]), tf_conv_weight_as_matrix(w)), [N, H, W, Cout]) + b
    out = clone(permute(y, [0, 3, 1, 2]))                          # dropped between convolutions

Preconditions: those of conv_as_gemm; others stay as they are, with the reason.

    before:  y = convolution(x, w, b, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)     # x [2, 32, 7, 7], w [64, 32, 1, 1]
    after:   a = view(clone(permute(x, [0, 2, 3, 1])), [98, 32])
             y = add(view(mm(a, tf_conv_weight_as_matrix(w)), [2, 7, 7, 64]), b)   # one GEMM kernel
             out = clone(permute(y, [0, 3, 1, 2]))
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes import conv_as_gemm
from torchfuser.passes.base import PassResult

aten = torch.ops.aten
NAME = "pointwise_conv_as_gemm"


def handles(node: fx.Node) -> bool:
    return node.target is aten.convolution.default and _not_pointwise(node) is None


def pointwise_conv_as_gemm(gm: fx.GraphModule) -> PassResult:
    return conv_as_gemm.rewrite_convolutions(gm, NAME, _not_pointwise)


def _not_pointwise(node: fx.Node) -> str | None:
    stride, padding = node.args[3], node.args[4]
    kernel = tuple(tensor_meta(node.args[1]).shape[2:])
    if any(k != 1 for k in kernel) or any(s != 1 for s in stride) or any(padding):
        shape = "x".join(map(str, kernel))
        return (f"a {shape} convolution with stride {list(stride)} and padding {list(padding)}: this pass takes 1x1 "
                "stride-1 convolutions only (conv_as_gemm, before it, the others)")
    return None
