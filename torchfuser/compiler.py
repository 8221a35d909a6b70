"""The compiler driver: aten graph → passes → kernels → plan, with its CompileReport.

`compile_aten_graph` is what every entry point ends in (the Dynamo backend, `compile`, `compile_fx`).
"""

from __future__ import annotations

import contextlib
import logging
import operator
import time
import warnings

import torch
import torch.fx as fx

from torchfuser.graph_snapshot import mark_fused_groups, snapshot_graph, target_name
from torchfuser.ir.from_aten import POINTWISE, lowering_problem
from torchfuser.ir.region import ARANGE, EMBEDDING, arange_problem, embedding_problem, index_op_problem
from torchfuser.memory_plan import peak_intermediate_bytes
from torchfuser.passes import check_pass_names, run_pipeline
from torchfuser.passes.fuse_attention import ATTENTION_OPS
from torchfuser.passes.fuse_reductions import REDUCTION_OPS, unfused_reason
from torchfuser.report import CompileReport, FallbackEntry, KernelEntry, provenance
from torchfuser.runtime.autotune import tune_gemm
from torchfuser.runtime.device import get_device
from torchfuser.runtime.gemm_launch import ExternGemmLaunch, GemmKernel
from torchfuser.runtime.executor import VIEW_OPS, Plan, Runtime
from torchfuser.runtime.kernel_cache import KernelBuildError
from torchfuser.runtime.launch import FusedKernel

logger = logging.getLogger("torchfuser")
aten = torch.ops.aten


class _Session:
    """The most recent report and the open `collect_reports()` lists."""

    last_report: CompileReport | None = None
    last_log: dict = {}
    collectors: list[list] = []


def publish(report: CompileReport) -> None:
    _Session.last_report = report
    stats = {p.name: p.stats for p in report.passes}
    _Session.last_log.clear()
    _Session.last_log.update(
        gemm_epilogue=stats.get("fuse_gemm_epilogue", {}).get("gemm_epilogue", 0),
        pointwise_groups=stats.get("fuse_pointwise", {}).get("pointwise_groups", 0),
        reductions=stats.get("fuse_reductions", {}).get("reductions", 0),
        attention=stats.get("fuse_attention", {}).get("attention", 0),
        kernels=len(report.kernels),
        fallbacks=len(report.fallbacks),
    )
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


def compile_aten_graph(
    gm: fx.GraphModule, *, disable=(), device=None, title="graph", captured: dict | None = None,
    started: float | None = None,
) -> CompiledGraph:
    started = started if started is not None else time.perf_counter()
    lowered = time.perf_counter()
    disable = check_pass_names(disable)
    cl_device = get_device(device)
    aten_graph = snapshot_graph(gm)
    eager_peak = peak_intermediate_bytes(gm)
    gm, records = run_pipeline(gm, disable)
    mark_fused_groups(aten_graph, gm)  # the aten graph shows where every final kernel came from
    passes_done = time.perf_counter()
    runtime = Runtime.for_device(cl_device) if cl_device is not None else None
    plan = Plan(gm, runtime, fallback_nodes={})
    report = CompileReport(title=title, device=cl_device.describe() if cl_device else None,
                           graphs={"captured": captured, "aten": aten_graph}, passes=records, plan=plan)
    build_seconds = _prepare_kernels(gm, plan, report)
    report.fallbacks += _fallbacks(gm, disable)
    report.timings.update(
        lower_seconds=lowered - started,
        passes_seconds=sum(p.seconds for p in records),
        build_seconds=build_seconds,
        compile_seconds=time.perf_counter() - started,
        codegen_seconds=time.perf_counter() - passes_done - build_seconds,
    )
    report.memory = {"peak_intermediate_bytes": peak_intermediate_bytes(gm), "eager_peak_intermediate_bytes": eager_peak}
    publish(report)
    return CompiledGraph(plan, report)


