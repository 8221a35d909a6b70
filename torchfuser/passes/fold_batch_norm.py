"""fold_batch_norm: an inference batch norm after a convolution is folded into the convolution's weights.

With running statistics, batch norm is a per-channel affine, y = x * scale + shift with scale = gamma /
sqrt(var + eps) and shift = beta - mean * scale; after a convolution it is the convolution itself with its
weights scaled per output channel and its bias shifted. The folded weight and bias are made on the host
once and kept while the weights and statistics are unchanged (ir/weights.FoldedBatchNorm), so every call
runs the convolution alone: the batch norm's pass over the output is gone (inductor's freezing folds the
same way).

Rule: `getitem(_native_batch_norm_legit_no_training(c, gamma, beta, mean, var, momentum, eps), 0)` where
`c = convolution(x, w, b, stride, padding, dilation, transposed=False, output_padding, groups)` becomes

    c' = convolution(x, FoldedBatchNorm("weight", eps)(w, b, mean, var, gamma, beta),
                        FoldedBatchNorm("bias", eps)(w, b, mean, var, gamma, beta), stride, ...)

Preconditions: nothing else reads c or the batch norm's other results; w, b, mean, var, gamma and beta are
graph inputs (the model's state: anything else would be folded again every call) and b, gamma, beta may be
None; a floating x. A batch norm that does not follow a convolution so is left to batch_norm_as_affine.

    before:  c = convolution(x, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
             y = getitem(_native_batch_norm_legit_no_training(c, g, b, m, v, 0.1, 1e-5), 0)
    after:   fw = tf_fold_batch_norm_weight(w, None, m, v, g, b); fb = tf_fold_batch_norm_bias(w, None, m, v, g, b)
             y = convolution(x, fw, fb, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from torchfuser.ir.weights import FoldedBatchNorm
from torchfuser.lowering.from_aten import tensor_meta
from torchfuser.passes.base import PassResult, rewrite_each

aten = torch.ops.aten
NAME = "fold_batch_norm"
BATCH_NORM = aten._native_batch_norm_legit_no_training.default


def handles(node: fx.Node) -> bool:
    return node.target is BATCH_NORM


def fold_batch_norm(gm: fx.GraphModule) -> PassResult:
    return rewrite_each(gm, BATCH_NORM, "folded", _fold)


def _foldable(node: fx.Node) -> fx.Node | None:
    """The batch norm's normalised-output getitem when the rule applies, else None."""
    conv, *state = node.args[:5]
    users = list(node.users)
    if len(users) != 1 or users[0].target is not operator.getitem or users[0].args[1] != 0:
        return None
    if not isinstance(conv, fx.Node) or conv.target is not aten.convolution.default or len(conv.users) != 1:
        return None
    weight, bias, transposed = conv.args[1], conv.args[2], conv.args[6]
    meta = tensor_meta(conv)
    if transposed or meta is None or not meta.dtype.is_floating_point:
        return None
    if not all(t is None or (isinstance(t, fx.Node) and t.op == "placeholder") for t in [weight, bias, *state]):
        return None
    if any(t is None for t in (weight, state[2], state[3])):  # the weight, mean and var are needed
        return None
    return users[0]


def _fold(graph: fx.Graph, node: fx.Node) -> bool:
    result = _foldable(node)
    if result is None:
        return False
    conv = node.args[0]
    gamma, beta, mean, var, _momentum, eps = node.args[1:7]
    weight, bias = conv.args[1], conv.args[2]
    args = (weight, bias, mean, var, gamma, beta)
    fake_args = [tensor_meta(a) if isinstance(a, fx.Node) else a for a in args]
    folded = []
    with graph.inserting_before(conv):
        for part in ("weight", "bias"):
            transform = FoldedBatchNorm(part, eps)
            made = graph.call_function(transform, args)
            made.meta["val"] = transform.make(*fake_args)
            folded.append(made)
        new_conv = graph.call_function(conv.target, (conv.args[0], *folded, *conv.args[3:]), dict(conv.kwargs))
    new_conv.meta.update(result.meta)
    new_conv.meta["stack_trace"] = conv.meta.get("stack_trace") or result.meta.get("stack_trace")
    result.replace_all_uses_with(new_conv)
    for dead in (result, node, conv):
        graph.erase_node(dead)
    return True
