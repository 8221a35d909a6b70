"""Pointwise kernels: an SSA program computed at every element of one output shape.

`PointwiseSpec` says which kernel to generate: the program, each input's layout after collapsing dims,
the index type and the schedule (scalar items, vectors, or rows for programs that index the last dim).
Sizes and strides are kernel arguments, so one kernel serves many shapes. `key_text()` is the exact text
the cache key hashes; float constants appear in it as hex floats through `Program.text()`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchfuser.ir.interpret import run_program
from torchfuser.ir.kernels.base import FusedKernel, KernelSpec
from torchfuser.ir.layout import is_dense, strides_in_order
from torchfuser.ir.program import Program
from torchfuser.ir.symbolic import has_symbols

# Per-input layouts of a pointwise launch, after permuting to the output's memory order and collapsing dims.
CONTIGUOUS = "contig"  # element i of the iteration space is element i of the input
SCALAR = "scalar"  # one element broadcast everywhere
STRIDED = "strided"  # general strides over the collapsed dims
ROW = "row"  # 2-D iteration [R, C], the input is one row broadcast down (a bias): element i % C
COLUMN = "col"  # 2-D iteration [R, C], one column broadcast across (a per-row scale): element i / C
# one dim of the iteration space, broadcast over the others (a per-channel scale of an NCHW tensor):
# element ((i / inner) % size) * stride
CHANNEL = "channel"
LAYOUTS = (CONTIGUOUS, SCALAR, STRIDED, ROW, COLUMN, CHANNEL)


@dataclass(frozen=True)
class PointwiseSpec(KernelSpec):
    program: Program
    layouts: tuple[str, ...]  # one per program input
    ndim: int  # dims of the collapsed iteration space (strided inputs index with it)
    index_type: str = "int"  # "int" or "long": long when sizes or offsets need 64 bits
    items_per_thread: int = 16  # scalar path: consecutive elements per work-item
    vector_width: int = 1  # > 1: the contiguous fast path, one OpenCL vector per work-item
    # vector path: the launch's element count is a multiple of the width, so the kernel has no partial last
    # vector to handle (a branch for it, never taken, still costs the full vectors)
    whole_vectors: bool = False
    # > 0: the row schedule (codegen/pointwise_rows.py) for programs that index the last dim: one row of
    # this many elements along the output's last dim per work-item; layouts and ndim then describe the
    # outer dims (SCALAR or STRIDED) and every input also gets its last-dim stride
    row_length: int = 0
    # row schedule: per input, its step along the last dim where it is a small constant (0: broadcast, 1:
    # contiguous, a pooling's or convolution's stride), written into the source so that the compiler can hoist
    # or vectorise the loads; None: a stride passed at launch (one kernel serves every value of it)
    row_steps: tuple = ()
    # row schedule: work-items per row, each computing one run of the row (a few long rows, as a padding or a
    # concatenation over flattened dims makes, would otherwise leave most of the machine idle)
    row_chunks: int = 1
    # row schedule: > 1, rows per work-item, consecutive along the innermost outer dim: where some input reads
    # that dim contiguously while its rows step far (a transposing copy), a tile of row_block rows x the row,
    # computed row position by row position, keeps the lines of both sides in L1; where every input reads along
    # the row (many short rows, a patch copy), the tile is computed row by row, its index divisions made once
    row_block: int = 1

    kind = "pointwise"

    def __post_init__(self):
        if len(self.layouts) != self.program.n_inputs:
            raise ValueError("one layout per program input")
        if any(layout not in LAYOUTS for layout in self.layouts):
            raise ValueError(f"layouts must be among {LAYOUTS}")
        if self.index_type not in ("int", "long"):
            raise ValueError("index_type is 'int' or 'long'")
        if self.vector_width > 1 and (STRIDED in self.layouts or self.program.indexes_last_dim):
            raise ValueError("the vector path needs contiguous or scalar inputs read at the element")
        if self.whole_vectors and self.vector_width <= 1:
            raise ValueError("whole vectors: on the vector path only")
        if self.row_length and (self.vector_width > 1 or set(self.layouts) - {SCALAR, STRIDED}):
            raise ValueError("the row schedule takes scalar or strided outer layouts, no vectors")
        if self.row_steps and (not self.row_length or len(self.row_steps) != self.program.n_inputs):
            raise ValueError("row steps: one per input, on the row schedule only")
        if self.row_chunks < 1 or (self.row_chunks > 1 and not self.row_length):
            raise ValueError("row chunks: at least 1, more on the row schedule only")
        if self.row_block < 1 or (self.row_block > 1 and (not self.row_length or self.row_chunks > 1
                                                          or self.program.indexes_last_dim)):
            raise ValueError("row blocks: at least 1, more on the row schedule of whole rows only")

    @property
    def elements_per_item(self) -> int:
        return self.vector_width if self.vector_width > 1 else self.items_per_thread

    def key_text(self) -> str:
        return (
            f"pointwise layouts={','.join(self.layouts)} ndim={self.ndim} index={self.index_type} "
            f"items={self.items_per_thread} vector={self.vector_width}{' whole' if self.whole_vectors else ''}"
            f"{f' rows={self.row_length}' if self.row_length else ''}"
            f"{f' steps={self.row_steps}' if self.row_steps else ''}"
            f"{f' chunks={self.row_chunks}' if self.row_chunks > 1 else ''}"
            f"{f' block={self.row_block}' if self.row_block > 1 else ''}\n{self.program.text()}"
        )


class PointwiseKernel(FusedKernel):
    """`index_dim`: the output dim (counted from the end) that the program's last-dim reads and `last_index`
    mean (the dim its cats and slices run along). The kernel computes in a frame where that dim is last:
    inputs and output are permuted views there (strides only), so one program and one codegen serve every
    dim; out_shape and order are in that frame."""

    kind = "pointwise"

    def __init__(self, program: Program, out_shape, out_stride, group: int, index_dim: int = -1):
        super().__init__(group)
        self.program = program
        rank = len(out_shape)
        moved = rank + index_dim
        self.frame = [d for d in range(rank) if d != moved] + [moved] if 0 <= moved < rank - 1 else None
        self.out_shape, out_stride = self._permute(out_shape), self._permute(out_stride)
        # iterate in the output's memory order (outermost first), as TensorIterator does
        order = sorted(range(len(out_shape)), key=lambda d: -out_stride[d]) if out_stride else []
        self.order = order if is_dense(self.out_shape, out_stride, order) else list(range(len(out_shape)))
        # the row schedule compiles the last dim's extent in: only where it is the same at every call
        self.static_last_dim = not self.out_shape or not has_symbols([self.out_shape[-1]])

    def sized_dims(self) -> list:
        return list(self.out_shape)

    def _evaluate_sizes(self, evaluate_dims) -> None:
        self.out_shape = evaluate_dims(self.out_shape)

    def _permute(self, dims) -> tuple:
        return tuple(dims[d] for d in self.frame) if self.frame else tuple(dims)

    def unpermute(self, dims) -> tuple:
        if not self.frame:
            return tuple(dims)
        out = [0] * len(dims)
        for k, d in enumerate(self.frame):
            out[d] = dims[k]
        return tuple(out)

    def in_frame(self, t):
        """t as the program sees it: broadcast up to the output's rank, the indexed dim last (a view)."""
        if not self.frame:
            return t
        return t.reshape((1,) * (len(self.frame) - t.dim()) + tuple(t.shape)).permute(self.frame)

    def reference(self, *inputs):
        outs = run_program(self.program, [self.in_frame(t) for t in inputs], self.out_shape)
        shape, stride = self.unpermute(self.out_shape), self.unpermute(strides_in_order(self.out_shape, self.order))
        outs = [torch.empty_strided(shape, stride, dtype=o.dtype).copy_(self._unpermute_view(o)) for o in outs]
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _unpermute_view(self, t):
        t = torch.broadcast_to(t, self.out_shape)
        return t.permute(self.unpermute(range(t.dim()))) if self.frame else t
