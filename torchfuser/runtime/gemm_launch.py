"""The GEMM graph target: schedule choice, weight pre-packing and launch arguments.

On CPU devices the packed schedule runs: B (usually a weight viewed as its transpose) is packed once into
[N/tile_n][K][tile_n] panels and the packed copy is reused while the tensor it was made from is the same
object at the same version (an optimiser step bumps the version and forces a re-pack). Other devices use
the strided schedule, which reads A and B as they are.
"""

from __future__ import annotations

import weakref

import numpy as np
import torch

from torchfuser.codegen.pointwise_ops import DTYPE_NAMES, TORCH_DTYPES
from torchfuser.ir.interpret import run_program
from torchfuser.ir.program import Program
from torchfuser.ir.specs import GemmSpec
from torchfuser.runtime.launch import INT32_MAX, FusedKernel, Launch, broadcast_strides, extent

PACKED_TILE = (8, 32)  # rows x columns of C per work-item: 16 float16 accumulators


def pack_panels(b: torch.Tensor, tile_n: int) -> torch.Tensor:
    """B [K, N] → [ceil(N / tile_n), K, tile_n], zero-padded: panel j holds columns j*tile_n.. contiguously."""
    k, n = b.shape
    full, rest = divmod(n, tile_n)
    packed = torch.zeros((full + (rest > 0), k, tile_n), dtype=b.dtype)
    if full:
        packed[:full].copy_(b[:, : full * tile_n].reshape(k, full, tile_n).permute(1, 0, 2))
    if rest:
        packed[full, :, :rest].copy_(b[:, full * tile_n :])
    return packed


class PackedWeights:
    """Packed copies of B operands, keyed by the tensor they view; valid while its version is unchanged."""

    def __init__(self):
        self._entries: dict = {}

    def get(self, b: torch.Tensor, tile_n: int) -> torch.Tensor:
        root = b._base if b._base is not None else b
        key = (id(root), tuple(b.shape), b.stride(), b.storage_offset(), tile_n)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is root and entry[1] == root._version:
            return entry[2]
        packed = pack_panels(b, tile_n)
        if len(self._entries) > 16:  # activations as B never hit: keep the table small
            self._entries = {k: e for k, e in self._entries.items() if e[0]() is not None}
        self._entries[key] = (weakref.ref(root), root._version, packed)
        return packed


class GemmLaunch(Launch):
    packer: PackedWeights | None = None

    def prepare(self, inputs):
        if self.spec.schedule != "packed":
            return inputs
        return [inputs[0], self.packer.get(inputs[1], self.spec.tile_n), *inputs[2:]]

    def arguments(self, in_buffers, in_offsets, out_buffers):
        index = np.int64 if self.spec.index_type == "long" else np.int32
        a_strides, b_strides, extra_strides, mnk = self.scalars
        args = [in_buffers[0], index(in_offsets[0]), *map(index, a_strides)]
        if self.spec.schedule == "packed":
            args.append(in_buffers[1])
        else:
            args += [in_buffers[1], index(in_offsets[1]), *map(index, b_strides)]
        for e, strides in enumerate(extra_strides, start=2):
            args += [in_buffers[e], index(in_offsets[e]), *map(index, strides)]
        return args + list(out_buffers) + [index(x) for x in mnk]


def _extra_layout(strides) -> str:
    return "row" if strides[1] == 1 else "bcast" if strides[1] == 0 else "strided"


class GemmKernel(FusedKernel):
    """out[M,N] = epilogue(a[M,K] @ b[K,N], *extras), extras broadcast to [M,N]."""

    kind = "gemm"

    def __init__(self, epilogue: Program, group: int):
        super().__init__(group)
        self.epilogue = epilogue
        self.packer = PackedWeights()

    def reference(self, a, b, *extras):
        acc = torch.mm(a, b)
        return run_program(self.epilogue, [acc, *extras])[0].contiguous()

    def _configure(self, inputs, device_type) -> Launch:
        a, b, *extras = inputs
        (m, k), n = a.shape, b.shape[1]
        extra_strides = [broadcast_strides((m, n), e) for e in extras]
        reach = max([m * n, k * (n + 64)] + [extent(t) for t in inputs])
        index_type = "int" if reach <= INT32_MAX else "long"
        if device_type == "CPU":
            tile_m, tile_n = PACKED_TILE if n > 16 else (PACKED_TILE[0], 16)
            layouts = tuple(_extra_layout(s) for s in extra_strides)
            spec = GemmSpec(DTYPE_NAMES[a.dtype], self.epilogue, index_type, tile_m, tile_n, "packed", layouts)
        else:
            spec = GemmSpec(DTYPE_NAMES[a.dtype], self.epilogue, index_type)
        grid = ((n + spec.tile_n - 1) // spec.tile_n, (m + spec.tile_m - 1) // spec.tile_m)
        out = ((m, n), (n, 1), TORCH_DTYPES[self.epilogue.output_dtypes[0]])
        launch = GemmLaunch(spec, grid, [out], [a.stride(), b.stride(), extra_strides, (m, n, k)],
                            empty=m * n == 0)
        launch.packer = self.packer
        return launch
