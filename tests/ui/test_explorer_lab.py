"""The explorer in a real JupyterLab: the live widget, Re-run, and the saved notebook
reopened later, where the MIME renderer shows the view with no kernel behind it.

Screenshots land in test-artifacts/ui/.
"""
from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from conftest import REPO, TOKEN, answer_kernel_dialog, open_notebook

REPORT_MIME = "application/vnd.torchfuser.report+json"
HOSTILE_FIXTURE = REPO / "labextension" / "test" / "fixtures" / "hostile_bundle.json"

MLP_CELL = """\
import torch, explorer
torch.manual_seed(0)

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.act = torch.nn.GELU()
        self.fc2 = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))

view = explorer.show(MLP(), torch.randn(8, 16))
view"""

HOSTILE_CELL = f"""\
import json
from IPython.display import display
display({{"{REPORT_MIME}": json.load(open({str(HOSTILE_FIXTURE)!r})), "text/plain": "hostile report"}}, raw=True)"""

MAGIC_CELL = """\
%%torchfuse
a = torch.randn(64, 64)
b = torch.relu(a) * 2 + 1
print("a graph break")
c = torch.tanh(b) + b"""

LIVE = ".jp-torchfuser-view[data-interactive]"
STATIC = ".jp-torchfuser-view:not([data-interactive])"
DRAWN_AFTER = '.jp-torchfuser-graph[data-side="after"][data-state="drawn"]'
DRAWN_BEFORE = '.jp-torchfuser-graph[data-side="before"][data-state="drawn"]'


_open = open_notebook
_answer_kernel_dialog = answer_kernel_dialog


def _wait_for_kernel(page) -> str:
    return page.evaluate("""() => window.jupyterapp.shell.currentWidget.sessionContext.ready
        .then(() => window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.name ?? '')""")


def _kernel_now(page) -> str:
    # sessionContext.ready never resolves after "No Kernel", so ask without waiting.
    return page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.session?.kernel?.name ?? ''")


def _command(page, command: str, args: dict | None = None) -> None:
    # Not awaited: some commands resolve only when their work (or a dialog) finishes.
    page.evaluate(f"() => {{ window.jupyterapp.commands.execute({json.dumps(command)}, {json.dumps(args or {})}); }}")


def _cell(page, index: int):
    return page.locator(".jp-Notebook .jp-Cell").nth(index)


def _after_ids(view) -> list[str]:
    return view.locator(f'{DRAWN_AFTER} g.node').evaluate_all("els => els.map(e => e.dataset.nodeId)")


def _view_box_after(svg, action, old: str | None) -> str:
    """Runs `action`, then waits (briefly) for the SVG's viewBox to differ from `old`."""
    action()
    value = svg.get_attribute("viewBox")
    for _ in range(40):
        if value != old:
            break
        time.sleep(0.05)
        value = svg.get_attribute("viewBox")
    return value


def _shutdown_kernels(base: str) -> None:
    with urllib.request.urlopen(f"{base}/api/sessions?token={TOKEN}") as response:
        sessions = json.load(response)
    for session in sessions:
        request = urllib.request.Request(f"{base}/api/sessions/{session['id']}?token={TOKEN}", method="DELETE")
        urllib.request.urlopen(request).close()


@pytest.fixture(scope="module")
def saved_notebook(lab_server, browser, artifacts_dir):
    """Runs the explorer notebook live, checks the widget, saves it; yields its path."""
    base, root = lab_server
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(MLP_CELL), nbformat.v4.new_code_cell(HOSTILE_CELL),
                      nbformat.v4.new_code_cell("%load_ext explorer"), nbformat.v4.new_code_cell(MAGIC_CELL)]
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = Path(root) / "explorer_ui.ipynb"
    nbformat.write(notebook, path)
    context, page, errors = _open(browser, base, path.name)
    try:
        _answer_kernel_dialog(page, "Select")
        assert _wait_for_kernel(page) == "python3"
        _command(page, "notebook:run-all-cells")
        _answer_kernel_dialog(page, "Select", wait_ms=2_000)
        live = _cell(page, 0).locator(LIVE)
        try:
            live.locator(DRAWN_AFTER).wait_for(timeout=240_000)
            live.locator(DRAWN_BEFORE).wait_for(timeout=60_000)
        except Exception:
            page.screenshot(path=str(artifacts_dir / "live-widget-failed.png"), full_page=True)
            raise
        yield {"base": base, "path": path, "page": page, "live": live, "errors": errors}
        page.screenshot(path=str(artifacts_dir / "live-widget.png"), full_page=True)
    finally:
        context.close()


