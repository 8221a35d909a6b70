"""The SSA pointwise program: the one IR that fused pointwise kernels and GEMM epilogues share.

A program is a straight-line list of instructions over scalars. Values 0..n_inputs-1 are the inputs (one
element of each input tensor, already broadcast); every instruction defines the next value. Operand types
are explicit: whoever builds a program inserts ``cast`` instructions so that every operand of an
arithmetic op already has the op's dtype, and both operands of a comparison share one dtype.

Everything is frozen and hashable, so a program is part of a kernel spec and of its cache key. Float
constants are kept as Python floats and printed as hex floats (``0x1.999999999999ap-4``), INFINITY or
NAN: never rounded text.

Pointwise kernels may also read an input at a remapped position along the last dim (`LastDimRead`) and
use the output's coordinate along the last dim (op ``last_index``): that is how slices and concatenations
along the last dim join a fused region (see passes/fuse_pointwise.py). An input may also be gathered: read at
a row given by another input's value (`GatherRead`, an embedding lookup).
"""

from __future__ import annotations

import math
import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from torchfuser.ir.dtypes import DTYPES, FLOAT_DTYPES
from torchfuser.ir.ops import OPS



@dataclass(frozen=True)
class Const:
    """A scalar constant operand with the dtype it is used at."""

    value: float | int | bool
    dtype: str

    def __post_init__(self):
        if self.dtype not in DTYPES:
            raise ValueError(f"unsupported constant dtype {self.dtype!r}")

    def exact_text(self) -> str:
        """Exact, round-trippable spelling: hex for floats, INFINITY/NAN for the specials."""
        if self.dtype == "bool":
            return "1" if self.value else "0"
        if self.dtype not in FLOAT_DTYPES:
            return str(int(self.value))
        v = float(self.value)
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "-INFINITY"
        return v.hex()


@dataclass(frozen=True)
class LastDimRead:
    """Read an input at position ``offset + step * j`` of its last dim, j the output's last-dim coordinate.

    The position is clamped into [0, size): lanes that a concatenation does not select still load in bounds
    (their values are discarded), so no load ever leaves the input.
    """

    offset: int
    step: int
    size: int  # the input's extent along its last dim

    def __post_init__(self):
        if self.step < 0 or self.size < 1:
            raise ValueError("a last-dim read needs step >= 0 and size >= 1")

    def text(self) -> str:
        return f"@last[{self.offset}+{self.step}*j;n={self.size}]"


@dataclass(frozen=True)
class GatherRead:
    """Read a [rows, ...] input at row ``v[index]`` (the value of program input `index`, which the kernel reads
    as if it had a trailing dim of 1: the indices of an embedding); its other dims broadcast as usual.

    The row is clamped into [0, rows) so that no load leaves the input; unless `in_range` (the graph proves
    the indices are), the launch checks them on the host first and raises IndexError as eager does.
    """

    index: int
    rows: int
    in_range: bool = False

    def __post_init__(self):
        if self.rows < 1:
            raise ValueError("a gathered input needs at least one row")

    def text(self) -> str:
        return f"@gather[v{self.index};n={self.rows}{';in_range' if self.in_range else ''}]"


@dataclass(frozen=True)
class Instr:
    op: str
    args: tuple  # of int (value ids) and Const
    dtype: str


