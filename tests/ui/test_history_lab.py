"""Issue #16 in JupyterLab, through the MIME renderer (a saved notebook, no kernel): a pass row shows what
the pass changed and what it left unfused, graph breaks and recompiles are listed, two runs compare, and a
user line highlights the kernels it became (and a kernel its lines).

The bundle comes from the real compiler (history_bundle.py: a function with a print and a float64 matmul,
re-run with fuse_pointwise off), checked against report.schema.json.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from conftest import answer_kernel_dialog, open_notebook
from history_bundle import validate
from torchfuser.report.wire import expand_line_nodes

REPORT_MIME = "application/vnd.torchfuser.report+json"
STATIC = ".jp-torchfuser-view:not([data-interactive])"
BEFORE = '.jp-torchfuser-graph[data-side="before"][data-state="drawn"]'
AFTER = '.jp-torchfuser-graph[data-side="after"][data-state="drawn"]'
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def history_view(lab_server, browser, artifacts_dir, tmp_path_factory):
    """The generated bundle saved in a notebook with no kernel, opened in Lab; yields (bundle, page, view)."""
    base, root = lab_server
    out = tmp_path_factory.mktemp("history") / "bundle.json"
    # A child process: the compiler (torch, OpenCL) stays out of the test process.
    subprocess.run([sys.executable, str(HERE / "history_bundle.py"), str(out)], check=True, timeout=600,
                   cwd=HERE.parents[1])
    bundle = json.loads(out.read_text())
    validate(bundle)
    notebook = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("view = explorer.show(scaled_then_printed, x, w)  # saved output")
    cell.outputs = [nbformat.v4.new_output("display_data", data={REPORT_MIME: bundle, "text/plain": "report"})]
    notebook.cells.append(cell)
    notebook.metadata["kernelspec"] = {"name": "torchfuser-no-such-kernel", "display_name": "none", "language": "none"}
    nbformat.write(notebook, Path(root) / "history.ipynb")
    context, page, errors = open_notebook(browser, base, "history.ipynb")
    try:
        answer_kernel_dialog(page, "No Kernel", wait_ms=30_000)
        view = page.locator(STATIC).first
        view.locator(AFTER).wait_for(timeout=60_000)
        view.locator(BEFORE).wait_for(timeout=60_000)
        yield bundle, page, view
        page.screenshot(path=str(artifacts_dir / "history-view.png"), full_page=True)
        assert not errors, errors
    finally:
        context.close()


def _ids(view, selector: str) -> list[str]:
    return view.locator(selector).evaluate_all("els => els.map(e => e.dataset.nodeId)")


def test_a_pass_row_shows_what_it_changed_and_left_unfused(history_view, artifacts_dir):
    bundle, page, view = history_view
    change = next(p for p in bundle["reports"][0]["passes"] if p["name"] == "fuse_gemm_epilogue")["change"]
    row = view.locator('.jp-torchfuser-pass[data-pass="fuse_gemm_epilogue"]')
    row.locator(".jp-torchfuser-pass-counts").click()  # the row, not its checkbox
    page.wait_for_function("row => row.hasAttribute('data-selected')", arg=row.element_handle())
    view.locator(f'{AFTER} g.node[data-change="added"]').first.wait_for(timeout=30_000)
    assert sorted(_ids(view, f'{BEFORE} g.node[data-change="removed"]')) == sorted(change["removed"])
    assert _ids(view, f'{AFTER} g.node[data-change="added"]') == [node["id"] for _, node in change["added"]]
    assert _ids(view, f'{BEFORE} g.node[data-change="rewritten"]') == [node["id"] for _, node in change["rewritten"]]
    view.locator(".jp-torchfuser-graphs").screenshot(path=str(artifacts_dir / "history-pass-change.png"))

    unfused = row.locator("details.jp-torchfuser-unfused")
    assert unfused.locator("summary").inner_text() == "1 left unfused"
    unfused.locator("summary").click()
    assert unfused.locator("li").inner_text() == "mm_1: the GEMM kernel takes float32 operands only"
    assert row.get_attribute("data-selected") is not None  # opening the list did not change the selection

    visible = view.locator(".jp-torchfuser-pass[data-pass]:visible")
    everything = visible.count()
    view.locator("input.jp-torchfuser-hide-unchanged").check()
    assert visible.evaluate_all("els => els.map(e => e.dataset.pass)") == ["fuse_gemm_epilogue"]
    view.locator("input.jp-torchfuser-hide-unchanged").uncheck()
    assert visible.count() == everything


def test_graph_breaks_and_recompiles_are_listed(history_view):
    bundle, _, view = history_view
    broken = bundle["reports"][0]["graph_break"]
    breaks = view.locator(".jp-torchfuser-breaks")
    assert breaks.count() == 1
    first = breaks.locator(".jp-torchfuser-break").first
    assert first.locator(".jp-torchfuser-break-graph").inner_text() == bundle["reports"][0]["title"]
    assert first.locator(".jp-torchfuser-break-reason").inner_text() == f"graph break: {broken['reason']}"
    assert "print" in first.locator(".jp-torchfuser-break-explanation").inner_text()
    assert first.locator(".jp-torchfuser-break-location").inner_text() == f"{broken['file']}:{broken['line']}"
    assert first.locator(".jp-torchfuser-break-code").inner_text() == 'print("a graph break")'
    assert first.locator(".jp-torchfuser-break-hints li").count() == len(broken["hints"])
    recompiles = breaks.locator(".jp-torchfuser-recompile")
    assert recompiles.count() == sum(1 for r in bundle["reports"] if r.get("recompile_reason"))
    assert recompiles.first.inner_text().startswith("recompiled because: ")


def test_two_runs_compare(history_view, artifacts_dir):
    bundle, _, view = history_view
    first, second = bundle["runs"]
    runs = view.locator(".jp-torchfuser-run")
    assert runs.count() == 2
    assert "passes off: fuse_pointwise" in runs.nth(1).inner_text()
    assert first["kernels"][0]["name"] in runs.nth(0).inner_text()
    assert view.locator(".jp-torchfuser-run-compare").count() == 0
    for i in range(2):
        runs.nth(i).locator("input.jp-torchfuser-run-pick").check()
    compare = view.locator(".jp-torchfuser-run-compare")
    compare.wait_for(timeout=5_000)
    rows = compare.locator("tbody tr").evaluate_all("els => els.map(e => [e.dataset.kernel, e.dataset.change])")
    new_names = {k["name"] for k in second["kernels"]}
    old_names = {k["name"] for k in first["kernels"]}
    assert sorted(n for n, c in rows if c == "removed") == sorted(old_names - new_names)
    assert sorted(n for n, c in rows if c == "shared") == sorted(old_names & new_names)
    assert not [n for n, c in rows if c == "added"]
    assert "speedup " in compare.locator(".jp-torchfuser-speedup-delta").inner_text()
    compare.screenshot(path=str(artifacts_dir / "history-run-compare.png"))


def test_user_lines_and_kernel_nodes_highlight_each_other(history_view):
    bundle, page, view = history_view
    view.locator('.jp-torchfuser-pass[data-pass-row="__pipeline__"] .jp-torchfuser-pass-name').click()
    view.locator(AFTER).wait_for(timeout=30_000)
    line = view.locator(".jp-torchfuser-user-line").first
    assert "y = torch.relu(x @ w) * 2 + 1" in line.inner_text()
    line.click()
    highlighted = view.locator(f"{AFTER} g.node.jp-torchfuser-highlight")
    highlighted.first.wait_for(timeout=5_000)
    # The kernel's node in the final graph (named by its group there, not by the OpenCL kernel name).
    assert _ids(view, f"{AFTER} g.node.jp-torchfuser-highlight") == _ids(view, f"{AFTER} g.node.jp-torchfuser-kernel")
    assert "jp-torchfuser-highlight" in line.get_attribute("class")

    view.locator(f"{AFTER} g.node.jp-torchfuser-kernel").first.click()
    assert highlighted.count() == 0
    page.wait_for_function("el => el.classList.contains('jp-torchfuser-highlight')", arg=line.element_handle())


def _report_node_ids(report: dict) -> set[str]:
    """Every node id of a schema v2 report: its captured and ATen graphs, and what the passes added or rewrote."""
    ids = {n["id"] for g in report["graphs"].values() if g for n in g["nodes"]}
    for change in (p.get("change") for p in report["passes"]):
        ids |= {node["id"] for key in ("added", "rewritten") for _, node in (change or {}).get(key, [])}
    return ids


def test_an_opencl_line_highlights_its_nodes_and_user_lines(history_view, artifacts_dir):
    bundle, page, view = history_view
    report = bundle["reports"][0]
    view.locator('.jp-torchfuser-pass[data-pass-row="__pipeline__"] .jp-torchfuser-pass-name').click()
    view.locator(AFTER).wait_for(timeout=30_000)
    view.locator(f"{AFTER} g.node.jp-torchfuser-kernel").first.click()
    kernel = next(k for k in report["kernels"] if k["name"] == view.locator(".jp-torchfuser-source").get_attribute("data-kernel"))
    source = report["kernel_sources"][kernel["cache_key"]]["source"]
    lines = view.locator(".jp-torchfuser-source .jp-torchfuser-source-line")
    assert lines.evaluate_all("els => els.map(e => e.dataset.line)") == [str(i + 1) for i in range(len(source.splitlines()))]
    mapped = dict(view.locator(".jp-torchfuser-source-line[data-nodes]").evaluate_all(
        "els => els.map(e => [e.dataset.line, e.dataset.nodes])"))
    assert mapped and mapped == {line: " ".join(ids) for line, ids in expand_line_nodes(kernel["line_nodes"]).items()}
    assert {i for ids in mapped.values() for i in ids.split()} <= _report_node_ids(report)
    # The newline kept in each line (for copying) adds no empty line: a short line is as high as the last
    # one, which has none (long lines may wrap: Lab's output CSS makes the code pre-wrap).
    heights = lines.evaluate_all("els => els.map(e => e.getBoundingClientRect().height)")
    assert {h for h, text in zip(heights, source.splitlines()) if len(text) < 40} == {heights[-1]}

    targets = {n["id"]: n["target"] for n in report["graphs"]["aten"]["nodes"]}
    number, ids = next((n, ids.split()) for n, ids in mapped.items() if any("view" not in targets[i] for i in ids.split()))
    line = view.locator(f'.jp-torchfuser-source-line[data-line="{number}"]')
    line.click()
    assert line.get_attribute("data-selected") is not None
    view.locator(f"{BEFORE} g.node.jp-torchfuser-highlight").first.wait_for(timeout=5_000)
    drawn_before = set(_ids(view, f"{BEFORE} g.node"))
    assert sorted(_ids(view, f"{BEFORE} g.node.jp-torchfuser-highlight")) == sorted(set(ids) & drawn_before)
    # After fusion the line's nodes are the kernel's node.
    assert _ids(view, f"{AFTER} g.node.jp-torchfuser-highlight") == [kernel["node"]]
    user_lines = view.locator(".jp-torchfuser-user-line.jp-torchfuser-highlight")
    user_lines.first.wait_for(timeout=5_000)
    assert all("y = torch.relu(x @ w) * 2 + 1" in text for text in user_lines.all_inner_texts())
    view.locator(".jp-torchfuser-source").screenshot(path=str(artifacts_dir / "history-source-line.png"))
