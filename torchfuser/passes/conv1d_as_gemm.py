"""conv1d_as_gemm: a dense 1-D convolution runs as a GEMM over its channels-last input, by default.

With x channels-last ([N, L, C] in memory), the patch of output position l is the k * C consecutive floats
that start at x[n, l * stride]: A's rows are runs of the input as it lies, one row stride apart, as a plain
GEMM reads its A. So every dense 1-D convolution (an audio front-end's, Whisper's) takes conv_as_gemm's
rewrite: the implicit GEMM reads the patches in place (after a zero-bordered copy where there is padding),
its bias and activation join the GEMM's epilogue, and the autotuner times it against PyTorch's own
convolution of the same padded input (the GEMM's `extern` variant), keeping PyTorch's where that is faster.
A 2-D convolution's patch is kernel_h separate runs and a dilated one's has gaps: those stay with PyTorch
unless conv_as_gemm is registered.

Rule: `convolution(x, w, b, [stride], [padding], [1], False, [0], 1)` with x of 3 dims, floating, static
shapes becomes (conv_as_gemm's rule; channels_last_between_convs keeps the result channels-last between
convolutions)

    y = view(mm(tf_conv_patches(xp), tf_conv_weight_as_matrix(w)), [N, L_out, Cout]) + b   # one GEMM kernel
    out = clone(permute(y, [0, 2, 1]))                              # xp: x channels-last, zero-bordered

Preconditions: one spatial dim, dilation 1, groups 1, and those of conv_as_gemm; other convolutions stay as
they are, with the reason.

    before:  y = convolution(x, w, b, [1], [1], [1], False, [0], 1)        # x [2, 80, 1000], w [384, 80, 3]
    after:   xp = cat([0, clone(permute(x, [0, 2, 1])), 0], ...)             # [2, 1, 1002, 80]
             y = add(view(mm(tf_conv_patches(xp), tf_conv_weight_as_matrix(w)), [2, 1000, 384]), b)
             out = clone(permute(y, [0, 2, 1]))
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes import conv_as_gemm
from torchfuser.passes.base import PassResult

aten = torch.ops.aten
NAME = "conv1d_as_gemm"


def handles(node: fx.Node) -> bool:
    return node.target is aten.convolution.default and _not_contiguous_patches(node) is None


def conv1d_as_gemm(gm: fx.GraphModule) -> PassResult:
    return conv_as_gemm.rewrite_convolutions(gm, NAME, _not_contiguous_patches)


def _not_contiguous_patches(node: fx.Node) -> str | None:
    weight = tensor_meta(node.args[1])
    if weight is None or weight.dim() != 3:
        return ("a 2-D convolution: its patches are several runs of the input (only 1-D ones run as GEMMs by "
                "default; torchfuser.passes.conv_as_gemm.register() takes every dense convolution)")
    if any(d != 1 for d in node.args[5]):
        return f"a 1-D convolution with dilation {list(node.args[5])}: its patches have gaps"
    return None
