"""fuse_gemm_epilogue: a matrix multiply and its bias and activation become one GEMM kernel.

Rule: `addmm(bias, a, b)` or `mm(a, b)`, optionally followed (through reshapes that keep the last dim)
by a bias `add` with a per-column vector (for mm) and then one activation among relu, silu, gelu (erf or
tanh), tanh and sigmoid, becomes `tf_gemm(a, b, [bias])` whose epilogue program applies alpha, beta,
the bias and the activation in registers before the store. Each absorbed node must have the previous
one as its only user, so nothing else needs the intermediate values.

Preconditions: float32 operands; a and b 2-D (any strides: a transposed weight is read as it is).

    before:  t = permute(w, [1, 0]); mm_ = addmm(b, x, t); v = view(mm_, [2, 4, 32]); g = gelu(v)
    after:   t = permute(w, [1, 0]); k = tf_gemm_group0(x, t, b); g = view(k, [2, 4, 32])
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.ir.from_aten import tensor_meta
from torchfuser.ir.program import Const, ProgramBuilder
from torchfuser.passes.base import PassResult, count_ops, erase_nodes, insert_fused_node, next_group_id
from torchfuser.runtime.gemm_launch import GemmKernel

aten = torch.ops.aten
RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _activation(node: fx.Node) -> str | None:
    if node.target in (aten.relu.default, aten.silu.default, aten.tanh.default, aten.sigmoid.default):
        return node.target._opname
    if node.target is aten.gelu.default:
        approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(approximate)
    return None


def fuse_gemm_epilogue(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    group = next_group_id(gm)
    erased: list[fx.Node] = []
    fused = 0
    activations = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in (aten.addmm.default, aten.mm.default):
            continue
        match = _match(node)
        if match is None:
            continue
        _rewrite(gm, match, group + fused)
        erased += match.absorbed
        fused += 1
        activations += match.activation is not None
    if fused:
        erase_nodes(gm, erased)
    return PassResult(gm, fused > 0, {
        "gemm_epilogue": fused, "activations_fused": activations,
        "nodes_before": before, "nodes_after": count_ops(gm),
    })


class _Match:
    def __init__(self, gemm: fx.Node):
        self.gemm = gemm
        self.a, self.b = (gemm.args[1], gemm.args[2]) if gemm.target is aten.addmm.default else gemm.args[:2]
        beta = gemm.kwargs.get("beta", 1)
        self.bias = gemm.args[0] if gemm.target is aten.addmm.default and beta != 0 else None
        self.beta, self.alpha = beta, gemm.kwargs.get("alpha", 1)
        self.reshape: fx.Node | None = None  # a reshape between the GEMM and its epilogue ops
        self.activation: str | None = None
        self.absorbed: list[fx.Node] = [gemm]

    @property
    def last(self) -> fx.Node:
        return self.absorbed[-1]


def _only_user(node: fx.Node) -> fx.Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def _match(gemm: fx.Node) -> _Match | None:
    metas = [tensor_meta(n) for n in gemm.all_input_nodes] + [tensor_meta(gemm)]
    if any(m is None or m.dtype != torch.float32 for m in metas):
        return None
    m = _Match(gemm)
    if tensor_meta(m.a).dim() != 2 or tensor_meta(m.b).dim() != 2:
        return None
    n_cols = tensor_meta(gemm).shape[1]
    nxt = _only_user(gemm)
    if nxt is not None and nxt.target in RESHAPES and tensor_meta(nxt).shape[-1:] == (n_cols,):
        after = _only_user(nxt)
        if after is not None and (_bias_add(after, nxt, n_cols) or _activation(after)):
            m.reshape, nxt = nxt, after
    if m.bias is None and nxt is not None and _bias_add(nxt, m.reshape or gemm, n_cols):
        m.bias = nxt.args[1] if nxt.args[0] is (m.reshape or gemm) else nxt.args[0]
        m.absorbed.append(nxt)
        nxt = _only_user(nxt)
    if nxt is not None and _activation(nxt):
        m.activation = _activation(nxt)
        m.absorbed.append(nxt)
    if m.reshape is not None and len(m.absorbed) == 1:
        m.reshape = None  # nothing absorbed after the reshape: keep it as it is
    return m


def _bias_add(node: fx.Node, source: fx.Node, n_cols: int) -> bool:
    """add(source, v) or add(v, source) where v is a float32 vector of n_cols broadcast over rows."""
    if node.target is not aten.add.Tensor or node.kwargs.get("alpha", 1) != 1 or len(node.args) != 2:
        return False
    other = node.args[1] if node.args[0] is source else node.args[0] if node.args[1] is source else None
    meta = tensor_meta(other)
    return (
        meta is not None and meta.dtype == torch.float32 and meta.numel() == n_cols
        and tuple(meta.shape)[-1:] == (n_cols,)
    )


def _rewrite(gm: fx.GraphModule, m: _Match, group: int) -> None:
    graph, last = gm.graph, m.last
    inputs = [m.a, m.b]
    if m.bias is not None:
        bias = m.bias
        if tensor_meta(bias).dim() > 2:  # a (1, 1, N) bias after a reshape: view it as (N,)
            with graph.inserting_before(last):
                bias = graph.call_function(aten.view.default, (bias, [tensor_meta(bias).shape[-1]]))
            bias.meta["val"] = tensor_meta(m.bias).reshape(-1)
        inputs.append(bias)
    covered = [m.gemm] + ([m.reshape] if m.reshape is not None else []) + m.absorbed[1:]
    fused = insert_fused_node(gm, GemmKernel(_epilogue(m), group), inputs, covered, tensor_meta(m.gemm))
    result = fused
    if m.reshape is not None:  # the epilogue ran on the 2-D result: give users the shape they expect
        with graph.inserting_after(fused):
            result = graph.call_function(m.reshape.target, (fused, *m.reshape.args[1:]))
        result.meta.update(last.meta)
        m.absorbed.append(m.reshape)
    last.replace_all_uses_with(result)


def _epilogue(m: _Match):
    """acc -> [alpha *] acc [+ beta * bias] -> [activation]."""
    bias_input = m.bias is not None
    builder = ProgramBuilder(["float32", "float32"] if bias_input else ["float32"])
    value = 0
    if m.alpha != 1:
        value = builder.emit("mul", (value, Const(float(m.alpha), "float32")), "float32")
    if bias_input:
        bias = 1 if m.beta == 1 else builder.emit("mul", (1, Const(float(m.beta), "float32")), "float32")
        value = builder.emit("add", (value, bias), "float32")
    if m.activation:
        value = builder.emit(m.activation, (value,), "float32")
    return builder.build([value])
