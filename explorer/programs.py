"""What the explorer re-runs: a model with example inputs, or a notebook cell.

Both compile with `torchfuser.compile(..., disable=...)`, run once while collecting the
CompileReports, and (when asked) time eager against compiled and record it on the reports. The
explorer widget only sees `run(disabled) -> list[CompileReport]`.
"""
from __future__ import annotations

import contextlib
import inspect
import keyword
import statistics
import time
from collections import OrderedDict
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .cell_program import build_cell_program

DEFAULT_TIMING_RUNS = 5
WARM_PROGRAMS = 8  # compiled models kept, so showing one again (same passes) times it without recompiling


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


def argument_names(target: Callable, count: int) -> list[str] | None:
    """The names of `target`'s first `count` positional parameters, or None when they are not plain ones."""
    function = getattr(target, "forward", target)  # a module's __call__ takes (*args, **kwargs)
    try:
        parameters = list(inspect.signature(function).parameters.values())[:count]
    except (TypeError, ValueError):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in parameters]
    if len(names) != count or any(p.kind not in positional for p in parameters) or "target" in names:
        return None
    return names if all(n.isidentifier() and not keyword.iskeyword(n) for n in names) else None


def fresh_entry(target: Callable, serial: int, count: int | None = None) -> Callable:
    """`target(*args)` behind a new code object; with `count`, its parameters take the names of target's
    first `count` parameters (so the report names the inputs `x`, `input_ids`, not `args.0`).

    Dynamo keeps its compiled code per code object and gives up after `recompile_limit` (8)
    entries; every re-run compiles with another backend, so re-running `target` itself would
    silently fall back to eager after a few toggles. Dynamo starts at this wrapper's fresh code
    and inlines the model, so each run starts with an empty cache.
    """
    names = argument_names(target, count) if count else None
    if names:  # identifiers checked above: the wrapper is `def explore(x, y): return target(x, y)`
        namespace = {"target": target}
        exec(f"def explore({', '.join(names)}):\n    return target({', '.join(names)})\n", namespace)
        explore = namespace["explore"]
    else:
        def explore(*args):
            return target(*args)

    explore.__code__ = explore.__code__.replace(co_name=f"explore_{serial}")
    explore.__name__ = getattr(target, "__name__", None) or type(target).__name__  # the report's title
    return explore


def pipeline_identity(core: Any) -> tuple:
    """The passes in order with the functions behind them: a pass registered (or registered again, edited)
    since a model was compiled makes the compiled program stale."""
    functions = getattr(core.passes, "PASSES", {})
    return tuple((name, functions.get(name)) for name in core.passes.PIPELINE)


class WarmPrograms:
    """The last WARM_PROGRAMS compiled models with their reports, by (model, disabled passes, device, passes).

    A compiled model stays correct for new inputs (Dynamo's guards recompile when they must), so showing it
    again reuses its graphs and kernels. Entries hold their model (the compiled code does anyway); the oldest
    go first."""

    def __init__(self, size: int = WARM_PROGRAMS):
        self.size = size
        self._entries: OrderedDict[tuple, tuple[Callable, Callable, list]] = OrderedDict()

    def get(self, target: Callable, key: tuple) -> tuple[Callable, list] | None:
        found = self._entries.get((id(target), *key))
        if found is None or found[0] is not target:
            return None
        self._entries.move_to_end((id(target), *key))
        return found[1], found[2]

    def put(self, target: Callable, key: tuple, compiled: Callable, reports: list) -> None:
        self._entries[(id(target), *key)] = (target, compiled, reports)
        self._entries.move_to_end((id(target), *key))
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()


WARM = WarmPrograms()


@dataclass
class ModelProgram:
    """A model or function with example inputs, run for inference (under torch.no_grad)."""
    target: Callable
    inputs: tuple
    device: str | None = None
    timing_runs: int = DEFAULT_TIMING_RUNS
    outputs: object = None
    runs: int = 0
    reused: bool = False  # the last run reused a compiled model (WARM) instead of compiling

    def run(self, disabled: Sequence[str]) -> list[Any]:
        core = compiler()
        key = (tuple(sorted(disabled)), self.device, pipeline_identity(core))
        warm = WARM.get(self.target, key)
        if warm is not None:
            compiled, previous = warm
        else:
            self.runs += 1
            entry = fresh_entry(self.target, self.runs, len(self.inputs))
            compiled = core.compile(entry, disable=tuple(disabled), device=self.device)
            previous = []
        with _no_grad():
            with core.collect_reports() as reports:
                self.outputs = compiled(*self.inputs)
            reports = list(reports)  # none when the compiled model was reused and its guards held
            WARM.put(self.target, key, compiled, reports or previous)
            self.reused = not reports
            if self.reused:
                reports = [report.as_reused() for report in previous]
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