def test_live_widget_draws_both_graphs_and_shows_kernel_source(saved_notebook, artifacts_dir):
    live, page = saved_notebook["live"], saved_notebook["page"]
    assert live.locator('.jp-torchfuser-graph[data-side="before"] svg g.node').count() > 0
    assert live.locator('.jp-torchfuser-graph[data-side="after"] svg g.node').count() > 0
    kernels = live.locator(f"{DRAWN_AFTER} g.node.jp-torchfuser-kernel")
    assert kernels.count() >= 1
    kernels.first.click()
    source = live.locator(".jp-torchfuser-source")
    source.locator(".jp-torchfuser-cache[data-status]").wait_for(timeout=10_000)
    assert "__kernel" in source.inner_text()
    assert live.locator("input.jp-torchfuser-pass-toggle[data-pass='fuse_gemm_epilogue']").is_enabled()
    live.screenshot(path=str(artifacts_dir / "live-kernel-source.png"))
    # Layout ran in Web Workers; the on-page fallback registers this function.
    assert page.evaluate("typeof window.__torchfuserLayout") == "undefined"
    assert not saved_notebook["errors"], saved_notebook["errors"]


def test_timing_bar_shows_host_overhead_and_a_kernel_shows_its_lane(saved_notebook, artifacts_dir):
    live = saved_notebook["live"]
    # explorer.show timed eager and compiled: the compiled bar ends in a host-overhead segment.
    overhead = live.locator(".jp-torchfuser-timing .jp-torchfuser-timing-compiled > .jp-torchfuser-overhead")
    overhead.wait_for(state="attached", timeout=10_000)
    assert overhead.count() == 1
    width = overhead.evaluate("el => el.getBoundingClientRect().width")
    assert width > 0, "a tiny MLP's compiled call is mostly host time, yet the overhead segment has no width"
    assert "host overhead" in overhead.get_attribute("title")
    assert "launching kernels" in overhead.get_attribute("title")
    is_last = overhead.evaluate("el => el.nextElementSibling === null && el.previousElementSibling !== null")
    assert is_last, "the overhead segment comes after the kernel segments"
    assert "host overhead" in live.locator(".jp-torchfuser-timing-split").inner_text()
    # explorer.show ran the graph several times: the line under the bar says how the steady calls ran
    replay = live.locator(".jp-torchfuser-timing .jp-torchfuser-timing-replay").inner_text()
    assert replay.startswith("Steady calls") and ("replayed from a tape" in replay or "walk the plan" in replay)

    live.locator(f"{DRAWN_AFTER} g.node.jp-torchfuser-kernel").first.click()
    lane = live.locator(".jp-torchfuser-source .jp-torchfuser-source-header .jp-torchfuser-lane")
    lane.wait_for(timeout=10_000)
    assert lane.get_attribute("data-lane") in ("inline", "threaded")
    assert lane.get_attribute("title"), "the lane's reason is its tooltip"
    facts = live.locator(".jp-torchfuser-source .jp-torchfuser-facts").inner_text()
    assert "runs" in facts and lane.get_attribute("data-lane") in facts
    live.locator(".jp-torchfuser-timing").screenshot(path=str(artifacts_dir / "live-timing-overhead.png"))
    assert not saved_notebook["errors"], saved_notebook["errors"]


