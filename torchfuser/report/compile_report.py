"""CompileReport: what one compile did, as versioned JSON (report.schema.json, schema.md) and static HTML.

The report is the only thing the explorer reads. It is filled by the compiler (passes, kernels, fallbacks,
compile timings) and stays live: launch counts and profiled kernel times come from the running plan each
time `to_dict()` is called.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

from torchfuser.report.dot import graph_dot
from torchfuser.report.html import render_html, replay_sentence
from torchfuser.report.snapshot import module_path, source_location
from torchfuser.report.wire import (SCHEMA_VERSION, Interner, encode_fallback, encode_graph, encode_kernels,
                                    encode_line_nodes, encode_passes, expand_report, with_fused_groups)
from torchfuser.version import __version__


@dataclass
class KernelEntry:
    name: str  # the OpenCL kernel's name (derived from its spec)
    node: str  # the fused node in the final graph
    kind: str
    group: int
    cache_key: str
    source: str
    cache: str  # hit | miss | disk
    build_seconds: float
    spec: str
    nodes: list[str]
    sources: list[dict]
    tuning: dict | None = None  # GEMMs: {"winner", "candidates": {variant: seconds}, "source"}
    transforms: list[str] = field(default_factory=list)  # one-time constant transforms (weight packing)
    lane: str = "threaded"  # where it runs: "inline" (the calling thread) or "threaded" (the device's workers)
    lane_reason: str = ""
    line_nodes: dict = field(default_factory=dict)  # 1-based source line -> the graph nodes it computes


@dataclass
class FallbackEntry:
    op: str
    node: str
    reason: str
    module: str = ""
    file: str | None = None
    line: int | None = None
    code: str | None = None


@dataclass
class CompileReport:
    title: str
    device: dict | None
    graphs: dict = field(default_factory=dict)
    passes: list = field(default_factory=list)  # PassRecord
    kernels: list[KernelEntry] = field(default_factory=list)
    fallbacks: list[FallbackEntry] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    memory: dict = field(default_factory=dict)  # peak intermediate bytes, fused and eager
    plan: object = None  # the running Plan: live launch counts and kernel times
    aten_fused_into: dict = field(default_factory=dict)  # ATen node -> group of the final kernel absorbing it
    recompile_reason: str | None = None  # Dynamo's, when it compiled this frame before (a guard failed)
    graph_break: dict | None = None  # the break that ended this graph (frontend/graph_breaks.py), else None

    def as_reused(self) -> "CompileReport":
        """This report as a later run sees it when it reuses the compiled graph (the explorer's warm show):
        the same graphs and live plan, every kernel from the cache, its own timings."""
        kernels = [replace(k, cache="hit", build_seconds=0.0) for k in self.kernels]
        return replace(self, kernels=kernels, timings=dict(self.timings, build_seconds=0.0))

    def record_timing(self, eager_seconds: float | None = None, compiled_seconds: float | None = None) -> None:
        """Record measured medians (explorer, bench); speedup = eager / compiled."""
        if eager_seconds is not None:
            self.timings["eager_seconds"] = float(eager_seconds)
        if compiled_seconds is not None:
            self.timings["compiled_seconds"] = float(compiled_seconds)
        eager, compiled = self.timings.get("eager_seconds"), self.timings.get("compiled_seconds")
        self.timings["speedup"] = eager / compiled if eager and compiled else None

    def kernel_seconds(self) -> dict[str, tuple[int, float | None]]:
        """fused node name -> (launches, mean profiled seconds per launch)."""
        stats = getattr(self.plan, "stats", {}) or {}
        return {
            name: (s.launches, s.seconds / s.profiled if s.profiled else None) for name, s in stats.items()
        }

    def to_dict(self) -> dict:
        """The report as JSON-ready data, schema_version 2 (report.schema.json): graphs stored once."""
        live = self.kernel_seconds()
        kernels = []
        for k in self.kernels:
            launches, mean = live.get(k.node, (0, None))
            kernels.append({
                "name": k.name, "node": k.node, "kind": k.kind, "group": k.group, "cache_key": k.cache_key,
                "source": k.source, "cache": k.cache, "build_seconds": k.build_seconds,
                "launches": launches, "seconds": mean * launches if mean is not None else 0.0,
                "mean_seconds": mean, "spec": k.spec, "nodes": list(k.nodes), "sources": list(k.sources),
                "tuning": k.tuning, "transforms": list(k.transforms), "lane": k.lane, "lane_reason": k.lane_reason,
                "line_nodes": encode_line_nodes(k.line_nodes),
            })
        timings = {"eager_seconds": None, "compiled_seconds": None, "speedup": None, **self.timings}
        timings["calls"] = getattr(self.plan, "calls", 0)
        timings.update(split_compiled_time(sum(k["seconds"] for k in kernels), timings["calls"],
                                           timings.get("compiled_seconds")))
        interner = Interner()
        graphs = {"captured": encode_graph(self.graphs.get("captured"), interner),
                  "aten": encode_graph(self.graphs.get("aten"), interner, self.aten_fused_into)}
        passes = encode_passes(self.passes, self.graphs.get("aten"), interner)
        kernel_sources, kernels = encode_kernels(kernels, interner)
        fallbacks = [encode_fallback(vars(f), interner) for f in self.fallbacks]
        return {
            "schema_version": SCHEMA_VERSION,
            "torchfuser_version": __version__,
            "title": self.title,
            "device": self.device,
            "modules": interner.modules,
            "locations": interner.locations,
            "graphs": graphs,
            "passes": passes,
            "kernel_sources": kernel_sources,
            "kernels": kernels,
            "fallbacks": fallbacks,
            "timings": timings,
            "memory": dict(self.memory),
            "dynamic": self.dynamic_sizes(),
            "recompile_reason": self.recompile_reason,
            "graph_break": self.graph_break,
            "replay": steady_replay(self.plan),
        }

    def expanded(self) -> dict:
        """to_dict() with every graph in full: each pass's graph before and after (wire.expand_report)."""
        return expand_report(self.to_dict())

    def to_dot(self, pass_name: str | None = None, side: str = "after") -> str:
        """Graphviz DOT of the ATen graph (no pass_name), or of the graph before or after a pass."""
        if pass_name is None:
            return graph_dot(with_fused_groups(self.graphs["aten"], self.aten_fused_into))
        record = next((p for p in self.passes if p.name == pass_name), None)
        if record is None:
            raise ValueError(f"no pass {pass_name!r} in this report; it has {[p.name for p in self.passes]}")
        if side not in ("before", "after"):
            raise ValueError(f"side must be 'before' or 'after', not {side!r}")
        graph = record.graph_before if side == "before" else record.graph_after
        if graph is None:
            raise ValueError(f"pass {pass_name!r} did not run (disabled or failed): it has no graphs")
        return graph_dot(with_fused_groups(graph, record.fused_into) if side == "before" else graph)

    def dynamic_sizes(self) -> dict | None:
        """The plan's symbols (sizes Dynamo made dynamic), their example values and the values it ran with."""
        bindings = getattr(self.plan, "bindings", None)
        if not bindings:
            return None
        return {"symbols": bindings.names(), "example": list(bindings.example),
                "runs": [{"sizes": list(sizes), "calls": calls} for sizes, calls in self.plan.sizes_run.items()]}

    def to_json(self, **kwargs) -> str:
        return json.dumps(self.to_dict(), **kwargs)

    def to_html(self) -> str:
        return render_html([self.to_dict()], title=self.title)

    def summary(self) -> str:
        """Plain text: each pass with its counts, each kernel with cache status, time and what it fuses,
        and what runs in PyTorch."""
        lines = [f"{self.title}"] + ([f"    recompiled: {self.recompile_reason}"] if self.recompile_reason else [])
        if self.graph_break:
            where = self.graph_break["file"] and f" at {self.graph_break['file']}:{self.graph_break['line']}"
            lines.append(f"    graph break{where or ''}: {self.graph_break['reason']}")
        for p in self.passes:
            stats = ", ".join(f"{k}={v}" for k, v in p.stats.items() if not k.startswith("nodes"))
            nodes = f"{p.stats['nodes_before']}->{p.stats['nodes_after']}" if "nodes_before" in p.stats else ""
            lines.append(f"    {p.name:<22} {'on ' if p.enabled else 'off'} {nodes:>9}  {stats}")
        lines.append(f"    {'kernel':<28}{'kind':<11}{'lane':<9}{'cache':<7}{'launches':>9}{'mean ms':>10}  fuses")
        live = self.kernel_seconds()
        device_seconds = 0.0  # profiled device time of all kernels over all calls
        for k in self.kernels:
            launches, mean = live.get(k.node, (0, None))
            device_seconds += mean * launches if mean is not None else 0.0
            mean_text = f"{mean * 1e3:.3f}" if mean is not None else "-"
            lines.append(f"    {k.name:<28}{k.kind:<11}{k.lane:<9}{k.cache:<7}{launches:>9}{mean_text:>10}  "
                         f"{', '.join(k.nodes)}")
        lines += [f"    PyTorch: {f.op} ({f.reason})" for f in self.fallbacks]
        compiled = self.timings.get("compiled_seconds")
        split = split_compiled_time(device_seconds, getattr(self.plan, "calls", 0), compiled)
        if split["kernel_seconds"] is not None:
            line = f"    per call: kernels {split['kernel_seconds'] * 1e3:.3f} ms"
            if split["host_overhead_seconds"] is not None:
                line = (f"    per call: compiled {compiled * 1e3:.3f} ms = kernels "
                        f"{split['kernel_seconds'] * 1e3:.3f} ms + host overhead "
                        f"{split['host_overhead_seconds'] * 1e3:.3f} ms (launching, Python, ops in PyTorch)")
            lines.append(line)
        lines += self._replay_lines()
        if self.memory:
            lines.append(f"    peak intermediate memory {self.memory['peak_intermediate_bytes'] / 2**20:.2f} MiB "
                         f"(eager {self.memory['eager_peak_intermediate_bytes'] / 2**20:.2f} MiB)")
        return "\n".join(lines)

    def _replay_lines(self) -> list[str]:
        """How steady calls ran: replayed from a tape (runtime/steady_tape.py), or why not."""
        sentence = replay_sentence(steady_replay(self.plan))
        return [f"    {sentence}"] if sentence else []

    def __repr__(self) -> str:
        return f"<CompileReport {self.title!r}: {len(self.kernels)} kernels, {len(self.fallbacks)} fallbacks>"


def split_compiled_time(device_seconds: float, calls: int, compiled_seconds: float | None) -> dict:
    """The report's timings.kernel_seconds and host_overhead_seconds (schema.md).

    device_seconds is the profiled device time of all kernels over all `calls` graph calls.
    kernel_seconds: that per call (None before any call); host_overhead_seconds: the measured compiled
    time per call less kernel_seconds, clamped at 0 (None unless compiled_seconds was measured)."""
    if not calls:
        return {"kernel_seconds": None, "host_overhead_seconds": None}
    kernel = device_seconds / calls
    overhead = max(0.0, float(compiled_seconds) - kernel) if compiled_seconds is not None else None
    return {"kernel_seconds": kernel, "host_overhead_seconds": overhead}


def steady_replay(plan) -> dict:
    """The report's "replay" (schema.md): how many of the plan's calls replayed a tape (runtime/steady_tape.py),
    the last tape's launches (per kernel, and as run after chaining), or why steady calls walk the plan; for a plan
    with symbols, how many replayed at new symbol values, or why those walk.
    Read with getattr: a report may have no plan, or one from before tapes."""
    calls, replayed = getattr(plan, "calls", 0), getattr(plan, "tape_calls", 0)
    launches, run_as = getattr(plan, "tape_launches", (None, None)) if replayed else (None, None)
    walks_because = getattr(plan, "tape_note", None) if calls and not replayed else None
    replay = {"calls": calls, "replayed": replayed, "launches": launches, "run_as": run_as,
              "walks_because": walks_because}
    if getattr(plan, "sized", False):  # runtime/resized_tape.py
        resized = getattr(plan, "resized", None)
        replay["new_sizes"] = getattr(plan, "resized_calls", 0)
        replay["new_sizes_walk_because"] = resized if isinstance(resized, str) else None
    return replay


def provenance(meta: dict) -> dict:
    """module / file / line / code of a node's meta, as report fields."""
    module, module_type = module_path(meta.get("nn_module_stack"))
    return {"module": module, "module_type": module_type, **source_location(meta.get("stack_trace"))}
