"""Row reductions in the SSA IR: a few passes over each row, each reducing a pointwise program.

A row is the last dim of a tensor. A `RowReduction` reads `loads` (tensors broadcast to the row space,
one element per (row, j)) and computes, per row:

  stage k:  acc = combine over j of element_k(loads at j, row values so far)  (combine: sum|max|min|prod)
            new row values = finish_k(acc, row length, row values so far)
  final:    element outputs at j = final(loads at j, all row values)
            row outputs = some of the row values

Every program is the pointwise `Program` that pointwise kernels and GEMM epilogues use, so a pointwise
prologue (mask add, scale, residual) is simply lowered into each stage's element program and an epilogue
(weight, bias, activation) into the final program. Softmax, for example:

  stage 0:  max of x              → m
  stage 1:  sum of exp(x - m)     → inv = 1 / sum
  final:    exp(x - m) * inv

`ROW_REDUCTIONS` maps the ATen ops to templates that build these stages (the prologue arrives as a
callback that lowers it into any element program). `run_row_reduction` is the reference meaning in
PyTorch (the fallback path and the tests' oracle).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from torchfuser.ir.dtypes import TORCH_DTYPES
from torchfuser.ir.interpret import run_program
from torchfuser.ir.program import Const, Program, ProgramBuilder

COMBINES = ("sum", "max", "min", "prod")
INT64_MAX = (1 << 63) - 1
aten = torch.ops.aten


@dataclass(frozen=True)
class RowStage:
    element: Program  # inputs: the loads, then the row values of earlier stages; one output
    combine: str  # one of COMBINES; max and min propagate NaN, as eager's amax and amin do
    finish: Program  # inputs: the combined value, the row length (accumulator dtype), earlier row values

    @property
    def acc_dtype(self) -> str:
        return self.element.output_dtypes[0]


@dataclass(frozen=True)
class RowReduction:
    load_dtypes: tuple[str, ...]
    stages: tuple[RowStage, ...]
    final: Program  # inputs: the loads, then every row value; outputs: element outputs (possibly none)
    row_outputs: tuple[int, ...]  # indices of the row values written out, one value per row

    def __post_init__(self):
        rows = 0
        for k, stage in enumerate(self.stages):
            if stage.combine not in COMBINES:
                raise ValueError(f"stage {k}: combine must be one of {COMBINES}")
            expected = self.load_dtypes + self.row_dtypes[:rows]
            if stage.element.input_dtypes != expected or len(stage.element.outputs) != 1:
                raise ValueError(f"stage {k}: element program must take {expected} and give one value")
            acc = stage.acc_dtype
            if stage.finish.input_dtypes != (acc, acc) + self.row_dtypes[:rows]:
                raise ValueError(f"stage {k}: finish program takes (acc, n, earlier row values)")
            rows += len(stage.finish.outputs)
        if self.final.input_dtypes != self.load_dtypes + self.row_dtypes:
            raise ValueError("final program takes the loads and every row value")
        if any(not 0 <= i < rows for i in self.row_outputs):
            raise ValueError("row output index out of range")

    @property
    def row_dtypes(self) -> tuple[str, ...]:
        return tuple(d for s in self.stages for d in s.finish.output_dtypes)

    @property
    def element_output_dtypes(self) -> tuple[str, ...]:
        return self.final.output_dtypes

    @property
    def row_output_dtypes(self) -> tuple[str, ...]:
        return tuple(self.row_dtypes[i] for i in self.row_outputs)

    def row_inputs_before(self, k: int) -> int:
        """How many row values the element program of stage k sees."""
        return sum(len(s.finish.outputs) for s in self.stages[:k])

    def text(self) -> str:
        """Exact text (hex floats through Program.text): the part of a cache key this IR owns."""
        parts = [f"loads {','.join(self.load_dtypes)}"]
        for k, stage in enumerate(self.stages):
            parts += [f"stage {k} {stage.combine}", stage.element.text(), f"finish {k}", stage.finish.text()]
        parts += ["final", self.final.text(), f"row_outputs {','.join(map(str, self.row_outputs))}"]
        return "\n".join(parts)


class RowReductionBuilder:
    """Builds a RowReduction stage by stage. Element builders number their inputs loads first, then row
    values; `row_input(builder, r)` is the id of row value r in such a builder. The last stage's finish
    program stays open (`finish`) so a row-level epilogue (e.g. rmsnorm's add eps, rsqrt) can join it."""

    def __init__(self, load_dtypes):
        self.load_dtypes = tuple(load_dtypes)
        self.stages: list[RowStage] = []
        self.row_dtypes: list[str] = []
        self._pending = None  # (element program, combine, finish builder, finish outputs)

    def element(self) -> ProgramBuilder:
        self._close()
        return ProgramBuilder(self.load_dtypes + tuple(self.row_dtypes))

    def row_input(self, r: int) -> int:
        return len(self.load_dtypes) + r

    def reduce(self, builder: ProgramBuilder, value: int, combine: str) -> ProgramBuilder:
        """End an element program with `value` reduced by `combine`; returns the open finish builder, whose
        input 0 is the combined value and input 1 the row length."""
        acc = builder.dtype_of(value)
        finish = ProgramBuilder((acc, acc, *self.row_dtypes))
        self._pending = (builder.build([value]), combine, finish, [])
        return finish

    @property
    def finish(self) -> ProgramBuilder:
        return self._pending[2]

    def row_in_finish(self, r: int) -> int:
        """The id of row value r inside the open finish builder: an input for earlier stages' values, the
        defining value for this stage's own."""
        defined_before = len(self.row_dtypes)
        return 2 + r if r < defined_before else self._pending[3][r - defined_before]

    def add_row(self, value: int) -> int:
        """Make a value of the open finish builder a row value; returns its row index."""
        outputs = self._pending[3]
        outputs.append(value)
        return len(self.row_dtypes) + len(outputs) - 1

    def _close(self) -> None:
        if self._pending is None:
            return
        element, combine, finish, outputs = self._pending
        if not outputs:
            raise ValueError("a stage must define at least one row value")
        program = finish.build(outputs)
        self.stages.append(RowStage(element, combine, program))
        self.row_dtypes += program.output_dtypes
        self._pending = None

    def final(self) -> ProgramBuilder:
        self._close()
        return ProgramBuilder(self.load_dtypes + tuple(self.row_dtypes))

    def build(self, final: ProgramBuilder, element_outputs, row_outputs) -> RowReduction:
        return RowReduction(self.load_dtypes, tuple(self.stages), final.build(element_outputs), tuple(row_outputs))


# ---------------------------------------------------------------- templates for the ATen ops
#
# A template gets the builder and `source(builder) -> value`, which lowers the reduced input (with its
# prologue) into an element builder. It returns an AnchorValues: where each result of the op lives.


@dataclass
class AnchorValues:
    element: Callable[[ProgramBuilder], int] | None  # emits the op's element result into the final program
    rows: dict  # result index (0 for single results; 1, 2 for layernorm's mean, rstd) -> row value index


def _f32(value: float) -> Const:
    return Const(float(value), "float32")


def softmax_template(rb: RowReductionBuilder, source, log: bool = False) -> AnchorValues:
    eb = rb.element()
    rb.reduce(eb, source(eb), "max")
    m = rb.add_row(0)

    def shifted(b: ProgramBuilder) -> int:
        return b.emit("sub", (source(b), rb.row_input(m)), "float32")

    eb = rb.element()
    fb = rb.reduce(eb, eb.emit("exp", (shifted(eb),), "float32"), "sum")
    # eager: exp(x - max) * (1 / sum) for softmax, (x - max) - log(sum) for log_softmax
    s = rb.add_row(fb.emit("log" if log else "reciprocal", (0,), "float32"))

    def element(b: ProgramBuilder) -> int:
        if log:
            return b.emit("sub", (shifted(b), rb.row_input(s)), "float32")
        return b.emit("mul", (b.emit("exp", (shifted(b),), "float32"), rb.row_input(s)), "float32")

    return AnchorValues(element, {})


def deviation_stages(rb: RowReductionBuilder, source):
    """Two passes (no cancellation): the mean, then the sum of squared deviations from it, whose finish is
    left open. Returns (the mean's row value, `centred(builder)` emitting x - mean)."""
    eb = rb.element()
    fb = rb.reduce(eb, source(eb), "sum")
    mean = rb.add_row(fb.emit("div", (0, 1), "float32"))

    def centred(b: ProgramBuilder) -> int:
        return b.emit("sub", (source(b), rb.row_input(mean)), "float32")

    eb = rb.element()
    d = centred(eb)
    rb.reduce(eb, eb.emit("mul", (d, d), "float32"), "sum")
    return mean, centred


def layer_norm_template(rb: RowReductionBuilder, source, eps: float, weight=None, bias=None) -> AnchorValues:
    """fp32 statistics over two passes; `weight`/`bias` are load indices or None."""
    mean, centred = deviation_stages(rb, source)
    fb = rb.finish
    variance = fb.emit("div", (0, 1), "float32")
    rstd = rb.add_row(fb.emit("rsqrt", (fb.emit("add", (variance, _f32(eps)), "float32"),), "float32"))

    def element(b: ProgramBuilder) -> int:
        y = b.emit("mul", (centred(b), rb.row_input(rstd)), "float32")
        if weight is not None:
            y = b.emit("mul", (y, b.cast(weight, "float32")), "float32")
        if bias is not None:
            y = b.emit("add", (y, b.cast(bias, "float32")), "float32")
        return y

    return AnchorValues(element, {1: mean, 2: rstd})


def variance_row(rb: RowReductionBuilder, source, correction: float) -> int:
    """var(x, correction) over the row: sum of squared deviations / max(n - correction, 0), as eager divides."""
    deviation_stages(rb, source)
    fb = rb.finish
    divisor = fb.emit("maximum", (fb.emit("sub", (1, _f32(correction)), "float32"), _f32(0.0)), "float32")
    return rb.add_row(fb.emit("div", (0, divisor), "float32"))


def reduce_template(rb: RowReductionBuilder, source, kind: str, correction: float = 1.0,
                    dtype: str = "float32") -> AnchorValues:
    """sum / mean / amax / amin / prod (one stage), var or argmax / argmin (two) over the row; the last
    finish stays open for a row-level epilogue. A sum accumulates in its result's dtype (int64 for bools)."""
    if kind == "var":
        return AnchorValues(None, {0: variance_row(rb, source, correction)})
    if kind in ("argmax", "argmin"):
        return AnchorValues(None, {0: arg_extreme_row(rb, source, kind)})
    eb = rb.element()
    value = eb.cast(source(eb), dtype) if kind == "sum" else source(eb)
    return AnchorValues(None, {0: reduction_stage(rb, eb, value, kind)})


_STAGE_COMBINES = {"sum": "sum", "mean": "sum", "amax": "max", "amin": "min", "prod": "prod"}


def reduction_stage(rb: RowReductionBuilder, builder: ProgramBuilder, value: int, kind: str) -> int:
    """End `builder` with a sum / mean / amax / amin / prod of `value`; returns the new row value."""
    finish = rb.reduce(builder, value, _STAGE_COMBINES[kind])
    return rb.add_row(finish.emit("div", (0, 1), "float32") if kind == "mean" else 0)


def arg_extreme_row(rb: RowReductionBuilder, source, kind: str) -> int:
    """argmax / argmin as eager computes it: the first index of the row's max (min), where NaN is the
    extreme (the max / min stage propagates it, so x != x finds the first one). Two passes: the extreme,
    then the smallest column j that holds it; an int64 row value."""
    eb = rb.element()
    rb.reduce(eb, source(eb), "max" if kind == "argmax" else "min")
    extreme = rb.add_row(0)
    eb = rb.element()
    x = source(eb)
    hit = eb.emit("logical_or", (eb.emit("eq", (x, rb.row_input(extreme)), "bool"), eb.emit("ne", (x, x), "bool")),
                  "bool")
    column = eb.emit("where", (hit, eb.emit("last_index", (), "int64"), Const(INT64_MAX, "int64")), "int64")
    rb.reduce(eb, column, "min")
    return rb.add_row(0)


# ---------------------------------------------------------------- reference semantics


def run_row_reduction(reduction: RowReduction, loads, row_shape) -> tuple[list, list]:
    """(element outputs shaped row_shape, row outputs shaped row_shape[:-1] + (1,)) computed by PyTorch."""
    row_shape = tuple(row_shape)
    loads = [torch.as_tensor(t).broadcast_to(row_shape) for t in loads]
    rows: list[torch.Tensor] = []
    for stage in reduction.stages:
        (value,) = run_program(stage.element, loads + rows, row_shape)
        acc = _combined(value.broadcast_to(row_shape), stage.combine)
        n = torch.tensor(row_shape[-1], dtype=TORCH_DTYPES[stage.acc_dtype])
        rows += [r.broadcast_to(acc.shape) for r in run_program(stage.finish, [acc, n, *rows])]
    elements = [o.broadcast_to(row_shape).contiguous() for o in run_program(reduction.final, loads + rows, row_shape)]
    row_outs = [rows[i].broadcast_to(row_shape[:-1] + (1,)).contiguous() for i in reduction.row_outputs]
    return elements, row_outs


def _combined(value: torch.Tensor, combine: str) -> torch.Tensor:
    """The row's combine with keepdim; an empty row gives the combine's identity."""
    if combine == "sum":
        return value.sum(-1, keepdim=True)
    if combine == "prod":
        return value.prod(-1, keepdim=True)
    if value.shape[-1] == 0:
        if value.dtype.is_floating_point:
            identity = float("-inf") if combine == "max" else float("inf")
        else:
            info = torch.iinfo(value.dtype)
            identity = info.min if combine == "max" else info.max
        return torch.full(value.shape[:-1] + (1,), identity, dtype=value.dtype)
    return value.amax(-1, keepdim=True) if combine == "max" else value.amin(-1, keepdim=True)
