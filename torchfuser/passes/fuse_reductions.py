"""fuse_reductions: a reduction over the last dim, with the elementwise ops around it, becomes one kernel.

Rule: each anchor, `_softmax`, `_log_softmax`, `native_layer_norm` (one normalised dim), `sum.dim_IntList`,
`mean.dim`, `amax`, `amin`, `prod.dim_int`, `var.correction`, `argmax` or `argmin` over the last dim only
(keepdim either way), becomes a `ReductionKernel` together with
- its prologue: the elementwise producers of its input, of the same shape, whose users are all in the
  kernel (a mask add, a scale, a residual add); they are recomputed in every pass over the row;
- its epilogue: consumers of its results, in graph order. Row-level ones (a row value's shape, no tensor
  operands of their own: rmsnorm's add eps and rsqrt) join the latest statistic; element-level ones (the
  row shape: weight, bias, activation, residual, rmsnorm's mul x) join the final program, loading their
  other operands broadcast to the rows (a row value used there must keep its dim); a further sum / mean /
  amax / var over the last dim of an element-level value becomes one more pass over the row, so a layernorm or
  softmax written out by hand (mean, then mean of squared deviations; amax, exp, sum) is one kernel too.
A row value that reads a 0-d tensor (with dynamic shapes Dynamo passes rmsnorm's eps as one) cannot join a
row stage, which reads no loads: it is computed per element instead (kept dim only, so it broadcasts along
the row), and may then not be an output itself. Nodes used outside the kernel become its outputs. An operand
that depends on the kernel's own results is never loaded (that would need a cycle). LLaMA's rmsnorm, pow -> mean.dim -> add -> rsqrt -> mul -> mul,
is thus one kernel.

Preconditions: float32 reduced input with a last dim of at least one element (rows may be zero); outputs
the graph expects contiguous; loads of any supported dtype and strides. Runs after fuse_gemm_epilogue (a
GEMM keeps its bias and activation) and before fuse_pointwise (which would otherwise take the prologue
and epilogue into separate kernels).

    before:  m = mul(x, 0.125); a = add(m, mask); s = _softmax(a, -1, False); return s
    after:   s = tf_reduction_group0(x, mask)          # max, sum of exp, exp * 1/sum; prologue inlined
             return s
"""

from __future__ import annotations

import heapq
import operator

import torch
import torch.fx as fx

from torchfuser.ir.kernels import ReductionKernel
from torchfuser.ir.program import ProgramBuilder
from torchfuser.ir.reduction import (
    RowReductionBuilder, layer_norm_template, reduce_template, reduction_stage, softmax_template, variance_row,
)
from torchfuser.lowering.from_aten import Lowerer, constant_value, dtype_name, lowering_problem, node_arg, tensor_meta
from torchfuser.passes.base import (
    PassResult, count_ops, erase_nodes, insert_fused_node, next_group_id, record_unfused,
)

aten = torch.ops.aten

KINDS = {
    aten._softmax.default: "softmax",
    aten._log_softmax.default: "log_softmax",
    aten.native_layer_norm.default: "layer_norm",
    aten.sum.dim_IntList: "sum",
    aten.mean.dim: "mean",
    aten.amax.default: "amax",
    aten.amin.default: "amin",
    aten.prod.dim_int: "prod",
    aten.var.correction: "var",
    aten.argmax.default: "argmax",
    aten.argmin.default: "argmin",
}
ROW_STATISTICS = (aten.sum.dim_IntList, aten.mean.dim, aten.amax.default, aten.amin.default, aten.prod.dim_int,
                  aten.var.correction)
REDUCTION_OPS = frozenset(KINDS)


