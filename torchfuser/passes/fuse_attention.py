"""fuse_attention: scaled dot-product attention, as SDPA or written out, becomes one attention kernel.

Rule: two forms become `tf_attention(q, k, v, masks...)` (one launch, online softmax, no [T, S] matrix):
- SDPA: `_scaled_dot_product_flash_attention_for_cpu` (what F.scaled_dot_product_attention and Hugging
  Face's default "sdpa" attention lower to on CPU; capture keeps it from decomposition) and
  `scaled_dot_product_attention` where a graph still has it: scale, attn_mask (float added, bool kept),
  is_causal, enable_gqa / fewer kv heads. A used logsumexp (training) becomes a second output.
  A fully masked row gives 0, as SDPA does.
- The explicit pattern of GPT-2 / BERT / LLaMA eager code: bmm(q, kᵀ) → view [B, H, T, S] → a chain of
  elementwise ops (scale by mul or div, additive mask, where/masked_fill) → _softmax(-1) → (clone: eval
  dropout) → bmm(·, v) → view [B, H, T, D]. The chain becomes the kernel's score program; its other
  operands are loaded broadcast to [B, H, T, S]. q, k, v are found behind the expand/view/clone/permute
  nodes that aot puts around bmm, and read through their strides; LLaMA's repeat_kv (unsqueeze, expand,
  clone, view) becomes grouped-query indexing. A fully masked row gives NaN, as eager softmax does.

Either form: when the graph's only use of the output [B, H, T, D] is a transpose to [B, T, H, D] made
contiguous (permute(o, [0, 2, 1, 3]) → clone, what `.transpose(1, 2).contiguous()` / `.reshape(B, T, C)`
give before the out-projection), the kernel writes that contiguous tensor itself through its output
strides and the transpose copy disappears (the views after it stay: they cost nothing).

Preconditions: float32 q, k, v of rank 4 with one head dim (q, k and v alike) and at least one key; no
dropout (p = 0; eval dropout is absent or a clone); the scores and probabilities used by nothing else
(output_attentions keeps the unfused ops). Runs first: fuse_gemm_epilogue would take the bmms and
fuse_reductions the softmax.

    before:  e = expand(q, [2, 4, 8, 16]); qv = view(e, [8, 8, 16]); kt = permute(k, [0, 1, 3, 2])
             e1 = expand(kt, [2, 4, 16, 8]); kv = view(e1, [8, 16, 8]); s = bmm(qv, kv)
             s4 = view(s, [2, 4, 8, 8]); d = div(s4, 4.0); a = add(d, mask); p = _softmax(a, -1, False)
             e2 = expand(p, [2, 4, 8, 8]); pv = view(e2, [8, 8, 8]); e3 = expand(v, [2, 4, 8, 16])
             vv = view(e3, [8, 8, 16]); o = bmm(pv, vv); o4 = view(o, [2, 4, 8, 16])
             t = permute(o4, [0, 2, 1, 3]); c = clone(t, memory_format=contiguous); y = view(c, [2, 8, 64])
    after:   c = tf_attention_group0(q, k, v, mask); y = view(c, [2, 8, 64])
"""

from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx

from torchfuser.ir.aten import RESHAPES
from torchfuser.ir.kernels import AttentionKernel
from torchfuser.ir.program import Const, ProgramBuilder
from torchfuser.lowering.from_aten import Lowerer, NotLowerable, POINTWISE, dtype_name, node_arg, tensor_meta
from torchfuser.passes.base import (
    PassResult, count_ops, erase_nodes, insert_fused_node, next_group_id, record_unfused,
)

aten = torch.ops.aten
SDPA_FLASH = aten._scaled_dot_product_flash_attention_for_cpu.default
SDPA = aten.scaled_dot_product_attention.default
ATTENTION_OPS = frozenset({SDPA_FLASH, SDPA})
KEEP = (SDPA_FLASH,)  # decomposed, SDPA is bmm, softmax, a masked-row fix-up and bmm
SWAP_LAST_TWO = [0, 1, 3, 2]


