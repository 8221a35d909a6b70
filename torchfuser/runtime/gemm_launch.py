"""GEMM launches: schedule choice, weight pre-packing and launch arguments.

On CPU devices the packed schedule runs, and the rows schedule for decode-sized mms (M <= ROWS_MAX_M): B
(usually a weight viewed as its transpose) is packed once into [N/tile_n][K][tile_n] panels and the packed
copy is reused while the tensor it was made from is the same object at the same version (an optimiser step
bumps the version and forces a re-pack); both schedules read the same panels (32 wide on AVX-512, 16 on
AVX2), one copy per weight.
Other devices (GPUs) use the tiled schedule: work-groups stage A and B tiles through local memory, read
through their strides.
A tiled configuration that exceeds the device's work-group or local-memory limits runs strided instead
(no local memory, groups of at most 4 items), and the tuning record says so.
"""

from __future__ import annotations

import functools
import logging
import math
import weakref
from dataclasses import dataclass

import numpy as np
import torch

from torchfuser.codegen.opencl.gemm import tiled_local_floats
from torchfuser.ir.dtypes import DTYPE_NAMES, TORCH_DTYPES
from torchfuser.ir.kernels import GemmKernel, GemmSpec, PointwiseKernel
from torchfuser.ir.window import Window
from torchfuser.ir.weights import version_of
from torchfuser.ir.layout import broadcast_strides, contiguous_strides, extent, index_type_for
from torchfuser.runtime.device import get_device
from torchfuser.runtime.launch import Launch, NoLaunch, vector_widths
from torchfuser.runtime.memory import REWRITTEN_BY_KERNELS
from torchfuser.runtime.pointwise_launch import PointwiseLaunch, configure_pointwise
from torchfuser.runtime.virtual_views import VirtualView, real
from torchfuser.runtime.window_launch import window_arguments, window_operands

logger = logging.getLogger("torchfuser")


@dataclass(frozen=True)
class GemmVariant:
    """One way to run a GEMM: a schedule of the template (tile, K block, row tiles per work-item; tiled: the
    work-group's block of C and its K depth), or the host BLAS + epilogue."""

    schedule: str  # packed | rows | strided | tiled | extern
    tile_m: int = 0
    tile_n: int = 0
    k_block: int = 0
    row_blocks: int = 1
    block_m: int = 0
    block_n: int = 0

    @property
    def name(self) -> str:
        if self.schedule == "extern":
            return "extern"
        blocking = {"packed": f" k{self.k_block} r{self.row_blocks}",
                    "tiled": f" m{self.block_m} n{self.block_n} k{self.k_block}"}.get(self.schedule, "")
        return f"{self.schedule} {self.tile_m}x{self.tile_n}{blocking}"

    @property
    def group_shape(self) -> tuple[int, int]:
        """tiled: work-items per group along N and along M."""
        return self.block_n // self.tile_n, self.block_m // self.tile_m

    @classmethod
    def parse(cls, name: str) -> "GemmVariant":
        schedule, *fields = name.split()
        if schedule == "extern":
            return cls("extern")
        tile_m, tile_n = (int(v) for v in fields[0].split("x"))
        blocking = {f[0]: int(f[1:]) for f in fields[1:]}
        return cls(schedule, tile_m, tile_n, blocking.get("k", 0), blocking.get("r", 1),
                   blocking.get("m", 0), blocking.get("n", 0))


