"""The attention graph target: softmax(score(q·k, masks)) @ v as one launch, its PyTorch meaning, its layouts.

Inputs are q [B, H, T, D], k and v [B, Hkv, S, D] (H a multiple of Hkv: query head h reads kv head
h // (H / Hkv)) and the score program's mask operands, each broadcastable to [B, H, T, S]; everything is
read through its strides, so transposed [B, T, H, D] views cost no copy. The output is laid out as eager
lays it out: like q for SDPA (empty_like), contiguous for the explicit matmul pattern.
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

    def arguments(self, in_buffers, in_offsets, out_buffers):
        index = np.int64 if self.spec.index_type == "long" else np.int32
        args = []
        for buffer, offset, strides in zip(in_buffers, in_offsets, self.strides):
            args += [buffer, index(offset), *map(index, strides)]
        (out_shape, out_stride, _), *rest = self.outputs
        args += [out_buffers[0], *map(index, out_stride)]
        if rest:
            args += [out_buffers[1], *map(index, rest[0][1])]
        return args + [index(x) for x in self.scalars]


def rows_per_group(rows: int) -> int:
    """Small work-groups, 16 or more per launch: PoCL's own choice (groups of thousands) can leave one of
    two threads with most of the rows."""
    return max(1, min(64, 1 << max(rows // 16, 1).bit_length() - 1))


def cpu_rows_per_item(keys_contiguous: bool) -> int:
    """Query rows per work-item on CPU devices. With kᵀ contiguous, 4 rows share each 16-key load: 1.6x
    faster than 1 row at head dims 64 and 128 (B=8, H=12, T=S=128, PoCL on AVX-512). Otherwise (a dot
    product per key, summed across lanes) 2 or 4 rows measured 1.1-1.7x slower than 1: registers spill."""
    return 4 if keys_contiguous else 1


def sdpa_output_strides(q) -> tuple:
    """The strides eager SDPA gives its output: empty_like(q) (q's layout when dense, else contiguous)."""
    return torch.empty_like(torch.empty_strided(tuple(q.shape), tuple(q.stride()), device="meta")).stride()


class AttentionKernel(FusedKernel):
    """outs = attention output [B, H, T, D] (+ logsumexp [B, H, T] when with_lse)."""

    kind = "attention"

    def __init__(self, score: Program, group: int, *, causal=False, masked_rows="nan", with_lse=False,
                 output_like_query=False):
        super().__init__(group)
        self.score = score
        self.causal, self.masked_rows, self.with_lse = causal, masked_rows, with_lse
        self.output_like_query = output_like_query

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
        out = self._empty_output(q).copy_(probs @ v)
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
        out_stride = self._output_strides(q)
        outputs = [((b, h, t, d), out_stride, q.dtype)]
        if self.with_lse:
            outputs.append(((b, h, t), (t * h, 1, h), torch.float32))
        layouts = tuple("contig" if st[3] == 1 or d == 1 else "strided" for st in (*strides[:3], out_stride))
        if device_type == "CPU" and strides[1][2] == 1 and s > 1:  # kᵀ contiguous: fuse_attention's copy
            layouts = (layouts[0], "keys", *layouts[2:])
        mask_layouts = tuple("bcast" if st[3] == 0 else "contig" if st[3] == 1 else "strided" for st in strides[3:])
        reach = max([b * h * t * max(d, s)] + [extent(x) for x in inputs])
        index_type = "int" if reach <= INT32_MAX else "long"
        schedule = ATTENTION_CPU if device_type == "CPU" else ATTENTION_GPU
        rows_per_item = cpu_rows_per_item(layouts[1] == "keys") if schedule == ATTENTION_CPU else 1
        spec = AttentionSpec(self.score, d, layouts, mask_layouts, self.causal, self.masked_rows, self.with_lse,
                             index_type, schedule, rows_per_item)
        rows = b * h * -(-t // rows_per_item)  # work-items
        local = rows_per_group(rows) if device_type == "CPU" else 64
        launch = AttentionLaunch(spec, (-(-max(rows, 1) // local) * local,), outputs,
                                 [b, h, t, s, h // hkv], empty=rows == 0 or d == 0)
        launch.local_size = (local,)
        launch.strides = strides
        return launch
