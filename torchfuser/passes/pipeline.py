"""The pass pipeline: one ordered list of named passes, run in order with instruments around each.

A pass is a callable GraphModule -> PassResult (ours, or torch.fx's: an fx `PassBase` registers as it is;
a pass returning None or a module counts as modified, as torch.fx's PassManager counts it). The runner
times each pass and keeps its counts; instruments see the graph before and after every pass (the report's
snapshots are one, hidet's pass instruments the model), so the runner itself renders nothing.

A pass that raises is reported and left out: the pipeline starts again, on a copy of the input graph,
without it, so a half-rewritten graph never runs.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch.fx as fx

from torchfuser.passes.base import PassResult, record_unfused, unfused_reasons

PASSES: dict[str, Callable] = {}  # name -> pass, in no particular order
PIPELINE: list[str] = []  # the order they run in


@dataclass(frozen=True)
class PassInfo:
    """What the pipeline knows of a pass besides its function."""

    handles: Callable[[fx.Node], bool] | None = None  # the nodes it fuses: a disabled pass is their reason
    keeps: tuple = ()  # ATen ops lowering must not decompose, so that the pass sees them whole


_INFO: dict[str, PassInfo] = {}


def register_pass(name: str, fn, after: str | None = None, *, handles=None, keeps=()) -> None:
    """Add a pass to PIPELINE (after `after`, else at the end); replacing a name keeps its place.
    handles(node): the nodes the pass would fuse, named as "NAME is disabled" in the report when it is
    switched off; keeps: ATen ops the lowering must leave whole for it."""
    if not callable(fn):
        raise TypeError(f"pass {name!r} must be a callable GraphModule -> PassResult")
    if after is not None and after not in PIPELINE:
        raise ValueError(f"unknown pass {after!r}; PIPELINE is {PIPELINE}")
    PASSES[name] = fn
    _INFO[name] = PassInfo(handles, tuple(keeps))
    if name not in PIPELINE:
        PIPELINE.insert(PIPELINE.index(after) + 1 if after else len(PIPELINE), name)


def unregister_pass(name: str) -> None:
    PASSES.pop(name, None)
    _INFO.pop(name, None)
    if name in PIPELINE:
        PIPELINE.remove(name)


def check_pass_names(names) -> tuple[str, ...]:
    names = (names,) if isinstance(names, str) else tuple(names)
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise ValueError(f"unknown pass name(s) {unknown}; choose from {PIPELINE}")
    return names


def kept_ops() -> frozenset:
    """The ATen ops some pass wants whole: lowering leaves them undecomposed."""
    return frozenset(op for info in _INFO.values() for op in info.keeps)


@dataclass
class PassRecord:
    name: str
    enabled: bool
    modified: bool = False
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)
    graph_before: dict | None = None  # filled by a snapshot instrument, when one runs
    graph_after: dict | None = None
    fused_into: dict = field(default_factory=dict)  # node of graph_before -> group of the kernel absorbing it
    unfused: list = field(default_factory=list)  # (node, why): what the pass would have fused but did not


class Instrument(Protocol):
    """Sees every enabled pass: before it runs and after it returned (hidet's PassInstrument). An optional
    `start()` is called when a pipeline run begins (again, after a pass failed)."""

    def before_pass(self, record: PassRecord, gm: fx.GraphModule) -> None: ...

    def after_pass(self, record: PassRecord, gm: fx.GraphModule) -> None: ...


class PassFailed(RuntimeError):
    """A pass raised: the graph it was working on may be half rewritten."""

    def __init__(self, name: str, error: BaseException):
        self.name, self.error = name, error
        super().__init__(f"pass {name} failed: {type(error).__name__}: {error}")


def copy_graph_module(gm: fx.GraphModule) -> fx.GraphModule:
    """A structural copy (nodes and their meta dicts, shallow) that passes may rewrite independently."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return fx.GraphModule(gm, graph)


def run_pipeline(gm: fx.GraphModule, disable=(), instruments=()) -> tuple[fx.GraphModule, list[PassRecord]]:
    """Run PIPELINE minus `disable`; returns the final graph and each pass's record."""
    disable = tuple(check_pass_names(disable))
    failures: dict[str, str] = {}
    pristine = copy_graph_module(gm)
    while True:
        try:
            gm, records = _run(gm, set(disable) | set(failures), instruments)
            break
        except PassFailed as failed:
            warnings.warn(f"torchfuser: {failed}; compiling without it", RuntimeWarning, stacklevel=2)
            failures[failed.name] = str(failed)
            gm = copy_graph_module(pristine)
    for record in records:
        if record.name in failures:
            record.stats = {"error": failures[record.name]}
    _name_disabled(gm, [r.name for r in records if not r.enabled], failures)
    return gm, records


def _run(gm, disabled: set, instruments):
    records = []
    for instrument in instruments:
        getattr(instrument, "start", lambda: None)()
    for name in list(PIPELINE):
        record = PassRecord(name, enabled=name not in disabled)
        records.append(record)
        if not record.enabled:
            continue
        for instrument in instruments:
            instrument.before_pass(record, gm)
        start = time.perf_counter()
        try:
            result = _as_pass_result(PASSES[name](gm), gm)
        except Exception as error:
            raise PassFailed(name, error) from error
        record.seconds = time.perf_counter() - start
        gm, record.modified, record.stats = result.gm, result.modified, dict(result.stats)
        record.unfused = [(node.name, why) for node in gm.graph.nodes
                          if (why := unfused_reasons(node).get(name)) is not None]
        for instrument in instruments:
            instrument.after_pass(record, gm)
    return gm, records


def _as_pass_result(result, gm: fx.GraphModule) -> PassResult:
    """Ours as it is; torch.fx's conventions: a PassResult, a module (modified), None (modified in place)."""
    if isinstance(result, PassResult):
        return result
    if result is None:
        return PassResult(gm, True)
    if isinstance(result, fx.GraphModule):
        return PassResult(result, True)
    if hasattr(result, "graph_module") and hasattr(result, "modified"):
        return PassResult(result.graph_module, result.modified)
    raise TypeError(f"returned {type(result).__name__}, not PassResult")


def _name_disabled(gm: fx.GraphModule, disabled: list[str], failures: dict) -> None:
    """Nodes a disabled (or failed) pass would have fused say so."""
    for name in disabled:
        handles = _INFO.get(name, PassInfo()).handles
        if handles is None:
            continue
        why = f"{name} failed and was left out" if name in failures else f"{name} is disabled"
        for node in gm.graph.nodes:
            if node.op == "call_function" and handles(node):
                record_unfused(node, name, why)