# the autotuner's CPU search spaces, per vector width: (tile_m, tile_n, k_block, row_blocks; k_block 0: K in one
# block). A tile keeps tile_m x tile_n / width accumulators in registers beside tile_n / width B vectors and A's
# broadcast: 8x32 is 16 float16 (half the AVX-512 registers), 4x16 and 4x24 are 8 and 12 float8 (of AVX2's 16).
# AVX-512 takes K in one block: a stack of row tiles then reads the panel from L2, and no partial sums go
# through C; 128- and 256-deep blocks (a slice of the panel inside L1) were slower on Zen 4 inside every plan
# measured, though timed alone the search still picked them (ViT's patch embedding, 784x768x768: the notes).
PACKED_VARIANTS = {
    16: ((8, 32, 0, 8), (8, 32, 0, 2), (4, 64, 0, 8)),
    8: ((4, 16, 256, 16), (4, 24, 512, 8), (4, 24, 256, 16), (4, 16, 384, 8), (5, 16, 256, 8), (6, 16, 256, 8)),
}


# the GPU search space: (tile_m, tile_n, block_m, block_n, k_block). 256-item groups of 4x4 to 8x8 outputs
# per item (16-64 accumulator registers), 8-13 KiB of local memory; 32x32 blocks give small GEMMs more groups.
TILED_WIDE, TILED_NARROW = (4, 4, 64, 64, 16), (4, 4, 32, 32, 16)  # the no-search choices
TILED_VARIANTS = (TILED_WIDE, (8, 4, 128, 64, 16), (8, 8, 128, 128, 8), TILED_NARROW)
STRIDED_VARIANT = GemmVariant("strided", 4, 8)  # needs no local memory and groups of at most 4 items


def tiled_variant(tile_m, tile_n, block_m, block_n, k_block) -> GemmVariant:
    return GemmVariant("tiled", tile_m, tile_n, k_block, 1, block_m, block_n)


# The decode schedule on CPUs: passes of up to ROWS_TILES[width] rows (8 x 32: 16 float16 accumulators;
# 4 x 16: 8 float8) over the same packed panels as the first packed variant. ROWS_MAX_M: the largest M it
# runs by default and is a search candidate for. Measured against
# packed 8x32 k256 r8 (2 Zen 4 vCPUs, medians of interleaved rounds, weights cold / L3-warm), rows / packed
# speed: M = 1-16: 0.96-1.33x cold, 1.03-1.7x warm (768x3072, 3072x768, 4096x4096, 16384x768); M = 32:
# 1.03-1.18x (16384x768, a 2 MiB panel that each pass streams again: 1.03x cold, 0.99x warm); M = 64: 0.97x
# at 16384x768, so the crossover is between 32 and 64 rows where K is large.
ROWS_TILES, ROWS_MAX_M = {16: (8, 32), 8: (4, 16)}, 32


def _narrow(tile_n: int, n: int) -> int:
    """A panel width for n columns: outputs of at most 16 columns take 16-wide panels."""
    return tile_n if n > 16 else min(tile_n, 16)


def rows_variant(n: int, width: int | None = None) -> GemmVariant:
    tile_m, tile_n = ROWS_TILES[width or panel_vector_width()]
    return GemmVariant("rows", tile_m, _narrow(tile_n, n))


def default_variant(device_type: str, n: int, m: int | None = None) -> GemmVariant:
    """The no-search choice: on CPUs the rows schedule for a plain mm of m <= ROWS_MAX_M rows (m None: a
    bmm, or unknown), else the first packed variant of the device's vector width (8x32 over K in one block on
    AVX-512; 4x64 tiles for 33-64 columns, 16-wide panels for at most 16); tiled 64x64 blocks (32x32 for narrow
    outputs) elsewhere."""
    if device_type == "CPU":
        if m is not None and m <= ROWS_MAX_M:
            return rows_variant(n)
        width = panel_vector_width()
        tile_m, tile_n, k_block, row_blocks = PACKED_VARIANTS[width][0]
        if width == 16 and 32 < n <= 64:  # one 4x64 panel for all of N: each row of A read once, not per panel
            tile_m, tile_n = 4, 64
        return GemmVariant("packed", tile_m, _narrow(tile_n, n), k_block, row_blocks)
    return tiled_variant(*(TILED_WIDE if n > 32 else TILED_NARROW))