def _prepare_kernels(gm: fx.GraphModule, plan: Plan, report: CompileReport) -> float:
    """Generate and build every fused node's kernel for the example layouts; returns build seconds."""
    total = 0.0
    for node in gm.graph.nodes:
        target = node.target
        if not isinstance(target, FusedKernel):
            continue
        covers = node.meta.get("torchfuser_covers", [])
        sources = _dedup([provenance(s) for s in node.meta.get("torchfuser_sources", [])])
        if plan.runtime is None:
            plan.fallback_nodes[node.name] = "no OpenCL device"
            report.fallbacks.append(FallbackEntry(target.__name__, node.name, "no OpenCL device: runs in PyTorch",
                                                  **_where(node)))
            continue
        fake_inputs = [a.meta["val"] for a in node.args]
        try:
            tuning = None
            if isinstance(target, GemmKernel) and fake_inputs[0].numel() and fake_inputs[1].numel():
                tuning = tune_gemm(plan.runtime, target, fake_inputs)
            launch = target.configure(fake_inputs, plan.runtime.device.type_name)
            if launch.empty:
                continue
            built, status = plan.runtime.build(launch.spec)
        except KernelBuildError as error:
            plan.fallback_nodes[node.name] = f"OpenCL build failed: {error.log.strip()[:2000]}"
            report.fallbacks.append(FallbackEntry(target.__name__, node.name, plan.fallback_nodes[node.name],
                                                  **_where(node)))
            warnings.warn(f"torchfuser: {error}; {node.name} runs in PyTorch", RuntimeWarning, stacklevel=2)
            continue
        plan.built[launch.spec] = built
        seconds = built.build_seconds if status != "hit" else 0.0
        total += seconds
        report.kernels.append(KernelEntry(
            name=launch.spec.kernel_name, node=node.name, kind=target.kind, group=target.group,
            cache_key=built.key, source=built.source, cache=status, build_seconds=seconds,
            spec=launch.spec.key_text(), nodes=list(covers), sources=sources, tuning=tuning,
            transforms=_transforms(launch, fake_inputs),
        ))
    return total


def _transforms(launch, inputs) -> list[str]:
    """One-time constant transforms the kernel relies on, in words, for the report."""
    spec = launch.spec
    if getattr(spec, "schedule", None) == "packed":
        *batch, k, n = inputs[1].shape
        panels, copies = -(-n // spec.tile_n), (batch or [1])[0]
        return [f"B [{'x'.join(map(str, inputs[1].shape))}] packed into {copies * panels} panels of "
                f"[{k}x{spec.tile_n}] ({copies * panels * k * spec.tile_n * 4 / 2**20:.1f} MiB), "
                "once per weight version (per call when B is an activation)"]
    if isinstance(launch, ExternGemmLaunch):
        return ["A @ B by the host BLAS (torch.mm) into a zero-copy buffer; this kernel is the epilogue"]
    return []


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


def _fallbacks(gm: fx.GraphModule, disabled) -> list[FallbackEntry]:
    entries = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or isinstance(node.target, FusedKernel):
            continue
        if node.target is operator.getitem or node.target in VIEW_OPS:
            continue  # views and tuple access read no data: nothing to fuse
        entries.append(FallbackEntry(target_name(node), node.name, _fallback_reason(node, disabled), **_where(node)))
    return entries


def _fallback_reason(node: fx.Node, disabled) -> str:
    if node.target in ATTENTION_OPS:
        return "fuse_attention is disabled" if "fuse_attention" in disabled else "attention with dropout, other dtypes or shapes: runs in PyTorch"
    if node.target in (aten.mm.default, aten.addmm.default):
        return "fuse_gemm_epilogue is disabled" if "fuse_gemm_epilogue" in disabled else "operand dtype or rank not supported by the GEMM kernel"
    if node.target in REDUCTION_OPS:
        if "fuse_reductions" in disabled:
            return "fuse_reductions is disabled"
        return f"row reduction, left unfused: {unfused_reason(node) or 'its results are not used'}"
    if node.target in POINTWISE:
        if "fuse_pointwise" in disabled:
            return "fuse_pointwise is disabled"
        problem = lowering_problem(node)
        return f"elementwise, but not lowerable: {problem}" if problem else "elementwise, left unfused"
    if node.target in _REGION_OPS:
        if "fuse_pointwise" in disabled:
            return "fuse_pointwise is disabled"
        what, problem = _REGION_OPS[node.target]
        return f"{what}, not fused: {problem(node) or 'left unfused'}"
    return _NO_KERNEL.get(node.target, "no OpenCL kernel for this op yet: runs in PyTorch")


# non-elementwise ops that pointwise kernels take, and the check that says why one was not taken
_REGION_OPS = {
    aten.cat.default: ("concatenation", index_op_problem),
    ARANGE: ("arange", arange_problem),
    EMBEDDING: ("embedding", embedding_problem),
}
_CONSTANT = ("a constant made on the host, for readers outside pointwise kernels (those take it as a literal); "
             "it reads no data, so it waits for no kernel")
_NO_KERNEL = {
    aten.full.default: _CONSTANT,
    aten.full_like.default: _CONSTANT,
    aten.scalar_tensor.default: _CONSTANT,
    aten.gather.default: "gather along a dim: no OpenCL kernel yet (kernels gather embedding rows only)",
    aten.index.Tensor: "advanced indexing: no OpenCL kernel yet (kernels gather embedding rows only)",
}
