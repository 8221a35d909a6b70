"""The pass pipeline: one literal, ordered list of named passes, each in its own file.

A pass is a function GraphModule -> PassResult(gm, modified, stats). `run_pipeline` runs the enabled ones
in order and records, for each, a snapshot of the graph before and after, its counts and its time.
Researchers add their own with `register_pass(name, fn, after=...)`; `disable=` takes any of the names.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import torch.fx as fx

from torchfuser.graph_snapshot import mark_fused_groups, snapshot_graph
from torchfuser.passes.base import PassResult
from torchfuser.passes.eliminate_dead_code import eliminate_dead_code
from torchfuser.passes.fuse_attention import fuse_attention
from torchfuser.passes.fuse_gemm_epilogue import fuse_gemm_epilogue
from torchfuser.passes.fuse_pointwise import fuse_pointwise
from torchfuser.passes.fuse_reductions import fuse_reductions

PASSES = {
    # attention first: its bmms and softmax would otherwise go to fuse_gemm_epilogue and fuse_reductions
    "fuse_attention": fuse_attention,
    # GEMM first: it claims the bias add and activation that fuse_pointwise would otherwise take.
    "fuse_gemm_epilogue": fuse_gemm_epilogue,
    # row reductions next, before fuse_pointwise: they take the elementwise ops around them (mask add,
    # scale, weight, bias, rmsnorm's chain) as prologue and epilogue instead of separate kernels; after the
    # GEMMs so a Linear keeps its bias and activation.
    "fuse_reductions": fuse_reductions,
    # then every remaining elementwise chain
    "fuse_pointwise": fuse_pointwise,
    # last: clean up whatever the fusions left unused
    "eliminate_dead_code": eliminate_dead_code,
}
PIPELINE: list[str] = list(PASSES)


@dataclass
class PassRecord:
    name: str
    enabled: bool
    modified: bool = False
    seconds: float = 0.0
    stats: dict = field(default_factory=dict)
    graph_before: dict | None = None
    graph_after: dict | None = None


def register_pass(name: str, fn, after: str | None = None) -> None:
    """Add a pass to PIPELINE (after `after`, else at the end); replacing a name keeps its place."""
    if not callable(fn):
        raise TypeError(f"pass {name!r} must be a callable GraphModule -> PassResult")
    if after is not None and after not in PIPELINE:
        raise ValueError(f"unknown pass {after!r}; PIPELINE is {PIPELINE}")
    PASSES[name] = fn
    if name not in PIPELINE:
        PIPELINE.insert(PIPELINE.index(after) + 1 if after else len(PIPELINE), name)


def unregister_pass(name: str) -> None:
    PASSES.pop(name, None)
    if name in PIPELINE:
        PIPELINE.remove(name)


def check_pass_names(names) -> tuple[str, ...]:
    names = (names,) if isinstance(names, str) else tuple(names)
    unknown = [n for n in names if n not in PASSES]
    if unknown:
        raise ValueError(f"unknown pass name(s) {unknown}; choose from {PIPELINE}")
    return names


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


def run_pipeline(gm: fx.GraphModule, disable=(), record_graphs=True) -> tuple[fx.GraphModule, list[PassRecord]]:
    """Run PIPELINE minus `disable`, recording each pass's graphs (before/after), counts and time.
    A pass that raises is reported and left out: the pipeline starts again, on a copy of the input graph,
    without it (a half-rewritten graph is never run)."""
    disable = tuple(check_pass_names(disable))
    failures: dict[str, str] = {}
    pristine = copy_graph_module(gm)
    while True:
        try:
            gm, records = _run(gm, set(disable) | set(failures), record_graphs)
            break
        except PassFailed as failed:
            warnings.warn(f"torchfuser: {failed}; compiling without it", RuntimeWarning, stacklevel=2)
            failures[failed.name] = str(failed)
            gm = copy_graph_module(pristine)
    for record in records:
        if record.name in failures:
            record.stats = {"error": failures[record.name]}
    return gm, records


def _run(gm, disabled: set, record_graphs: bool):
    records = []
    for name in list(PIPELINE):
        record = PassRecord(name, enabled=name not in disabled)
        records.append(record)
        if not record.enabled:
            continue
        before = snapshot_graph(gm) if record_graphs else None
        start = time.perf_counter()
        try:
            result = PASSES[name](gm)
        except Exception as error:
            raise PassFailed(name, error) from error
        if not isinstance(result, PassResult):
            raise PassFailed(name, TypeError(f"returned {type(result).__name__}, not PassResult"))
        record.seconds = time.perf_counter() - start
        gm, record.modified, record.stats = result.gm, result.modified, dict(result.stats)
        if record_graphs:
            mark_fused_groups(before, gm)
            record.graph_before, record.graph_after = before, snapshot_graph(gm)
    return gm, records


__all__ = ["PIPELINE", "PASSES", "PassResult", "PassRecord", "register_pass", "unregister_pass", "run_pipeline"]
