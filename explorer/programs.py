"""What the explorer re-runs: a model with example inputs, or a notebook cell.

Both compile with `torchfuser.compile(..., disable=...)`, run once while collecting the
CompileReports, and (when asked) time eager against compiled and record it on the reports. The
explorer widget only sees `run(disabled) -> list[CompileReport]`.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .cell_program import build_cell_program

DEFAULT_TIMING_RUNS = 5


def compiler() -> Any:
    """The torchfuser module; one place to import it, so tests can substitute a stand-in."""
    import torchfuser

    return torchfuser


def current_pipeline() -> list[str]:
    """Pass names in pipeline order, read fresh: researchers register passes at run time."""
    return list(compiler().passes.PIPELINE)


def unknown_pass_names(names: Sequence[str]) -> list[str]:
    known = set(current_pipeline())
    return [n for n in names if n not in known]


def check_pass_names(names: Sequence[str]) -> None:
    unknown = unknown_pass_names(names)
    if unknown:
        raise ValueError(f"unknown pass {', '.join(map(repr, unknown))}; "
                         f"the pipeline has: {', '.join(current_pipeline())}")


def median_seconds(fn: Callable, args: Sequence[object], runs: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(max(1, runs)):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def record_timing(reports: Sequence[Any], eager: float, compiled: float) -> None:
    for report in reports:
        report.record_timing(eager_seconds=eager, compiled_seconds=compiled)


class Program(Protocol):
    def run(self, disabled: Sequence[str]) -> list[Any]: ...


def _no_grad() -> contextlib.AbstractContextManager:
    import torch

    return torch.no_grad()


def fresh_entry(target: Callable, serial: int) -> Callable:
    """`target(*args)` behind a new code object.

    Dynamo keeps its compiled code per code object and gives up after `recompile_limit` (8)
    entries; every re-run compiles with another backend, so re-running `target` itself would
    silently fall back to eager after a few toggles. Dynamo starts at this wrapper's fresh code
    and inlines the model, so each run starts with an empty cache.
    """
    def explore(*args):
        return target(*args)

    explore.__code__ = explore.__code__.replace(co_name=f"explore_{serial}")
    explore.__name__ = getattr(target, "__name__", None) or type(target).__name__  # the report's title
    return explore


@dataclass
class ModelProgram:
    """A model or function with example inputs, run for inference (under torch.no_grad)."""
    target: Callable
    inputs: tuple
    device: str | None = None
    timing_runs: int = DEFAULT_TIMING_RUNS
    outputs: object = None
    runs: int = 0

    def run(self, disabled: Sequence[str]) -> list[Any]:
        core = compiler()
        self.runs += 1
        entry = fresh_entry(self.target, self.runs)
        compiled = core.compile(entry, disable=tuple(disabled), device=self.device)
        with _no_grad():
            with core.collect_reports() as reports:
                self.outputs = compiled(*self.inputs)
            reports = list(reports)
            if self.timing_runs:
                eager = median_seconds(self.target, self.inputs, self.timing_runs)
                record_timing(reports, eager, median_seconds(compiled, self.inputs, self.timing_runs, warmup=0))
        return reports


@dataclass
class CellRun:
    """A %%torchfuse cell. Re-runs start from the namespace values the first run saw."""
    source: str
    namespace: MutableMapping[str, object]
    filename: str = "<torchfuse-cell>"
    title: str = "cell"
    device: str | None = None
    bench_runs: int = 0
    last_value: object = None
    _arguments: list | None = field(default=None, repr=False)

    def run(self, disabled: Sequence[str]) -> list[Any]:
        core = compiler()
        # A fresh function (and code object) per run, so Dynamo's per-code cache doesn't pile up
        # one entry per re-run.
        program = build_cell_program(self.source, self.namespace, self.filename)
        program.function.__name__ = self.title  # the compiler titles its reports after it
        if self._arguments is None:
            self._arguments = program.arguments(self.namespace)
        compiled = core.compile(program.function, disable=tuple(disabled), device=self.device)
        with core.collect_reports() as reports:
            results = compiled(*self._arguments)
        reports = list(reports)
        self.last_value = program.apply_results(self.namespace, results)
        if self.bench_runs:
            eager = median_seconds(program.function, self._arguments, self.bench_runs)
            record_timing(reports, eager, median_seconds(compiled, self._arguments, self.bench_runs, warmup=0))
        return reports