def candidate_variants(device, m: int | None = None, window: bool = False, produced: bool = False,
                       n: int | None = None) -> list[GemmVariant]:
    """The search space on this device; m: the rows of a plain mm (None: a bmm), which may add the rows
    schedule; window: a convolution's implicit patches (the packed schedule only); produced: A made by a window
    kernel (the packed schedule only); n: the output's columns (None: unknown), at most 16 of which take 16-wide
    panels, as the heuristic's choice does. Wider outputs get no panel narrower than 32: its broadcast of A feeds
    one FMA, not two (8x16 tiles won searches by noise and lost in plans: ResNet's 64x4608x512, the notes)."""
    if device.type_name != "CPU":
        return [tiled_variant(*v) for v in TILED_VARIANTS] + [STRIDED_VARIANT]
    width = panel_vector_width()
    packed = (GemmVariant("packed", tm, tn if n is None else _narrow(tn, n), k, r)
              for tm, tn, k, r in PACKED_VARIANTS[width])
    found = list({v.name: v for v in packed}.values())
    if m is not None and m <= ROWS_MAX_M and not window:
        found.append(rows_variant(n=32 if n is None else n, width=width))  # on the first packed variant's panels
    # the host's own: BLAS for an mm, PyTorch's convolution for a convolution's patches (a producer has none)
    return found + ([GemmVariant("extern")] if device.zero_copy and not produced else [])


def mm_rows(inputs) -> int | None:
    """M of a plain (2-D) mm, None for a bmm or a convolution's patches: the rows schedule runs plain mms only."""
    return inputs[0].shape[0] if inputs[0].dim() == 2 else None


@dataclass(frozen=True)
class DeviceLimits:
    max_group: int  # CL_DEVICE_MAX_WORK_GROUP_SIZE
    max_items: tuple[int, ...]  # CL_DEVICE_MAX_WORK_ITEM_SIZES, per dimension
    local_bytes: int  # CL_DEVICE_LOCAL_MEM_SIZE


def device_limits(device) -> DeviceLimits | None:
    if device is None:
        return None
    d = device.cl_device
    return DeviceLimits(d.max_work_group_size, tuple(d.max_work_item_sizes), d.local_mem_size)


def misfit(variant: GemmVariant, limits: DeviceLimits | None) -> str | None:
    """Why `variant` cannot launch on a device with these limits; None when it can (or they are unknown)."""
    if variant.schedule != "tiled" or limits is None:
        return None
    gx, gy = variant.group_shape
    if gx * gy > limits.max_group or gx > limits.max_items[0] or gy > limits.max_items[1]:
        return (f"a {gx}x{gy} work-group exceeds the device's {limits.max_group} items "
                f"({'x'.join(map(str, limits.max_items[:2]))} per dimension)")
    local = 4 * tiled_local_floats(variant.block_m, variant.block_n, variant.k_block)
    if local > limits.local_bytes:
        return f"{local} bytes of local memory exceed the device's {limits.local_bytes}"
    return None


def fitted(variant: GemmVariant, limits: DeviceLimits | None) -> tuple[GemmVariant, str | None]:
    """`variant`, or the strided schedule with the reason when it does not fit the device."""
    why = misfit(variant, limits)
    return (variant, None) if why is None else (STRIDED_VARIANT, f"{variant.name} does not fit: {why}; runs strided")


def pack_panels(b: torch.Tensor, tile_n: int) -> torch.Tensor:
    """B [K, N] → [ceil(N / tile_n), K, tile_n], zero-padded: panel j holds columns j*tile_n.. contiguously.
    A batched B [batch, K, N] packs each matrix: [batch, panels, K, tile_n]; one broadcast over the batch (batch
    stride 0: a weight every batch shares) packs once, [1, panels, K, tile_n]."""
    if b.dim() == 3:
        if b.stride(0) == 0:
            return pack_panels(b[0], tile_n).unsqueeze(0)
        return torch.stack([pack_panels(matrix, tile_n) for matrix in b])
    k, n = b.shape
    full, rest = divmod(n, tile_n)
    packed = torch.zeros((full + (rest > 0), k, tile_n), dtype=b.dtype)
    if full:
        packed[:full].copy_(b[:, : full * tile_n].reshape(k, full, tile_n).permute(1, 0, 2))
    if rest:
        packed[full, :, :rest].copy_(b[:, full * tile_n :])
    return packed


