"""explorer.show and the widget, against FakeCore: toggles, re-run, cache hits, display bundle, status."""
from __future__ import annotations

import json

import pytest
import traitlets

import explorer
from explorer.widget import REPORT_MIME, ExplorerWidget

PIPELINE = ["fuse_gemm_epilogue", "fuse_pointwise", "eliminate_dead_code"]
HOSTILE = "<img src=x onerror=alert(1)>"


def double(x):
    return x * 2


def test_show_compiles_runs_and_records_eager_vs_compiled(fake_core):
    view = explorer.show(double, 21, timing_runs=3)
    assert isinstance(view, ExplorerWidget)
    assert view.outputs == 42
    report = view.report.to_dict()
    assert report["timings"]["eager_seconds"] > 0 and report["timings"]["compiled_seconds"] > 0
    assert report["timings"]["speedup"] == pytest.approx(report["timings"]["eager_seconds"]
                                                        / report["timings"]["compiled_seconds"])
    assert view.status == "idle"
    assert view.enabled_passes == PIPELINE
    assert view.bundle["kind"] == "torchfuser.explorer" and view.bundle["schema_version"] == 2
    assert view.bundle["pipeline"] == PIPELINE and view.bundle["reports"] == [report]


def test_disable_at_show_reaches_the_compiler(fake_core):
    view = explorer.show(double, 1, disable=["fuse_pointwise"], timing_runs=0)
    assert fake_core.compile_calls[-1]["disable"] == ("fuse_pointwise",)
    assert view.enabled_passes == ["fuse_gemm_epilogue", "eliminate_dead_code"]
    passes = {p["name"]: p["enabled"] for p in view.bundle["reports"][0]["passes"]}
    assert passes == {"fuse_gemm_epilogue": True, "fuse_pointwise": False, "eliminate_dead_code": True}


def test_unknown_pass_name_is_refused(fake_core):
    with pytest.raises(ValueError, match="unknown pass 'fuse_everything'"):
        explorer.show(double, 1, disable=["fuse_everything"])
    view = explorer.show(double, 1, timing_runs=0)
    with pytest.raises(traitlets.TraitError, match="unknown pass"):
        view.enabled_passes = ["fuse_pointwise", "nope"]


def test_toggle_and_rerun_from_python_recompiles_and_hits_the_cache(fake_core):
    view = explorer.show(double, 1, timing_runs=0)
    assert {k["cache"] for k in view.bundle["reports"][0]["kernels"]} == {"miss"}
    view.enabled_passes = ["eliminate_dead_code", "fuse_gemm_epilogue"]  # any order; kept in pipeline order
    assert view.enabled_passes == ["fuse_gemm_epilogue", "eliminate_dead_code"]
    view.rerun()
    assert fake_core.compile_calls[-1]["disable"] == ("fuse_pointwise",)
    assert {k["cache"] for k in view.bundle["reports"][0]["kernels"]} == {"miss"}  # new configuration
    view.enabled_passes = PIPELINE
    view.rerun()
    assert {k["cache"] for k in view.bundle["reports"][0]["kernels"]} == {"hit"}  # built by the first run
    assert len(fake_core.compile_calls) == 2  # the first configuration's compiled model is reused
    assert view._program.reused


def test_a_second_show_of_a_model_reuses_its_compiled_graphs_and_times_them_again(fake_core):
    first = explorer.show(double, 1, timing_runs=2)
    second = explorer.show(double, 1, timing_runs=2)
    assert len(fake_core.compile_calls) == 1 and second._program.reused and second.outputs == 2
    assert {k["cache"] for k in second.bundle["reports"][0]["kernels"]} == {"hit"}
    assert {k["cache"] for k in first.bundle["reports"][0]["kernels"]} == {"miss"}  # the first view's report
    assert second.bundle["reports"][0]["timings"]["compiled_seconds"] > 0
    explorer.show(double, 1, disable=["fuse_pointwise"], timing_runs=0)  # other passes: compiled again
    assert len(fake_core.compile_calls) == 2


