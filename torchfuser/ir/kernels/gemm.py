"""GEMM kernels: C = epilogue(A @ B, extras...), mm or bmm, with an SSA epilogue applied in registers."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchfuser.ir.interpret import run_program
from torchfuser.ir.kernels.base import FusedKernel, KernelSpec
from torchfuser.ir.program import Program


@dataclass(frozen=True)
class ConvWindow:
    """A GEMM's A read as the patches of a channels-last input [N, H, W, C] (implicit im2col): row m = (n, oh,
    ow), column k = (kh, kw, c), A[m, k] = x[n, oh * sh - ph + kh * dh, ow * sw - pw + kw * dw, c], 0 where that
    falls in the zero padding (ph, pw: read as bounds, no padded copy). A convolution is then C = A @ B with B
    its weight as [KH * KW * C, Cout]."""

    batch: int
    height: int  # of the input, without the padding
    width: int
    channels: int
    out_h: int
    out_w: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    dilation_h: int = 1
    dilation_w: int = 1
    pad_h: int = 0
    pad_w: int = 0

    @property
    def padded(self) -> bool:
        return bool(self.pad_h or self.pad_w)

    @property
    def rows(self) -> int:
        return self.batch * self.out_h * self.out_w

    @property
    def depth(self) -> int:
        return self.kernel_h * self.kernel_w * self.channels

    def patches(self, x: torch.Tensor) -> torch.Tensor:
        """A as a tensor [M, K] (the im2col the kernel never makes) of the contiguous input x."""
        if self.padded:
            x = torch.nn.functional.pad(x, (0, 0, self.pad_w, self.pad_w, self.pad_h, self.pad_h))
        sn, sh, sw, sc = x.stride()
        view = x.as_strided((self.batch, self.out_h, self.out_w, self.kernel_h, self.kernel_w, self.channels),
                            (sn, sh * self.stride_h, sw * self.stride_w, sh * self.dilation_h, sw * self.dilation_w,
                             sc), x.storage_offset())
        return view.reshape(self.rows, self.depth)

    def convolve(self, x: torch.Tensor, b: torch.Tensor, weight: torch.Tensor | None = None) -> torch.Tensor:
        """A @ B by PyTorch's convolution of x [N, H, W, C] (B [KH * KW * C, Cout], or `weight`, B made back into
        the convolution's weight): the [M, Cout] result in channels-last order."""
        if weight is None:
            weight = conv_weight(b, self)
        y = torch.nn.functional.conv2d(x.permute(0, 3, 1, 2), weight, stride=(self.stride_h, self.stride_w),
                                       padding=(self.pad_h, self.pad_w), dilation=(self.dilation_h, self.dilation_w))
        return y.permute(0, 2, 3, 1).reshape(self.rows, b.shape[1])

    def text(self) -> str:
        return "window=" + ",".join(str(v) for v in vars(self).values())


def conv_weight(b: torch.Tensor, window: ConvWindow) -> torch.Tensor:
    """B [KH * KW * C, Cout] (row (kh, kw, c)) as the convolution's weight [Cout, C, KH, KW], channels-last."""
    return b.t().reshape(b.shape[1], window.kernel_h, window.kernel_w, window.channels).contiguous().permute(0, 3, 1, 2)


class ConvPatches:
    """A graph target: the patches of a channels-last input as a matrix [M, K] (an explicit im2col in
    PyTorch). fuse_gemm_epilogue takes it into the GEMM that reads it, which then reads the input itself."""

    def __init__(self, window: ConvWindow):
        self.window = window
        self.__name__ = "tf_conv_patches"
        self.__module__ = "torchfuser.fused"

    def __repr__(self) -> str:
        return self.__name__

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.window.patches(x)