class PackedWeights:
    """Packed copies of B operands, keyed by the tensor they view and the view's layout; valid while its version
    and address are unchanged (`p.data = new` swaps the storage and keeps the version). B may be a virtual view
    (runtime/virtual_views.py): a steady call finds its copy without making the view (a PyTorch call, several
    microseconds after a kernel that streamed the caches)."""

    def __init__(self):
        self._entries: dict = {}
        self._last = (None, None, None, None)  # (weak ref to the root of the last call's B, its key, state, packed)

    def get(self, b, tile_n: int, call=None) -> torch.Tensor:
        if type(b) is VirtualView:
            root, key = b.root, (b.shape, b.strides, b.offset, tile_n)
        else:
            root, key = b._base if b._base is not None else b, (tuple(b.shape), b.stride(), b.storage_offset(), tile_n)
        state = (version_of(root), root.data_ptr())
        last_ref, last_key, last_state, packed = self._last
        if last_ref is not None and last_ref() is root and state == last_state and last_key == key:
            return packed
        # a planned result (memory.REWRITTEN_BY_KERNELS) has new contents every call under the same version
        keep = REWRITTEN_BY_KERNELS.get(id(root)) is not root
        packed = self._lookup(b, root, key, state, call, keep)
        if keep:
            self._last = (weakref.ref(root), key, state, packed)
        return packed

    def _lookup(self, b, root: torch.Tensor, key: tuple, state: tuple, call, keep: bool) -> torch.Tensor:
        entry = self._entries.get((id(root), key)) if keep else None
        if entry is not None and entry[0]() is root and entry[1] == state:
            return entry[2]
        if call is not None:
            call.before_host_read([b])  # an activation as B may still be being written by a kernel
        packed = pack_panels(real(b), key[-1])
        if keep:
            if len(self._entries) > 16:  # activations as B never hit: keep the table small
                self._entries = {k: e for k, e in self._entries.items() if e[0]() is not None}
            self._entries[(id(root), key)] = (weakref.ref(root), state, packed)
        return packed


PANEL_SCHEDULES = ("packed", "rows")  # the schedules that read B as packed panels


class GemmLaunch(Launch):
    packer: PackedWeights | None = None
    prepare_reads = ()  # B may stay virtual: PackedWeights finds its copy by its root and layout
    prepare_from_weights = True

    def prepare(self, inputs, call=None):
        if self.spec.schedule not in PANEL_SCHEDULES:
            return inputs
        return [inputs[0], self.packer.get(inputs[1], self.spec.tile_n, call), *inputs[2:]]

    def arguments(self, in_buffers, in_offsets, out_buffers):
        index = np.int64 if self.spec.index_type == "long" else np.int32
        a_strides, b_strides, extra_strides, mnk, produced = self.scalars
        args = [in_buffers[0], index(in_offsets[0]), *map(index, a_strides)] if produced is None else []
        if self.spec.schedule in PANEL_SCHEDULES:
            args += [in_buffers[1], index(b_strides)]  # the packed copy's batch stride
        else:
            args += [in_buffers[1], index(in_offsets[1]), *map(index, b_strides)]
        for e, strides in enumerate(extra_strides, start=2):
            args += [in_buffers[e], index(in_offsets[e]), *map(index, strides)]
        args += list(out_buffers) + [index(x) for x in mnk]
        window = self.spec.window
        if window is not None and window.padded:
            args.append(zeros_buffer(window.channels))
        if produced is not None:  # the producer's x, taps and extras, as its own window kernel takes them
            x_strides, produced_extra_strides = produced
            first = 2 + len(extra_strides)
            args += [in_buffers[0], index(in_offsets[0]), *map(index, x_strides)]
            args += window_arguments(in_buffers[first:], in_offsets[first:], produced_extra_strides, index)
        return args


