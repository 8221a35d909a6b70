"""The compiler driver: aten graph → passes → kernels → plan, with its CompileReport.

`compile_aten_graph` is what every way in ends in (the Dynamo backend, `compile`, `compile_fx`). It knows no
pass and no kind of kernel by name: passes come from the pipeline, what each kind needs at compile time
(tuning, transforms) from its registry entry, and why a node runs in PyTorch from what the passes recorded.
"""

from __future__ import annotations

import contextlib
from collections import Counter
import operator
import time
import warnings

import torch
import torch.fx as fx
import torch.utils._pytree as pytree

from torchfuser import kinds  # noqa: F401  (registers the kernel kinds)
from torchfuser.codegen import kernel_source
from torchfuser.codegen.opencl.claimed import is_claimed
from torchfuser.codegen.source_lines import source_line_nodes
from torchfuser.ir.aten import VIEW_OPS
from torchfuser.ir.kernels import FusedKernel, kind_of
from torchfuser.ir.symbolic import hint, hint_tensor, symbol_tensor, tensor_has_symbols
from torchfuser.options import Options
from torchfuser.passes import run_pipeline
from torchfuser.passes.base import unfused_reasons
from torchfuser.report import CompileReport, FallbackEntry, KernelEntry, provenance
from torchfuser.report.memory import peak_intermediate_bytes
from torchfuser.report.snapshot import GraphSnapshots, fused_into, snapshot_graph, target_name
from torchfuser.report.trace import trace_report
from torchfuser.runtime.call import Runtime
from torchfuser.runtime.device import get_device
from torchfuser.runtime.executor import Plan
from torchfuser.runtime.kernel_cache import KernelBuildError
from torchfuser.runtime.lanes import HOST_THREADS, INLINE, PARALLEL_GRAIN
from torchfuser.runtime.launch import NoLaunch, configure

NO_KERNEL = "no OpenCL kernel for this op yet: runs in PyTorch"


class _Session:
    """The most recent report and the open `collect_reports()` lists."""

    last_report: CompileReport | None = None
    last_log: Counter = Counter()  # counts are 0 where no pass made them (a disabled pass)
    collectors: list[list] = []


def publish(report: CompileReport) -> None:
    """The report becomes `last_report()`; `last_log` gets every pass's counts and the kernel totals."""
    _Session.last_report = report
    _Session.last_log.clear()
    for record in report.passes:
        _Session.last_log.update({k: v for k, v in record.stats.items() if not k.startswith("nodes_")
                                  and isinstance(v, (int, float))})
    _Session.last_log.update(kernels=len(report.kernels), fallbacks=len(report.fallbacks))
    for collector in _Session.collectors:
        collector.append(report)


@contextlib.contextmanager
def collect_reports():
    """`with torchfuser.collect_reports() as reports:` gathers every CompileReport made inside."""
    reports: list[CompileReport] = []
    _Session.collectors.append(reports)
    try:
        yield reports
    finally:
        _Session.collectors.remove(reports)


class CompiledGraph:
    """A compiled aten graph: call it like the graph (positional tensors in, graph outputs out)."""

    def __init__(self, plan: Plan, report: CompileReport):
        self.plan, self.report = plan, report

    def __call__(self, *args):
        return self.plan.run(args)


def compile_aten_graph(gm: fx.GraphModule, options: Options, *, title="graph", captured: dict | None = None,
                       started: float | None = None, recompile_reason: str | None = None,
                       graph_break: dict | None = None) -> CompiledGraph:
    started = started if started is not None else time.perf_counter()
    lowered = time.perf_counter()
    cl_device = get_device(options.device)
    aten_graph = snapshot_graph(gm)
    eager_peak = peak_intermediate_bytes(gm)
    gm, records = run_pipeline(gm, options.disable, instruments=[GraphSnapshots(aten_graph)])
    passes_done = time.perf_counter()
    runtime = Runtime.for_device(cl_device) if cl_device is not None else None
    plan = Plan(gm, runtime, fallback_nodes={})
    report = CompileReport(title=title, device=cl_device.describe() if cl_device else None,
                           recompile_reason=recompile_reason, graph_break=graph_break,
                           graphs={"captured": captured, "aten": aten_graph}, passes=records, plan=plan,
                           aten_fused_into=fused_into(aten_graph, gm))  # where every final kernel came from
    build_seconds = _prepare_kernels(gm, plan, report, options)
    report.fallbacks += _fallbacks(gm)
    report.timings.update(
        lower_seconds=lowered - started,
        passes_seconds=sum(p.seconds for p in records),
        build_seconds=build_seconds,
        compile_seconds=time.perf_counter() - started,
        codegen_seconds=time.perf_counter() - passes_done - build_seconds,
    )
    report.memory = {"peak_intermediate_bytes": peak_intermediate_bytes(gm), "eager_peak_intermediate_bytes": eager_peak}
    trace_report(report)
    publish(report)
    return CompiledGraph(plan, report)