def fuse_reductions(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    group = next_group_id(gm)
    claimed: set[fx.Node] = set()
    fused = prologue_ops = epilogue_ops = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in REDUCTION_OPS or node in claimed:
            continue
        match = _match(gm, node, claimed)
        if isinstance(match, str):
            record_unfused(node, "fuse_reductions", match)
            continue
        if match is None:
            continue
        _rewrite(gm, match, group + fused)
        claimed |= match.members
        fused += 1
        prologue_ops += len(match.prologue)
        epilogue_ops += len(match.epilogue)
    if fused:
        erase_nodes(gm, claimed)
    return PassResult(gm, fused > 0, {
        "reductions": fused, "prologue_ops": prologue_ops, "epilogue_ops": epilogue_ops,
        "nodes_before": before, "nodes_after": count_ops(gm),
    })


# ---------------------------------------------------------------- the anchor


def _last_dim_only(dims, rank: int) -> bool:
    if isinstance(dims, int):
        dims = [dims]
    return isinstance(dims, (list, tuple)) and len(dims) == 1 and rank > 0 and dims[0] % rank == rank - 1


def unfused_reason(node: fx.Node) -> str | None:
    """Why this reduction cannot be a row-reduction kernel; None when it can."""
    kind = KINDS.get(node.target)
    if kind is None:
        return "not a row reduction"
    x = node.args[0]
    meta = tensor_meta(x)
    if meta is None or (meta.dtype != torch.float32 and not integer_sum(node)):
        return "row reductions are fused for float32 inputs (and sums of integers or bools) only"
    rank = meta.dim()
    if kind in ("softmax", "log_softmax"):
        if not _last_dim_only(node.args[1], rank) or node.args[2]:
            return f"{kind} over a dim other than the last (or half_to_float)"
    elif kind == "layer_norm":
        if len(node.args[1]) != 1 or rank == 0:
            return "layer_norm over more than the last dim"
        if any(u.target is not operator.getitem for u in node.users):
            return "layer_norm result used other than through getitem"
    else:
        if not _last_dim_only(node_arg(node, 1, "dim"), rank):
            return f"{kind} over a dim other than the last"
        if node.kwargs.get("dtype") not in (None, tensor_meta(node).dtype):
            return f"{kind} with a dtype argument other than its result's"
    if meta.shape[-1] == 0:
        return "rows of length zero"
    return None


def integer_sum(node: fx.Node) -> bool:
    """A sum of bools or integers into int64 (count_nonzero's): accumulated exactly in int64."""
    x, result = tensor_meta(node.args[0]), tensor_meta(node)
    return (node.target is aten.sum.dim_IntList and x is not None and result is not None
            and x.dtype in (torch.bool, torch.int32, torch.int64) and result.dtype == torch.int64)


class _Match:
    def __init__(self, anchor: fx.Node):
        self.anchor = anchor
        self.kind = KINDS[anchor.target]
        self.x: fx.Node = anchor.args[0]
        self.shape = tuple(tensor_meta(self.x).shape)
        self.row_shapes = (self.shape[:-1], self.shape[:-1] + (1,))  # a row value without / with its dim
        self.prologue: set[fx.Node] = set()
        self.results: dict[fx.Node, tuple] = {}  # node -> ("element",) or ("row", result index)
        self.getitems: list[fx.Node] = []
        self.epilogue: list[fx.Node] = []  # in graph order
        self.level: dict[fx.Node, str] = {}  # epilogue node -> "element" | "row" | "reduce"
        self.loads: list[fx.Node] = []

    @property
    def members(self) -> set[fx.Node]:
        return {self.anchor} | self.prologue | set(self.results) | set(self.getitems) | set(self.epilogue)

    def is_row_level(self, node: fx.Node) -> bool:
        return self.level.get(node) in ("row", "reduce") or self.results.get(node, ("element",))[0] == "row"

    def is_element_level(self, node: fx.Node) -> bool:
        return self.level.get(node) == "element" or self.results.get(node) == ("element",)


def handles(node: fx.Node) -> bool:
    return node.target in REDUCTION_OPS


def _match(gm: fx.GraphModule, anchor: fx.Node, claimed: set) -> _Match | str | None:
    """The match; or why there is none; or None when nothing reads the result (dead code, not ours)."""
    reason = unfused_reason(anchor)
    if reason is not None:
        return reason
    m = _Match(anchor)
    if m.kind == "layer_norm":
        for user in anchor.users:
            m.getitems.append(user)
            m.results[user] = ("element",) if user.args[1] == 0 else ("row", user.args[1])
    else:
        m.results[anchor] = ("element",) if m.kind in ("softmax", "log_softmax") else ("row", 0)
    for node in m.results:
        meta = tensor_meta(node)
        if meta is None or not meta.is_contiguous():
            return "a result the graph expects in a layout other than contiguous (kernels write rows contiguously)"
    _grow_prologue(m, claimed)
    _grow_epilogue(gm, m, claimed)
    if not any(_used_outside(m, node) for node in m.members):
        return None
    if any(_per_element_row(m, node) and _used_outside(m, node) for node in m.epilogue):
        return "a row value computed per element (it reads a 0-d tensor) is also read outside the kernel"
    return m


def _broadcasts_to(node: fx.Node, shape: tuple) -> bool:
    meta = tensor_meta(node)
    if meta is None or meta.dim() > len(shape):
        return False
    return all(s in (1, t) for s, t in zip(reversed(meta.shape), reversed(shape)))


def _grow_prologue(m: _Match, claimed: set) -> None:
    """Producers of the reduced input, walked users-first, that nothing outside the kernel reads."""
    order = {n: i for i, n in enumerate(m.anchor.graph.nodes)}
    heap = [(-order[m.x], id(m.x), m.x)]
    seen = set()
    while heap:
        _, _, node = heapq.heappop(heap)
        if node in seen:
            continue
        seen.add(node)
        inside = m.prologue | {m.anchor}
        meta = tensor_meta(node)
        if (node in claimed or lowering_problem(node) is not None or tuple(meta.shape) != m.shape
                or any(u not in inside for u in node.users)):
            continue
        m.prologue.add(node)
        for i in node.all_input_nodes:
            heapq.heappush(heap, (-order[i], id(i), i))


def _grow_epilogue(gm: fx.GraphModule, m: _Match, claimed: set) -> None:
    """Consumers in graph order; `tainted` holds what depends on the kernel without being in it."""
    nodes = list(gm.graph.nodes)
    tainted: set[fx.Node] = set()
    for node in nodes[nodes.index(m.anchor) + 1:]:
        members = m.members
        inputs = node.all_input_nodes
        if node in members or not any(i in members or i in tainted for i in inputs):
            continue
        level = None
        if node not in claimed and not any(i in tainted for i in inputs):
            level = _epilogue_level(m, node, members)
        if level is None:
            tainted.add(node)
        else:
            m.epilogue.append(node)
            m.level[node] = level


def _epilogue_level(m: _Match, node: fx.Node, members: set) -> str | None:
    meta = tensor_meta(node)
    if meta is None or not meta.is_contiguous():
        return None
    shape, inputs = tuple(meta.shape), node.all_input_nodes
    if node.target in ROW_STATISTICS:
        reduced = node.args[0]
        ok = unfused_reason(node) is None and m.is_element_level(reduced) and len(inputs) == 1
        return "reduce" if ok and tuple(tensor_meta(reduced).shape) == m.shape else None
    if lowering_problem(node) is not None:
        return None
    if shape == m.shape and all(
        m.is_element_level(i) or (m.is_row_level(i) and tuple(tensor_meta(i).shape) == m.row_shapes[1])
        or (i not in members and _broadcasts_to(i, m.shape)) for i in inputs
    ):
        return "element"
    if shape in m.row_shapes and all(m.is_row_level(i) and tuple(tensor_meta(i).shape) == shape for i in inputs):
        return "row"
    if shape == m.row_shapes[1] and _computed_per_element(m, inputs, members, shape):
        return "element"  # kept dim: it broadcasts along the row as the element ops read it
    return None


def _computed_per_element(m: _Match, inputs, members: set, shape: tuple) -> bool:
    """A row value that reads a 0-d tensor (an epsilon Dynamo passes as a runtime value), or one computed from
    such a value: a row stage reads no loads, so it is computed per element, as the element ops reading it
    are (an rsqrt per element instead of per row)."""
    def zero_d(i):  # a loaded 0-d tensor (a constant is a literal, and rows take those as they are)
        meta = tensor_meta(i)
        return i not in members and meta is not None and meta.dim() == 0 and constant_value(i) is None

    def row_shaped(i):
        return (m.is_row_level(i) or m.is_element_level(i)) and tuple(tensor_meta(i).shape) == shape

    return (any(zero_d(i) or _per_element_row(m, i) for i in inputs)
            and all(zero_d(i) or row_shaped(i) for i in inputs))


def _per_element_row(m: _Match, node: fx.Node) -> bool:
    """A row-shaped value computed per element (see _epilogue_level)."""
    return m.is_element_level(node) and tuple(tensor_meta(node).shape) != m.shape


def _correction(node: fx.Node) -> float:
    """var's divisor is n - correction; no correction given means 1 (Bessel)."""
    correction = node.kwargs.get("correction")
    return 1.0 if correction is None else float(correction)


def _used_outside(m: _Match, node: fx.Node) -> bool:
    members = m.members
    return any(u not in members for u in node.users)


# ---------------------------------------------------------------- the rewrite


def _rewrite(gm: fx.GraphModule, m: _Match, group: int) -> None:
    members = m.members
    position = {n: i for i, n in enumerate(gm.graph.nodes)}
    prologue = sorted(m.prologue, key=position.__getitem__)
    affine = [a for a in m.anchor.args[2:4] if isinstance(a, fx.Node)] if m.kind == "layer_norm" else []
    operands = [i for node in prologue for i in node.all_input_nodes] + [m.x] + affine
    operands += [i for node in m.epilogue for i in node.all_input_nodes]
    for i in operands:  # constants (scalar_tensor, full) are literals of the programs, not loads
        if i not in members and i not in m.loads and constant_value(i) is None:
            m.loads.append(i)
    rb = RowReductionBuilder([dtype_name(n) for n in m.loads])
    load_ids = {n: k for k, n in enumerate(m.loads)}

    def source(builder: ProgramBuilder) -> int:
        values = dict(load_ids)
        lowerer = Lowerer(builder, values)
        for node in prologue:
            values[node] = lowerer.lower(node)
        return values[m.x]

    if m.kind in ("softmax", "log_softmax"):
        anchor_values = softmax_template(rb, source, log=m.kind == "log_softmax")
    elif m.kind == "layer_norm":
        weight, bias = (load_ids.get(a) if isinstance(a, fx.Node) else None for a in m.anchor.args[2:4])
        anchor_values = layer_norm_template(rb, source, float(m.anchor.args[4]), weight, bias)
    else:
        anchor_values = reduce_template(rb, source, m.kind, _correction(m.anchor), dtype_name(m.anchor))
    row_index = {}  # row-level node -> its row value
    for node, result in m.results.items():
        if result[0] == "row":
            row_index[node] = anchor_values.rows[result[1]]

    def element_value(builder: ProgramBuilder, memo: dict, node: fx.Node) -> int:
        """Lower an element-level value (and what it needs) into an element or final program."""
        if node not in memo:
            if node in load_ids:
                memo[node] = load_ids[node]
            elif node in row_index:  # defined by an earlier stage: an input of this program
                memo[node] = rb.row_input(row_index[node])
            elif node in m.results:
                memo[node] = anchor_values.element(builder)
            else:
                for i in node.all_input_nodes:
                    if constant_value(i) is None:
                        element_value(builder, memo, i)
                memo[node] = Lowerer(builder, memo).lower(node)
        return memo[node]

    for node in m.epilogue:  # row-level work in graph order: each joins the latest statistic
        if m.level[node] == "row":
            values = {n: rb.row_in_finish(r) for n, r in row_index.items()}
            row_index[node] = rb.add_row(Lowerer(rb.finish, values).lower(node))
        elif m.level[node] == "reduce":
            reduced = node.args[0]
            if KINDS[node.target] == "var":
                row_index[node] = variance_row(rb, lambda b: element_value(b, {}, reduced), _correction(node))
            else:
                builder = rb.element()
                value = element_value(builder, {}, reduced)
                row_index[node] = reduction_stage(rb, builder, value, KINDS[node.target])

    final = rb.final()
    memo: dict = {}
    ordered = sorted(members, key=position.__getitem__)
    outputs = [n for n in ordered if _used_outside(m, n)]
    element_outputs = [n for n in outputs if m.is_element_level(n)]
    row_outputs = [n for n in outputs if m.is_row_level(n)]
    values = {n: element_value(final, memo, n) for n in element_outputs}
    reduction = rb.build(final, [values[n] for n in element_outputs], [row_index[n] for n in row_outputs])
    kernel = ReductionKernel(reduction, m.shape, [tuple(tensor_meta(n).shape) for n in row_outputs], group)
    results = element_outputs + row_outputs
    out_vals = tuple(n.meta["val"] for n in results)
    fused = insert_fused_node(gm, kernel, m.loads, ordered, out_vals[0] if len(results) == 1 else out_vals)
    if len(results) == 1:
        results[0].replace_all_uses_with(fused, delete_user_cb=lambda user: user not in members)
        return
    for index, node in enumerate(results):
        with gm.graph.inserting_after(fused):
            item = gm.graph.call_function(operator.getitem, (fused, index))
        item.meta.update(val=node.meta["val"], stack_trace=node.meta.get("stack_trace"))
        node.replace_all_uses_with(item, delete_user_cb=lambda user: user not in members)
