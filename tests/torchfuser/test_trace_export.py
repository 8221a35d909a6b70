"""With a TORCH_TRACE structured trace being written, every compiled graph adds its graphs, kernel sources
and report to it (tlparse shows them in the compile's directory)."""
import json
import logging

import torch
from torch._logging._internal import trace_log

import torchfuser


class Entries(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.entries = []

    def emit(self, record):
        self.entries.append((record.metadata, record.payload))


def test_compiles_write_graphs_kernel_sources_and_the_report_into_the_trace():
    handler = Entries()
    trace_log.addHandler(handler)
    try:
        torch._dynamo.reset()
        fn = torch.compile(lambda x: torch.relu(x @ x) * 2 + x.sum(-1, keepdim=True), backend="torchfuser")
        with torchfuser.collect_reports() as reports:
            fn(torch.randn(8, 8))
    finally:
        trace_log.removeHandler(handler)
    ours = {meta[kind]["name"]: (meta, payload) for meta, payload in handler.entries
            for kind in ("artifact", "graph_dump") if kind in meta and meta[kind]["name"].startswith("torchfuser")}
    (report,) = reports
    kernel_names = {f"torchfuser_kernel_{k.name}" for k in report.kernels}
    assert set(ours) == {"torchfuser_aten_graph", "torchfuser_fused_graph", "torchfuser_report"} | kernel_names
    assert all("frame_id" in meta for meta, _ in ours.values())  # inside Dynamo's compile: tlparse files it there
    assert ours["torchfuser_fused_graph"][1] == report.to_dot("eliminate_dead_code")
    for kernel in report.kernels:
        assert ours[f"torchfuser_kernel_{kernel.name}"][1] == kernel.source
    assert json.loads(ours["torchfuser_report"][1])["title"] == report.title
