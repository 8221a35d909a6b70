"""The static HTML page of CompileReports: content, escaping of user data, SVG safety, big graphs."""
from __future__ import annotations

import copy
import json
import re
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "fixtures"))
import report_factory  # noqa: E402

from torchfuser.report import svg as report_svg  # noqa: E402
from torchfuser.report.compile_report import CompileReport, KernelEntry  # noqa: E402
from torchfuser.report.html import render_html, render_text, split_compiled  # noqa: E402

HOSTILE = "<img src=x onerror=alert(1)>"
needs_dot = pytest.mark.skipif(not report_svg.dot_available(), reason="system Graphviz `dot` not installed")


class MarkupCensus(HTMLParser):
    """Every tag and attribute the browser would create from the page."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attributes: list[tuple[str, str, str | None]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attributes += [(tag, name, value) for name, value in attrs]

    def handle_data(self, data):
        self.text.append(data)


def load_fixture() -> dict:
    return json.loads((Path(__file__).parent / "fixtures" / "mlp_report.json").read_text())


def hostile_report() -> dict:
    report = report_factory.mlp_report(fc1=HOSTILE, title=HOSTILE)
    report["kernels"][0]["source"] = f"</pre><script>alert(1)</script>/* {HOSTILE} */"
    report["fallbacks"][0].update(reason=HOSTILE, module=HOSTILE, code=HOSTILE)
    report["passes"][0]["stats"][HOSTILE] = 1
    report["device"]["name"] = HOSTILE
    report["kernels"][1].update(lane=HOSTILE, lane_reason=HOSTILE)
    report["replay"] = {"calls": 6, "replayed": 0, "launches": None, "run_as": None, "walks_because": HOSTILE}
    return report


def assert_inert(page: str) -> MarkupCensus:
    census = MarkupCensus(page)
    assert not {"img", "script", "iframe", "object", "embed", "foreignobject", "image"} & set(census.tags)
    handlers = [(t, n) for t, n, _ in census.attributes if n.startswith("on")]
    assert handlers == []
    assert not [v for _, n, v in census.attributes if n in ("src", "href", "xlink:href")]
    return census


def test_fixture_page_shows_passes_kernels_fallbacks_and_timing():
    page = render_html([load_fixture()])
    census = MarkupCensus(page)
    text = " ".join(census.text)
    for expected in ("fuse_gemm_epilogue", "fuse_pointwise", "eliminate_dead_code", "tf_gemm_0", "tf_pointwise_2",
                     "no OpenCL kernel for this op", "aten.cumsum.default", "2.43×", "5.10 ms", "2.10 ms",
                     "gemm_epilogue=2", "810.00 ms", "__kernel void tf_gemm_0"):
        assert expected in text, expected
    cache_cells = {v: census.attributes.count(("span", "class", v)) for v in ("tf-cache-hit", "tf-cache-miss",
                                                                               "tf-cache-disk")}
    assert cache_cells == {"tf-cache-hit": 1, "tf-cache-miss": 1, "tf-cache-disk": 1}
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")


@needs_dot
def test_svg_keeps_node_ids_kernel_class_tooltips_and_group_colours():
    page = render_html([load_fixture()])
    # gemm and pointwise before/after, dead-code pass once (unchanged), the aten graph
    assert page.count("<svg") == 6
    census = MarkupCensus(page)
    g_classes = {v for t, n, v in census.attributes if t == "g" and n == "class"}
    assert "node jp-torchfuser-kernel" in g_classes
    ids = {v for t, n, v in census.attributes if t == "g" and n == "id"}
    assert {"addmm", "gelu", "tf_gemm_0", "tf_gemm_1", "tf_pointwise_2"} <= ids
    titles = [v for t, n, v in census.attributes if n == "xlink:title"]
    assert "[8, 64] float32 fc1 model.py:12 x = self.fc1(x)" in titles
    # fused group 0 (t, addmm, gelu before; tf_gemm_0 after) is drawn in one colour on both sides
    fills = re.findall(r'<g id="(addmm|gelu|tf_gemm_0)" class="[^"]*">.*?fill="(#[0-9a-f]+)"', page, re.S)
    assert {node for node, _ in fills} == {"addmm", "gelu", "tf_gemm_0"}
    assert {colour for _, colour in fills} == {"#aec7e8"}


@needs_dot
def test_hostile_module_name_appears_only_as_text():
    page = render_html([hostile_report()])
    assert HOSTILE not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    census = assert_inert(page)
    assert any(HOSTILE in chunk for chunk in census.text)  # visible as text, e.g. the title and module column
    assert any(HOSTILE in (v or "") for _, n, v in census.attributes if n == "xlink:title")  # tooltip, as text
    assert ("span", "title", HOSTILE) in census.attributes  # the lane's reason, as text
    assert f"Steady calls walk the plan: {HOSTILE}" in census.text  # why no tape, as text
    assert "<svg" in page  # the graphs were still drawn


def test_hostile_report_is_inert_without_dot(monkeypatch):
    monkeypatch.setattr(report_svg, "dot_available", lambda: False)
    page = render_html([hostile_report()])
    assert HOSTILE not in page and "<svg" not in page
    census = assert_inert(page)
    assert "Graphviz `dot` is not on PATH" in " ".join(census.text)
    assert any("digraph G" in chunk and HOSTILE in chunk for chunk in census.text)  # the DOT text, escaped


@needs_dot
def test_svg_from_hostile_dot_is_reduced_to_drawing_elements():
    linking_dot = ('digraph G { a [id="a" URL="javascript:alert(1)" tooltip="t" label=<<B>bold</B>>];'
                   ' b [href="http://example.com/x"]; a -> b }')
    assert "javascript:" in report_svg.graphviz.Source(linking_dot).pipe(format="svg", encoding="utf-8")
    report = load_fixture()
    report["passes"][0]["graph_before"] = dict(report["passes"][0]["graph_before"], dot=linking_dot)
    report["passes"][0]["graph_after"] = dict(report["passes"][0]["graph_after"], dot=linking_dot.replace(
        "<<B>bold</B>>", '<<TABLE><TR><TD><IMG SRC="/etc/hostname"/></TD></TR></TABLE>>'))
    page = render_html([report])
    census = assert_inert(page)
    assert ("g", "id", "a") in census.attributes  # drawn, links dropped
    assert "javascript:" not in page.split("after fuse_gemm_epilogue")[0]
    assert "example.com" not in page.split("after fuse_gemm_epilogue")[0]


def test_sanitize_svg_drops_scripts_handlers_and_external_references():
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="x()">'
           '<script>alert(1)</script><foreignObject><div>hi</div></foreignObject>'
           '<g id="n" class="node jp-torchfuser-kernel"><a xlink:href="http://evil" xlink:title="&lt;b&gt;">'
           '<text fill="url(http://evil/#x)">&lt;img&gt;</text><polygon fill="url(#grad)"/></a>'
           '<image xlink:href="http://evil/i.png"/><use href="#n"/></g></svg>')
    clean = report_svg.sanitize_svg(svg)
    for banned in ("script", "foreignObject", "onload", "http://evil", "<image", "<use", "<div"):
        assert banned not in clean
    assert '<g id="n" class="node jp-torchfuser-kernel">' in clean
    assert 'xlink:title="&lt;b&gt;"' in clean and "&lt;img&gt;" in clean and 'fill="url(#grad)"' in clean


def test_sanitize_svg_rejects_entity_declarations():
    with pytest.raises(ValueError):
        report_svg.sanitize_svg('<!DOCTYPE svg [<!ENTITY a "b">]><svg xmlns="http://www.w3.org/2000/svg"/>')


@needs_dot
def test_undrawable_dot_falls_back_to_text_and_says_why():
    report = load_fixture()
    report["passes"][0]["graph_before"] = dict(report["passes"][0]["graph_before"], dot="digraph { a -> }")
    page = render_html([report])
    assert "Graphviz could not draw this graph" in page
    assert "digraph { a -&gt; }" in page


def test_page_has_no_external_urls():
    page = render_html([load_fixture()])
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}
    assert "<link" not in page and "<script" not in page and "@import" not in page


def test_disabled_pass_and_missing_measurements_are_stated():
    report = report_factory.mlp_report(enabled=["fuse_pointwise", "eliminate_dead_code"])
    report["timings"].update(eager_seconds=None, compiled_seconds=None, speedup=None)
    report["device"] = None
    text = " ".join(MarkupCensus(render_html([report])).text)
    assert "fuse_gemm_epilogue: disabled" in text
    assert "Eager vs compiled not measured" in text
    assert "No OpenCL device" in text


def test_several_reports_share_one_page_and_summary():
    first, second = load_fixture(), copy.deepcopy(load_fixture())
    second["title"] = "MLP backward"
    second["schema_version"] = 3
    page = render_html([first, second], title="my cell")
    assert 'id="tf-report-0"' in page and 'id="tf-report-1"' in page
    assert "<title>my cell</title>" in page
    assert "may be incomplete: TorchFuser report schema_version 3 is not one this version reads" in page
    summary = render_text([first, second])
    assert summary.splitlines()[0] == "TorchFuser: 2 compiled graphs"
    assert "- MLP backward: passes on [fuse_gemm_epilogue*, fuse_pointwise*, eliminate_dead_code]" in summary
    assert "3 kernels (1 disk, 1 hit, 1 miss); 1 fallback; speedup 2.43×" in summary


def test_empty_report_list_renders_a_page():
    assert "No graphs were compiled." in render_html([])


@needs_dot
def test_two_thousand_node_report_renders_quickly_as_module_overview_in_a_notebook_output():
    report = report_factory.large_report(n_nodes=2000)
    report_svg.dot_to_svg.cache_clear()
    start = time.perf_counter()
    page = render_html([report], compact=True)
    seconds = time.perf_counter() - start
    print(f"\n2,000-node report page: {seconds:.3f} s, {len(page) / 1e3:.0f} kB")
    assert seconds < 3.0
    assert "2000 nodes: too many to draw here" in page
    assert len(page) < 500_000
    census = MarkupCensus(page)
    assert ("g", "class", "node jp-torchfuser-module-fused") in census.attributes


def test_module_overview_groups_by_module_prefix():
    graph = report_factory.large_report(n_nodes=2000)["passes"][0]["graph_after"]
    dot, depth = report_svg.module_overview_dot(graph, max_boxes=60)
    assert depth == 3  # layers.N.block: 10 boxes; depth 4 would make 100
    assert dot.count("label=") == 10 and dot.count('label="layers.3.block\\n200 nodes, 40 fused kernels"') == 1


def test_repeated_kernels_show_their_source_once_and_long_provenance_is_cut():
    report = load_fixture()
    layer_kernel = report["kernels"][0]
    report["kernels"] = [dict(layer_kernel, group=g, nodes=[f"addmm_{g}"]) for g in range(20)]
    report["kernels"][0]["sources"] = [dict(layer_kernel["sources"][0], line=n) for n in range(1, 8)]
    page = render_html([report])
    assert page.count("<pre>__kernel void tf_gemm_0") == 1
    assert "20 fused nodes, covers addmm_0, addmm_1" in page and "and 8 more" in page
    assert page.count("<tr><td><code>tf_gemm_0</code></td><td>tf_gemm_0</td>") == 20
    assert "… and 4 more" in page


def _overhead_width(page: str) -> float:
    match = re.search(r'<div class="tf-bar tf-overhead" style="width:([0-9.]+)%" title="([^"]*)"', page)
    assert match, "no host overhead segment"
    assert "host overhead" in match.group(2) and "launching kernels" in match.group(2)
    return float(match.group(1))


def test_timing_splits_compiled_time_into_kernels_and_host_overhead():
    report = report_factory.mlp_report()  # 0.84 ms of kernels over 4 calls; compiled 2.1 ms per call
    assert report["timings"]["kernel_seconds"] == pytest.approx(0.00021)
    page = render_html([report])
    assert _overhead_width(page) == pytest.approx(90.0, abs=0.1)  # 1.89 of 2.1 ms
    text = "".join(MarkupCensus(page).text)
    assert "Compiled 2.10 ms per call = kernels 210.0 µs + host overhead 1.89 ms" in text
    assert "host overhead per call1.89 ms" in text  # a row of the timing table


def test_report_without_split_fields_derives_the_overhead():
    old = load_fixture()  # written before kernel_seconds / host_overhead_seconds / lane existed
    assert "host_overhead_seconds" not in old["timings"] and "lane" not in old["kernels"][0]
    assert split_compiled(old) == pytest.approx((0.00021, 0.00189))
    page = render_html([old])
    assert _overhead_width(page) == pytest.approx(90.0, abs=0.1)
    assert 'class="tf-lane' not in page  # lane unknown: a dash


def test_split_uses_the_reports_own_figures_and_clamps():
    report = report_factory.mlp_report()
    report["timings"].update(kernel_seconds=0.0015, host_overhead_seconds=0.0006)
    assert split_compiled(report) == (0.0015, 0.0006)
    report["timings"].update(kernel_seconds=None, host_overhead_seconds=None, compiled_seconds=0.0001)
    assert split_compiled(report) == pytest.approx((0.00021, 0.0))
    report["timings"].update(calls=0, compiled_seconds=None)
    assert split_compiled(report) == (None, None)
    page = render_html([report])
    assert "<div class=\"tf-bar tf-overhead\"" not in page


def test_kernel_table_shows_each_lane_with_its_reason():
    page = render_html([report_factory.mlp_report()])
    census = MarkupCensus(page)
    lanes = [v for t, n, v in census.attributes if t == "span" and n == "class" and v.startswith("tf-lane")]
    assert lanes == ["tf-lane tf-lane-threaded", "tf-lane tf-lane-inline", "tf-lane tf-lane-inline"]
    assert ("span", "title", report_factory.LANE_REASONS["inline"]) in census.attributes
    assert "<th>lane</th>" in page


def test_timing_says_how_steady_calls_ran():
    report = report_factory.mlp_report()
    assert "tf-replay" not in render_html([report])  # a report from before the field: nothing to say
    report["replay"] = {"calls": 124, "replayed": 122, "launches": 55, "run_as": 51, "walks_because": None}
    assert "Steady calls: 122 of 124 replayed from a tape (55 launches run as 51)" in MarkupCensus(
        render_html([report])).text
    report["replay"].update(launches=2, run_as=2)  # nothing chained: no count to compare
    assert "Steady calls: 122 of 124 replayed from a tape" in MarkupCensus(render_html([report])).text
    report["replay"] = {"calls": 6, "replayed": 0, "launches": None, "run_as": None,
                        "walks_because": "index_put.default runs in PyTorch"}
    assert "Steady calls walk the plan: index_put.default runs in PyTorch" in MarkupCensus(
        render_html([report])).text
    report["replay"].update(calls=0)  # before any call a stale reason says nothing
    assert "tf-replay" not in render_html([report])


class _Stats:
    def __init__(self, launches: int, seconds: float):
        self.launches, self.profiled, self.seconds = launches, launches, seconds


def _live_report(calls: int, stats: dict) -> CompileReport:
    def entry(node: str, lane: str) -> KernelEntry:
        return KernelEntry(name=f"tf_{node}", node=node, kind="pointwise", group=0, cache_key="0" * 64, source="",
                           cache="miss", build_seconds=0.1, spec="Spec()", nodes=["add"], sources=[], lane=lane,
                           lane_reason=f"{lane} because")
    report = CompileReport(title="t", device=None, kernels=[entry("a", "inline"), entry("b", "threaded")])
    report.plan = type("Plan", (), {"calls": calls, "stats": stats})()
    return report


def test_compile_report_timings_carry_kernel_time_and_host_overhead():
    fresh = _live_report(0, {}).to_dict()["timings"]
    assert fresh["kernel_seconds"] is None and fresh["host_overhead_seconds"] is None

    report = _live_report(4, {"a": _Stats(4, 0.004), "b": _Stats(4, 0.002)})
    timings = report.to_dict()["timings"]
    assert timings["kernel_seconds"] == pytest.approx(0.0015) and timings["host_overhead_seconds"] is None
    report.record_timing(eager_seconds=0.01, compiled_seconds=0.002)
    data = report.to_dict()
    assert data["timings"]["host_overhead_seconds"] == pytest.approx(0.0005)
    assert [(k["lane"], k["lane_reason"]) for k in data["kernels"]] == [("inline", "inline because"),
                                                                        ("threaded", "threaded because")]
    assert split_compiled(data) == pytest.approx((0.0015, 0.0005))
    summary = report.summary()
    assert "per call: compiled 2.000 ms = kernels 1.500 ms + host overhead 0.500 ms" in summary
    assert "inline" in summary.splitlines()[2]

    report.record_timing(compiled_seconds=0.001)  # faster than its kernels' profiled time: clamped
    assert report.to_dict()["timings"]["host_overhead_seconds"] == 0.0
