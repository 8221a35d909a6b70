"""Symbolic sizes: dims that Dynamo marks dynamic stay expressions of its symbols (s0, s0 + 1, ...) in the
graph, in fused nodes and in the plan; a call binds the symbols to its inputs' sizes.

A graph lowered with Dynamo's symbolic fake tensors carries `torch.SymInt` sizes in its nodes' meta. Passes
read them as they read ints (comparisons the shape environment can decide add no guard; one it cannot
decide becomes one of Dynamo's guards, so a wrong assumption recompiles instead of computing garbage).
What must become a number — a launch's sizes, a planned block — is computed per call from `Bindings`:
each symbol's value read off the graph inputs whose size it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
import torch
from torch.fx.experimental.symbolic_shapes import optimization_hint


def is_symbolic(value) -> bool:
    """A SymInt whose value is not known at compile time."""
    return isinstance(value, torch.SymInt) and not isinstance(value.node.expr, sympy.Integer)


def has_symbols(dims) -> bool:
    """Some dim is a SymInt (even one the shape environment has since fixed to a number: it still has to be
    turned into an int before it can key a cache)."""
    return any(isinstance(d, torch.SymInt) for d in dims)


def hint(value) -> int:
    """The value a symbolic size had in the example Dynamo compiled with (an int stays itself)."""
    return optimization_hint(value) if isinstance(value, torch.SymInt) else int(value)  # adds no guard


def hints(dims) -> tuple[int, ...]:
    return tuple(hint(d) for d in dims)


def text(value) -> str | int:
    """An int, or the expression as text (`s0 + 1`): what reports and graph snapshots show."""
    return str(value.node.expr) if is_symbolic(value) else hint(value)


def hint_tensor(t: torch.Tensor) -> torch.Tensor:
    """A meta tensor with t's layout at the example sizes: launches are configured and tuned on it."""
    shape, stride, offset = hints(t.shape), hints(t.stride()), hint(t.storage_offset())
    base = torch.empty(offset + sum((n - 1) * s for n, s in zip(shape, stride)) + 1, dtype=t.dtype, device="meta")
    return base.as_strided(shape, stride, offset)


def tensor_has_symbols(t: torch.Tensor) -> bool:
    return has_symbols([*t.shape, *t.stride(), t.storage_offset()])


@dataclass(frozen=True)
class SizeSource:
    """Where a call finds a symbol's value: graph input `slot`, its size along `dim` (None: the input is the
    int itself)."""

    symbol: sympy.Symbol
    slot: int
    dim: int | None


class Bindings:
    """The graph's free symbols and where each call reads them; `values(args)` is what shapes evaluate with."""

    def __init__(self, placeholder_values: list):
        sources: dict[sympy.Symbol, SizeSource] = {}
        example: dict[sympy.Symbol, int] = {}
        for slot, value in enumerate(placeholder_values):
            dims = [(None, value)] if isinstance(value, torch.SymInt) else (
                list(enumerate(value.shape)) if isinstance(value, torch.Tensor) else [])
            for dim, size in dims:
                expr = size.node.expr if is_symbolic(size) else None
                if isinstance(expr, sympy.Symbol) and expr not in sources:
                    sources[expr], example[expr] = SizeSource(expr, slot, dim), hint(size)
        self.sources = list(sources.values())
        self.symbols = tuple(s.symbol for s in self.sources)
        self.example = tuple(example.values())  # each symbol's value in the example Dynamo compiled with

    def __bool__(self) -> bool:
        return bool(self.sources)

    def values(self, args) -> tuple[int, ...]:
        return tuple([int(args[s.slot]) if s.dim is None else args[s.slot].shape[s.dim] for s in self.sources])

    def names(self) -> list[str]:
        return [str(s) for s in self.symbols]


def evaluate(dims, symbols: tuple, values: tuple) -> tuple[int, ...]:
    """dims (ints and SymInts) at these symbol values."""
    table = dict(zip(symbols, values))
    return tuple(int(d.node.expr.xreplace(table)) if is_symbolic(d) else hint(d) for d in dims)


def symbol_tensor(value: int) -> torch.Tensor:
    """A graph's integer input (a symbol's value) as a 0-d int64 tensor, as elementwise ops read it where it is
    an operand (passes/symbol_operands.py). A plan keeps one such tensor per node in its own memory and writes the
    call's value into it (runtime/executor.py); this is what runs without a plan."""
    return torch.tensor(int(value), dtype=torch.int64)
