"""The attention graph target: softmax(score(q·k, masks)) @ v as one launch, its PyTorch meaning, its layouts.

Inputs are q [B, H, T, D], k and v [B, Hkv, S, D] (H a multiple of Hkv: query head h reads kv head
h // (H / Hkv)) and the score program's mask operands, each broadcastable to [B, H, T, S]; everything is
read through its strides, so transposed [B, T, H, D] views cost no copy. The output is laid out as eager
lays it out: like q for SDPA (empty_like), contiguous for the explicit matmul pattern; or, when the graph
transposes it to [B, T, H, D] and makes that contiguous right after (heads_last), the kernel writes that
tensor itself through its strides.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from torchfuser.ir.interpret import run_program
from torchfuser.ir.program import Program
from torchfuser.ir.specs import ATTENTION_CPU, ATTENTION_GPU, AttentionSpec
from torchfuser.runtime.launch import INT32_MAX, FusedKernel, Launch, _contiguous_strides, broadcast_strides, extent


class AttentionLaunch(Launch):
    strides: list = []  # per input: its 4 strides (0 along broadcast dims)
    out_strides: tuple = ()  # the output's strides along (b, h, t, d), whatever its own dim order

    def arguments(self, in_buffers, in_offsets, out_buffers):
        index = np.int64 if self.spec.index_type == "long" else np.int32
        args = []
        for buffer, offset, strides in zip(in_buffers, in_offsets, self.strides):
            args += [buffer, index(offset), *map(index, strides)]
        args += [out_buffers[0], *map(index, self.out_strides)]
        if len(self.outputs) > 1:
            args += [out_buffers[1], *map(index, self.outputs[1][1])]
        return args + [index(x) for x in self.scalars]


def cpu_tile(t: int) -> tuple[int, int]:
    """(lanes, query vectors) per work-item on CPU devices. Two vectors of 16 rows share every k and v
    load (GPT-2 shapes, PoCL on AVX-512: ~1.3x one vector); short query lengths take narrower vectors
    rather than computing rows past T."""
    if t >= 32:
        return 16, 2
    return (16, 1) if t > 8 else (8, 1) if t > 4 else (4, 1)


def items_per_group(items: int) -> int:
    """Small work-groups: PoCL's own choice (groups of thousands) can leave one of two threads with most
    of the work; consecutive items (the tiles of one head) share a group and their k and v in cache."""
    return max(1, min(4, items // 16))


def sdpa_output_strides(q) -> tuple:
    """The strides eager SDPA gives its output: empty_like(q) (q's layout when dense, else contiguous)."""
    return torch.empty_like(torch.empty_strided(tuple(q.shape), tuple(q.stride()), device="meta")).stride()


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

    # ------------------------------------------------------------ PyTorch meaning (fallback, tests)

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

    def _output_strides(self, q) -> tuple:
        return sdpa_output_strides(q) if self.output_like_query else tuple(_contiguous_strides(list(q.shape)))

    def _empty_output(self, q):
        return torch.empty_strided(tuple(q.shape), self._output_strides(q), dtype=q.dtype)

    # ------------------------------------------------------------ the launch

    def _configure(self, inputs, device_type) -> Launch:
        q, k, v, *masks = inputs
        b, h, t, d = q.shape
        hkv, s = k.shape[1], k.shape[2]
        strides = [broadcast_strides((b, h, t, d), q), broadcast_strides((b, hkv, s, d), k),
                   broadcast_strides((b, hkv, s, d), v)]
        strides += [broadcast_strides((b, h, t, s), m) for m in masks]
        if self.heads_last:
            out_shape, out_stride = (b, t, h, d), tuple(_contiguous_strides([b, t, h, d]))
            out_strides = (out_stride[0], out_stride[2], out_stride[1], out_stride[3])
        else:
            out_shape, out_stride = (b, h, t, d), self._output_strides(q)
            out_strides = out_stride
        outputs = [(out_shape, out_stride, q.dtype)]
        if self.with_lse:
            outputs.append(((b, h, t), (t * h, 1, h), torch.float32))
        layouts = tuple("contig" if st[3] == 1 or d == 1 else "strided" for st in (*strides[:3], out_strides))
        mask_layouts = tuple("bcast" if st[2] == 0 else "rows" if st[3] == 1 else "strided" for st in strides[3:])
        reach = max([b * h * t * max(d, s)] + [extent(x) for x in inputs])
        index_type = "int" if reach <= INT32_MAX else "long"
        if device_type == "CPU":
            lanes, vectors = cpu_tile(t)
            items = b * h * -(-t // (lanes * vectors))
            local = items_per_group(items)
            # row strides as literals: a key row's load is one addressing mode (score loop 39 -> 32 instructions)
            row_strides = (strides[1][2], strides[2][2]) if min(strides[1][2], strides[2][2]) > 0 else (0, 0)
            spec = AttentionSpec(self.score, d, layouts, mask_layouts, self.causal, self.masked_rows,
                                 self.with_lse, index_type, ATTENTION_CPU, lanes, vectors, row_strides)
        else:
            items, local = b * h * t, 64
            spec = AttentionSpec(self.score, d, layouts, mask_layouts, self.causal, self.masked_rows,
                                 self.with_lse, index_type, ATTENTION_GPU, 1, 1)
        launch = AttentionLaunch(spec, (-(-max(items, 1) // local) * local,), outputs,
                                 [b, h, t, s, h // hkv], empty=items == 0 or d == 0)
        launch.local_size = (local,)
        launch.strides, launch.out_strides = strides, out_strides
        return launch
