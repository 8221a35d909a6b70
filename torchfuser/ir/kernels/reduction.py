"""Row-reduction kernels: a RowReduction (ir/reduction.py) over the last dim, with its prologue and epilogue."""

from __future__ import annotations

from dataclasses import dataclass

from torchfuser.ir.kernels.base import FusedKernel, KernelSpec
from torchfuser.ir.reduction import RowReduction, run_row_reduction


# Row-reduction schedules: CPU devices run one work-item per row with vectors along it; GPUs run a
# work-group per row, strided over the row, combined through a local-memory tree.
ROW_PER_ITEM = "row_per_item"
GROUP_PER_ROW = "group_per_row"
ROW_LAYOUTS = ("contig", "bcast", "strided")  # along the row: stride 1, stride 0 (one value per row), other


@dataclass(frozen=True)
class ReductionSpec(KernelSpec):
    """A RowReduction (ir/reduction.py) over rows whose outer dims collapse to `ndim` dims.

    Each load is read at `base + j * column_stride`, base from the row's outer coordinates; its layout
    along the row picks vector loads (contig), one load per row (bcast) or a strided gather.
    """

    reduction: RowReduction
    layouts: tuple[str, ...]  # one per load
    ndim: int  # collapsed outer dims
    index_type: str = "int"
    schedule: str = ROW_PER_ITEM
    vector_width: int = 16  # row_per_item: elements per vector step (1: scalar loops only)
    group_size: int = 256  # group_per_row: work-items per row (the local-memory tree's width)

    kind = "reduction"

    @property
    def indexes_by_group(self) -> bool:
        return self.schedule == GROUP_PER_ROW  # rows by work-group id, in a loop over the groups

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


class ReductionKernel(FusedKernel):
    """outs = element outputs (row_shape) + row outputs (their own shapes, one value per row)."""

    kind = "reduction"

    def __init__(self, reduction: RowReduction, row_shape, row_output_shapes, group: int):
        super().__init__(group)
        self.reduction = reduction
        self.row_shape = tuple(row_shape)
        self.row_output_shapes = [tuple(s) for s in row_output_shapes]

    def sized_dims(self) -> list:
        return [*self.row_shape, *(d for shape in self.row_output_shapes for d in shape)]

    def _evaluate_sizes(self, evaluate_dims) -> None:
        self.row_shape = evaluate_dims(self.row_shape)
        self.row_output_shapes = [evaluate_dims(s) for s in self.row_output_shapes]

    def reference(self, *loads):
        elements, rows = run_row_reduction(self.reduction, list(loads), self.row_shape)
        outs = elements + [r.reshape(shape) for r, shape in zip(rows, self.row_output_shapes)]
        return outs[0] if len(outs) == 1 else tuple(outs)
