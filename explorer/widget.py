"""The explorer widget, Python side: traits the TypeScript view reads, and re-running with other passes.

Contract with labextension/ (the front end):
- `bundle` (synced Dict): {"kind": "torchfuser.explorer", "schema_version": 2, "pipeline": [...],
  "reports": [CompileReport dicts], "runs": [run records, explorer/runs.py]} (torchfuser/report/report.schema.json)
- `enabled_passes` (synced List[str]), `status` (synced: "idle" | "running" | "error: <message>")
- the front end sends {"type": "rerun", "enabled_passes": [...]}; Python re-runs and updates `bundle`.

The front end is the bundle the labextension build writes to explorer/static/widget.js. Without
it, a small inline view shows the static HTML page (escaped by torchfuser.report_html) with pass
checkboxes and a Re-run button.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from torchfuser.report.html import render_html, render_text

from .programs import Program
from .runs import compare_runs, run_record

REPORT_MIME = "application/vnd.torchfuser.report+json"
BUNDLE_KIND = "torchfuser.explorer"
BUNDLE_SCHEMA_VERSION = 2  # report.schema.json; the view reads 1 and 2
FRONT_END_BUNDLE = Path(__file__).resolve().parent / "static" / "widget.js"
USES_FALLBACK_VIEW = not FRONT_END_BUNDLE.is_file()

log = logging.getLogger("torchfuser.explorer")

FALLBACK_ESM = """
function render({ model, el }) {
  const root = document.createElement("div");
  const bar = document.createElement("div");
  const status = document.createElement("span");
  const button = document.createElement("button");
  const page = document.createElement("div");
  button.textContent = "Re-run";
  bar.style.cssText = "display:flex;gap:10px;flex-wrap:wrap;align-items:center;margin:4px 0";
  root.append(bar, page);
  el.append(root);
  function checked() {
    return [...bar.querySelectorAll("input:checked")].map((box) => box.value);
  }
  function draw() {
    bar.replaceChildren();
    const enabled = new Set(model.get("enabled_passes"));
    for (const name of (model.get("bundle").pipeline || [])) {
      const label = document.createElement("label");
      const box = document.createElement("input");
      box.type = "checkbox";
      box.value = name;
      box.checked = enabled.has(name);
      box.onchange = () => { model.set("enabled_passes", checked()); model.save_changes(); };
      label.append(box, document.createTextNode(" " + name));
      bar.append(label);
    }
    status.textContent = model.get("status");
    button.disabled = model.get("status") === "running";
    bar.append(button, status);
    // static_html comes from torchfuser.report_html: every report value in it is escaped text.
    page.innerHTML = model.get("static_html");
  }
  button.onclick = () => model.send({ type: "rerun", enabled_passes: checked() });
  for (const name of ["bundle", "enabled_passes", "status", "static_html"]) {
    model.on("change:" + name, draw);
  }
  draw();
}
export default { render };
"""


def report_to_dict(report: Any) -> dict:
    return report.to_dict() if hasattr(report, "to_dict") else dict(report)


def make_bundle(pipeline: Sequence[str], reports: Sequence[Any], runs: Sequence[dict] = ()) -> dict:
    return {"kind": BUNDLE_KIND, "schema_version": BUNDLE_SCHEMA_VERSION, "pipeline": list(pipeline),
            "reports": [report_to_dict(r) for r in reports], "runs": list(runs)}


class ExplorerWidget(anywidget.AnyWidget):
    """Live view of one program's CompileReports; toggle passes and re-run from Python or the page."""

    _esm = FALLBACK_ESM if USES_FALLBACK_VIEW else FRONT_END_BUNDLE
    bundle = traitlets.Dict().tag(sync=True)
    enabled_passes = traitlets.List(traitlets.Unicode()).tag(sync=True)
    status = traitlets.Unicode("idle").tag(sync=True)
    # Only the inline fallback view reads this; the TypeScript view draws from `bundle`.
    static_html = traitlets.Unicode("").tag(sync=True)

    def __init__(self, program: Program, *, pipeline: Sequence[str], enabled_passes: Sequence[str],
                 title: str | None = None, **kwargs: Any) -> None:
        self._program = program
        self._pipeline = list(pipeline)
        self._title = title
        self._reports: list[Any] = []
        self._runs: list[dict] = []  # run_record of every (re-)run, oldest first
        super().__init__(enabled_passes=list(enabled_passes), **kwargs)
        self.bundle = make_bundle(self._pipeline, [])
        self.on_msg(self._on_front_end_message)

    @traitlets.validate("enabled_passes")
    def _check_enabled_passes(self, proposal: dict) -> list[str]:
        names = list(proposal["value"])
        unknown = [n for n in names if n not in self._pipeline]
        if unknown:
            raise traitlets.TraitError(f"unknown pass {', '.join(map(repr, unknown))}; "
                                       f"the pipeline has: {', '.join(self._pipeline)}")
        return [n for n in self._pipeline if n in names]  # pipeline order, no duplicates

    @property
    def report(self) -> Any:
        """The CompileReport of the last run, or a list of them when it captured several graphs."""
        return self._reports[0] if len(self._reports) == 1 else list(self._reports)

    @property
    def reports(self) -> list[Any]:
        return list(self._reports)

    @property
    def runs(self) -> list[dict]:
        """Every run so far (runs.run_record): passes on, per-kernel times, eager and compiled medians."""
        return list(self._runs)

    def compare(self, before: int = -2, after: int = -1) -> dict:
        """Two runs side by side (runs.compare_runs), by index into `runs` (default: the last two)."""
        if len(self._runs) < 2:
            raise ValueError(f"comparing needs two runs; there {'is' if len(self._runs) == 1 else 'are'} "
                             f"{len(self._runs)} (change the passes and call rerun())")
        return compare_runs(self._runs[before], self._runs[after])

    @property
    def breaks(self) -> list[dict]:
        """Where Dynamo split the program: per graph that ended early, its title and the break (reason,
        explanation, hints, file, line, code), in compile order."""
        return [{"graph": report["title"], **report["graph_break"]} for report in self.bundle["reports"]
                if report.get("graph_break")]

    @property
    def outputs(self) -> Any:
        """What the compiled program returned on the last run (a cell: its last expression's value)."""
        return getattr(self._program, "outputs", getattr(self._program, "last_value", None))

    @property
    def pipeline(self) -> list[str]:
        return list(self._pipeline)

    @property
    def disabled_passes(self) -> list[str]:
        return [n for n in self._pipeline if n not in self.enabled_passes]

    def rerun(self) -> ExplorerWidget:
        """Compile again with `enabled_passes` and run; kernels built before come back as cache hits."""
        self.status = "running"
        try:
            self._reports = list(self._program.run(self.disabled_passes))
            reports = [report_to_dict(r) for r in self._reports]
            self._runs.append(run_record(len(self._runs) + 1, self.enabled_passes, reports,
                                         reused=bool(getattr(self._program, "reused", False))))
            self._publish(reports)  # one bundle (and one sync to the page) per run
            self._update_display()
        except Exception as error:
            self.status = f"error: {type(error).__name__}: {error}".splitlines()[0]
            raise
        self.status = "idle"
        return self

    def refresh(self) -> None:
        """Re-read the reports (launch counts and times grow as the compiled code keeps running)."""
        self._publish([report_to_dict(r) for r in self._reports])

    def _publish(self, reports: list[dict]) -> None:
        self.bundle = make_bundle(self._pipeline, reports, self._runs)
        if USES_FALLBACK_VIEW:
            self.static_html = self.to_html(compact=True)

    def to_html(self, compact: bool = False) -> str:
        """The static page: every pass's graphs and kernel sources; compact (a notebook output): big graphs
        by module and the kernel table only."""
        return render_html(self.bundle["reports"], title=self._title, compact=compact)

    def save_html(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_html(), encoding="utf-8")
        return path

    def summary(self) -> str:
        return render_text(self.bundle["reports"])

    def _on_front_end_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, dict) or content.get("type") != "rerun":
            return
        try:
            if "enabled_passes" in content:
                self.enabled_passes = list(content["enabled_passes"])
            self.rerun()
        except Exception as error:  # the page shows `status`; a traceback has nowhere to go
            self.status = f"error: {type(error).__name__}: {error}".splitlines()[0]
            log.exception("explorer re-run failed")

    def _ipython_display_(self) -> None:
        """Display with a display id, so a re-run also replaces the report saved in the notebook."""
        from IPython.display import display

        data, metadata = self._repr_mimebundle_()
        self._display_handle = display(data, metadata=metadata, raw=True, display_id=True)

    def _update_display(self) -> None:
        handle = getattr(self, "_display_handle", None)
        if handle is not None:
            data, metadata = self._repr_mimebundle_()
            handle.update(data, metadata=metadata, raw=True)

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict]:
        shown = super()._repr_mimebundle_(**kwargs)
        data, metadata = shown if isinstance(shown, tuple) else (shown or {}, {})
        data = dict(data)
        data[REPORT_MIME] = self.bundle
        data["text/html"] = self.to_html(compact=True)  # saved in the notebook: bounded
        data["text/plain"] = self.summary()
        return data, metadata
