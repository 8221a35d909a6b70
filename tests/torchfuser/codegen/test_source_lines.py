"""The provenance map: every line of every kernel's OpenCL source names the graph nodes it computes."""
import torch
import torch.nn as nn

import torchfuser
from torchfuser.codegen.source_lines import source_line_nodes
from torchfuser.report.wire import encode_line_nodes, expand_line_nodes


class Block(nn.Module):
    """A GEMM with an epilogue, a layer norm with a residual, a cat along the last dim, a softmax."""

    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.ln = nn.Linear(16, 32), nn.Linear(32, 16), nn.LayerNorm(16)

    def forward(self, x):
        y = self.ln(self.fc2(nn.functional.gelu(self.fc1(x))) + x)
        return torch.cat([y, torch.sigmoid(y) * 3.0], -1).softmax(-1)


def compiled_reports(model, *args, backward=False):
    with torchfuser.collect_reports() as reports:
        out = torchfuser.compile(model)(*args)
        if backward:
            out.backward()
    return out, reports


def graph_node_ids(report) -> set[str]:
    """Every node of every graph the report draws (a pass may add nodes: a merged GEMM)."""
    full = report.expanded()
    ids = {n["id"] for g in full["graphs"].values() if g for n in g["nodes"]}
    for record in full["passes"]:
        ids |= {n["id"] for side in ("graph_before", "graph_after") for n in record[side]["nodes"]}
    return ids


def check_map(report):
    """Every mapped line is a real line and maps to nodes that exist; every kernel maps its work."""
    ids = graph_node_ids(report)
    data = report.expanded()  # the wire's runs of lines expanded, as a reader sees them
    assert data["kernels"], "nothing compiled"
    for kernel in data["kernels"]:
        lines = kernel["source"].split("\n")
        mapped = {int(line): nodes for line, nodes in kernel["line_nodes"].items()}
        assert mapped, f"{kernel['name']}: no line maps to a node"
        for line, nodes in mapped.items():
            assert 1 <= line <= len(lines) and lines[line - 1].strip(), (kernel["name"], line)
            assert nodes and set(nodes) <= ids, (kernel["name"], line, set(nodes) - ids)
            assert set(nodes) <= set(kernel["nodes"]), (kernel["name"], line, nodes, kernel["nodes"])
        # every node the kernel covers is computed by some line (a view by the loads that read through it)
        assert {n for nodes in mapped.values() for n in nodes} == set(kernel["nodes"]), kernel["name"]
    return data


def test_every_line_maps_to_existing_nodes_in_a_block():
    with torch.no_grad():
        out, reports = compiled_reports(Block().eval(), torch.randn(5, 16))
    (report,) = reports
    data = check_map(report)
    kinds = {k["kind"] for k in data["kernels"]}
    assert {"gemm", "reduction", "pointwise"} <= kinds


def test_elementwise_lines_name_the_node_they_compute():
    def fn(x, y):
        return torch.exp(x) * y + 1.0

    with torch.no_grad():
        _, (report,) = compiled_reports(fn, torch.randn(7, 9), torch.randn(9))
    (kernel,) = report.kernels
    lines = kernel.source.split("\n")
    by_node = {}
    for line, nodes in kernel.line_nodes.items():
        for n in nodes:
            by_node.setdefault(n, []).append(lines[line - 1])
    assert set(by_node) == {"exp", "mul", "add"}
    assert all("exp(" in text for text in by_node["exp"])
    assert all(" * " in text for text in by_node["mul"])
    assert all(" + " in text and "0x1" in text for text in by_node["add"])


def test_a_gemm_epilogue_names_the_bias_and_the_activation():
    model = nn.Sequential(nn.Linear(8, 24), nn.ReLU()).eval()
    with torch.no_grad():
        _, (report,) = compiled_reports(model, torch.randn(3, 8))
    (kernel,) = [k for k in report.kernels if k.kind == "gemm"]
    named = {n for nodes in kernel.line_nodes.values() for n in nodes}
    assert {"addmm", "relu"} <= named
    assert any(nodes == ["relu"] for nodes in kernel.line_nodes.values())


def attention(q, k, v, mask):
    return (nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask) * 2.0).sum()


def test_attention_and_backward_graphs_are_mapped():
    q, k, v = (torch.randn(2, 3, 6, 16, requires_grad=True) for _ in range(3))
    _, reports = compiled_reports(attention, q, k, v, torch.randn(2, 1, 6, 6), backward=True)
    assert len(reports) == 2  # forward and backward
    for report in reports:
        check_map(report)
    forward = reports[0].expanded()
    assert any(k["kind"] == "attention" for k in forward["kernels"])


def test_a_source_that_does_not_regenerate_exactly_gets_no_map():
    with torch.no_grad():
        _, (report,) = compiled_reports(lambda x: torch.relu(x) + 1, torch.randn(10))
    (kernel,) = report.kernels
    ((spec, _lane, _claimed),) = report.plan.built
    assert source_line_nodes(spec, kernel.source, kernel.nodes) == kernel.line_nodes != {}
    assert source_line_nodes(spec, kernel.source + "\n", kernel.nodes) == {}


def test_wire_runs_of_lines_round_trip():
    lines = {3: ["mm"], 4: ["mm"], 5: ["mm"], 7: ["mm"], 8: ["relu"], 9: ["mm", "relu"]}
    encoded = encode_line_nodes(lines)
    assert encoded == {"3-5": ["mm"], "7": ["mm"], "8": ["relu"], "9": ["mm", "relu"]}
    assert expand_line_nodes(encoded) == {str(k): v for k, v in lines.items()}
