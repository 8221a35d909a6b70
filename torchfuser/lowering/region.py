"""A fused pointwise region → one SSA program, including concatenations, slices and aranges.

Elementwise members lower through `from_aten.Lowerer`. `cat` and `slice` are index ops: they compute
nothing themselves, they change *where* their operands are evaluated. A region's index ops all run along
one dim, its *indexed dim* d (counted from the end; -1 without index ops), and every member is lowered in a
context ``(offset, step)``: it is evaluated at its own position ``offset + step * j`` along d, j the
kernel's output coordinate along d (the outputs use ``(0, 1)``).

- elementwise: operands in the same context (one of extent 1 along d, or without d, broadcasts: context
  ``(0, 0)``);
- ``slice(x, d, start, end, s)``: x at ``(start + s * offset, s * step)``;
- ``cat([x0, x1, ...], d)``: operand k, which starts at position c_k, at ``(offset - c_k, step)``; the cat
  selects between them, ``where(position < c_1, x0, where(position < c_2, x1, ...))``; empty 1-d operands
  are skipped, as eager skips them (Hugging Face's KV cache starts as ``torch.tensor([])``);
- ``arange(start, end, step)`` (1-d, so d is its only dim): ``start + step * position``;
- ``embedding(weight, indices)``: the weight read at the row an index gives (`GatherRead`); the indices are
  an input of their own, read with a trailing dim of 1. Its group has no index ops or aranges (their reads
  are not combined with a gather), so its context is the identity;
- a group input in any context but the identity becomes a `LastDimRead` of that input.

The program calls d its last dim (`LastDimRead`, ``last_index``): the kernel computes in a frame where d is
moved last (runtime/launch.py `PointwiseKernel`, a permuted view: no data moves).

A member may be lowered in several contexts (rotate_half reads x at two shifts); each (member, context)
is lowered once. Without index ops every member is in the identity context and the program is the plain
elementwise one.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.ir.kernels.cat import skipped_by_cat
from torchfuser.ir.program import Const, GatherRead, LastDimRead, Program, ProgramBuilder
from torchfuser.ir.symbolic import has_symbols
from torchfuser.lowering.from_aten import Lowerer, NotLowerable, constant_value, dtype_name, tensor_meta

aten = torch.ops.aten

IDENTITY, BROADCAST = (0, 1), (0, 0)
INDEX_OPS = (aten.cat.default, aten.slice.Tensor)
ARANGE = aten.arange.start_step
EMBEDDING = aten.embedding.default
_INDEX = "index"  # the read key of an embedding's indices: an input of its own (trailing dim of 1)
# ops that keep the values they read (for the static range of embedding indices)
_SAME_VALUES = {aten.unsqueeze.default, aten.view.default, aten._unsafe_view.default, aten.expand.default,
                aten.clone.default, aten.alias.default, aten.slice.Tensor, aten.squeeze.dim, aten.select.int}


def index_op_problem(node: fx.Node) -> str | None:
    """None when node is a cat or slice that a pointwise region can take, else why not."""
    if node.op != "call_function" or node.target not in INDEX_OPS:
        return f"{node.target} is not a cat or slice"
    meta = tensor_meta(node)
    if meta is None or meta.dim() == 0:
        return "the result is not a tensor with dims"
    operands = cat_operands(node) if node.target is aten.cat.default else [node.args[0]]
    if not operands:
        return "every operand is an empty 1-d tensor"
    dim = index_dim(node)
    for x in operands:
        t = tensor_meta(x)
        if t is None or t.dim() != meta.dim() or any(a != b for k, (a, b) in enumerate(zip(t.shape, meta.shape))
                                                     if k != meta.dim() + dim):
            return f"an operand is not a tensor of the result's shape outside dim {dim}"
    if node.target is aten.slice.Tensor and _arg(node, 4, "step", 1) < 1:
        return "slice with a step below 1"
    if has_symbols([tensor_meta(x).shape[dim] for x in [node, *operands]]) or has_symbols(node.args[2:4]):
        return f"a {node.target.__name__.split('.')[0]} along a dynamic dim (its bounds would be kernel constants)"
    try:
        dtype_name(node), [dtype_name(x) for x in operands]
    except NotLowerable as why:
        return str(why)
    return None


def arange_problem(node: fx.Node) -> str | None:
    """None when node is an integer arange a pointwise region can compute, else why not."""
    meta = tensor_meta(node)
    args = list(node.args) + [1] * (3 - len(node.args))
    if meta is None or meta.dtype not in (torch.int32, torch.int64):
        return f"arange of dtype {getattr(meta, 'dtype', None)}: kernels compute integer aranges only"
    if not all(type(a) is int for a in args[:3]):
        return "arange with bounds that are not Python ints"
    if torch.device(node.kwargs.get("device") or "cpu").type != "cpu" or node.kwargs.get("layout") not in (
            None, torch.strided):
        return "arange on another device or layout"
    return None


def embedding_problem(node: fx.Node) -> str | None:
    """None when node is an embedding lookup a pointwise kernel can gather, else why not."""
    weight, indices = (tensor_meta(a) for a in node.args[:2])
    if weight is None or indices is None or weight.dim() != 2:
        return "embedding of a table that is not a 2-d tensor"
    if indices.dtype not in (torch.int32, torch.int64):
        return f"embedding indices of dtype {indices.dtype}"
    if has_symbols([weight.shape[0]]):
        return "embedding of a table whose row count is dynamic (the kernel clamps rows to a constant)"
    if weight.shape[0] == 0:
        return "embedding of an empty table"
    try:
        dtype_name(node)
    except NotLowerable as why:
        return str(why)
    return None


def indices_in_range(node: fx.Node) -> bool:
    """The graph proves an embedding's indices lie in [0, rows): aranges shifted by constants, through views
    (GPT-2's position ids). Call it before any rewrite of the graph."""
    bounds = _value_range(node.args[1])
    return bounds is not None and 0 <= bounds[0] and bounds[1] < tensor_meta(node.args[0]).shape[0]


def _value_range(node) -> tuple[int, int] | None:
    if not isinstance(node, fx.Node):
        return None
    if node.target is ARANGE and arange_problem(node) is None:
        start, end, step = (list(node.args) + [1] * 3)[:3]
        values = range(start, end, step)
        return (min(values[0], values[-1]), max(values[0], values[-1])) if values else None
    if node.target in (aten.add.Tensor, aten.sub.Tensor) and type(node.args[1]) is int and not node.kwargs:
        bounds, shift = _value_range(node.args[0]), node.args[1] if node.target is aten.add.Tensor else -node.args[1]
        return (bounds[0] + shift, bounds[1] + shift) if bounds else None
    return _value_range(node.args[0]) if node.target in _SAME_VALUES else None


def index_dim(node: fx.Node) -> int:
    """The dim a cat or slice runs along, counted from the end (-1 is the last)."""
    rank = tensor_meta(node).dim()
    return _arg(node, 1, "dim", 0) % rank - rank


def cat_operands(node: fx.Node) -> list:
    """The operands eager concatenates: it skips empty 1-d tensors whatever the other operands' rank."""
    return [a for a in node.args[0] if not (tensor_meta(a) is not None and skipped_by_cat(tensor_meta(a)))]


def is_index_slice(node) -> bool:
    return isinstance(node, fx.Node) and node.target is aten.slice.Tensor and index_op_problem(node) is None


def region_dim(members) -> int:
    """The indexed dim of a region: that of its cats and slices (one dim, see fuse_pointwise), else -1."""
    return next((index_dim(m) for m in members if m.target in INDEX_OPS), -1)


def lower_region(members: list[fx.Node], outputs: list[fx.Node],
                 in_range=frozenset()) -> tuple[Program, list[fx.Node], int]:
    """The program computing `outputs` from the members; the group's input nodes, one per program input (a
    node read at two positions is two inputs); and the indexed dim the program calls its last. `in_range`:
    the embeddings whose indices `indices_in_range` proved (the kernel then skips the host check)."""
    dim = region_dim(members)
    width = _extent(outputs[-1], dim)
    region = set(members)
    position = {n: i for i, n in enumerate(members)}
    wanted: dict[tuple, None] = {}  # (member, context), ordered by discovery
    stack = [(n, _context(n, IDENTITY, dim)) for n in reversed(outputs)]
    while stack:
        key = stack.pop()
        if key in wanted:
            continue
        wanted[key] = None
        stack += [(a, c) for a, c in reversed(_operand_contexts(*key, dim)) if a in region]

    todo = sorted(wanted, key=lambda key: position[key[0]])  # operands before users, as in the graph
    reads: dict[tuple, int] = {}  # (input node, LastDimRead | None) -> program input
    for node, ctx in todo:
        if node.target is EMBEDDING:
            reads.setdefault((node.args[0], _gather(node, reads.setdefault((node.args[1], _INDEX), len(reads)),
                                                     in_range)), len(reads))
            continue
        for a, c in _operand_contexts(node, ctx, dim):
            if a not in region and constant_value(a) is None:  # constants are literals, not inputs
                reads.setdefault((a, _read(a, c, width, dim)), len(reads))
    builder = ProgramBuilder()
    for a, read in reads:
        builder.add_input(dtype_name(a), None if read is _INDEX else read)

    values: dict[tuple, int] = {}

    def value(a, c):
        if a in region:
            return values[(a, c)]
        constant = constant_value(a)
        return reads[(a, _read(a, c, width, dim))] if constant is None else constant

    for node, ctx in todo:
        operands = _operand_contexts(node, ctx, dim)
        with builder.producing([node.name]):
            if node.target is aten.slice.Tensor:
                values[(node, ctx)] = value(*operands[0])
            elif node.target is aten.cat.default:
                pieces = [(value(a, c), start) for a, c, start in _pieces(node, ctx, dim)]
                values[(node, ctx)] = _select(builder, node, ctx, pieces)
            elif node.target is ARANGE:
                values[(node, ctx)] = _arange(builder, node, ctx)
            elif node.target is EMBEDDING:
                values[(node, ctx)] = reads[(node.args[0], _gather(node, reads[(node.args[1], _INDEX)], in_range))]
            else:
                values[(node, ctx)] = Lowerer(builder, {a: value(a, c) for a, c in operands}).lower(node)
    program = builder.build([values[(n, _context(n, IDENTITY, dim))] for n in outputs])
    return program, [a for a, _ in reads], dim


def _gather(node: fx.Node, index_input: int, in_range) -> GatherRead:
    return GatherRead(index_input, tensor_meta(node.args[0]).shape[0], node in in_range)


def _operand_contexts(node: fx.Node, ctx: tuple, dim: int) -> list[tuple]:
    """(operand, context) for each tensor operand that node, evaluated in ctx, reads."""
    offset, step = ctx
    if node.target is aten.slice.Tensor:
        start, stride = _window(node)
        source = node.args[0]
        return [(source, _context(source, (start + stride * offset, stride * step), dim))]
    if node.target is aten.cat.default:
        return [(a, c) for a, c, _ in _pieces(node, ctx, dim)]
    return [(a, _context(a, ctx, dim)) for a in node.all_input_nodes]


def _pieces(node: fx.Node, ctx: tuple, dim: int) -> list[tuple]:
    """(operand, its context, its first position in the cat) for the operands ctx can reach."""
    offset, step = ctx
    pieces, start = [], 0
    for a in cat_operands(node):
        size = tensor_meta(a).shape[dim]
        if size and (step or start <= offset < start + size):  # step 0: one fixed position, one operand
            pieces.append((a, _context(a, (offset - start, step), dim), start))
        start += size
    return pieces


def _affine(builder: ProgramBuilder, value, scale: int, shift: int):
    """shift + scale * value in int64; a Const stays a Const."""
    if isinstance(value, Const):
        return Const(shift + scale * value.value, "int64")
    scaled = value if scale == 1 else builder.emit("mul", (value, Const(scale, "int64")), "int64")
    return scaled if shift == 0 else builder.emit("add", (scaled, Const(shift, "int64")), "int64")


def _arange(builder: ProgramBuilder, node: fx.Node, ctx: tuple) -> int | Const:
    """start + step * (offset + ctx_step * j), exact in int64 (arange_problem admits integer aranges only)."""
    start, _, step = (list(node.args) + [1] * 3)[:3]
    offset, ctx_step = ctx
    j = builder.emit("last_index", (), "int64") if ctx_step else Const(0, "int64")
    value = _affine(builder, _affine(builder, j, ctx_step, offset), step, start)
    return builder.cast(value, dtype_name(node))


def _select(builder: ProgramBuilder, node: fx.Node, ctx: tuple, pieces: list[tuple]) -> int | Const:
    """where(position < start_1, piece_0, where(position < start_2, piece_1, ...)) at position offset + step*j."""
    dtype = dtype_name(node)
    offset, step = ctx
    if not pieces:  # a zero-size result (every operand empty along dim): no element is ever computed
        return Const(0, dtype)
    result = builder.cast(pieces[-1][0], dtype)
    if len(pieces) > 1:
        j = builder.emit("last_index", (), "int64")
        for (v, _), (_, bound) in zip(reversed(pieces[:-1]), reversed(pieces[1:])):
            first_j = -((offset - bound) // step)  # ceil((bound - offset) / step): the first j at the bound
            below = builder.emit("lt", (j, Const(first_j, "int64")), "bool")
            result = builder.emit("where", (below, builder.cast(v, dtype), result), dtype)
    return result


def _extent(node, dim: int) -> int:
    """node's size along dim (counted from the end); 1 where it has no such dim (it broadcasts)."""
    meta = tensor_meta(node)
    return meta.shape[dim] if meta is not None and meta.dim() >= -dim else 1


def _context(node, ctx: tuple, dim: int) -> tuple:
    """A value of extent 1 along dim (or without it) has one position: context (0, 0) (which, for a wider
    value, means position 0 at every j)."""
    return BROADCAST if _extent(node, dim) <= 1 else ctx


def _read(node, ctx: tuple, width: int, dim: int) -> LastDimRead | None:
    size = _extent(node, dim)
    if size <= 1 or (ctx == IDENTITY and size == width):
        return None  # read at the element, broadcast by strides as before
    return LastDimRead(ctx[0], ctx[1], size)


def _window(node: fx.Node) -> tuple[int, int]:
    """(first position, step) of a slice, its bounds normalised as eager does."""
    size = tensor_meta(node.args[0]).shape[index_dim(node)]
    start = _arg(node, 2, "start", None)
    start = 0 if start is None else start + size if start < 0 else start
    return min(max(start, 0), size), _arg(node, 4, "step", 1)


def _arg(node: fx.Node, index: int, name: str, default):
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)
