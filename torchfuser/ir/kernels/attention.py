"""Attention kernels: softmax(score(q·k, masks)) @ v in one launch, and its PyTorch meaning.

Inputs are q [B, H, T, D], k and v [B, Hkv, S, D] (H a multiple of Hkv: query head h reads kv head
h // (H / Hkv)) and the score program's mask operands, each broadcastable to [B, H, T, S]; everything is
read through its strides, so transposed [B, T, H, D] views cost no copy. The output is laid out as eager
lays it out: like q for SDPA (empty_like), contiguous for the explicit matmul pattern; or, when the graph
transposes it to [B, T, H, D] and makes that contiguous right after (heads_last), the kernel writes that
tensor itself through its strides.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from torchfuser.ir.interpret import run_program
from torchfuser.ir.kernels.base import FusedKernel, KernelSpec
from torchfuser.ir.layout import contiguous_strides
from torchfuser.ir.program import Program

# Attention schedules: CPU devices give each work-item vectors of consecutive query rows (one row per lane)
# and walk blocks of keys with broadcast FMAs (no local memory); GPUs one query row per work-item with
# scalar loops, so neighbouring work-items read the same key row at once.
ATTENTION_CPU = "query_lanes"
ATTENTION_GPU = "row_scalar"
ATTENTION_LAYOUTS = ("contig", "strided")  # q, k, v and the output along the head dim: stride 1 or any other
# a mask along the queries (the CPU lanes): stride 0 (one load per key), "rows" (any, but stride 1 along the
# keys: row vectors transposed in registers) or any strides (a gather per key)
MASK_LAYOUTS = ("bcast", "rows", "strided")


@dataclass(frozen=True)
class AttentionSpec(KernelSpec):
    """softmax(score(q·k, masks...)) @ v with an online softmax, `lanes` x `query_vectors` query rows per
    work-item.

    `score` is an SSA program: input 0 the raw dot product q·k (fp32), inputs 1.. the mask operands read
    at (b, h, t, s) through their strides; its output is the softmax input (scale, additive or fill masks).
    """

    score: Program
    head_dim: int
    layouts: tuple[str, ...]  # along the head dim, for q, k, v and the output
    mask_layouts: tuple[str, ...] = ()  # along the queries, one per mask operand (score inputs 1..)
    causal: bool = False  # SDPA's is_causal: key s is seen by query t when s <= t
    masked_rows: str = "nan"  # a row with every score -inf: "nan" (softmax, as eager) or "zero" (SDPA)
    with_lse: bool = False  # also write logsumexp of the scores per row (what SDPA's backward reads)
    index_type: str = "int"
    schedule: str = ATTENTION_CPU
    lanes: int = 16  # query_lanes: query rows per vector (4, 8 or 16); row_scalar: 1
    query_vectors: int = 1  # query_lanes: vectors per work-item, each k and v load feeds one FMA per vector
    kv_row_strides: tuple[int, int] = (0, 0)  # query_lanes: k and v row strides as literals (0: arguments)

    kind = "attention"

    def __post_init__(self):
        if len(self.layouts) != 4 or any(layout not in ATTENTION_LAYOUTS for layout in self.layouts):
            raise ValueError(f"four layouts (q, k, v, out) among {ATTENTION_LAYOUTS}")
        if len(self.mask_layouts) != self.score.n_inputs - 1 or any(x not in MASK_LAYOUTS for x in self.mask_layouts):
            raise ValueError(f"one mask layout per mask operand, among {MASK_LAYOUTS}")
        if self.score.n_inputs < 1 or self.score.input_dtypes[0] != "float32" or len(self.score.outputs) != 1:
            raise ValueError("the score program takes the fp32 dot product first and has one output")
        if self.masked_rows not in ("nan", "zero"):
            raise ValueError("masked_rows is 'nan' or 'zero'")
        if self.schedule not in (ATTENTION_CPU, ATTENTION_GPU):
            raise ValueError(f"schedule is {ATTENTION_CPU!r} or {ATTENTION_GPU!r}")
        if self.head_dim < 1 or self.index_type not in ("int", "long") or self.query_vectors < 1:
            raise ValueError("head_dim >= 1, index_type 'int' or 'long', query_vectors >= 1")
        if len(self.kv_row_strides) != 2 or min(self.kv_row_strides) < 0:
            raise ValueError("kv_row_strides: two strides >= 0")
        if self.lanes not in ((4, 8, 16) if self.schedule == ATTENTION_CPU else (1,)):
            raise ValueError("lanes is 4, 8 or 16 on the CPU schedule, 1 on the GPU one")

    @property
    def n_masks(self) -> int:
        return self.score.n_inputs - 1

    @property
    def rows_per_item(self) -> int:
        return self.lanes * self.query_vectors

    def key_text(self) -> str:
        return (
            f"attention head_dim={self.head_dim} layouts={','.join(self.layouts)} "
            f"masks={','.join(self.mask_layouts)} causal={int(self.causal)} "
            f"masked_rows={self.masked_rows} lse={int(self.with_lse)} index={self.index_type} "
            f"schedule={self.schedule} lanes={self.lanes}x{self.query_vectors} "
            f"kv_rows={self.kv_row_strides[0]},{self.kv_row_strides[1]}\n{self.score.text()}"
        )


def sdpa_output_strides(q) -> tuple:
    """The strides eager SDPA gives its output: empty_like(q) (q's layout when dense, else contiguous)."""
    shape, stride = tuple(q.shape), tuple(q.stride())
    if all(type(x) is int for x in shape + stride):
        return _empty_like_strides(shape, stride)
    return _empty_like_strides.__wrapped__(shape, stride)  # symbolic sizes: not hashable


@functools.lru_cache(maxsize=256)  # a decode step's query has the same layout every call: one meta op, not one per bind
def _empty_like_strides(shape: tuple, stride: tuple) -> tuple:
    return torch.empty_like(torch.empty_strided(shape, stride, device="meta")).stride()


class AttentionKernel(FusedKernel):
    """outs = attention output [B, H, T, D], or [B, T, H, D] contiguous when heads_last (+ logsumexp
    [B, H, T] when with_lse)."""

    kind = "attention"

    def __init__(self, score: Program, group: int, *, causal=False, masked_rows="nan", with_lse=False,
                 output_like_query=False, heads_last=False):
        super().__init__(group)
        self.score = score
        self.causal, self.masked_rows, self.with_lse = causal, masked_rows, with_lse
        self.output_like_query = output_like_query
        self.heads_last = heads_last  # the output is [B, T, H, D], contiguous

    def reference(self, q, k, v, *masks):
        heads_per_kv = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(heads_per_kv, 1), v.repeat_interleave(heads_per_kv, 1)
        (scores,) = run_program(self.score, [q @ k.transpose(-1, -2), *masks])
        t, s = q.shape[2], k.shape[2]
        scores = torch.broadcast_to(scores.float(), (*q.shape[:3], s))
        if self.causal:
            scores = scores.masked_fill(~torch.ones(t, s, dtype=torch.bool).tril(), -math.inf)
        probs = torch.softmax(scores, -1)
        if self.masked_rows == "zero":
            probs = probs.masked_fill((scores == -math.inf).all(-1, keepdim=True), 0.0)
        out = probs @ v
        out = out.transpose(1, 2).contiguous() if self.heads_last else self._empty_output(q).copy_(out)
        if not self.with_lse:
            return out
        lse = torch.logsumexp(scores, -1)
        if self.masked_rows == "zero":  # SDPA reports 0 for a row with every key masked
            lse = lse.masked_fill(lse == -math.inf, 0.0)
        lse = torch.empty(q.shape[0], t, q.shape[1]).transpose(1, 2).copy_(lse)
        return out, lse

    def structure(self) -> tuple | None:
        return self._attributes()

    def output_strides(self, q) -> tuple:
        return sdpa_output_strides(q) if self.output_like_query else tuple(contiguous_strides(list(q.shape)))

    def _empty_output(self, q):
        return torch.empty_strided(tuple(q.shape), self.output_strides(q), dtype=q.dtype)