@dataclass(frozen=True)
class Program:
    input_dtypes: tuple[str, ...]
    instrs: tuple[Instr, ...]
    outputs: tuple[int, ...]
    # () when every input is read at the element; else one per input: None, a LastDimRead or a GatherRead
    input_reads: tuple = ()
    # Provenance, not part of the kernel (nor of equality, hashes or cache keys): per value (inputs, then
    # instructions), the names of the graph nodes it computes; () when the builder was told none.
    origins: tuple = field(default=(), compare=False, hash=False, repr=False)

    @property
    def n_inputs(self) -> int:
        return len(self.input_dtypes)

    @property
    def indexes_last_dim(self) -> bool:
        """The kernel needs the output's last-dim coordinate (remapped reads or a last_index op)."""
        return any(isinstance(r, LastDimRead) for r in self.input_reads) or any(
            ins.op == "last_index" for ins in self.instrs)

    def read_of(self, i: int) -> LastDimRead | None:
        """Input i's last-dim remap, if it has one."""
        read = self.input_reads[i] if self.input_reads else None
        return read if isinstance(read, LastDimRead) else None

    def gather_of(self, i: int) -> GatherRead | None:
        read = self.input_reads[i] if self.input_reads else None
        return read if isinstance(read, GatherRead) else None

    @property
    def gather_indices(self) -> set[int]:
        """The inputs that gathered inputs take their rows from."""
        return {r.index for r in self.input_reads if isinstance(r, GatherRead)}

    def dtype_of(self, value: int) -> str:
        if value < self.n_inputs:
            return self.input_dtypes[value]
        return self.instrs[value - self.n_inputs].dtype

    @property
    def output_dtypes(self) -> tuple[str, ...]:
        return tuple(self.dtype_of(v) for v in self.outputs)

    def text(self) -> str:
        """One line per instruction; `parse_program` reads it back exactly."""
        reads = self.input_reads or (None,) * self.n_inputs
        decls = (f"v{i}:{d}{r.text() if r else ''}" for i, (d, r) in enumerate(zip(self.input_dtypes, reads)))
        lines = [f"in {', '.join(decls)}"]
        for i, ins in enumerate(self.instrs, start=self.n_inputs):
            args = ", ".join(_arg_text(a) for a in ins.args)
            lines.append(f"v{i}:{ins.dtype} = {ins.op}({args})")
        lines.append(f"out {', '.join(f'v{v}' for v in self.outputs)}")
        return "\n".join(lines)

    __str__ = text


def _arg_text(arg) -> str:
    if isinstance(arg, Const):
        return f"{arg.exact_text()}:{arg.dtype}"
    return f"v{arg}"


class ProgramBuilder:
    """Appends instructions; hands out value ids; deduplicates identical instructions (CSE).

    Inside `producing(names)`, every instruction emitted (or found by CSE) is recorded as computing those
    graph nodes: the program's `origins`, which the report maps onto the kernel's source lines."""

    def __init__(self, input_dtypes=(), input_reads=()):
        self.input_dtypes = list(input_dtypes)
        self.input_reads = list(input_reads) or [None] * len(self.input_dtypes)
        self.instrs: list[Instr] = []
        self._seen: dict[Instr, int] = {}
        self._origins: dict[int, set[str]] = {}
        self._producing: tuple[str, ...] = ()

    @contextmanager
    def producing(self, names):
        outer, self._producing = self._producing, tuple(names)
        try:
            yield
        finally:
            self._producing = outer

    def add_input(self, dtype: str, read: LastDimRead | GatherRead | None = None) -> int:
        if self.instrs:
            raise RuntimeError("inputs must be added before instructions")
        self.input_dtypes.append(dtype)
        self.input_reads.append(read)
        return len(self.input_dtypes) - 1

    def dtype_of(self, value) -> str:
        if isinstance(value, Const):
            return value.dtype
        if value < len(self.input_dtypes):
            return self.input_dtypes[value]
        return self.instrs[value - len(self.input_dtypes)].dtype

    def emit(self, op: str, args, dtype: str) -> int:
        ins = Instr(op, tuple(args), dtype)
        vid = self._seen.get(ins)
        if vid is None:
            self.instrs.append(ins)
            vid = self._seen[ins] = len(self.input_dtypes) + len(self.instrs) - 1
        if self._producing:
            self._origins.setdefault(vid, set()).update(self._producing)
        return vid

    def cast(self, value, dtype: str):
        if self.dtype_of(value) == dtype:
            return value
        if isinstance(value, Const):
            return Const(_convert_scalar(value.value, dtype), dtype)
        return self.emit("cast", (value,), dtype)

    def build(self, outputs) -> Program:
        """outputs: value ids, or Consts (a copy of a constant, a one-position arange), computed at every element."""
        outputs = [self.emit("cast", (v,), v.dtype) if isinstance(v, Const) else v for v in outputs]
        reads = tuple(self.input_reads) if any(self.input_reads) else ()
        n_values = len(self.input_dtypes) + len(self.instrs)
        origins = tuple(tuple(sorted(self._origins.get(v, ()))) for v in range(n_values)) if self._origins else ()
        return Program(tuple(self.input_dtypes), tuple(self.instrs), tuple(outputs), reads, origins)


