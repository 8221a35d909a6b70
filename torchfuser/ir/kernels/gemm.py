"""GEMM kernels: C = epilogue(A @ B, extras...), mm or bmm, with an SSA epilogue applied in registers."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from torchfuser.ir.interpret import run_program
from torchfuser.ir.kernels.base import FusedKernel, KernelSpec
from torchfuser.ir.kernels.window import WindowKernel, WindowSpec
from torchfuser.ir.program import Program
from torchfuser.ir.weights import ConvWeightFromMatrix
from torchfuser.ir.window import Window


class ConvPatches:
    """A graph target: the patches of a channels-last input as a matrix [M, K] (an explicit im2col in
    PyTorch). fuse_gemm_epilogue takes it into the GEMM that reads it, which then reads the input itself."""

    def __init__(self, window: Window):
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
    window: Window | None = None  # packed: A is the patches of a channels-last input (a convolution)
    # packed: A [M, C] is this window kernel's result (a depthwise convolution or a pooling), computed a chunk of
    # producer.vector_width channels at a time in registers and never stored
    producer: WindowSpec | None = None
    # C in eager's channels-first order: rows are output pixels, out_images of them per image, stored
    # C[m / P][n][m % P] (P = out_images), an NCHW (NCL) convolution result with no copy; 0: C[m][n]
    out_images: int = 0

    kind = "gemm"

    @property
    def indexes_by_group(self) -> bool:
        return self.schedule == "tiled"  # a work-group per block of C

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
        if (self.window is not None or self.producer is not None) and self.schedule != "packed":
            raise ValueError("a convolution's implicit patches and a window producer are read by the packed "
                             "schedule only")
        if self.producer is not None and (self.window is not None or self.k_block % self.producer.vector_width):
            raise ValueError("a window producer: no patches, and K blocks of whole channel chunks")
        if self.out_images < 0 or self.out_images and self.k_block and self.schedule == "packed":
            raise ValueError("channels-first results: out_images > 0 and K in one block (partial sums go through C "
                             "in rows)")
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
            f"{f'{chr(10)}producer {self.producer.key_text()}' if self.producer is not None else ''}"
            f"{f'{chr(10)}channels-first images of {self.out_images}' if self.out_images else ''}"
        )


class GemmKernel(FusedKernel):
    """out[(batch,) M, N] = epilogue(a @ b, *extras): mm or bmm, extras broadcast to the output.

    With a producer (a WindowKernel), A is the producer's [M, C] result and the inputs are
    (x, b, *extras, *producer operands after x): x the producer's channels-last input, then the producer's taps
    (a sum) and its epilogue's extras."""

    kind = "gemm"

    def __init__(self, epilogue: Program, group: int, window: Window | None = None,
                 producer: WindowKernel | None = None, channels_first: tuple | None = None):
        super().__init__(group)
        if window is not None and producer is not None:
            raise ValueError("A is a convolution's patches or a window kernel's result, not both")
        self.epilogue = epilogue
        self.window = window  # a: a channels-last input whose patches are A (a convolution)
        self.producer = producer
        # the result as eager's NCHW (NCL) convolution result: rows are the pixels of images of these spatial
        # sizes, stored [images, N, *spatial] (GemmSpec.out_images); None: [M, N]
        self.channels_first = tuple(channels_first) if channels_first is not None else None
        # B back as the convolution's weight, for PyTorch's convolution (the reference, the extern variant)
        self.conv_weight = (ConvWeightFromMatrix(window.kernel_h, window.kernel_w, window.channels)
                            if window is not None else None)

    @property
    def out_images(self) -> int:
        """Pixels per image of a channels-first result (0: row-major)."""
        return math.prod(self.channels_first) if self.channels_first is not None else 0

    def channels_first_shape(self, batch: int, m: int, n: int) -> tuple:
        """The channels-first result of `batch` products of [m, n]: images of out_images rows each."""
        return (batch * m // self.out_images, n, *self.channels_first)

    def mnk(self, inputs) -> tuple:
        """(M, K, N) of these inputs."""
        a, b = inputs[0], inputs[1]
        if self.window is not None:
            return self.window.rows, self.window.depth, b.shape[-1]
        if self.producer is not None:
            return self.producer.window.rows, self.producer.window.channels, b.shape[-1]
        return a.shape[-2], a.shape[-1], b.shape[-1]

    def producer_flops(self, panels: int) -> float:
        """The producer's FLOPs as this kernel does them: once per panel of columns that reads A."""
        return self.producer.flops() * panels

    def split_inputs(self, inputs) -> tuple[list, list]:
        """(the GEMM's own inputs: a or x, b and the epilogue's extras; the producer's operands after x)."""
        own = 2 + self.epilogue.n_inputs - 1
        return list(inputs[:own]), list(inputs[own:])

    def reference(self, *inputs):
        (a, b, *extras), produced = self.split_inputs(inputs)
        if self.producer is not None:
            acc = torch.matmul(self.producer.reference(a, *produced), b)
        elif self.window is not None:  # PyTorch's convolution (an im2col and an mm would be much slower)
            acc = self.window.convolve(a, self.conv_weight(b))
        else:
            acc = torch.matmul(a, b)
        result = run_program(self.epilogue, [acc, *extras])[0]
        if self.channels_first is not None:
            *batch, m, n = result.shape
            result = result.reshape(-1, self.out_images, n).transpose(1, 2).reshape(
                self.channels_first_shape(math.prod(batch), m, n))
        return result.contiguous()

    @staticmethod
    def shape_key(inputs) -> tuple:
        return (tuple(inputs[0].shape), tuple(inputs[1].shape))