@dataclass(frozen=True)
class GemmSpec(KernelSpec):
    """C[M,N] = epilogue(A[M,K] @ B[K,N], extra...) with arbitrary strides on A, B and the extras.

    The epilogue is an SSA program whose input 0 is the fp32 accumulator and whose further inputs are
    extra tensors indexed at (m, n) through their own strides (0 for a broadcast dim, e.g. a bias).
    """

    dtype: str
    epilogue: Program
    index_type: str = "int"
    tile_m: int = 4
    tile_n: int = 8
    # "strided": A and B read through their strides (any device). "packed": B pre-packed into
    # [N/tile_n][K][tile_n] panels, vectors along n, no local memory (the CPU recipe). "tiled": a
    # work-group per block_m x block_n block of C, A and B staged through local memory (the GPU recipe).
    # "rows": decode / skinny GEMMs (small M, 2-D only) over the packed panels: a work-item streams one
    # panel along K once per pass of up to tile_m rows, M a runtime argument (the CPU recipe for small M).
    schedule: str = "strided"
    extra_layouts: tuple[str, ...] = ()  # packed, rows: per extra input "row" (n-contiguous), "bcast" or "strided"
    k_block: int = 0  # packed: K in blocks of this many (0: all of K at once); tiled: depth of a local tile
    row_blocks: int = 1  # packed: row tiles per work-item, each passing over the same K block of the panel
    block_m: int = 0  # tiled: rows of C per work-group (block_m / tile_m work-items along M)
    block_n: int = 0  # tiled: columns of C per work-group (block_n / tile_n work-items along N)
    # packed, rows: floats per vector along n, the device's native SIMD width (16 on AVX-512, 8 on AVX2):
    # wider vectors than the registers split in two and the accumulator tile spills
    vector_width: int = 16
    window: ConvWindow | None = None  # packed: A is the patches of a channels-last input (a convolution)

    kind = "gemm"

    def __post_init__(self):
        if self.dtype != "float32":
            raise ValueError("the GEMM template supports float32")
        if self.schedule not in ("strided", "packed", "tiled", "rows"):
            raise ValueError("schedule is 'strided', 'packed', 'tiled' or 'rows'")
        tiled = self.schedule == "tiled"
        if tiled and not (self.k_block > 0 and self.block_m > 0 and self.block_n > 0
                          and self.block_m % self.tile_m == 0 and self.block_n % self.tile_n == 0):
            raise ValueError("tiled GEMM: k_block > 0 and blocks that are whole multiples of the item tile")
        if not tiled and (self.block_m or self.block_n):
            raise ValueError("block_m and block_n belong to the tiled schedule")
        if self.vector_width not in (4, 8, 16):
            raise ValueError("vector_width is 4, 8 or 16")
        if self.schedule == "packed" and (self.tile_n % self.vector_width or len(self.extra_layouts) != self.n_extra):
            raise ValueError("packed GEMM: tile_n a multiple of vector_width and one layout per extra input")
        if self.schedule == "rows" and not (self.tile_n % self.vector_width == 0
                                            and len(self.extra_layouts) == self.n_extra and 1 <= self.tile_m <= 16
                                            and self.k_block == 0 and self.row_blocks == 1):
            raise ValueError("rows GEMM: tile_n a multiple of vector_width, one layout per extra input, passes of "
                             "1 to 16 rows (tile_m), no K blocks and one row block")
        if self.k_block < 0 or self.row_blocks < 1:
            raise ValueError("packed GEMM: k_block >= 0 and row_blocks >= 1")
        if self.window is not None and self.schedule != "packed":
            raise ValueError("a convolution's implicit patches are read by the packed schedule only")
        if self.epilogue.n_inputs < 1 or self.epilogue.input_dtypes[0] != self.dtype:
            raise ValueError("epilogue input 0 is the accumulator")
        if len(self.epilogue.outputs) != 1:
            raise ValueError("a GEMM epilogue has exactly one output")

    @property
    def n_extra(self) -> int:
        return self.epilogue.n_inputs - 1

    def key_text(self) -> str:
        return (
            f"gemm dtype={self.dtype} index={self.index_type} tile={self.tile_m}x{self.tile_n} "
            f"schedule={self.schedule} extras={','.join(self.extra_layouts)} "
            f"k_block={self.k_block} row_blocks={self.row_blocks}"
            # only tiled specs carry blocks: the other schedules' key texts stay what they were
            f"{f' block={self.block_m}x{self.block_n}' if self.schedule == 'tiled' else ''}"
            f"{f' vector={self.vector_width}' if self.vector_width != 16 else ''}"
            f"{f' {self.window.text()}' if self.window is not None else ''}\n"
            f"{self.epilogue.text()}"
        )


class GemmKernel(FusedKernel):
    """out[(batch,) M, N] = epilogue(a @ b, *extras): mm or bmm, extras broadcast to the output."""

    kind = "gemm"

    def __init__(self, epilogue: Program, group: int, window: ConvWindow | None = None):
        super().__init__(group)
        self.epilogue = epilogue
        self.window = window  # a: a channels-last input whose patches are A (a convolution)

    def mnk(self, inputs) -> tuple:
        """(M, K, N) of these inputs."""
        a, b = inputs[0], inputs[1]
        if self.window is not None:
            return self.window.rows, self.window.depth, b.shape[-1]
        return a.shape[-2], a.shape[-1], b.shape[-1]

    def reference(self, a, b, *extras):
        # a convolution's patches: PyTorch's convolution (an im2col and an mm would be much slower)
        acc = self.window.convolve(a, b) if self.window is not None else torch.matmul(a, b)
        return run_program(self.epilogue, [acc, *extras])[0].contiguous()

    @staticmethod
    def shape_key(inputs) -> tuple:
        return (tuple(inputs[0].shape), tuple(inputs[1].shape))
