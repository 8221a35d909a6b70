"""fuse_gemm_epilogue: a matrix multiply and the elementwise chain after it become one GEMM kernel.

Rule: `mm(a, b)`, `bmm(a, b)` or `addmm(bias, a, b, beta, alpha)` (or a window kernel, a depthwise convolution
or max pool, whose [M, C] result takes an epilogue as a GEMM's does), then (through one reshape that keeps the
last dim, as aot graphs put around Linear) the largest region of elementwise ops that reads the GEMM's result and
has one exit: bias adds, activations (relu, silu, gelu, tanh, sigmoid, gelu_new's diamond ...), scales,
residual adds. The region becomes the epilogue program of `tf_gemm(a, b, extras...)`, applied in
registers before the store. Extra operands must map onto the [M, N] output: a per-column vector, a scalar, or a tensor of the
output's shape that can be viewed as [M, N] (a residual). Nothing is absorbed that another node uses.

Preconditions: float32 GEMM operands and result; a and b 2-D, or 3-D for bmm (any strides: a transposed
weight is read as it is, or packed once by the runtime; a weight broadcast over a bmm's batch is packed once).

    before:  t = permute(w, [1, 0]); mm_ = addmm(b, x, t); v = view(mm_, [2, 4, 32]); g = gelu(v)
             r = add(g, x3)
    after:   t = permute(w, [1, 0]); x2 = view(x3, [8, 32]); k = tf_gemm_group0(x, t, b, x2)
             r = view(k, [2, 4, 32])
"""

from __future__ import annotations

import math

import torch
import torch.fx as fx

from torchfuser.ir.aten import RESHAPES
from torchfuser.ir.kernels import ConvPatches, WindowKernel, GemmKernel
from torchfuser.ir.kernels.window import bias_epilogue
from torchfuser.ir.program import Const, ProgramBuilder
from torchfuser.ir.symbolic import is_symbolic
from torchfuser.lowering.from_aten import Lowerer, dtype_name, lowering_problem, tensor_meta
from torchfuser.passes.base import PassResult, count_ops, erase_nodes, insert_fused_node, next_group_id, record_unfused

aten = torch.ops.aten
GEMMS = (aten.addmm.default, aten.mm.default, aten.bmm.default)
REGION_SCAN = 64  # how far after the GEMM to look for its epilogue ops