@functools.lru_cache(maxsize=None)
def _zeros_on(context, floats: int):
    import pyopencl as cl

    return cl.Buffer(context, cl.mem_flags.READ_ONLY | cl.mem_flags.COPY_HOST_PTR, hostbuf=np.zeros(floats, np.float32))


def zeros_buffer(floats: int):
    """A device buffer of at least `floats` zeros (what a padded convolution reads in its padding), one per size
    per context, kept for the process."""
    return _zeros_on(get_device().context, max(floats, 1))


def _extra_layout(strides) -> str:
    return "row" if strides[1] == 1 else "bcast" if strides[1] == 0 else "strided"  # by the n stride


class GemmState:
    """What the runtime keeps per GEMM node: its packed weights, the variant chosen per shape (by the
    autotuner, whose choices already fit the device) and the device's limits (None until known)."""

    def __init__(self):
        self.packer = PackedWeights()
        self.choices: dict[tuple, GemmVariant] = {}
        self.limits: DeviceLimits | None = None


_states: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def gemm_state(kernel: GemmKernel) -> GemmState:
    state = _states.get(kernel)
    if state is None:
        state = _states[kernel] = GemmState()
    return state


def configure_gemm(kernel: GemmKernel, inputs, device_type: str) -> Launch:
    state = gemm_state(kernel)
    variant = state.choices.get(kernel.shape_key(inputs))
    if variant is None:
        variant = default_variant(device_type, inputs[1].shape[-1], mm_rows(inputs))
        if variant.schedule == "tiled":
            if state.limits is None:  # never tuned (a manual op): the device run_single uses
                state.limits = device_limits(get_device())
            variant, why = fitted(variant, state.limits)
            if why:
                logger.info("torchfuser: %s: %s", kernel.__name__, why)
    return launch_for(kernel, variant, inputs)


def panel_vector_width() -> int:
    """Floats per vector along a packed panel: the device's native float width, 16 on AVX-512 and 8 below it
    (a wider vector than the registers is split in two and the accumulator tile spills)."""
    return vector_widths()["float32"]


