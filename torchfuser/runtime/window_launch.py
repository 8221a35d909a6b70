"""Window launches: from a WindowKernel and its operands' layouts to the spec and arguments.

x [N, H, W, C] is read through its strides; with channels innermost (stride 1) a work-item loads vectors of
channels, the device's native width or the largest power of two below it that divides C. A sum's taps
[KH * KW, C] are contiguous (ConvWeightAsMatrix makes them). Extras map onto the [M, C] result by their strides,
as a GEMM's do: "row" (c-contiguous), "bcast" (one value per row) or "strided" (element by element, vector
width 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from torchfuser.codegen.opencl.program_c import vectorisable
from torchfuser.ir.kernels.window import WindowKernel, WindowSpec
from torchfuser.ir.layout import broadcast_strides, extent, index_type_for
from torchfuser.runtime.launch import Launch, vector_widths

# Outputs along a row per work-item: a whole row up to this many. The taps' weights loaded once serve them all,
# and fewer, longer items cost PoCL less to hand out than runs of a few pixels (measured: the notes).
ROW_PIXELS_MAX = 64


@dataclass
class WindowLaunch(Launch):
    def arguments(self, in_buffers, in_offsets, out_buffers):
        index = np.int64 if self.spec.index_type == "long" else np.int32
        x_strides, extra_strides = self.scalars
        return [in_buffers[0], index(in_offsets[0]), *map(index, x_strides),
                *window_arguments(in_buffers[1:], in_offsets[1:], extra_strides, index), *out_buffers]


def window_arguments(buffers, offsets, extra_strides, index) -> list:
    """The arguments after x: a sum's taps (when there is one more buffer than extras), then each extra with its
    (m, c) strides."""
    taps = len(buffers) - len(extra_strides)
    args = [buffers[0], index(offsets[0])] if taps else []
    for e, strides in enumerate(extra_strides, start=taps):
        args += [buffers[e], index(offsets[e]), *map(index, strides)]
    return args


def window_operands(kernel: WindowKernel, inputs, index_type: str, max_width: int, pixels: int = 1
                    ) -> tuple[WindowSpec, tuple]:
    """The spec for these operands (vectors of channels up to max_width where x's channels are contiguous) and
    the scalars its arguments need: (x's strides, the extras' (m, c) strides)."""
    x, extras = inputs[0], inputs[kernel.operands:]
    win = kernel.window
    rows, channels = win.rows, win.channels
    taps = inputs[1] if kernel.reduction == "sum" else None
    if taps is not None and taps.numel() > 1 and (taps.stride(1) != 1 or win.taps > 1 and taps.stride(0) != channels):
        raise ValueError(f"{kernel.__name__}: the taps must be a contiguous [KH * KW, C] matrix, got strides "
                         f"{taps.stride()}")
    extra_strides = [broadcast_strides((rows, channels), e) for e in extras]
    layouts = tuple("row" if s[1] == 1 else "bcast" if s[1] == 0 else "strided" for s in extra_strides)
    width = 1
    if x.stride(3) == 1 and "strided" not in layouts and vectorisable(kernel.epilogue):
        width = max_width
        while channels % width:
            width //= 2
    spec = WindowSpec("float32", win, kernel.reduction, kernel.epilogue, layouts, width, pixels, index_type)
    return spec, (list(x.stride()), extra_strides)


def configure_window(kernel: WindowKernel, inputs, device_type: str) -> WindowLaunch:
    win = kernel.window
    rows, channels = win.rows, win.channels
    reach = max([rows * channels] + [extent(t) for t in inputs])
    pixels = max(1, min(win.out_w, ROW_PIXELS_MAX))
    spec, scalars = window_operands(kernel, inputs, index_type_for(reach), vector_widths()["float32"], pixels)
    items = win.batch * win.out_h * -(-win.out_w // pixels) * (channels // spec.vector_width)
    launch = WindowLaunch(spec, (max(items, 1),), [((rows, channels), (channels, 1), inputs[0].dtype)], scalars,
                          empty=rows * channels == 0, local_size=(1,))
    launch.flops = kernel.flops()
    return launch