def test_front_end_rerun_message_updates_passes_and_bundle(fake_core):
    view = explorer.show(double, 1, timing_runs=0)
    view._on_front_end_message(view, {"type": "rerun", "enabled_passes": ["fuse_pointwise"]}, [])
    assert view.enabled_passes == ["fuse_pointwise"] and view.status == "idle"
    assert fake_core.compile_calls[-1]["disable"] == ("fuse_gemm_epilogue", "eliminate_dead_code")
    enabled = [p["name"] for p in view.bundle["reports"][0]["passes"] if p["enabled"]]
    assert enabled == ["fuse_pointwise"]
    calls = len(fake_core.compile_calls)
    view._on_front_end_message(view, {"type": "something-else"}, [])
    assert len(fake_core.compile_calls) == calls


def test_failed_rerun_sets_error_status(fake_core):
    def broken(x):
        raise RuntimeError("kernel exploded\nsecond line")

    with pytest.raises(RuntimeError):
        explorer.show(broken, 1, timing_runs=0)
    view = explorer.show(double, 1, timing_runs=0)
    view._program.target = broken
    view._on_front_end_message(view, {"type": "rerun", "enabled_passes": PIPELINE}, [])  # must not raise
    assert view.status == "error: RuntimeError: kernel exploded"
    view._on_front_end_message(view, {"type": "rerun", "enabled_passes": ["bogus"]}, [])
    assert view.status.startswith("error: TraitError: unknown pass 'bogus'")


def test_display_bundle_carries_widget_report_html_and_text(fake_core):
    view = explorer.show(double, 1, timing_runs=2)
    data, _metadata = view._repr_mimebundle_()
    assert data["application/vnd.jupyter.widget-view+json"]["model_id"] == view.model_id
    assert data[REPORT_MIME] == view.bundle
    json.dumps(data[REPORT_MIME])  # must be plain JSON for the notebook file
    assert data["text/html"].startswith("<!DOCTYPE html>") and "tf_gemm_0" in data["text/html"]
    assert data["text/plain"].startswith("TorchFuser: 1 compiled graph")
    assert "speedup" in data["text/plain"]


def test_report_is_a_list_when_several_graphs_were_captured(fake_core):
    def two_graphs(x):
        first = fake_core.compile(lambda v: v + 1)
        second = fake_core.compile(lambda v: v * 3)
        return second(first(x))

    view = explorer.show(two_graphs, 1, timing_runs=0)
    assert isinstance(view.report, list) and len(view.report) == 3
    assert view.summary().startswith("TorchFuser: 3 compiled graphs")


def test_save_html_writes_the_escaped_page(fake_core, tmp_path):
    view = explorer.show(double, 1, timing_runs=0)
    view._reports[0]._data["title"] = HOSTILE
    view.refresh()
    path = view.save_html(tmp_path / "report.html")
    page = path.read_text()
    assert HOSTILE not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_fallback_view_gets_static_html_only_without_front_end_bundle(fake_core):
    import explorer.widget as widget_module

    view = explorer.show(double, 1, timing_runs=0)
    if widget_module.USES_FALLBACK_VIEW:
        assert view._esm == widget_module.FALLBACK_ESM
        assert view.static_html == view.to_html()
    else:
        assert view._esm == widget_module.FRONT_END_BUNDLE.read_text()
        assert view.static_html == ""


def test_a_rerun_replaces_the_displayed_report_too(fake_core, monkeypatch):
    """The saved notebook must hold the latest report, not the one from the first display."""
    import IPython.display

    shown, updates = [], []

    class Handle:
        def update(self, data, **kwargs):
            updates.append(data)

    def fake_display(data, **kwargs):
        shown.append((data, kwargs))
        return Handle()

    monkeypatch.setattr(IPython.display, "display", fake_display)
    view = explorer.show(double, 3, timing_runs=0)
    view._ipython_display_()
    assert shown[0][1]["display_id"] is True and REPORT_MIME in shown[0][0]
    view.enabled_passes = ["fuse_gemm_epilogue"]
    view.rerun()
    (latest,) = updates
    passes = {p["name"]: p["enabled"] for p in latest[REPORT_MIME]["reports"][0]["passes"]}
    assert passes["fuse_pointwise"] is False
