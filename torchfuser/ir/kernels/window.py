"""Window kernels over a channels-last input: per channel, a depthwise convolution's weighted sum or a max pool.

Output channel c at (n, oh, ow) reduces the taps (i, j) of its window, x[n, oh * sh - ph + i * dh, ow * sw - pw +
j * dw, c]: "sum" adds each times the tap's weight for c (a depthwise convolution), "max" takes their maximum,
NaN propagating (max pooling). A tap in the padding is skipped (it would add 0, or never win as -inf), so the
padded input is never made. The result is [M, C] (M = N * OH * OW rows, channels-last order) and the epilogue
program maps the reduction to what is stored, as a GEMM's does: input 0 is the reduction, the others extras
indexed at (m, c) by their strides.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchfuser.ir.interpret import run_program
from torchfuser.ir.kernels.base import FusedKernel, KernelSpec
from torchfuser.ir.program import Program, ProgramBuilder
from torchfuser.ir.window import Window

REDUCTIONS = ("sum", "max")


@dataclass(frozen=True)
class WindowSpec(KernelSpec):
    """Y[M, C] = epilogue(reduction over the window, extras...): each work-item owns `vector_width` channels of a
    run of `pixels` outputs along a row (a sum's weights for them in registers)."""

    dtype: str
    window: Window
    reduction: str  # "sum" (weighted by the taps input) or "max"
    epilogue: Program
    extra_layouts: tuple[str, ...] = ()  # per extra input: "row" (c-contiguous), "bcast" or "strided"
    vector_width: int = 1  # channels per work-item, a divisor of C (1: element by element)
    pixels: int = 1
    index_type: str = "int"

    kind = "window"

    def __post_init__(self):
        if self.dtype != "float32":
            raise ValueError("the window kernel supports float32")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction is one of {REDUCTIONS}")
        if self.vector_width not in (1, 2, 4, 8, 16) or self.window.channels % self.vector_width:
            raise ValueError("vector_width is 1, 2, 4, 8 or 16 and divides the channels")
        if self.pixels < 1 or len(self.extra_layouts) != self.epilogue.n_inputs - 1:
            raise ValueError("pixels >= 1 and one layout per extra input")
        if self.vector_width > 1 and "strided" in self.extra_layouts:
            raise ValueError("strided extras are read element by element (vector_width 1)")
        if self.epilogue.input_dtypes[0] != self.dtype or len(self.epilogue.outputs) != 1:
            raise ValueError("epilogue input 0 is the sum, and it has one output")

    def key_text(self) -> str:
        return (f"window {self.reduction} dtype={self.dtype} index={self.index_type} vector={self.vector_width} "
                f"pixels={self.pixels} extras={','.join(self.extra_layouts)} {self.window.text()}\n"
                f"{self.epilogue.text()}")


class WindowKernel(FusedKernel):
    """out[M, C] = epilogue(reduction of x's windows, *extras): x [N, H, W, C] any strides; a "sum" reads the
    taps [KH * KW, C] as its second input."""

    kind = "window"

    def __init__(self, window: Window, reduction: str, epilogue: Program, group: int):
        super().__init__(group)
        if reduction not in REDUCTIONS:
            raise ValueError(f"reduction is one of {REDUCTIONS}")
        self.window, self.reduction, self.epilogue = window, reduction, epilogue

    @property
    def operands(self) -> int:
        """Inputs before the epilogue's extras: x, and a sum's taps."""
        return 2 if self.reduction == "sum" else 1

    def flops(self) -> float:
        """A sum's multiply-adds (two FLOPs per tap), a max's comparisons (one)."""
        win = self.window
        return (2.0 if self.reduction == "sum" else 1.0) * win.rows * win.channels * win.taps

    def reference(self, x, *rest):
        taps, extras = (rest[0], rest[1:]) if self.reduction == "sum" else (None, rest)
        return run_program(self.epilogue, [self.window.reduce(self.reduction, x, taps), *extras])[0].contiguous()


def bias_epilogue(bias: bool) -> Program:
    """A window kernel's own epilogue: the reduction, plus a per-channel bias (input 1) where there is one."""
    builder = ProgramBuilder(["float32"] + (["float32"] if bias else []))
    return builder.build([builder.emit("add", (0, 1), "float32") if bias else 0])
