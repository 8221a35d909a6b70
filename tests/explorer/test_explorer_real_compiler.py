"""The explorer on the real compiler (Dynamo + OpenCL): show, toggles, re-run and cache hits, graph
breaks in a %%torchfuse cell, `%load_ext torchfuser`, and a hostile module name end to end."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import torch
import torch.nn as nn

import explorer
import explorer.magic
import torchfuser
from explorer.widget import REPORT_MIME

REPORT_SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "torchfuser" / "report" / "report.schema.json")
                           .read_text())

HOSTILE = "<img src=x onerror=alert(1)>"


class MLP(nn.Module):
    def __init__(self, width: int = 32, hidden: int = 64):
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


class HostileNames(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(HOSTILE, nn.Linear(16, 16))

    def forward(self, x):
        return torch.relu(getattr(self, HOSTILE)(x)) * 2 + 1


def kernel_caches(view) -> list[str]:
    return [k["cache"] for report in view.bundle["reports"] for k in report["kernels"]]


def test_show_on_the_real_compiler_fuses_times_and_matches_eager():
    model, x = MLP().eval(), torch.randn(8, 32)
    view = explorer.show(model, x, timing_runs=2)
    report = view.report.to_dict()
    assert report["kernels"], "the MLP should compile to OpenCL kernels"
    assert {p["name"] for p in report["passes"]} == set(torchfuser.passes.PIPELINE)
    assert report["timings"]["eager_seconds"] > 0 and report["timings"]["compiled_seconds"] > 0
    assert report["timings"]["speedup"] > 0
    with torch.no_grad():
        torch.testing.assert_close(view.outputs, model(x), rtol=1e-4, atol=1e-4)


def test_toggle_rerun_many_times_keeps_compiling_and_hits_the_kernel_cache():
    model, x = MLP().eval(), torch.randn(8, 32)
    view = explorer.show(model, x, timing_runs=0)
    everything = view.pipeline
    without_gemm = [p for p in everything if p != "fuse_gemm_epilogue"]
    for round_number in range(5):  # 10 compiles of one model: past Dynamo's recompile limit of 8
        view.enabled_passes = without_gemm
        view.rerun()
        gemm = next(p for p in view.bundle["reports"][0]["passes"] if p["name"] == "fuse_gemm_epilogue")
        assert gemm["enabled"] is False and gemm["change"] is None
        view.enabled_passes = everything
        view.rerun()
        assert len(view.reports) == 1, f"round {round_number}: Dynamo stopped compiling"
        caches = kernel_caches(view)
        assert caches and set(caches) == {"hit"}, caches


def test_rerun_message_from_the_front_end_on_the_real_compiler():
    view = explorer.show(MLP().eval(), torch.randn(8, 32), timing_runs=0)
    view._on_front_end_message(view, {"type": "rerun", "enabled_passes": ["eliminate_dead_code"]}, [])
    assert view.status == "idle"
    enabled = [p["name"] for p in view.bundle["reports"][0]["passes"] if p["enabled"]]
    assert enabled == ["eliminate_dead_code"]


def test_hostile_module_name_from_a_real_model_is_only_text(tmp_path):
    view = explorer.show(HostileNames().eval(), torch.randn(4, 16), timing_runs=0)
    report = view.bundle["reports"][0]
    modules = {path for path, _ in report["modules"]}
    assert any(HOSTILE in m for m in modules), modules  # the name really reached the report
    page = view.save_html(tmp_path / "hostile.html").read_text()
    assert HOSTILE not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<svg" in page
    assert "<img" not in page.lower()


def test_cell_with_a_print_becomes_two_graphs_and_assigns_names(shell, monkeypatch, capsys):
    shown: list = []
    monkeypatch.setattr(explorer.magic, "display", shown.append)
    shell.user_ns.update(torch=torch, model=MLP().eval(), x=torch.randn(8, 32))
    result = shell.run_cell("%%torchfuse\nwith torch.no_grad():\n    h = model(x)\n    print('between')\n"
                            "    out = torch.relu(h) * 3")
    assert result.success, result.error_in_exec
    assert "between" in capsys.readouterr().out
    assert len(shown[0].reports) == 2
    with torch.no_grad():
        torch.testing.assert_close(shell.user_ns["out"], torch.relu(shell.user_ns["model"](shell.user_ns["x"])) * 3,
                                   rtol=1e-4, atol=1e-4)
    titles = [r["title"] for r in shown[0].bundle["reports"]]
    assert all(t.startswith("In[") for t in titles), titles
    data, _ = shown[0]._repr_mimebundle_()
    assert len(data[REPORT_MIME]["reports"]) == 2 and data["text/plain"].startswith("TorchFuser: 2 compiled graphs")
    (graph_break,) = shown[0].breaks  # the first graph ended at the print; the second ran to the end
    assert graph_break["graph"] == titles[0] and "`print`" in graph_break["explanation"]
    assert graph_break["code"] == "print('between')" and graph_break["line"] == 3 and graph_break["hints"]
    assert "Graph break" in data["text/html"] and "print(&#x27;between&#x27;)" in data["text/html"]


def test_load_ext_torchfuser_registers_the_magic(shell):
    shell.magics_manager.magics["cell"].pop("torchfuse")
    shell.extension_manager.loaded.discard("torchfuser")
    assert shell.run_line_magic("load_ext", "torchfuser") is None
    assert "torchfuse" in shell.magics_manager.magics["cell"]


def test_compile_report_to_html_uses_the_static_page():
    compiled = torchfuser.compile(MLP().eval())
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        compiled(torch.randn(8, 32))
    page = reports[0].to_html()
    assert page.startswith("<!DOCTYPE html>") and "jp-torchfuser-report" in page


def test_unknown_device_is_a_one_line_usage_error(shell, capsys):
    result = shell.run_cell("%%torchfuse --device no-such-device\nnever_set = 1")
    assert not result.success
    err = capsys.readouterr().err.strip()
    assert err.startswith("UsageError: no OpenCL device matches 'no-such-device'") and "\n" not in err
    assert "never_set" not in shell.user_ns


def test_cell_without_tensor_work_compiles_no_graph_and_still_assigns(shell, monkeypatch):
    shown: list = []
    monkeypatch.setattr(explorer.magic, "display", shown.append)
    result = shell.run_cell("%%torchfuse\nwords = ['a', 'b']\ncount = len(words)")
    assert result.success, result.error_in_exec
    assert shell.user_ns["count"] == 2
    assert shown[0].reports == [] and shown[0].report == []
    data, _ = shown[0]._repr_mimebundle_()
    assert data[REPORT_MIME]["reports"] == [] and "No graphs were compiled." in data["text/html"]


def test_every_run_is_kept_and_two_runs_compare():
    view = explorer.show(MLP().eval(), torch.randn(8, 32), timing_runs=3)
    with pytest.raises(ValueError, match="comparing needs two runs"):
        view.compare()
    view.enabled_passes = [p for p in view.pipeline if p != "fuse_gemm_epilogue"]
    view.rerun()
    first, second = view.runs
    assert first["number"] == 1 and "fuse_gemm_epilogue" in first["enabled_passes"]
    assert all(k["seconds_per_call"] > 0 for k in first["kernels"]) and first["speedup"] > 0
    change = view.compare()
    assert change["passes_off"] == ["fuse_gemm_epilogue"] and change["passes_on"] == []
    assert {k["kind"] for k in change["removed"]} == {"gemm"}  # the GEMMs with their epilogues are gone
    assert change["added"] and change["speedup_delta"] == pytest.approx(second["speedup"] - first["speedup"])
    jsonschema.validate(view.bundle, REPORT_SCHEMA, cls=jsonschema.Draft202012Validator)
    assert view.bundle["runs"] == view.runs


def test_a_pass_registered_after_a_show_is_not_skipped_by_the_warm_program():
    from torchfuser.passes import PassResult, register_pass, unregister_pass

    model, x = MLP().eval(), torch.randn(8, 32)
    explorer.show(model, x, timing_runs=0)
    seen = []
    register_pass("count_nodes", lambda gm: seen.append(len(gm.graph.nodes)) or PassResult(gm, False))
    try:
        view = explorer.show(model, x, timing_runs=0)
    finally:
        unregister_pass("count_nodes")
    assert seen and not view._program.reused
    assert "count_nodes" in [p["name"] for p in view.bundle["reports"][0]["passes"]]
