"""A fused pointwise region → one SSA program, including concatenations and slices along the last dim.

Elementwise members lower through `from_aten.Lowerer`. `cat` and `slice` along the last dim are index ops:
they compute nothing themselves, they change *where* their operands are evaluated. So every member is
lowered in a context ``(offset, step)``: it is evaluated at its own last-dim position ``offset + step * j``,
j the kernel's output coordinate along the last dim (the outputs use ``(0, 1)``).

- elementwise: operands in the same context (one of width 1 broadcasts: context ``(0, 0)``);
- ``slice(x, -1, start, end, s)``: x at ``(start + s * offset, s * step)``;
- ``cat([x0, x1, ...], -1)``: operand k, which starts at position c_k, at ``(offset - c_k, step)``; the cat
  selects between them, ``where(position < c_1, x0, where(position < c_2, x1, ...))``;
- a group input in any context but the identity becomes a `LastDimRead` of that input.

A member may be lowered in several contexts (rotate_half reads x at two shifts); each (member, context)
is lowered once. Without index ops every member is in the identity context and the program is the plain
elementwise one.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.ir.from_aten import Lowerer, NotLowerable, dtype_name, tensor_meta
from torchfuser.ir.program import Const, LastDimRead, Program, ProgramBuilder

aten = torch.ops.aten

IDENTITY, BROADCAST = (0, 1), (0, 0)
INDEX_OPS = (aten.cat.default, aten.slice.Tensor)


def index_op_problem(node: fx.Node) -> str | None:
    """None when node is a cat or slice along the last dim that a pointwise region can take, else why not."""
    if node.op != "call_function" or node.target not in INDEX_OPS:
        return f"{node.target} is not a cat or slice"
    meta = tensor_meta(node)
    if meta is None or meta.dim() == 0:
        return "the result is not a tensor with dims"
    operands = node.args[0] if node.target is aten.cat.default else [node.args[0]]
    dim = _arg(node, 1, "dim", 0)
    if dim % meta.dim() != meta.dim() - 1:
        what = "concatenate" if node.target is aten.cat.default else "slice"
        return f"along dim {dim} of a {meta.dim()}-d tensor: kernels {what} along the last dim only"
    for x in operands:
        t = tensor_meta(x)
        if t is None or t.dim() != meta.dim() or t.shape[:-1] != meta.shape[:-1]:
            return "an operand is not a tensor of the result's shape outside the last dim"
    if node.target is aten.slice.Tensor and _arg(node, 4, "step", 1) < 1:
        return "slice with a step below 1"
    try:
        dtype_name(node), [dtype_name(x) for x in operands]
    except NotLowerable as why:
        return str(why)
    return None


def is_last_dim_slice(node) -> bool:
    return isinstance(node, fx.Node) and node.target is aten.slice.Tensor and index_op_problem(node) is None


def lower_region(members: list[fx.Node], outputs: list[fx.Node], width: int) -> tuple[Program, list[fx.Node]]:
    """The program computing `outputs` (last dim `width`) from the members; and the group's input nodes,
    one per program input (a node read at two positions is two inputs)."""
    region = set(members)
    position = {n: i for i, n in enumerate(members)}
    wanted: dict[tuple, None] = {}  # (member, context), ordered by discovery
    stack = [(n, _context(n, IDENTITY)) for n in reversed(outputs)]
    while stack:
        key = stack.pop()
        if key in wanted:
            continue
        wanted[key] = None
        stack += [(a, c) for a, c in reversed(_operand_contexts(*key)) if a in region]

    todo = sorted(wanted, key=lambda key: position[key[0]])  # operands before users, as in the graph
    reads: dict[tuple, int] = {}  # (input node, LastDimRead | None) -> program input
    for node, ctx in todo:
        for a, c in _operand_contexts(node, ctx):
            if a not in region:
                reads.setdefault((a, _read(a, c, width)), len(reads))
    builder = ProgramBuilder()
    for a, read in reads:
        builder.add_input(dtype_name(a), read)

    values: dict[tuple, int] = {}

    def value(a, c):
        return values[(a, c)] if a in region else reads[(a, _read(a, c, width))]

    for node, ctx in todo:
        operands = _operand_contexts(node, ctx)
        if node.target is aten.slice.Tensor:
            values[(node, ctx)] = value(*operands[0])
        elif node.target is aten.cat.default:
            pieces = [(value(a, c), start) for a, c, start in _pieces(node, ctx)]
            values[(node, ctx)] = _select(builder, node, ctx, pieces)
        else:
            values[(node, ctx)] = Lowerer(builder, {a: value(a, c) for a, c in operands}).lower(node)
    program = builder.build([values[(n, _context(n, IDENTITY))] for n in outputs])
    return program, [a for a, _ in reads]


def _operand_contexts(node: fx.Node, ctx: tuple) -> list[tuple]:
    """(operand, context) for each tensor operand that node, evaluated in ctx, reads."""
    offset, step = ctx
    if node.target is aten.slice.Tensor:
        start, stride = _window(node)
        source = node.args[0]
        return [(source, _context(source, (start + stride * offset, stride * step)))]
    if node.target is aten.cat.default:
        return [(a, c) for a, c, _ in _pieces(node, ctx)]
    return [(a, _context(a, ctx)) for a in node.all_input_nodes]


def _pieces(node: fx.Node, ctx: tuple) -> list[tuple]:
    """(operand, its context, its first position in the cat) for the operands ctx can reach."""
    offset, step = ctx
    pieces, start = [], 0
    for a in node.args[0]:
        size = tensor_meta(a).shape[-1]
        if size and (step or start <= offset < start + size):  # step 0: one fixed position, one operand
            pieces.append((a, _context(a, (offset - start, step)), start))
        start += size
    return pieces


def _select(builder: ProgramBuilder, node: fx.Node, ctx: tuple, pieces: list[tuple]) -> int:
    """where(position < start_1, piece_0, where(position < start_2, piece_1, ...)) at position offset + step*j."""
    dtype = dtype_name(node)
    offset, step = ctx
    result = builder.cast(pieces[-1][0], dtype)
    if len(pieces) > 1:
        j = builder.emit("last_index", (), "int64")
        for (v, _), (_, bound) in zip(reversed(pieces[:-1]), reversed(pieces[1:])):
            first_j = -((offset - bound) // step)  # ceil((bound - offset) / step): the first j at the bound
            below = builder.emit("lt", (j, Const(first_j, "int64")), "bool")
            result = builder.emit("where", (below, builder.cast(v, dtype), result), dtype)
    return result


def _context(node, ctx: tuple) -> tuple:
    """A value of width 1 (or no dims) has one position: context (0, 0) (which, for a wider value, means
    position 0 at every j)."""
    meta = tensor_meta(node)
    return BROADCAST if meta is None or meta.dim() == 0 or meta.shape[-1] <= 1 else ctx


def _read(node, ctx: tuple, width: int) -> LastDimRead | None:
    size = tensor_meta(node).shape[-1] if tensor_meta(node).dim() else 1
    if size <= 1 or (ctx == IDENTITY and size == width):
        return None  # read at the element, broadcast by strides as before
    return LastDimRead(ctx[0], ctx[1], size)


def _window(node: fx.Node) -> tuple[int, int]:
    """(first position, step) of a last-dim slice, its bounds normalised as eager does."""
    size = tensor_meta(node.args[0]).shape[-1]
    start = _arg(node, 2, "start", None)
    start = 0 if start is None else start + size if start < 0 else start
    return min(max(start, 0), size), _arg(node, 4, "step", 1)


def _arg(node: fx.Node, index: int, name: str, default):
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)
