"""Attention launches: the schedule by device type (query lanes on CPUs, a row per item on GPUs), layouts and
launch arguments; every input is read through its strides."""

from __future__ import annotations

import numpy as np
import torch

from torchfuser.ir.kernels.attention import ATTENTION_CPU, ATTENTION_GPU, AttentionKernel, AttentionSpec
from torchfuser.ir.layout import broadcast_strides, contiguous_strides, extent, index_type_for
from torchfuser.runtime.launch import Launch, vector_widths


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
    load (GPT-2 shapes, PoCL on AVX-512: ~1.3x one vector); below AVX-512 one vector of 8 rows (a float16
    is two registers there, and 16 of them spill: 1.35x slower on GPT-2's causal attention); short query
    lengths take narrower vectors rather than computing rows past T."""
    if vector_widths()["float32"] < 16:
        return (8, 1) if t > 4 else (4, 1)
    if t >= 32:
        return 16, 2
    return (16, 1) if t > 8 else (8, 1) if t > 4 else (4, 1)


def items_per_group(items: int) -> int:
    """Small work-groups: PoCL's own choice (groups of thousands) can leave one of two threads with most
    of the work; consecutive items (the tiles of one head) share a group and their k and v in cache."""
    return max(1, min(4, items // 16))


def configure_attention(kernel: AttentionKernel, inputs, device_type: str) -> AttentionLaunch:
    q, k, v, *masks = inputs
    b, h, t, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    strides = [broadcast_strides((b, h, t, d), q), broadcast_strides((b, hkv, s, d), k),
               broadcast_strides((b, hkv, s, d), v)]
    strides += [broadcast_strides((b, h, t, s), m) for m in masks]
    if kernel.heads_last:
        out_shape, out_stride = (b, t, h, d), tuple(contiguous_strides([b, t, h, d]))
        out_strides = (out_stride[0], out_stride[2], out_stride[1], out_stride[3])
    else:
        out_shape, out_stride = (b, h, t, d), kernel.output_strides(q)
        out_strides = out_stride
    outputs = [(out_shape, out_stride, q.dtype)]
    if kernel.with_lse:
        outputs.append(((b, h, t), (t * h, 1, h), torch.float32))
    layouts = tuple("contig" if st[3] == 1 or d == 1 else "strided" for st in (*strides[:3], out_strides))
    mask_layouts = tuple("bcast" if st[2] == 0 else "rows" if st[3] == 1 else "strided" for st in strides[3:])
    reach = max([b * h * t * max(d, s)] + [extent(x) for x in inputs])
    index_type = index_type_for(reach)
    if device_type == "CPU":
        lanes, vectors = cpu_tile(t)
        items = b * h * -(-t // (lanes * vectors))
        local = items_per_group(items)
        # row strides as literals: a key row's load is one addressing mode (score loop 39 -> 32 instructions)
        row_strides = (strides[1][2], strides[2][2]) if min(strides[1][2], strides[2][2]) > 0 else (0, 0)
        spec = AttentionSpec(kernel.score, d, layouts, mask_layouts, kernel.causal, kernel.masked_rows,
                             kernel.with_lse, index_type, ATTENTION_CPU, lanes, vectors, row_strides)
    else:
        items, local = b * h * t, 64
        spec = AttentionSpec(kernel.score, d, layouts, mask_layouts, kernel.causal, kernel.masked_rows,
                             kernel.with_lse, index_type, ATTENTION_GPU, 1, 1)
    launch = AttentionLaunch(spec, (-(-max(items, 1) // local) * local,), outputs,
                             [b, h, t, s, h // hkv], empty=items == 0 or d == 0, flops=4.0 * b * h * t * s * d)
    launch.local_size = (local,)
    launch.strides, launch.out_strides = strides, out_strides
    return launch
