"""The geometry of a sliding window over a channels-last input: convolutions and pooling.

Output (n, oh, ow) reads taps (i, j) at x[n, oh * sh - ph + i * dh, ow * sw - pw + j * dw, :] of x [N, H, W, C]
(1-d: H = 1, one kernel row); a tap in the zero padding (ph, pw) reads nothing from x, so no padded copy is
made. The window kernels (ir/kernels/window.py) reduce each channel over its taps; a convolution's GEMM
(ir/kernels/gemm.py) reads the taps of all channels as the row of A (implicit im2col): A[m, k], k = (kh, kw, c),
also over a contiguous NCHW x (channels_first: a model's input, not copied channels-last first).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Window:
    """A window over x [N, H, W, C]: kernel, stride, zero padding and dilation per spatial dim."""

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
    channels_first: bool = False  # x is [N, C, H, W] (GEMM patches only: the window kernels read any strides)

    @classmethod
    def over(cls, shape, kernel, stride, padding, dilation) -> "Window":
        """The window over an NCHW- (NCL-) shaped x, given per spatial dim (1-d: H = 1, one kernel row)."""
        n, c, *spatial = shape
        one, zero = [1] * (2 - len(spatial)), [0] * (2 - len(spatial))
        return cls(n, *one, *spatial, c, *one, *kernel, *one, *stride, *zero, *padding, *one, *dilation)

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

    @property
    def depth(self) -> int:
        return self.kernel_h * self.kernel_w * self.channels

    @property
    def padded(self) -> bool:
        return bool(self.pad_h or self.pad_w)

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        """A as a tensor [M, K] (the im2col the kernel never makes) of the contiguous input x."""
        if self.channels_first:
            x = x.permute(0, 2, 3, 1).contiguous()
        if self.padded:
            x = torch.nn.functional.pad(x, (0, 0, self.pad_w, self.pad_w, self.pad_h, self.pad_h))
        sn, sh, sw, sc = x.stride()
        view = x.as_strided((self.batch, self.out_h, self.out_w, self.kernel_h, self.kernel_w, self.channels),
                            (sn, sh * self.stride_h, sw * self.stride_w, sh * self.dilation_h, sw * self.dilation_w,
                             sc), x.storage_offset())
        return view.reshape(self.rows, self.depth)

    def convolve(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """A @ B by PyTorch's convolution of x [N, H, W, C] with B as the convolution's weight [Cout, C, KH, KW]
        (ir/weights.ConvWeightFromMatrix): the [M, Cout] result in channels-last order."""
        return self._conv2d(x, weight)

    def reduce(self, reduction: str, x: torch.Tensor, taps: torch.Tensor | None = None) -> torch.Tensor:
        """Each channel over its taps in PyTorch: "max" (max pooling) or "sum" weighted by taps [KH * KW, C] (a
        depthwise convolution), of x [N, H, W, C] -> [M, C] in channels-last order."""
        if reduction == "sum":
            return self._conv2d(x, taps.t().reshape(self.channels, 1, self.kernel_h, self.kernel_w), self.channels)
        y = torch.nn.functional.max_pool2d(x.permute(0, 3, 1, 2), (self.kernel_h, self.kernel_w),
                                           (self.stride_h, self.stride_w), (self.pad_h, self.pad_w),
                                           (self.dilation_h, self.dilation_w))
        return y.permute(0, 2, 3, 1).reshape(self.rows, self.channels)

    def _conv2d(self, x: torch.Tensor, weight: torch.Tensor, groups: int = 1) -> torch.Tensor:
        nchw = x if self.channels_first else x.permute(0, 3, 1, 2)
        y = torch.nn.functional.conv2d(nchw, weight, None, (self.stride_h, self.stride_w), (self.pad_h, self.pad_w),
                                       (self.dilation_h, self.dilation_w), groups)
        return y.permute(0, 2, 3, 1).reshape(self.rows, y.shape[1])

    def text(self) -> str:
        geometry = [v for name, v in vars(self).items() if name != "channels_first"]
        return "window=" + ",".join(str(v) for v in geometry) + (",channels-first" if self.channels_first else "")