def fuse_gemm_epilogue(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    group = next_group_id(gm)
    erased: list[fx.Node] = []
    fused = epilogue_ops = 0
    windows = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or not (handles(node) or _bare_window(node)):
            continue
        match = _match(node)
        if isinstance(match, str):
            record_unfused(node, "fuse_gemm_epilogue", match)
            continue
        if match.windowed and not match.chain:
            continue  # its own epilogue (the bias) is all there is
        windows += match.windowed
        _rewrite(gm, match, group + fused)
        erased += match.erased
        fused += 1
        epilogue_ops += len(match.chain)
    if fused:
        erase_nodes(gm, erased)
    return PassResult(gm, fused > 0, {
        "gemm_epilogue": fused - windows, "window_epilogue": windows, "epilogue_ops": epilogue_ops,
        "nodes_before": before, "nodes_after": count_ops(gm),
    })


class _Match:
    def __init__(self, gemm: fx.Node):
        self.gemm = gemm
        self.windowed = _bare_window(gemm)  # x[, taps][, bias]: the bias is where an addmm's is
        addmm = gemm.target is aten.addmm.default
        self.beta, self.alpha = gemm.kwargs.get("beta", 1), gemm.kwargs.get("alpha", 1)
        if self.windowed:
            operands = gemm.target.operands
            self.a, self.b = gemm.args[0], gemm.args[1] if operands == 2 else None
            self.bias = gemm.args[operands] if len(gemm.args) > operands else None
        else:
            self.a, self.b = (gemm.args[1], gemm.args[2]) if addmm else gemm.args[:2]
            self.bias = gemm.args[0] if addmm and self.beta != 0 else None
        self.batched = gemm.target is aten.bmm.default
        self.rows, self.cols = tensor_meta(gemm).shape[-2:]
        self.reshape: fx.Node | None = None  # between the GEMM and its chain
        self.chain: list[fx.Node] = []  # absorbed elementwise ops, in graph order (the last is the exit)
        self.extras: list[fx.Node] = []  # their tensor operands other than the chain itself
        # a: a convolution's patches (conv_as_gemm) that nothing else reads: the kernel reads their input
        self.patches = self.a if isinstance(self.a.target, ConvPatches) and len(self.a.users) == 1 else None
        self.window = self.patches.target.window if self.patches is not None else None
        if self.patches is not None:
            self.a = self.patches.args[0]

    @property
    def source(self) -> fx.Node:
        return self.reshape or self.gemm

    @property
    def last(self) -> fx.Node:
        return self.chain[-1] if self.chain else self.gemm

    @property
    def erased(self) -> list[fx.Node]:
        patches = [self.patches] if self.patches is not None else []
        return patches + [self.gemm] + ([self.reshape] if self.reshape is not None else []) + self.chain


def _only_user(node: fx.Node) -> fx.Node | None:
    return next(iter(node.users)) if len(node.users) == 1 else None


def handles(node: fx.Node) -> bool:
    return node.target in GEMMS


def _bare_window(node: fx.Node) -> bool:
    """A window kernel as its pass made it: its epilogue the bias alone, or nothing."""
    kernel = node.target
    return isinstance(kernel, WindowKernel) and kernel.epilogue == bias_epilogue(len(node.args) > kernel.operands)


def _match(gemm: fx.Node) -> _Match | str:
    """The match, or why there is none."""
    metas = [tensor_meta(n) for n in gemm.all_input_nodes] + [tensor_meta(gemm)]
    if any(m is None or m.dtype != torch.float32 for m in metas):
        return "the GEMM kernel takes float32 operands only"
    m = _Match(gemm)
    rank = 3 if m.batched else 2
    if not m.windowed and ((m.window is None and tensor_meta(m.a).dim() != rank) or tensor_meta(m.b).dim() != rank):
        return f"operands of rank other than {rank}"
    nxt = _only_user(gemm)
    reshaped = nxt is not None and nxt.target in RESHAPES and tuple(tensor_meta(nxt).shape)[-1:] == (m.cols,)
    if reshaped:
        m.reshape = nxt
    m.chain = _epilogue_region(m, list(gemm.graph.nodes))
    if m.reshape is not None and not m.chain:
        m.reshape = None  # nothing absorbed after the reshape: leave it where it is
    return m


def _epilogue_region(m: _Match, nodes: list[fx.Node]) -> list[fx.Node]:
    """The elementwise ops after the GEMM that can run in its epilogue: grown in graph order while each
    new op reads only the region and valid extras, then trimmed until the region has one exit and
    nothing outside reads the GEMM's own result (GPT-2's gelu_new reads it three times: a diamond)."""
    start = nodes.index(m.source)
    inside, region = {m.source}, []
    downstream = {m.source}  # reaches the region: such a node cannot also feed it (a cycle)
    for node in nodes[start + 1 : start + 1 + REGION_SCAN]:
        reads_region = any(i in inside for i in node.all_input_nodes)
        if reads_region and _absorbable(m, node, inside, downstream):
            inside.add(node)
            region.append(node)
        if any(i in downstream for i in node.all_input_nodes):
            downstream.add(node)
    while region and not _single_exit(m, region):
        region.pop()
    return region


def _single_exit(m: _Match, region: list[fx.Node]) -> bool:
    members = set(region)
    if any(u not in members for u in m.source.users):
        return False
    return [n for n in region if any(u not in members for u in n.users)] == [region[-1]]


def _absorbable(m: _Match, node: fx.Node, inside: set, downstream: set) -> bool:
    """An elementwise op of the region's shape whose other operands map onto [M, N] and do not depend on
    the region."""
    if lowering_problem(node) is not None or tensor_meta(node).dtype != torch.float32:
        return False
    if tuple(tensor_meta(node).shape) != tuple(tensor_meta(m.source).shape):
        return False
    others = [a for a in node.all_input_nodes if a not in inside]
    return all(a not in downstream and _extra_view(m, a) is not False for a in others)


def _extra_view(m: _Match, operand: fx.Node):
    """How an extra operand reaches the kernel: None (as it is), a shape to view it as, or False (can't)."""
    meta = tensor_meta(operand)
    if meta is None:
        return False
    if m.batched and m.reshape is None:
        return None  # no reshape in between: the kernel broadcasts it over [batch, M, N] by its strides
    if meta.numel() == 1:
        return None if meta.dim() == 0 else []
    if is_symbolic(m.cols):
        return False  # the view would hold a dynamic size as a constant
    if meta.numel() == m.cols and tuple(meta.shape)[-1] == m.cols:
        return None if meta.dim() == 1 else [m.cols]
    shape = list(tensor_meta(m.gemm).shape)  # [M, N], or a bmm's [batch, M, N]
    if any(is_symbolic(size) for size in shape[1:-1]):
        return False  # the view would hold a dynamic size as a constant
    if meta.numel() == math.prod(shape) and tuple(meta.shape)[-1] == m.cols:
        try:
            meta.view(shape)
        except (RuntimeError, ValueError):
            return False  # not viewable without a copy
        return None if list(meta.shape) == shape else [-1 if is_symbolic(shape[0]) else shape[0], *shape[1:]]
    return False


def _rewrite(gm: fx.GraphModule, m: _Match, group: int) -> None:
    graph, last = gm.graph, m.last
    builder = ProgramBuilder(["float32"])
    inputs = [m.a] + ([m.b] if m.b is not None else [])
    values: dict[fx.Node, int] = {}
    bias_id = None
    if m.bias is not None:
        bias_id = builder.add_input(dtype_name(m.bias))
        inputs.append(m.bias)
    for node in m.chain:
        for operand in node.all_input_nodes:
            if operand is not m.source and operand not in m.chain and operand not in values:
                values[operand] = builder.add_input(dtype_name(operand))
                inputs.append(_as_2d(graph, m, operand, before=last))
    value = 0
    with builder.producing([m.gemm.name]):  # addmm's own scaling and bias
        if m.alpha != 1:
            value = builder.emit("mul", (value, Const(float(m.alpha), "float32")), "float32")
        if bias_id is not None:
            bias = builder.cast(bias_id, "float32")
            if m.beta != 1:
                bias = builder.emit("mul", (bias, Const(float(m.beta), "float32")), "float32")
            value = builder.emit("add", (value, bias), "float32")
    values[m.source] = value
    lowerer = Lowerer(builder, values)
    for node in m.chain:
        values[node] = lowerer.lower(node)
    epilogue = builder.build([values[last]])
    window = m.gemm.target
    kernel = (WindowKernel(window.window, window.reduction, epilogue, group) if m.windowed
              else GemmKernel(epilogue, group, m.window))
    fused = insert_fused_node(gm, kernel, inputs, m.erased, tensor_meta(m.gemm))
    result = fused
    if m.reshape is not None:  # the epilogue ran on the 2-D result: give users the shape they expect
        with graph.inserting_after(fused):
            result = graph.call_function(m.reshape.target, (fused, *m.reshape.args[1:]))
        result.meta.update(last.meta)
    last.replace_all_uses_with(result)


def _as_2d(graph: fx.Graph, m: _Match, operand: fx.Node, before: fx.Node) -> fx.Node:
    shape = _extra_view(m, operand)
    if shape is None:
        return operand
    with graph.inserting_before(before):
        view = graph.call_function(aten.view.default, (operand, shape))
    view.meta["val"] = tensor_meta(operand).view(shape)
    return view