def _convert_scalar(value, dtype: str):
    if dtype == "bool":
        return bool(value)
    if dtype in FLOAT_DTYPES:
        return float(value)
    return int(value)


_LINE = re.compile(r"v(\d+):(\w+) = (\w+)\((.*)\)$")
_INPUT = re.compile(r"v(\d+):(\w+)(?:@last\[(-?\d+)\+(\d+)\*j;n=(\d+)\]|@gather\[v(\d+);n=(\d+)(;in_range)?\])?$")


def parse_program(text: str) -> Program:
    """Read the text form written by `Program.text` (also the manual `torchfuser::pointwise` syntax)."""
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) < 2 or not lines[0].startswith("in ") or not lines[-1].startswith("out "):
        raise ValueError("a program starts with 'in v0:float32, ...' and ends with 'out vN, ...'")
    inputs, reads = [], []
    for i, item in enumerate(lines[0][3:].split(",")):
        m = _INPUT.match(item.strip())
        if not m or m.group(1) != str(i) or m.group(2) not in DTYPES:
            raise ValueError(f"bad input declaration {item.strip()!r}: expected v{i}:<dtype>")
        inputs.append(m.group(2))
        gather = GatherRead(int(m.group(6)), int(m.group(7)), bool(m.group(8))) if m.group(6) else None
        reads.append(LastDimRead(*map(int, m.group(3, 4, 5))) if m.group(3) else gather)
    builder = ProgramBuilder(inputs, reads)
    for line in lines[1:-1]:
        m = _LINE.match(line)
        if not m:
            raise ValueError(f"cannot parse program line {line!r}")
        vid, dtype, op, args = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        if vid != len(builder.input_dtypes) + len(builder.instrs):
            raise ValueError(f"values must be numbered in order; got v{vid} in {line!r}")
        builder.instrs.append(Instr(op, tuple(_parse_arg(a.strip()) for a in args.split(",") if a.strip()), dtype))
    outputs = tuple(int(v.strip()[1:]) for v in lines[-1][4:].split(","))
    program = builder.build(outputs)
    validate_program(program)
    return program


def _parse_arg(text: str):
    if text.startswith("v") and text[1:].isdigit():
        return int(text[1:])
    literal, _, dtype = text.rpartition(":")
    specials = {"INFINITY": math.inf, "-INFINITY": -math.inf, "NAN": math.nan}
    if dtype in FLOAT_DTYPES:
        value = specials[literal] if literal in specials else float.fromhex(literal)
    else:
        value = int(literal)
    return Const(_convert_scalar(value, dtype), dtype)


def validate_program(program: Program) -> None:
    """Checks ids, dtypes and op names; raises ValueError naming the first problem."""
    for i, ins in enumerate(program.instrs, start=program.n_inputs):
        if ins.op not in OPS:
            raise ValueError(f"v{i}: unknown op {ins.op!r}; known: {', '.join(sorted(OPS))}")
        if ins.dtype not in DTYPES:
            raise ValueError(f"v{i}: unsupported dtype {ins.dtype!r}")
        if len(ins.args) != OPS[ins.op].arity:
            raise ValueError(f"v{i}: {ins.op} takes {OPS[ins.op].arity} operands, got {len(ins.args)}")
        for a in ins.args:
            if not isinstance(a, Const) and not 0 <= a < i:
                raise ValueError(f"v{i}: operand v{a} is not defined before use")
    if program.input_reads and len(program.input_reads) != program.n_inputs:
        raise ValueError("input_reads: one entry per input (or none at all)")
    for i in range(program.n_inputs):
        gather = program.gather_of(i)
        if gather and not (0 <= gather.index < program.n_inputs and program.input_dtypes[gather.index] in
                           ("int32", "int64") and not program.input_reads[gather.index]):
            raise ValueError(f"v{i}: gathers at rows of v{gather.index}, which is not an integer input read plainly")
    for v in program.outputs:
        if not 0 <= v < program.n_inputs + len(program.instrs):
            raise ValueError(f"output v{v} is not defined")
