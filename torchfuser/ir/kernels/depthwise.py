"""Depthwise convolution kernels over a channels-last input, zero padding read as bounds, with an SSA epilogue.

Output channel c at (n, oh, ow) is the sum over taps (i, j) of x[n, oh * sh - ph + i * dh, ow * sw - pw + j * dw,
c] times the tap's weight for c; a tap that falls in the padding adds nothing, so the padded input is never
made. The result is [M, C] (M = N * OH * OW rows, channels-last order) and the epilogue program maps the sum
to what is stored, as a GEMM's does: input 0 is the sum, the others extras indexed at (m, c) by their strides.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchfuser.ir.interpret import run_program
from torchfuser.ir.kernels.base import FusedKernel, KernelSpec
from torchfuser.ir.program import Program, ProgramBuilder


@dataclass(frozen=True)
class DepthwiseWindow:
    """The geometry of a depthwise convolution of x [N, H, W, C] (a conv1d: H = 1, one kernel row)."""

    batch: int
    height: int
    width: int
    channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dilation_h: int = 1
    dilation_w: int = 1

    @property
    def out_h(self) -> int:
        return (self.height + 2 * self.pad_h - self.dilation_h * (self.kernel_h - 1) - 1) // self.stride_h + 1

    @property
    def out_w(self) -> int:
        return (self.width + 2 * self.pad_w - self.dilation_w * (self.kernel_w - 1) - 1) // self.stride_w + 1

    @property
    def rows(self) -> int:
        return self.batch * self.out_h * self.out_w

    @property
    def taps(self) -> int:
        return self.kernel_h * self.kernel_w

    def text(self) -> str:
        return "window=" + ",".join(str(v) for v in vars(self).values())

    def convolve(self, x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
        """The convolution in PyTorch: x [N, H, W, C], taps [KH * KW, C] -> [M, C]."""
        weight = taps.t().reshape(self.channels, 1, self.kernel_h, self.kernel_w)
        y = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), weight, None, (self.stride_h, self.stride_w),
                                       (self.pad_h, self.pad_w), (self.dilation_h, self.dilation_w), self.channels)
        return y.permute(0, 2, 3, 1).reshape(self.rows, self.channels)


@dataclass(frozen=True)
class DepthwiseSpec(KernelSpec):
    """Y[M, C] = epilogue(depthwise sum, extras...): each work-item owns `vector_width` channels of a run of
    `pixels` outputs along a row, the taps' weights for them in registers."""

    dtype: str
    window: DepthwiseWindow
    epilogue: Program
    extra_layouts: tuple[str, ...] = ()  # per extra input: "row" (c-contiguous), "bcast" or "strided"
    vector_width: int = 1  # channels per work-item, a divisor of C (1: element by element)
    pixels: int = 1
    index_type: str = "int"

    kind = "depthwise"

    def __post_init__(self):
        if self.dtype != "float32":
            raise ValueError("the depthwise kernel supports float32")
        if self.vector_width not in (1, 2, 4, 8, 16) or self.window.channels % self.vector_width:
            raise ValueError("vector_width is 1, 2, 4, 8 or 16 and divides the channels")
        if self.pixels < 1 or len(self.extra_layouts) != self.epilogue.n_inputs - 1:
            raise ValueError("pixels >= 1 and one layout per extra input")
        if self.vector_width > 1 and "strided" in self.extra_layouts:
            raise ValueError("strided extras are read element by element (vector_width 1)")
        if self.epilogue.input_dtypes[0] != self.dtype or len(self.epilogue.outputs) != 1:
            raise ValueError("epilogue input 0 is the sum, and it has one output")

    def key_text(self) -> str:
        return (f"depthwise dtype={self.dtype} index={self.index_type} vector={self.vector_width} "
                f"pixels={self.pixels} extras={','.join(self.extra_layouts)} {self.window.text()}\n"
                f"{self.epilogue.text()}")


class DepthwiseKernel(FusedKernel):
    """out[M, C] = epilogue(depthwise_conv(x, taps), *extras), x [N, H, W, C] any strides, taps [KH * KW, C]."""

    kind = "depthwise"

    def __init__(self, window: DepthwiseWindow, epilogue: Program, group: int):
        super().__init__(group)
        self.window = window
        self.epilogue = epilogue

    def reference(self, x, taps, *extras):
        return run_program(self.epilogue, [self.window.convolve(x, taps), *extras])[0].contiguous()


def bias_epilogue(bias: bool) -> Program:
    """The depthwise kernel's own epilogue: the sum, plus a per-channel bias (input 1) where there is one."""
    builder = ProgramBuilder(["float32"] + (["float32"] if bias else []))
    return builder.build([builder.emit("add", (0, 1), "float32") if bias else 0])