def launch_for(kernel: GemmKernel, variant: GemmVariant, inputs) -> Launch:
    (a, b, *extras), produced = kernel.split_inputs(inputs)
    m, k, n = kernel.mnk(inputs)
    batch = _batch(a)
    out_shape = (batch, m, n) if a.dim() == 3 else (m, n)
    if kernel.window is not None and variant.schedule not in ("packed", "extern"):
        raise NoLaunch(f"{variant.name}: a convolution's implicit patches are read by the packed schedule (CPU "
                       "devices) only")
    if kernel.producer is not None and variant.schedule != "packed":
        raise NoLaunch(f"{variant.name}: a window kernel's result as A is made by the packed schedule (CPU "
                       "devices) only")
    if kernel.channels_first is not None:
        if variant.schedule == "packed":  # K in one block: partial sums would go through C in rows
            variant = GemmVariant("packed", variant.tile_m, variant.tile_n, 0, variant.row_blocks)
    if variant.schedule == "extern":
        if kernel.window is not None:
            return ExternConvLaunch.create(kernel, a, b, extras, out_shape)
        return ExternGemmLaunch.create(kernel, a, b, extras, out_shape)
    if variant.schedule == "rows" and a.dim() != 2:
        raise ValueError(f"{variant.name}: the rows schedule runs plain (2-D) mms only")
    # every operand as (m, n, batch) strides; a plain mm is one batch with batch strides 0
    extra_strides = [_mnb(broadcast_strides(out_shape, e), a.dim()) for e in extras]
    reach = max([batch * m * n, batch * k * (n + 64)] + [extent(t) for t in inputs])
    packed, tiled, rows = variant.schedule == "packed", variant.schedule == "tiled", variant.schedule == "rows"
    layouts = tuple(_extra_layout(s) for s in extra_strides) if packed or rows else ()
    index_type = index_type_for(reach)
    producer = produced_scalars = None
    if kernel.producer is not None:
        producer, produced_scalars = window_operands(kernel.producer, [a, *produced], index_type,
                                                     math.gcd(panel_vector_width(), variant.k_block or k))
    spec = GemmSpec(DTYPE_NAMES[a.dtype], kernel.epilogue, index_type, variant.tile_m, variant.tile_n,
                    variant.schedule, layouts, variant.k_block if packed or tiled else 0,
                    variant.row_blocks if packed else 1, variant.block_m if tiled else 0,
                    variant.block_n if tiled else 0,
                    panel_vector_width() if packed or rows else 16, kernel.window, producer, kernel.out_images)
    panels, row_tiles = -(-n // spec.tile_n), -(-m // spec.tile_m)
    if packed:  # a work-item walks its stack of row tiles itself (the K-block loop order needs it)
        grid, local = (panels, -(-row_tiles // spec.row_blocks), batch), (1, 1, 1)
    elif rows:  # a work-item per panel, which walks all of M itself
        grid, local = (panels,), (1,)
    elif tiled:  # a group per block of C; the kernel requires exactly this group shape
        gx, gy = variant.group_shape
        grid, local = (-(-n // spec.block_n) * gx, -(-m // spec.block_m) * gy, batch), (gx, gy, 1)
    else:  # groups of a few row tiles share a B panel
        grid, local = (panels, row_tiles, batch), (1, 4 if row_tiles % 4 == 0 else 1, 1)
    a_strides = _mnb(a.stride(), a.dim()) if producer is None else ()
    shared_b = b.dim() == 3 and b.stride(0) == 0  # one packed copy serves every batch
    b_strides = panels * k * spec.tile_n * (a.dim() == 3 and not shared_b) if packed or rows else _mnb(b.stride(),
                                                                                                      b.dim())
    if kernel.channels_first is not None:
        out_shape = kernel.channels_first_shape(batch, m, n)
    out = (out_shape, tuple(contiguous_strides(out_shape)), TORCH_DTYPES[kernel.epilogue.output_dtypes[0]])
    flops = 2.0 * batch * m * n * k + (kernel.producer_flops(-(-n // spec.tile_n)) if producer is not None else 0)
    launch = GemmLaunch(spec, grid, [out], [a_strides, b_strides, extra_strides, (m, n, k), produced_scalars],
                        empty=batch * m * n == 0, local_size=local, flops=flops)
    launch.packer = gemm_state(kernel).packer
    return launch


def _batch(t) -> int:
    return t.shape[0] if t.dim() == 3 else 1


def _mnb(strides, dim) -> tuple:
    """(row stride, column stride, batch stride) of a 2-D or batched 3-D operand."""
    return (strides[-2], strides[-1], strides[0] if dim == 3 else 0)


class ExternGemmLaunch(PointwiseLaunch):
    """The host BLAS writes A @ B into a fresh buffer (zero-copy: the kernel reads it where it lies), then the
    epilogue runs as a pointwise kernel over it: TorchInductor's extern-kernel-plus-epilogue idea."""

    fresh_prepared = True  # the accumulator
    host_threads = True  # the host BLAS

    channels_first: tuple | None = None  # the GEMM node's: the epilogue kernel writes NCHW (NCL) from [M, N]

    @classmethod
    def create(cls, gemm: GemmKernel, a, b, extras, out_shape) -> "ExternGemmLaunch":
        accumulator = torch.empty(out_shape, dtype=torch.float32, device="meta")
        operands = [accumulator, *extras]
        if gemm.channels_first is not None:  # the epilogue walks the result's NCHW order, reading [M, N] transposed
            operands = [_in_channels_first(t, out_shape, gemm.channels_first) for t in operands]
            out_shape = operands[0].shape
        epilogue = PointwiseKernel(gemm.epilogue, out_shape, torch.empty(out_shape, device="meta").stride(),
                                   gemm.group)
        launch = cls(**vars(configure_pointwise(epilogue, operands, "CPU")))
        launch.channels_first = gemm.channels_first
        return launch

    def prepare(self, inputs, call=None):
        a, b, *extras = inputs
        if call is not None:
            call.before_host_read([a, b])
        shape = (*a.shape[:-1], b.shape[-1])
        stride = torch.empty(shape, device="meta").stride()
        accumulator = (call.runtime.arena.empty_strided(shape, stride, torch.float32) if call is not None
                       else torch.empty(shape, dtype=torch.float32))  # the arena's pages are already mapped
        torch.matmul(a, b, out=accumulator)
        return self.epilogue_operands(accumulator, extras)

    def epilogue_operands(self, accumulator, extras) -> list:
        """The epilogue kernel's inputs: the accumulator and the extras, in the channels-first frame if any."""
        operands = [accumulator, *extras]
        if self.channels_first is None:
            return operands
        return [_in_channels_first(t, accumulator.shape, self.channels_first) for t in operands]


@dataclass
class ExternConvLaunch(ExternGemmLaunch):
    """A convolution's GEMM done by PyTorch's own convolution (oneDNN) over the channels-last input A lies in,
    with B turned back into the convolution's weight (once per weight version); its channels-last result is the
    accumulator [M, Cout] the epilogue kernel reads. The autotuner's way to keep a convolution
    on PyTorch's kernels where they are faster than the implicit GEMM."""

    window: Window | None = None
    conv_weight: object = None  # the GEMM node's ConvWeightFromMatrix: B as the weight, once per version of B

    @classmethod
    def create(cls, gemm: GemmKernel, a, b, extras, out_shape) -> "ExternConvLaunch":
        launch = super().create(gemm, a, b, extras, out_shape)
        launch.window, launch.conv_weight = gemm.window, gemm.conv_weight
        return launch

    def prepare(self, inputs, call=None):
        x, b, *extras = inputs
        if call is not None:
            call.before_host_read([x, b])
        return self.epilogue_operands(self.window.convolve(x, self.conv_weight(b)), extras)


def _in_channels_first(t, shape, spatial: tuple):
    """t (broadcast to a GEMM's [(batch,) M, N] result) viewed as the NCHW (NCL) tensor whose pixels are its rows."""
    n = shape[-1]
    rows = t.expand(shape).reshape(-1, *spatial, n)
    return rows.permute(0, rows.dim() - 1, *range(1, rows.dim() - 1))


def gemm_transforms(launch: Launch, inputs) -> list[str]:
    """One-time constant transforms a GEMM launch relies on, in words, for the report."""
    spec = launch.spec
    if getattr(spec, "schedule", None) in PANEL_SCHEDULES:
        *batch, k, n = inputs[1].shape
        panels, copies = -(-n // spec.tile_n), (batch or [1])[0]
        return [f"B [{'x'.join(map(str, inputs[1].shape))}] packed into {copies * panels} panels of "
                f"[{k}x{spec.tile_n}] ({copies * panels * k * spec.tile_n * 4 / 2**20:.1f} MiB), "
                "once per weight version (per call when B is an activation)"]
    if isinstance(launch, ExternConvLaunch):
        return ["the convolution by PyTorch (torch.nn.functional.conv2d over the padded channels-last input, its "
                "weight rebuilt from B once per weight version); this kernel is the epilogue"]
    if isinstance(launch, ExternGemmLaunch):
        return ["A @ B by the host BLAS (torch.mm) into a zero-copy buffer; this kernel is the epilogue"]
    return []
