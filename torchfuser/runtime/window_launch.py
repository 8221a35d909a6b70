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
        operands = len(in_buffers) - len(extra_strides)  # x, and a sum's taps
        args = [in_buffers[0], index(in_offsets[0]), *map(index, x_strides)]
        if operands == 2:
            args += [in_buffers[1], index(in_offsets[1])]
        for e, strides in enumerate(extra_strides, start=operands):
            args += [in_buffers[e], index(in_offsets[e]), *map(index, strides)]
        return args + list(out_buffers)


def configure_window(kernel: WindowKernel, inputs, device_type: str) -> WindowLaunch:
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
        width = vector_widths()["float32"]
        while channels % width:
            width //= 2
    reach = max([rows * channels] + [extent(t) for t in inputs])
    pixels = max(1, min(win.out_w, ROW_PIXELS_MAX))
    spec = WindowSpec("float32", win, kernel.reduction, kernel.epilogue, layouts, width, pixels, index_type_for(reach))
    items = win.batch * win.out_h * -(-win.out_w // pixels) * (channels // width)
    launch = WindowLaunch(spec, (max(items, 1),), [((rows, channels), (channels, 1), x.dtype)],
                          [list(x.stride()), extra_strides], empty=rows * channels == 0, local_size=(1,))
    launch.flops = (2.0 if taps is not None else 1.0) * rows * channels * win.taps
    return launch
