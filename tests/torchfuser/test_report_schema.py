"""Report schema v2: real reports validate against report.schema.json, expand back to the full per-pass
graphs exactly, read version 1 reports, and stay small for many-layer models."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from torchfuser.passes import register_pass, unregister_pass
from torchfuser.report.compile_report import CompileReport
from torchfuser.report.dot import graph_dot
from torchfuser.report.html import render_html
from torchfuser.report.wire import apply_change, encode_change, expand_report, with_fused_groups, Interner, _Provenance

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "torchfuser" / "report" / "report.schema.json").read_text())
FIXTURES = REPO / "tests" / "fixtures"


class Block(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(width), nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.down(F.gelu(self.up(self.norm(x)))).softmax(-1)


def compile_report(model, *inputs, **options):
    compiled = torchfuser.compile(model, **options)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        compiled(*inputs)
    (report,) = reports
    return report


def validate(report_dict: dict) -> None:
    bundle = {"kind": "torchfuser.explorer", "schema_version": 2, "pipeline": [], "reports": [report_dict]}
    jsonschema.validate(bundle, SCHEMA, cls=jsonschema.Draft202012Validator)


def as_json(value):
    return json.loads(json.dumps(value))


def test_a_real_report_validates_and_expands_to_every_pass_graph_exactly():
    report = compile_report(nn.Sequential(Block(), Block()).eval(), torch.randn(3, 5, 16))
    data = as_json(report.to_dict())
    validate(data)
    assert data["schema_version"] == 2 and "dot" not in json.dumps(data["graphs"])
    expanded = expand_report(data)
    ran = [p for p in report.passes if p.graph_after is not None]
    assert sum(p.modified for p in ran) >= 2  # several passes changed the graph
    for record, p in zip(report.passes, expanded["passes"]):
        if record.graph_after is None:
            assert p["graph_before"] is None and p["graph_after"] is None
            continue
        assert p["graph_after"] == as_json(record.graph_after), record.name
        assert p["graph_before"] == as_json(with_fused_groups(record.graph_before, record.fused_into)), record.name
        assert graph_dot(p["graph_before"]) == report.to_dot(record.name, "before")
        assert graph_dot(p["graph_after"]) == report.to_dot(record.name)
    assert graph_dot(expanded["graphs"]["aten"]) == report.to_dot()
    kernels = {k.node: k for k in report.kernels}
    for k in expanded["kernels"]:
        assert k["source"] == kernels[k["node"]].source and k["spec"] == kernels[k["node"]].spec
        assert k["sources"] == as_json(kernels[k["node"]].sources)
    # the two blocks' kernels are the same programs: one source entry each
    assert len(data["kernel_sources"]) < len(data["kernels"])


def test_dynamic_sizes_a_failed_pass_and_fallbacks_validate():
    def broken(gm):
        raise RuntimeError("this pass always fails")

    register_pass("always_fails", broken)
    try:
        with pytest.warns(RuntimeWarning, match="always_fails"):
            report = compile_report(lambda x: torch.cumsum(x.relu(), 0) * 2, torch.randn(6, 4))
    finally:
        unregister_pass("always_fails")
    data = as_json(report.to_dict())
    validate(data)
    failed = next(p for p in data["passes"] if p["name"] == "always_fails")
    assert failed["change"] is None and "this pass always fails" in failed["error"]
    assert "error" not in failed["stats"]
    assert any(f["op"] == "aten.cumsum.default" for f in data["fallbacks"])
    assert "failed: pass always_fails failed" in render_html([data])

    torch._dynamo.reset()
    fn = torch.compile(lambda x: F.silu(x) + 1, backend="torchfuser", dynamic=True)
    with torchfuser.collect_reports() as reports:
        fn(torch.randn(5, 3))
    dynamic = as_json(reports[-1].to_dict())
    validate(dynamic)
    assert dynamic["dynamic"]["symbols"]
    torch._dynamo.reset()


def test_change_lists_moved_nodes_as_rewritten_and_apply_restores_the_order():
    def node(name, inputs=()):
        return {"id": name, "op": "call_function", "target": name, "label": name, "shape": [2], "dtype": "float32",
                "group": None, "kernel": None, "module": "", "module_type": "", "file": None, "line": None,
                "code": None, "inputs": list(inputs)}

    before = {"nodes": [node("a"), node("b", "a"), node("c", "a"), node("d", "bc"), node("out", "d")]}
    after = {"nodes": [node("a"), node("c", "a"), node("k", "a"), node("b", "a"), node("out", "kb")]}
    interner = Interner()
    change = encode_change(before, after, {"d": 3}, interner)
    assert change["removed"] == ["d"] and [n["id"] for _, n in change["added"]] == ["k"]
    # c and b swapped: one of them is placed again; out changed its inputs
    assert {n["id"] for _, n in change["rewritten"]} in ({"b", "out"}, {"c", "out"})
    rebuilt = apply_change(before["nodes"], as_json(change), _Provenance(interner.modules, interner.locations))
    assert rebuilt == after["nodes"]


def test_version_1_fixture_and_version_2_fixture_of_one_model_give_the_same_graphs():
    v1 = json.loads((FIXTURES / "gpt2_tiny_bundle_v1.json").read_text())["reports"][0]
    v2 = json.loads((FIXTURES / "gpt2_tiny_bundle_v2.json").read_text())["reports"][0]
    validate(v2)
    assert expand_report(v1) is v1
    expanded = expand_report(v2)
    pairs = [(v1["graphs"]["captured"], expanded["graphs"]["captured"]), (v1["graphs"]["aten"], expanded["graphs"]["aten"])]
    pairs += [(p1[side], p2[side]) for p1, p2 in zip(v1["passes"], expanded["passes"])
              for side in ("graph_before", "graph_after")]
    assert len(pairs) == 14
    for old, new in pairs:
        assert [{k: v for k, v in n.items() if k != "inputs"} for n in new["nodes"]] == old["nodes"]
        assert new["edges"] == old["edges"] and new["modules"] == old["modules"]
        assert graph_dot(new) == old["dot"]  # the DOT version 1 stored, derived
    assert [k["name"] for k in expanded["kernels"]] == [k["name"] for k in v1["kernels"]]
    assert [k["sources"] for k in expanded["kernels"]] == [k["sources"] for k in v1["kernels"]]


def test_unknown_version_is_a_clear_error_and_the_page_says_so():
    with pytest.raises(ValueError, match="schema_version 9"):
        expand_report({"schema_version": 9})
    page = render_html([{"schema_version": 9, "title": "future"}])
    assert "schema_version 9" in page and "future" in page


def display_bytes(view) -> int:
    data, _ = view._repr_mimebundle_()
    return len(json.dumps(data))


def test_display_bundle_stays_small_and_grows_less_than_the_model():
    import explorer

    sizes = {}
    for layers in (6, 12):
        model = nn.Sequential(*[Block(32) for _ in range(layers)]).eval()
        sizes[layers] = display_bytes(explorer.show(model, torch.randn(2, 8, 32), timing_runs=0))
    assert sizes[12] < 1.5e6, sizes
    assert sizes[12] < 1.9 * sizes[6], sizes


def test_each_pass_says_what_it_left_unfused_and_why():
    report = compile_report(lambda x: torch.softmax(x, -1) + torch.softmax(x, 0), torch.randn(8, 8))
    data = as_json(report.to_dict())
    validate(data)
    reductions = next(p for p in data["passes"] if p["name"] == "fuse_reductions")
    (node, why), = reductions["unfused"]
    assert why == "softmax over a dim other than the last (or half_to_float)"
    expanded = next(p for p in expand_report(data)["passes"] if p["name"] == "fuse_reductions")
    assert node in {n["id"] for n in expanded["graph_after"]["nodes"]}
    page = render_html([data])
    assert "left unfused, and why" in page and "softmax over a dim other than the last" in page


def test_a_graph_ended_by_data_dependent_control_flow_says_where_and_what_to_do():
    def branchy(x):
        y = x.relu() * 2
        if y.sum() > 0:  # the break
            return y + 1
        return y - 1

    torch._dynamo.reset()
    with torchfuser.collect_reports() as reports:
        torch.compile(branchy, backend="torchfuser")(torch.ones(4))
    first, last = (as_json(r.to_dict()) for r in reports)
    validate(first)
    assert last["graph_break"] is None  # ran to the return
    graph_break = first["graph_break"]
    assert graph_break["code"] == "if y.sum() > 0:  # the break" and graph_break["file"].endswith(__file__.split("/")[-1])
    assert any("torch.where" in hint for hint in graph_break["hints"])
    assert "graph break at" in reports[0].summary()
    torch._dynamo.reset()


def test_the_report_says_how_steady_calls_ran():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64)).eval()
    compiled, x = torchfuser.compile(model), torch.randn(4, 64)
    with torch.no_grad():
        for _ in range(12):
            compiled(x)
    report = torchfuser.last_report()
    data = as_json(report.to_dict())
    validate(data)
    replay = data["replay"]
    assert replay["calls"] == data["timings"]["calls"] == 12
    if data["device"] and data["device"]["zero_copy"]:  # kernels bind the tensors' own memory: what a tape replays
        assert replay["replayed"] > 0 and replay["walks_because"] is None
        assert 1 <= replay["run_as"] <= replay["launches"] == len(report.kernels)
        assert f"steady calls: {replay['replayed']} of 12 replayed from a tape" in report.summary()
        assert f"Steady calls: {replay['replayed']} of 12 replayed from a tape" in render_html([data])

        def with_fallback(x):
            return torch.cumsum(x.relu(), -1).tanh()  # cumsum runs in PyTorch: a call does more than launches

        compiled = torchfuser.compile(with_fallback)
        with torch.no_grad():
            for _ in range(4):
                compiled(x)
        walked = as_json(torchfuser.last_report().to_dict())
        validate(walked)
        assert walked["replay"] == {"calls": 4, "replayed": 0, "launches": None, "run_as": None,
                                    "walks_because": "cumsum.default runs in PyTorch"}
    else:
        assert replay["replayed"] == 0 and replay["launches"] is None and replay["run_as"] is None


def test_the_report_of_a_plan_with_symbols_says_how_many_calls_replayed_at_new_sizes():
    def f(x, cache):
        return torch.cat([cache, torch.sin(x)], dim=1) * 2

    compiled = torch.compile(f, backend="torchfuser", dynamic=True)
    with torch.no_grad():
        for n in range(3, 12):  # every length new
            compiled(torch.randn(2, 1, 8), torch.randn(2, n, 8))
    report = torchfuser.last_report()
    data = as_json(report.to_dict())
    validate(data)
    replay = data["replay"]
    assert set(replay) >= {"new_sizes", "new_sizes_walk_because"}
    if data["device"] and data["device"]["zero_copy"]:
        assert replay["new_sizes"] >= 5 and replay["new_sizes_walk_because"] is None
        assert f", {replay['new_sizes']} at new sizes" in report.summary()
        assert f", {replay['new_sizes']} at new sizes" in render_html([data])
    report.plan.resized = "an output is a view (its layout is the recorded call's)"
    data = as_json(report.to_dict())
    validate(data)
    assert "new sizes walk the plan: an output is a view" in render_html([data])
    torch._dynamo.reset()


def test_a_report_without_a_plan_or_with_a_plan_from_before_tapes_says_nothing_replayed():
    nothing = {"calls": 0, "replayed": 0, "launches": None, "run_as": None, "walks_because": None}
    report = CompileReport(title="t", device=None)
    data = as_json(report.to_dict())
    validate(data)
    assert data["replay"] == nothing
    report.plan = type("Plan", (), {"calls": 3, "stats": {}})()  # no tape_calls, tape_launches, tape_note
    assert report.to_dict()["replay"] == dict(nothing, calls=3)
    assert "steady calls" not in report.summary()