def test_hover_search_and_zoom_in_the_browser(saved_notebook):
    live, page = saved_notebook["live"], saved_notebook["page"]
    kernel = live.locator(f"{DRAWN_AFTER} g.node.jp-torchfuser-kernel").first
    kernel.hover()
    counterparts = live.locator('.jp-torchfuser-graph[data-side="before"] g.node.jp-torchfuser-counterpart')
    counterparts.first.wait_for(timeout=5_000)
    assert counterparts.evaluate_all("els => els.map(e => e.dataset.nodeId)")  # e.g. addmm, gelu

    live.locator("input.jp-torchfuser-search").fill("addmm")
    live.locator('.jp-torchfuser-graph[data-side="before"] g.node.jp-torchfuser-match').first.wait_for(timeout=5_000)
    assert "before" in live.locator(".jp-torchfuser-match-count").inner_text()
    live.locator("input.jp-torchfuser-search").fill("")

    svg = live.locator(f"{DRAWN_AFTER} svg")
    buttons = live.locator('.jp-torchfuser-graph-column:has([data-side="after"]) button.jp-torchfuser-zoom')
    fitted = _view_box_after(svg, lambda: buttons.filter(has_text="Fit").click(), None)
    zoomed = _view_box_after(svg, lambda: buttons.filter(has_text="+").click(), fitted)
    assert zoomed != fitted

    def drag():
        box = svg.bounding_box()
        page.mouse.move(box["x"] + 20, box["y"] + 20)
        page.mouse.down()
        page.mouse.move(box["x"] + 120, box["y"] + 80, steps=5)
        page.mouse.up()

    assert _view_box_after(svg, drag, zoomed) != zoomed
    assert _view_box_after(svg, lambda: buttons.filter(has_text="Fit").click(), None) == fitted


def test_rerun_without_gemm_epilogue_changes_the_after_graph(saved_notebook, artifacts_dir):
    live, page = saved_notebook["live"], saved_notebook["page"]
    before = _after_ids(live)
    live.locator("input.jp-torchfuser-pass-toggle[data-pass='fuse_gemm_epilogue']").uncheck()
    live.locator("button.jp-torchfuser-rerun").click()
    page.wait_for_function(
        """([root, selector, before]) => {
            const nodes = [...root.querySelectorAll(selector)].map(e => e.dataset.nodeId);
            return nodes.length > 0 && nodes.join() !== before.join();
        }""",
        arg=[live.element_handle(), f"{DRAWN_AFTER} g.node", before], timeout=120_000)
    after = _after_ids(live)
    assert after != before
    assert any(node.startswith("addmm") for node in after), after  # the GEMM stays an aten op
    assert live.locator("input.jp-torchfuser-pass-toggle[data-pass='fuse_gemm_epilogue']").is_checked() is False
    live.screenshot(path=str(artifacts_dir / "live-after-rerun.png"))


def test_live_widget_shows_runs_pass_changes_and_user_lines(saved_notebook, artifacts_dir):
    """#16 in the live widget: after the re-run above, two runs compare; a pass row marks what it changed; a
    user line highlights its kernel nodes."""
    live = saved_notebook["live"]
    runs = live.locator(".jp-torchfuser-run")
    runs.nth(1).wait_for(timeout=30_000)
    assert runs.count() == 2
    for i in range(2):
        runs.nth(i).locator("input.jp-torchfuser-run-pick").check()
    compare = live.locator(".jp-torchfuser-run-compare")
    compare.wait_for(timeout=5_000)
    # fuse_gemm_epilogue off: its GEMM kernels are gone in run 2.
    assert compare.locator('tbody tr[data-change="removed"]').count() >= 1
    assert "off: fuse_gemm_epilogue" in compare.inner_text()

    live.locator('.jp-torchfuser-pass[data-pass="fuse_pointwise"] .jp-torchfuser-pass-counts').click()
    live.locator(f'{DRAWN_AFTER} g.node[data-change="added"]').first.wait_for(timeout=30_000)
    assert live.locator(f'{DRAWN_BEFORE} g.node[data-change="removed"]').count() >= 1

    live.locator('.jp-torchfuser-pass[data-pass-row="__pipeline__"] .jp-torchfuser-pass-name').click()
    live.locator(DRAWN_AFTER).wait_for(timeout=30_000)
    live.locator(".jp-torchfuser-user-line").first.click()
    live.locator(f"{DRAWN_AFTER} g.node.jp-torchfuser-highlight").first.wait_for(timeout=5_000)
    live.screenshot(path=str(artifacts_dir / "live-history.png"))
    assert not saved_notebook["errors"], saved_notebook["errors"]