def fuse_attention(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    group = next_group_id(gm)
    fused = 0
    dead: list[fx.Node] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node in dead:
            continue
        if node.target in ATTENTION_OPS:
            match = _match_sdpa(node)
            if isinstance(match, str):
                record_unfused(node, "fuse_attention", match)
                continue
        elif node.target is aten.bmm.default:
            match = _match_explicit(node)
        else:
            continue
        if match is not None:
            _absorb_heads_transpose(match)
            dead += _rewrite(gm, match, group + fused)
            fused += 1
    if fused:
        erase_nodes(gm, dead)  # at the end: erasing re-sorts the graph under the loop
    return PassResult(gm, fused > 0, {"attention": fused, "nodes_before": before, "nodes_after": count_ops(gm)})


class _Match:
    def __init__(self):
        self.q = self.k = self.v = None  # fx nodes, or ("permute", node) for a kᵀ we must swap back
        self.masks: list[fx.Node] = []
        self.score = None  # Program
        self.causal = False
        self.masked_rows = "nan"
        self.output_like_query = False
        self.heads_last = False  # the kernel writes the [B, T, H, D] contiguous copy the graph makes next
        self.covered: list[fx.Node] = []  # the nodes the kernel replaces (provenance, erasure)
        self.output: fx.Node | None = None  # its uses get the attention output
        self.lse: fx.Node | None = None  # its uses get the logsumexp (SDPA in training)


def _float32(*nodes) -> bool:
    return all(tensor_meta(n) is not None and tensor_meta(n).dtype == torch.float32 for n in nodes)


def _shapes_fit(q, k, v) -> bool:
    """q, k, v metas: rank 4, one head dim, one batch, kv heads dividing the query heads, a key or more."""
    qs, ks, vs = (tuple(x.shape) for x in (q, k, v))
    return (len(qs) == len(ks) == len(vs) == 4 and qs[3] == ks[3] == vs[3] and qs[0] == ks[0] == vs[0]
            and ks[1:3] == vs[1:3] and ks[1] > 0 and qs[1] % ks[1] == 0 and ks[2] > 0)


def _broadcasts_to(node, shape) -> bool:
    meta = tensor_meta(node)
    return meta is not None and meta.dim() <= len(shape) and all(
        s in (1, t) for s, t in zip(reversed(meta.shape), reversed(shape)))


# ---------------------------------------------------------------- SDPA


def handles(node: fx.Node) -> bool:
    return node.target in ATTENTION_OPS


def _match_sdpa(node: fx.Node) -> _Match | str:
    """The match, or why there is none."""
    q, k, v = node.args[:3]
    flash = node.target is SDPA_FLASH
    dropout = node_arg(node, 3, "dropout_p", 0.0) if flash else node_arg(node, 4, "dropout_p", 0.0)
    causal = node_arg(node, 4, "is_causal", False) if flash else node_arg(node, 5, "is_causal", False)
    mask = node.kwargs.get("attn_mask") if flash else node_arg(node, 3, "attn_mask")
    scale = node.kwargs.get("scale") if flash else node_arg(node, 6, "scale")
    if dropout:
        return "attention with dropout (p > 0)"
    if not _float32(q, k, v):
        return "q, k and v are not all float32"
    if not _shapes_fit(*map(tensor_meta, (q, k, v))):
        return "q, k and v are not rank 4 with one head dim and at least one key"
    if not flash and tensor_meta(q).shape[1] != tensor_meta(k).shape[1] and not node_arg(node, 7, "enable_gqa", False):
        return "different head counts without enable_gqa (eager's error is kept)"
    b, h, t, d = tensor_meta(q).shape
    s = tensor_meta(k).shape[2]
    m = _Match()
    m.q, m.k, m.v, m.causal, m.masked_rows, m.output_like_query = q, k, v, bool(causal), "zero", True
    scale = float(scale if scale is not None else 1 / math.sqrt(d))
    if isinstance(mask, fx.Node):
        meta = tensor_meta(mask)
        if meta is None or meta.dtype not in (torch.float32, torch.bool) or not _broadcasts_to(mask, (b, h, t, s)):
            return "a mask that is not float32 or bool, or does not broadcast to [B, H, T, S]"
        m.masks.append(mask)
        builder = ProgramBuilder(["float32", "bool" if meta.dtype == torch.bool else "float32"])
    else:
        builder = ProgramBuilder(["float32"])
    score = builder.emit("mul", (0, Const(scale, "float32")), "float32")  # SDPA: scale, then the mask
    if m.masks and builder.input_dtypes[1] == "bool":
        score = builder.emit("where", (1, score, Const(-math.inf, "float32")), "float32")
    elif m.masks:
        score = builder.emit("add", (score, 1), "float32")
    m.score = builder.build([score])
    m.covered = [node]
    if flash:
        items = {u.args[1]: u for u in node.users if u.target is operator.getitem}
        if len(items) != len(node.users) or 0 not in items or not items[0].users:
            return "its results are used other than through their items, or its output is unused"
        m.output = items[0]
        m.lse = items.get(1) if items.get(1) is not None and items[1].users else None
        m.covered += [items[i] for i in sorted(items)]
    else:
        m.output = node
    return m


# ---------------------------------------------------------------- the explicit pattern


def _only_user(node: fx.Node):
    return next(iter(node.users)) if len(node.users) == 1 else None


def _skip_clones(node: fx.Node, covered: list) -> fx.Node:
    while node.op == "call_function" and node.target is aten.clone.default:
        covered.append(node)
        node = node.args[0]
    return node


def _unflatten(operand: fx.Node, covered: list):
    """A bmm operand [B*H, X, Y] made by view(clone?(expand?(E))) → E, when E is [B, H, X, Y] already."""
    if operand.op != "call_function" or operand.target not in RESHAPES:
        return None
    steps = [operand]
    source = _skip_clones(operand.args[0], steps)
    if source.op == "call_function" and source.target is aten.expand.default:
        steps.append(source)
        shape = tuple(tensor_meta(source).shape)
        source = _skip_clones(source.args[0], steps)
        if tensor_meta(source) is None or tuple(tensor_meta(source).shape) != shape:
            return None  # a real broadcast: not the layout attention code produces
    meta, flat = tensor_meta(source), tuple(tensor_meta(operand).shape)
    if meta is None or meta.dim() != 4 or (meta.shape[0] * meta.shape[1], *meta.shape[2:]) != flat:
        return None
    covered += steps
    return source


def _repeat_kv_source(node: fx.Node, covered: list) -> fx.Node:
    """LLaMA's repeat_kv: view(clone(expand(unsqueeze(x, 2), [B, Hkv, R, S, D])), [B, Hkv*R, S, D]) → x."""
    if node.op != "call_function" or node.target not in RESHAPES:
        return node
    steps = [node]
    expand = _skip_clones(node.args[0], steps)
    if expand.op != "call_function" or expand.target is not aten.expand.default:
        return node
    unsqueeze = expand.args[0]
    if unsqueeze.op != "call_function" or unsqueeze.target is not aten.unsqueeze.default or unsqueeze.args[1] != 2:
        return node
    source = unsqueeze.args[0]
    meta, repeated = tensor_meta(source), tuple(tensor_meta(expand).shape)
    if meta is None or meta.dim() != 4 or tuple(tensor_meta(node).shape) != (
            repeated[0], repeated[1] * repeated[2], *repeated[3:]):
        return node
    covered += steps + [expand, unsqueeze]
    return source


def _match_explicit(pv_bmm: fx.Node) -> _Match | None:
    """Anchor: the probabilities @ v bmm; walk back to the scores bmm."""
    out = _only_user(pv_bmm)
    if out is None or out.target not in RESHAPES or tensor_meta(out) is None or tensor_meta(out).dim() != 4:
        return None
    covered: list[fx.Node] = []
    probs_side: list[fx.Node] = []
    probs = _unflatten(pv_bmm.args[0], probs_side)
    v = _unflatten(pv_bmm.args[1], covered)
    if probs is None or v is None:
        return None
    softmax = _skip_clones(probs, probs_side)  # eval-mode dropout
    covered += probs_side
    if (softmax.op != "call_function" or softmax.target is not aten._softmax.default or softmax.args[2]
            or softmax.args[1] % 4 != 3):
        return None
    covered.append(softmax)
    found = _score_chain(softmax.args[0])
    if found is None:
        return None
    scores4, chain = found
    qk_bmm = scores4.args[0]
    covered += [scores4, qk_bmm] + chain
    q = _unflatten(qk_bmm.args[0], covered)
    kt = _unflatten(qk_bmm.args[1], covered)
    if q is None or kt is None:
        return None
    k = None  # kᵀ is usually permute(k, [0, 1, 3, 2]); otherwise the rewrite adds that permute back
    if kt.op == "call_function" and kt.target is aten.permute.default and list(kt.args[1]) == SWAP_LAST_TWO:
        covered.append(kt)
        k = _repeat_kv_source(kt.args[0], covered)
    v = _repeat_kv_source(v, covered)
    private = [qk_bmm, scores4, *chain, softmax, *probs_side]
    if any(u not in private + [pv_bmm] for n in private for u in n.users):
        return None  # scores or probabilities used elsewhere (output_attentions): keep them
    if not _float32(q, v, kt, out):
        return None
    k_meta = tensor_meta(k) if k is not None else tensor_meta(kt).transpose(2, 3)
    if not _shapes_fit(tensor_meta(q), k_meta, tensor_meta(v)):
        return None
    b, h, t, _ = tensor_meta(q).shape
    s = tensor_meta(v).shape[2]
    program = _score_program(scores4, chain, (b, h, t, s))
    if program is None:
        return None
    m = _Match()
    m.q, m.k, m.v = q, k if k is not None else ("permute", kt), v
    m.score, m.masks = program
    m.covered = covered + [pv_bmm, out]
    m.output = out
    return m


def _score_chain(node: fx.Node, depth: int = 0):
    """(view of the scores bmm, elementwise ops from it to `node` in order), each op used once."""
    if node.op != "call_function" or depth > 16:
        return None
    if node.target in RESHAPES:
        source = node.args[0]
        ok = isinstance(source, fx.Node) and source.op == "call_function" and source.target is aten.bmm.default
        return (node, []) if ok and len(source.users) == 1 else None
    if node.target not in POINTWISE:
        return None
    for operand in node.all_input_nodes:  # the operand that leads back to the bmm continues the chain
        meta = tensor_meta(operand)
        if len(operand.users) == 1 and meta is not None and tuple(meta.shape) == tuple(tensor_meta(node).shape):
            found = _score_chain(operand, depth + 1)
            if found is not None:
                return found[0], found[1] + [node]
    return None


def _score_program(scores4: fx.Node, chain: list, shape: tuple):
    """(program, masks): the chain lowered with the raw score as input 0 and other operands as loads."""
    builder = ProgramBuilder(["float32"])
    values = {scores4: 0}
    masks = []
    for node in chain:
        for operand in node.all_input_nodes:
            if operand not in values and operand not in chain:
                if not _broadcasts_to(operand, shape):
                    return None
                try:
                    values[operand] = builder.add_input(dtype_name(operand))
                except (NotLowerable, RuntimeError):
                    return None
                masks.append(operand)
    lowerer = Lowerer(builder, values)
    try:
        for node in chain:
            if tuple(tensor_meta(node).shape) != shape:
                return None
            values[node] = lowerer.lower(node)
        last = values[chain[-1]] if chain else 0
        result = builder.cast(last, "float32")
    except NotLowerable:
        return None
    return builder.build([result]), masks


# ---------------------------------------------------------------- the output layout


def _swaps_heads_and_rows(node: fx.Node) -> bool:
    """permute(x, [0, 2, 1, 3]) or transpose(x, 1, 2) of a rank-4 x."""
    if node.op != "call_function":
        return False
    if node.target is aten.permute.default:
        return [d % 4 for d in node.args[1]] == [0, 2, 1, 3]
    if node.target is aten.transpose.int:
        return sorted(d % 4 for d in node.args[1:3]) == [1, 2]
    return False


def _absorb_heads_transpose(m: _Match) -> None:
    """output → transpose(1, 2) → clone to contiguous, nothing else using the first two: the kernel's output
    becomes the clone (a layout change only, so nothing to compute)."""
    transpose = _only_user(m.output)
    if transpose is None or not _swaps_heads_and_rows(transpose):
        return
    clone = _only_user(transpose)
    meta = tensor_meta(clone) if clone is not None else None
    if clone is None or clone.target is not aten.clone.default or meta is None or not meta.is_contiguous():
        return
    m.covered += [transpose, clone]
    m.output, m.heads_last = clone, True


# ---------------------------------------------------------------- the rewrite


def _rewrite(gm: fx.GraphModule, m: _Match, group: int) -> list[fx.Node]:
    """Insert the kernel, hand its results to the users; returns the covered nodes now dead."""
    graph = gm.graph
    k = m.k
    if isinstance(k, tuple):  # kᵀ as found: read it back as k through a permuted view (no copy)
        kt = k[1]
        with graph.inserting_after(kt):
            k = graph.call_function(aten.permute.default, (kt, SWAP_LAST_TWO))
        k.meta["val"] = tensor_meta(kt).permute(SWAP_LAST_TWO)
    kernel = AttentionKernel(m.score, group, causal=m.causal, masked_rows=m.masked_rows, with_lse=m.lse is not None,
                             output_like_query=m.output_like_query, heads_last=m.heads_last)
    position = {n: i for i, n in enumerate(graph.nodes)}
    covered = sorted(set(m.covered), key=position.__getitem__)
    out_val = m.output.meta["val"]
    vals = (out_val, m.lse.meta["val"]) if m.lse is not None else out_val
    fused = insert_fused_node(gm, kernel, [m.q, k, m.v, *m.masks], covered, vals)
    if m.lse is None:
        m.output.replace_all_uses_with(fused)
    else:
        for index, node in enumerate((m.output, m.lse)):
            with graph.inserting_after(fused):
                item = graph.call_function(operator.getitem, (fused, index))
            item.meta.update(val=node.meta["val"], stack_trace=node.meta.get("stack_trace"))
            node.replace_all_uses_with(item)
    dead: list[fx.Node] = []
    for node in reversed(covered):  # users first: a node dies once every user of it has
        if all(u in dead for u in node.users):
            dead.append(node)
    return dead
