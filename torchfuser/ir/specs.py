"""Kernel specs: frozen dataclasses that say exactly which kernel to generate.

A spec holds everything the generated source depends on and nothing else (sizes and strides are kernel
arguments, so one kernel serves many shapes). `key_text()` is the exact text the cache key hashes; float
constants appear in it as hex floats through `Program.text()`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from torchfuser.ir.program import Program

# Per-input layouts of a pointwise launch, after permuting to the output's memory order and collapsing dims.
CONTIGUOUS = "contig"  # element i of the iteration space is element i of the input
SCALAR = "scalar"  # one element broadcast everywhere
STRIDED = "strided"  # general strides over the collapsed dims
ROW = "row"  # 2-D iteration [R, C], the input is one row broadcast down (a bias): element i % C
COLUMN = "col"  # 2-D iteration [R, C], one column broadcast across (a per-row scale): element i / C
LAYOUTS = (CONTIGUOUS, SCALAR, STRIDED, ROW, COLUMN)


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:10]


@dataclass(frozen=True)
class PointwiseSpec:
    program: Program
    layouts: tuple[str, ...]  # one per program input
    ndim: int  # dims of the collapsed iteration space (strided inputs index with it)
    index_type: str = "int"  # "int" or "long": long when sizes or offsets need 64 bits
    items_per_thread: int = 16  # scalar path: consecutive elements per work-item
    vector_width: int = 1  # > 1: the contiguous fast path, one OpenCL vector per work-item
    # > 0: the row schedule (codegen/pointwise_rows.py) for programs that index the last dim: one row of
    # this many elements along the output's last dim per work-item; layouts and ndim then describe the
    # outer dims (SCALAR or STRIDED) and every input also gets its last-dim stride
    row_length: int = 0

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
        if self.row_length and (self.vector_width > 1 or set(self.layouts) - {SCALAR, STRIDED}):
            raise ValueError("the row schedule takes scalar or strided outer layouts, no vectors")

    @property
    def elements_per_item(self) -> int:
        return self.vector_width if self.vector_width > 1 else self.items_per_thread

    def key_text(self) -> str:
        return (
            f"pointwise layouts={','.join(self.layouts)} ndim={self.ndim} index={self.index_type} "
            f"items={self.items_per_thread} vector={self.vector_width}"
            f"{f' rows={self.row_length}' if self.row_length else ''}\n{self.program.text()}"
        )

    @property
    def kernel_name(self) -> str:
        return f"tf_pointwise_{_short_hash(self.key_text())}"


@dataclass(frozen=True)
class GemmSpec:
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
    # [N/tile_n][K][tile_n] panels, float16 vectors along n, no local memory (the CPU recipe). "tiled": a
    # work-group per block_m x block_n block of C, A and B staged through local memory (the GPU recipe).
    schedule: str = "strided"
    extra_layouts: tuple[str, ...] = ()  # packed: per extra input "row" (n-contiguous), "bcast" or "strided"
    k_block: int = 0  # packed: K in blocks of this many (0: all of K at once); tiled: depth of a local tile
    row_blocks: int = 1  # packed: row tiles per work-item, each passing over the same K block of the panel
    block_m: int = 0  # tiled: rows of C per work-group (block_m / tile_m work-items along M)
    block_n: int = 0  # tiled: columns of C per work-group (block_n / tile_n work-items along N)

    kind = "gemm"

    def __post_init__(self):
        if self.dtype != "float32":
            raise ValueError("the GEMM template supports float32")
        if self.schedule not in ("strided", "packed", "tiled"):
            raise ValueError("schedule is 'strided', 'packed' or 'tiled'")
        tiled = self.schedule == "tiled"
        if tiled and not (self.k_block > 0 and self.block_m > 0 and self.block_n > 0
                          and self.block_m % self.tile_m == 0 and self.block_n % self.tile_n == 0):
            raise ValueError("tiled GEMM: k_block > 0 and blocks that are whole multiples of the item tile")
        if not tiled and (self.block_m or self.block_n):
            raise ValueError("block_m and block_n belong to the tiled schedule")
        if self.schedule == "packed" and (self.tile_n % 16 or len(self.extra_layouts) != self.n_extra):
            raise ValueError("packed GEMM: tile_n a multiple of 16 and one layout per extra input")
        if self.k_block < 0 or self.row_blocks < 1:
            raise ValueError("packed GEMM: k_block >= 0 and row_blocks >= 1")
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
            f"{f' block={self.block_m}x{self.block_n}' if self.schedule == 'tiled' else ''}\n"
            f"{self.epilogue.text()}"
        )

    @property
    def kernel_name(self) -> str:
        return f"tf_gemm_{_short_hash(self.key_text())}"


# Row-reduction schedules: CPU devices run one work-item per row with vectors along it; GPUs run a
# work-group per row, strided over the row, combined through a local-memory tree.
ROW_PER_ITEM = "row_per_item"
GROUP_PER_ROW = "group_per_row"
ROW_LAYOUTS = ("contig", "bcast", "strided")  # along the row: stride 1, stride 0 (one value per row), other


@dataclass(frozen=True)
class ReductionSpec:
    """A RowReduction (ir/reduction.py) over rows whose outer dims collapse to `ndim` dims.

    Each load is read at `base + j * column_stride`, base from the row's outer coordinates; its layout
    along the row picks vector loads (contig), one load per row (bcast) or a strided gather.
    """

    reduction: object  # RowReduction (typed loosely: ir/reduction.py imports the codegen op table)
    layouts: tuple[str, ...]  # one per load
    ndim: int  # collapsed outer dims
    index_type: str = "int"
    schedule: str = ROW_PER_ITEM
    vector_width: int = 16  # row_per_item: elements per vector step (1: scalar loops only)
    group_size: int = 256  # group_per_row: work-items per row (the local-memory tree's width)

    kind = "reduction"

    def __post_init__(self):
        if len(self.layouts) != len(self.reduction.load_dtypes):
            raise ValueError("one layout per load")
        if any(layout not in ROW_LAYOUTS for layout in self.layouts):
            raise ValueError(f"row layouts must be among {ROW_LAYOUTS}")
        if self.schedule not in (ROW_PER_ITEM, GROUP_PER_ROW):
            raise ValueError(f"schedule is {ROW_PER_ITEM!r} or {GROUP_PER_ROW!r}")
        if self.index_type not in ("int", "long"):
            raise ValueError("index_type is 'int' or 'long'")

    def key_text(self) -> str:
        return (
            f"reduction layouts={','.join(self.layouts)} ndim={self.ndim} index={self.index_type} "
            f"schedule={self.schedule} vector={self.vector_width} group={self.group_size}\n"
            f"{self.reduction.text()}"
        )

    @property
    def kernel_name(self) -> str:
        return f"tf_reduction_{_short_hash(self.key_text())}"


# Attention schedules: CPU devices give each work-item vectors of consecutive query rows (one row per lane)
# and walk blocks of keys with broadcast FMAs (no local memory); GPUs one query row per work-item with
# scalar loops, so neighbouring work-items read the same key row at once.
ATTENTION_CPU = "query_lanes"
ATTENTION_GPU = "row_scalar"
ATTENTION_LAYOUTS = ("contig", "strided")  # q, k, v and the output along the head dim: stride 1 or any other
# a mask along the queries (the CPU lanes): stride 0 (one load per key), "rows" (any, but stride 1 along the
# keys: row vectors transposed in registers) or any strides (a gather per key)
MASK_LAYOUTS = ("bcast", "rows", "strided")


@dataclass(frozen=True)
class AttentionSpec:
    """softmax(score(q·k, masks...)) @ v with an online softmax, `lanes` x `query_vectors` query rows per
    work-item.

    `score` is an SSA program: input 0 the raw dot product q·k (fp32), inputs 1.. the mask operands read
    at (b, h, t, s) through their strides; its output is the softmax input (scale, additive or fill masks).
    """

    score: Program
    head_dim: int
    layouts: tuple[str, ...]  # along the head dim, for q, k, v and the output
    mask_layouts: tuple[str, ...] = ()  # along the queries, one per mask operand (score inputs 1..)
    causal: bool = False  # SDPA's is_causal: key s is seen by query t when s <= t
    masked_rows: str = "nan"  # a row with every score -inf: "nan" (softmax, as eager) or "zero" (SDPA)
    with_lse: bool = False  # also write logsumexp of the scores per row (what SDPA's backward reads)
    index_type: str = "int"
    schedule: str = ATTENTION_CPU
    lanes: int = 16  # query_lanes: query rows per vector (4, 8 or 16); row_scalar: 1
    query_vectors: int = 1  # query_lanes: vectors per work-item, each k and v load feeds one FMA per vector
    kv_row_strides: tuple[int, int] = (0, 0)  # query_lanes: k and v row strides as literals (0: arguments)

    kind = "attention"

    def __post_init__(self):
        if len(self.layouts) != 4 or any(layout not in ATTENTION_LAYOUTS for layout in self.layouts):
            raise ValueError(f"four layouts (q, k, v, out) among {ATTENTION_LAYOUTS}")
        if len(self.mask_layouts) != self.score.n_inputs - 1 or any(x not in MASK_LAYOUTS for x in self.mask_layouts):
            raise ValueError(f"one mask layout per mask operand, among {MASK_LAYOUTS}")
        if self.score.n_inputs < 1 or self.score.input_dtypes[0] != "float32" or len(self.score.outputs) != 1:
            raise ValueError("the score program takes the fp32 dot product first and has one output")
        if self.masked_rows not in ("nan", "zero"):
            raise ValueError("masked_rows is 'nan' or 'zero'")
        if self.schedule not in (ATTENTION_CPU, ATTENTION_GPU):
            raise ValueError(f"schedule is {ATTENTION_CPU!r} or {ATTENTION_GPU!r}")
        if self.head_dim < 1 or self.index_type not in ("int", "long") or self.query_vectors < 1:
            raise ValueError("head_dim >= 1, index_type 'int' or 'long', query_vectors >= 1")
        if len(self.kv_row_strides) != 2 or min(self.kv_row_strides) < 0:
            raise ValueError("kv_row_strides: two strides >= 0")
        if self.lanes not in ((4, 8, 16) if self.schedule == ATTENTION_CPU else (1,)):
            raise ValueError("lanes is 4, 8 or 16 on the CPU schedule, 1 on the GPU one")

    @property
    def n_masks(self) -> int:
        return self.score.n_inputs - 1

    @property
    def rows_per_item(self) -> int:
        return self.lanes * self.query_vectors

    def key_text(self) -> str:
        return (
            f"attention head_dim={self.head_dim} layouts={','.join(self.layouts)} "
            f"masks={','.join(self.mask_layouts)} causal={int(self.causal)} "
            f"masked_rows={self.masked_rows} lse={int(self.with_lse)} index={self.index_type} "
            f"schedule={self.schedule} lanes={self.lanes}x{self.query_vectors} "
            f"kv_rows={self.kv_row_strides[0]},{self.kv_row_strides[1]}\n{self.score.text()}"
        )

    @property
    def kernel_name(self) -> str:
        return f"tf_attention_{_short_hash(self.key_text())}"