def test_hostile_names_in_lab_run_nothing(saved_notebook):
    page = saved_notebook["page"]
    # The second cell displays the hostile report through the MIME renderer alone.
    hostile = _cell(page, 1).locator(STATIC)
    hostile.locator(DRAWN_AFTER).wait_for(timeout=60_000)
    assert page.evaluate("window.__x") is None
    assert page.locator(".jp-torchfuser-view img, .jp-torchfuser-view script").count() == 0
    assert '<img src=x onerror="window.__x=1">' in hostile.locator(".jp-torchfuser-title").inner_text()
    assert '<img src=x onerror="window.__x=1">' in hostile.locator(".jp-torchfuser-timing-replay").inner_text()


def test_torchfuse_magic_with_a_graph_break_offers_both_graphs(saved_notebook, artifacts_dir):
    page = saved_notebook["page"]
    magic_view = _cell(page, 3).locator(LIVE)
    magic_view.locator(DRAWN_AFTER).wait_for(timeout=120_000)
    breaks = magic_view.locator(".jp-torchfuser-breaks .jp-torchfuser-break-code")
    assert 'print("a graph break")' in breaks.all_inner_texts()
    select = magic_view.locator("select.jp-torchfuser-report-select")
    assert select.locator("option").count() >= 2
    first_title = magic_view.locator(".jp-torchfuser-title").inner_text()
    select.select_option(index=1)
    page.wait_for_function("([el, t]) => el.textContent !== t",
                           arg=[magic_view.locator(".jp-torchfuser-title").element_handle(), first_title])
    magic_view.locator(DRAWN_AFTER).wait_for(timeout=30_000)
    magic_view.screenshot(path=str(artifacts_dir / "magic-graph-break.png"))


def test_saved_notebook_reopened_without_kernel_shows_static_view(saved_notebook, lab_server, browser, artifacts_dir):
    base, page = saved_notebook["base"], saved_notebook["page"]
    _command(page, "docmanager:save")
    page.wait_for_function("() => !document.querySelector('.jp-mod-dirty')", timeout=30_000)
    _shutdown_kernels(base)
    saved = nbformat.read(saved_notebook["path"], as_version=4)
    outputs = [o for o in saved.cells[0].outputs if REPORT_MIME in o.get("data", {})]
    assert outputs, "the saved output carries no TorchFuser report"

    # A copy whose kernel cannot start: the page opens with no kernel at all.
    saved.metadata["kernelspec"] = {"name": "torchfuser-no-such-kernel", "display_name": "none", "language": "none"}
    saved.metadata.pop("language_info", None)
    reopened = saved_notebook["path"].with_name("reopened.ipynb")
    nbformat.write(saved, reopened)
    context, page, errors = _open(browser, base, reopened.name)
    try:
        assert _answer_kernel_dialog(page, "No Kernel", wait_ms=30_000), "Lab did not offer to open without a kernel"
        assert _kernel_now(page) == ""
        view = _cell(page, 0).locator(STATIC)
        view.locator(DRAWN_AFTER).wait_for(timeout=60_000)
        view.locator(DRAWN_BEFORE).wait_for(timeout=60_000)
        assert view.locator(f"{DRAWN_AFTER} g.node.jp-torchfuser-kernel").count() >= 1
        toggle = view.locator("input.jp-torchfuser-pass-toggle").first
        assert toggle.is_disabled()
        assert view.locator("button.jp-torchfuser-rerun").is_disabled()
        assert "running kernel" in view.locator(".jp-torchfuser-kernel-note").inner_text()
        view.locator(f"{DRAWN_AFTER} g.node.jp-torchfuser-kernel").first.click()
        assert "__kernel" in view.locator(".jp-torchfuser-source").inner_text()
        assert page.locator(LIVE).count() == 0
        page.screenshot(path=str(artifacts_dir / "reopened-static-view.png"), full_page=True)

        light_background = view.evaluate("el => getComputedStyle(el).backgroundColor")
        _command(page, "apputils:change-theme", {"theme": "JupyterLab Dark"})
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'", timeout=30_000)
        page.wait_for_timeout(500)
        dark_background = view.evaluate("el => getComputedStyle(el).backgroundColor")
        assert dark_background != light_background, "the view does not follow the Lab theme"
        page.screenshot(path=str(artifacts_dir / "reopened-static-view-dark.png"), full_page=True)
        _command(page, "apputils:change-theme", {"theme": "JupyterLab Light"})
        assert not errors, errors
    finally:
        context.close()
