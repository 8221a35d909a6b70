"""TorchFuser's part of a `TORCH_TRACE` structured trace, so tlparse's report shows it beside Dynamo's.

Per compiled graph, inside the compile Dynamo is tracing (the entries carry its frame and compile ids):
- `graph_dump` "torchfuser_aten_graph" and "torchfuser_fused_graph": the graph before and after the passes,
  as Graphviz DOT text;
- `artifact` "torchfuser_kernel_<kernel name>" (string): each distinct kernel's OpenCL source, once;
- `artifact` "torchfuser_report" (json): the CompileReport (schema v2, report.schema.json).
Nothing is built unless a trace is being written (torch only calls the payload functions then).
"""

from __future__ import annotations

from torch._logging import trace_structured

from torchfuser.report.dot import graph_dot
from torchfuser.report.wire import with_fused_groups


def trace_report(report) -> None:
    """Emit `report`'s graphs, kernel sources and JSON as structured trace entries (see the module doc)."""
    aten = report.graphs.get("aten")
    if aten is not None:
        trace_structured("graph_dump", metadata_fn=lambda: {"name": "torchfuser_aten_graph"},
                         payload_fn=lambda: graph_dot(with_fused_groups(aten, report.aten_fused_into)))
    ran = [p for p in report.passes if p.graph_after is not None]
    if ran:
        trace_structured("graph_dump", metadata_fn=lambda: {"name": "torchfuser_fused_graph"},
                         payload_fn=lambda: graph_dot(ran[-1].graph_after))
    for kernel in {k.name: k for k in report.kernels}.values():
        trace_structured("artifact", metadata_fn=lambda k=kernel: {"name": f"torchfuser_kernel_{k.name}",
                                                                   "encoding": "string"},
                         payload_fn=lambda k=kernel: k.source)
    trace_structured("artifact", metadata_fn=lambda: {"name": "torchfuser_report", "encoding": "json"},
                     payload_fn=report.to_json)