def _prepare_kernels(gm: fx.GraphModule, plan: Plan, report: CompileReport, options: Options) -> float:
    """Tune and configure every fused node's launch for the example layouts, place them in lanes together,
    then generate and build each; returns build seconds."""
    configured, sequence = [], []  # sequence: the launches in order, HOST_THREADS for PyTorch ops between them
    for node in gm.graph.nodes:
        target = node.target
        if not isinstance(target, FusedKernel):
            if _on_host_threads(node):
                sequence.append(HOST_THREADS)
            continue
        if plan.runtime is None:
            _fall_back(plan, report, node, "no OpenCL device: runs in PyTorch")
            continue
        kind = kind_of(target)
        fake_inputs = [_at_example_sizes(a.meta["val"]) for a in node.args]
        target = target.at_sizes(plan.bindings.symbols, plan.bindings.example)
        try:
            sizes_vary = any(isinstance(a, fx.Node) and isinstance(a.meta.get("val"), torch.Tensor)
                             and tensor_has_symbols(a.meta["val"]) for a in node.args)
            tuning = kind.tune(plan.runtime, target, fake_inputs, options.autotune, sizes_vary) if kind.tune else None
            launch = configure(target, fake_inputs, plan.runtime.device.type_name)
        except KernelBuildError as error:
            _build_failed(plan, report, node, error)
            continue
        except NoLaunch as error:  # named in the report (every convolution of a CNN on a GPU: no warning each)
            _fall_back(plan, report, node, f"no kernel schedule on this device: {error}")
            continue
        if not launch.empty:
            configured.append((node, kind, fake_inputs, tuning, launch))
            sequence.append(launch)
    lanes = plan.runtime.lanes(sequence) if plan.runtime is not None else []
    total = 0.0
    for (node, kind, fake_inputs, tuning, launch), (lane, lane_reason) in zip(configured, lanes):
        target = node.target
        claimed = plan.runtime.claims(launch, lane)
        try:
            builts, status = plan.runtime.build(launch.spec, lane, claimed)
        except KernelBuildError as error:
            _build_failed(plan, report, node, error)
            continue
        plan.lanes[node.name] = lane
        plan.uses_workers |= lane != INLINE and plan.runtime.device.type_name == "CPU"  # PoCL's threads
        plan.built[(launch.spec, lane, claimed)] = builts
        built = builts[0]
        claimed = is_claimed(built.name)  # not every kernel has a claimed form
        if claimed:
            lane_reason += "; both threads claim its slices from one counter until none is left"
        seconds = sum(b.build_seconds for b in builts) if status != "hit" else 0.0
        total += seconds
        covers = list(node.meta.get("torchfuser_covers", []))
        report.kernels.append(KernelEntry(
            name=launch.spec.kernel_name, node=node.name, kind=target.kind, group=target.group,
            cache_key=built.key, source=built.source, cache=status, build_seconds=seconds,
            spec=launch.spec.key_text(), nodes=covers,
            sources=_dedup([provenance(s) for s in node.meta.get("torchfuser_sources", [])]), tuning=tuning,
            transforms=kind.transforms(launch, fake_inputs) if kind.transforms else [], lane=lane,
            lane_reason=lane_reason, line_nodes=source_line_nodes(
                launch.spec, kernel_source(launch.spec) if claimed else built.source, covers),  # the same lines
        ))
    return total


def _at_example_sizes(value):
    """A tensor with symbolic sizes as a meta tensor at the sizes Dynamo's example had: launches are tuned
    and configured (and kernels built) for those; another call's sizes reuse the kernel (sizes are arguments)."""
    if isinstance(value, torch.Tensor) and tensor_has_symbols(value):
        return hint_tensor(value)
    return value


def _build_failed(plan: Plan, report: CompileReport, node: fx.Node, error: KernelBuildError) -> None:
    _fall_back(plan, report, node, f"OpenCL build failed: {error.log.strip()[:2000]}")
    warnings.warn(f"torchfuser: {error}; {node.name} runs in PyTorch", RuntimeWarning, stacklevel=3)


def _fall_back(plan: Plan, report: CompileReport, node: fx.Node, reason: str) -> None:
    plan.fallback_nodes[node.name] = reason
    report.fallbacks.append(FallbackEntry(node.target.__name__, node.name, reason, **_where(node)))


def _where(node) -> dict:
    info = provenance(node.meta)
    return {k: info[k] for k in ("module", "file", "line", "code")}


def _dedup(items: list[dict]) -> list[dict]:
    seen, unique = set(), []
    for item in items:
        key = tuple(sorted(item.items()))
        if key not in seen and (item["module"] or item["file"]):
            seen.add(key)
            unique.append(item)
    return unique


def _in_pytorch(node: fx.Node) -> bool:
    """Whether the node is a tensor op that every call runs in PyTorch."""
    if node.op != "call_function" or isinstance(node.target, FusedKernel):
        return False
    if node.target is operator.getitem or node.target in VIEW_OPS:
        return False  # views and tuple access read no data: nothing to fuse
    if getattr(node.target, "weight_transform", False):
        return False  # made once per weight version (ir/weights.py), not an op of every call
    if node.target is symbol_tensor:
        return False  # an integer input written into the plan's memory (passes/symbol_operands.py)
    # size arithmetic of a symbolic graph (sym_size, s0 + 1): host integers, no tensor op
    return not isinstance(node.meta.get("val"), (int, torch.SymInt))


def _on_host_threads(node: fx.Node) -> bool:
    """A PyTorch op big enough for ATen to run it on its intra-op threads (lanes.HOST_THREADS)."""
    if not _in_pytorch(node):
        return False
    sizes = [v.numel() for v in pytree.tree_leaves(node.meta.get("val")) if isinstance(v, torch.Tensor)]
    # a symbolic size counts at the example's value, as the launches are placed: a KV cache's cat at decode
    # is small, and counting it as large would keep every launch after it off the workers
    return any(hint(n) >= PARALLEL_GRAIN for n in sizes)


def _fallbacks(gm: fx.GraphModule) -> list[FallbackEntry]:
    """Every op left to PyTorch, with what the passes said about it."""
    return [FallbackEntry(target_name(node), node.name, "; ".join(unfused_reasons(node).values()) or NO_KERNEL,
                          **_where(node)) for node in gm.graph.nodes if _in_pytorch(node)]
