"""CompileReport dicts → one self-contained static HTML page (no scripts, no external URLs).

This is the `text/html` fallback of the explorer and what `CompileReport.to_html()` returns, so it
must read well in GitHub, nbviewer and VS Code. Every value taken from a report is user data
(module names, source lines, kernel sources) and goes through `_text()` (html.escape); graphs are
inlined as SVG that report/svg.py has already reduced to drawing elements. CSS is scoped under
`.jp-torchfuser-report` so the page can also sit inside a notebook output without restyling it.
"""
from __future__ import annotations

import html
import math
from collections.abc import Iterable

from torchfuser.report.svg import NOTEBOOK_GRAPH_NODE_LIMIT, SAVED_PAGE_NODE_LIMIT, GraphDrawing, draw_graphs
from torchfuser.report.wire import expand_report

COMPACT_NODE_BUDGET = 300  # nodes drawn over all of a report's graphs in a notebook output

MAX_PROVENANCE_LINES = 3  # per kernel row; a fused layer can cover dozens of source lines
MAX_UNFUSED_SHOWN = 12  # per pass row
CACHE_CLASSES = {"hit": "tf-cache-hit", "miss": "tf-cache-miss", "disk": "tf-cache-disk"}

STYLE = """
.jp-torchfuser-report { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 13px;
  line-height: 1.4; color: #1f2328; background: #fff; padding: 8px; }
.jp-torchfuser-report h1 { font-size: 18px; margin: 4px 0 8px; }
.jp-torchfuser-report h2 { font-size: 16px; margin: 18px 0 6px; border-bottom: 1px solid #d0d7de; }
.jp-torchfuser-report h3 { font-size: 14px; margin: 14px 0 4px; }
.jp-torchfuser-report table { border-collapse: collapse; margin: 4px 0; }
.jp-torchfuser-report th, .jp-torchfuser-report td { border: 1px solid #d0d7de; padding: 2px 8px;
  text-align: left; vertical-align: top; }
.jp-torchfuser-report td.tf-num { text-align: right; font-variant-numeric: tabular-nums; }
.jp-torchfuser-report pre { background: #f6f8fa; padding: 8px; overflow: auto; max-height: 420px;
  font-size: 12px; margin: 4px 0; }
.jp-torchfuser-report pre.tf-summary { white-space: pre-wrap; }
.jp-torchfuser-report .tf-note { color: #6e7781; font-style: italic; }
.jp-torchfuser-report .tf-warning { color: #9a6700; }
.jp-torchfuser-report .tf-off { color: #8c959f; }
.jp-torchfuser-report .tf-sides { display: flex; gap: 12px; flex-wrap: wrap; align-items: flex-start; }
.jp-torchfuser-report .tf-side { flex: 1 1 320px; min-width: 0; overflow: auto; max-height: 640px;
  border: 1px solid #d0d7de; padding: 4px; }
.jp-torchfuser-report .tf-side svg { max-width: 100%; height: auto; }
.jp-torchfuser-report .jp-torchfuser-kernel path, .jp-torchfuser-report .jp-torchfuser-kernel polygon {
  stroke-width: 2px; }
.jp-torchfuser-report .tf-bar-row { display: flex; align-items: center; gap: 8px; margin: 2px 0; }
.jp-torchfuser-report .tf-bar-label { width: 140px; }
.jp-torchfuser-report .tf-bar { height: 12px; background: #8c959f; min-width: 1px; }
.jp-torchfuser-report .tf-bar.tf-compiled { background: #1f77b4; }
.jp-torchfuser-report .tf-bar-split { display: flex; height: 12px; min-width: 1px; }
.jp-torchfuser-report .tf-bar-split .tf-bar { min-width: 0; }
.jp-torchfuser-report .tf-bar.tf-overhead { background: repeating-linear-gradient(45deg, #f0b37e 0 4px,
  #fbe3cd 4px 8px); }
.jp-torchfuser-report .tf-lane[title] { text-decoration: underline dotted; cursor: help; }
.jp-torchfuser-report .tf-cache-hit { color: #1a7f37; font-weight: 600; }
.jp-torchfuser-report .tf-cache-miss { color: #cf222e; font-weight: 600; }
.jp-torchfuser-report .tf-cache-disk { color: #8250df; font-weight: 600; }
.jp-torchfuser-report details > summary { cursor: pointer; margin: 4px 0; }
"""


def _text(value: object) -> str:
    """Escaped text for element content and quoted attribute values."""
    return html.escape("" if value is None else str(value), quote=True)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def format_seconds(seconds: object) -> str:
    if not _is_number(seconds):
        return "—"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    if seconds > 0:
        return f"{seconds * 1e6:.1f} µs"
    return "0"


def format_speedup(speedup: object) -> str:
    return f"{speedup:.2f}×" if _is_number(speedup) else "—"


def _location(entry: dict) -> str:
    where = entry.get("file") or ""
    if entry.get("line") is not None:
        where += f":{entry['line']}"
    return where


def _provenance(source: dict) -> str:
    module = source.get("module") or "(top level)"
    if source.get("module_type"):
        module += f" ({source['module_type']})"
    parts = [module, _location(source), source.get("code") or ""]
    return " · ".join(p for p in parts if p)


def _cache_counts(kernels: Iterable[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for k in kernels:
        counts[str(k.get("cache"))] = counts.get(str(k.get("cache")), 0) + 1
    return counts


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def render_text(reports: list[dict]) -> str:
    """A few plain lines: passes, kernels with cache status, fallbacks, speedup (the text/plain view)."""
    lines = [f"TorchFuser: {_count(len(reports), 'compiled graph')}"]
    for report in reports:  # (every field read here is the same in schema versions 1 and 2)
        passes = report.get("passes") or []
        on = [p.get("name", "?") + ("*" if p.get("modified") else "") for p in passes if p.get("enabled")]
        off = [p.get("name", "?") for p in passes if not p.get("enabled")]
        kernels = report.get("kernels") or []
        cache = ", ".join(f"{n} {status}" for status, n in sorted(_cache_counts(kernels).items()))
        timings = report.get("timings") or {}
        line = (f"- {report.get('title') or 'graph'}: passes on [{', '.join(on)}]"
                + (f" off [{', '.join(off)}]" if off else "")
                + f"; {_count(len(kernels), 'kernel')}" + (f" ({cache})" if cache else "")
                + f"; {_count(len(report.get('fallbacks') or []), 'fallback')}")
        if _is_number(timings.get("speedup")):
            line += (f"; speedup {format_speedup(timings['speedup'])} (eager {format_seconds(timings.get('eager_seconds'))}"
                     f", compiled {format_seconds(timings.get('compiled_seconds'))})")
        lines.append(line)
    if any(p.get("modified") for r in reports for p in r.get("passes") or []):
        lines.append("(* = the pass changed the graph)")
    return "\n".join(lines)


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """rows hold already-escaped cell HTML; headers are fixed strings."""
    head = "".join(f"<th>{_text(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f'<td class="tf-num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                         for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _device_line(report: dict) -> str:
    device = report.get("device")
    version = f"torchfuser {_text(report.get('torchfuser_version') or '?')}"
    if not device:
        return f'<p class="tf-meta">No OpenCL device: every op ran in PyTorch. {version}</p>'
    extras = ", ".join(_text(device.get(k)) for k in ("type", "platform", "driver") if device.get(k))
    zero_copy = "zero-copy buffers" if device.get("zero_copy") else "copied buffers"
    return (f'<p class="tf-meta">Device: <b>{_text(device.get("name"))}</b> ({extras}; {zero_copy}). '
            f"{version}</p>")


def _bar(label: str, seconds: object, longest: float, css: str) -> str:
    width = 70.0 * seconds / longest if _is_number(seconds) and longest > 0 else 0.0
    return (f'<div class="tf-bar-row"><span class="tf-bar-label">{_text(label)}</span>'
            f'<div class="tf-bar {css}" style="width:{width:.1f}%"></div>'
            f"<span>{_text(format_seconds(seconds))}</span></div>")


OVERHEAD_MEANING = "host overhead: launching kernels, Python, ops in PyTorch"


def split_compiled(report: dict) -> tuple[float | None, float | None]:
    """(kernel seconds, host overhead seconds) per graph call: the report's own figures, else derived
    from the kernels (reports written before these fields existed)."""
    t = report.get("timings") or {}
    kernel, overhead, compiled = t.get("kernel_seconds"), t.get("host_overhead_seconds"), t.get("compiled_seconds")
    if not _is_number(kernel):
        calls = t.get("calls")
        kernel = None
        if _is_number(calls) and calls > 0:
            kernel = sum(k.get("seconds") for k in report.get("kernels") or []
                         if _is_number(k.get("seconds"))) / calls
    if _is_number(overhead):
        overhead = max(0.0, overhead)
    else:
        overhead = max(0.0, compiled - kernel) if _is_number(compiled) and _is_number(kernel) else None
    return kernel, overhead


def _split_bar(compiled: float, kernel: float, overhead: float, longest: float) -> str:
    """The compiled bar as two segments: kernel time, then host overhead."""
    width = 70.0 * compiled / longest if longest > 0 else 0.0
    whole = max(compiled, kernel + overhead)
    kernel_share = 100.0 * kernel / whole if whole > 0 else 0.0
    overhead_share = 100.0 * overhead / whole if whole > 0 else 0.0
    return (f'<div class="tf-bar-row"><span class="tf-bar-label">compiled</span>'
            f'<div class="tf-bar-split" style="width:{width:.1f}%">'
            f'<div class="tf-bar tf-compiled tf-kernels" style="width:{kernel_share:.1f}%" '
            f'title="{_text("kernels (profiled device time): " + format_seconds(kernel))}"></div>'
            f'<div class="tf-bar tf-overhead" style="width:{overhead_share:.1f}%" '
            f'title="{_text(OVERHEAD_MEANING + ": " + format_seconds(overhead))}"></div></div>'
            f"<span>{_text(format_seconds(compiled))}</span></div>")


def replay_sentence(replay: dict | None) -> str | None:
    """How steady calls ran (the report's "replay"), as the text summary and the page say it; None when there
    is nothing to say (no calls yet, a report from before the field, or no reason recorded)."""
    replay = replay or {}
    calls, replayed = replay.get("calls"), replay.get("replayed")
    new_sizes, new_sizes_reason = replay.get("new_sizes"), replay.get("new_sizes_walk_because")
    resized = (f"; new sizes walk the plan: {new_sizes_reason}" if new_sizes_reason
               else f", {new_sizes} at new sizes" if _is_number(new_sizes) and new_sizes > 0 else "")
    if _is_number(replayed) and replayed > 0:
        launches, run_as = replay.get("launches"), replay.get("run_as")
        chained = _is_number(launches) and _is_number(run_as) and run_as < launches
        return (f"steady calls: {replayed} of {calls} replayed from a tape"
                + (f" ({launches} launches run as {run_as})" if chained else "") + resized)
    reason = replay.get("walks_because")
    return f"steady calls walk the plan: {reason}{resized}" if reason and _is_number(calls) and calls > 0 else None


def _timing_section(report: dict) -> str:
    t = report.get("timings") or {}
    eager, compiled = t.get("eager_seconds"), t.get("compiled_seconds")
    kernel, overhead = split_compiled(report)
    if _is_number(eager) and _is_number(compiled):
        longest = max(eager, compiled)
        bars = _bar("eager PyTorch", eager, longest, "")
        if _is_number(kernel) and _is_number(overhead):
            bars += (_split_bar(compiled, kernel, overhead, longest)
                     + f'<p class="tf-split">Compiled {_text(format_seconds(compiled))} per call = kernels '
                     f"<b>{_text(format_seconds(kernel))}</b> + host overhead "
                     f"<b>{_text(format_seconds(overhead))}</b> (launching kernels, Python, ops in PyTorch)</p>")
        else:
            bars += _bar("compiled", compiled, longest, "tf-compiled")
        bars += f"<p>Speedup: <b>{_text(format_speedup(t.get('speedup')))}</b> (medians)</p>"
    else:
        bars = '<p class="tf-note">Eager vs compiled not measured (explorer.show or %%torchfuse --bench do).</p>'
    replay = replay_sentence(report.get("replay"))
    if replay:
        bars += f'<p class="tf-replay">{_text(replay[:1].upper() + replay[1:])}</p>'
    phases = [("lower", "lower_seconds"), ("passes", "passes_seconds"), ("codegen", "codegen_seconds"),
              ("build", "build_seconds"), ("compile total", "compile_seconds")]
    rows = [[_text(name), _text(format_seconds(t.get(key)))] for name, key in phases]
    rows.append(["calls", _text(t.get("calls", "—"))])
    rows.append(["kernels per call", _text(format_seconds(kernel))])
    rows.append(["host overhead per call", _text(format_seconds(overhead))])
    return "<h3>Timing</h3>" + bars + _table(["phase", "time"], rows, numeric={1})


def _stats_text(stats: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in (stats or {}).items())


def _passes_section(report: dict) -> str:
    rows = []
    for index, p in enumerate(report.get("passes") or [], start=1):
        enabled = bool(p.get("enabled"))
        status = ("changed" if p.get("modified") else "no change") if enabled else "disabled"
        if p.get("error"):  # schema 2 (version 1 kept it in stats)
            status = f"failed: {p['error']}"
        name = _text(p.get("name")) if enabled else f'<span class="tf-off">{_text(p.get("name"))}</span>'
        rows.append([str(index), name, _text(status), _text(format_seconds(p.get("seconds")) if enabled else "—"),
                     _text(_stats_text(p.get("stats"))), _unfused_html(p.get("unfused") or [])])
    if not rows:
        return '<h3>Passes</h3><p class="tf-note">No passes ran.</p>'
    return "<h3>Passes</h3>" + _table(["#", "pass", "status", "time", "counts", "left unfused, and why"], rows,
                                      numeric={0, 3})


def _unfused_html(unfused: list) -> str:
    if not unfused:
        return ""
    items = "".join(f"<li><code>{_text(node)}</code>: {_text(why)}</li>" for node, why in unfused[:MAX_UNFUSED_SHOWN])
    more = f"<li>… and {len(unfused) - MAX_UNFUSED_SHOWN} more</li>" if len(unfused) > MAX_UNFUSED_SHOWN else ""
    return f"<details><summary>{len(unfused)}</summary><ul>{items}{more}</ul></details>"


def _drawing_html(caption: str, drawing: GraphDrawing) -> str:
    parts = [f'<div class="tf-side"><div><b>{_text(caption)}</b></div>']
    if drawing.note:
        parts.append(f'<p class="tf-note">{_text(drawing.note)}</p>')
    if drawing.svg is not None:
        parts.append(drawing.svg)  # sanitised and re-serialised by svg.sanitize_svg
    elif drawing.dot:
        parts.append(f"<pre>{_text(drawing.dot)}</pre>")
    parts.append("</div>")
    return "".join(parts)


def _graph_sizes(report: dict) -> list[int]:
    graphs = [*(report.get("graphs") or {}).values()]
    graphs += [g for p in report.get("passes") or [] for g in (p.get("graph_before"), p.get("graph_after"))]
    return [len(g.get("nodes") or []) for g in graphs if g]


def _is_compact(report: dict, compact: bool) -> bool:
    """A notebook output (compact) of a report with many nodes to draw shows only the compiled graph (by
    module if big) and the kernel table: drawn SVG costs about a kilobyte per node, saved in the notebook."""
    return compact and sum(_graph_sizes(report)) > COMPACT_NODE_BUDGET


def _graph_slots(report: dict, compact: bool) -> list[tuple[str, list[tuple[str, dict]], bool]]:
    """(summary line, [(caption, GRAPH)], open?) for every graph block of one report, in page order."""
    slots = []
    graphs = report.get("graphs") or {}
    if _is_compact(report, compact):
        ran = [p for p in report.get("passes") or [] if p.get("graph_after")]
        final = ran[-1]["graph_after"] if ran else graphs.get("aten")
        return [("the compiled graph", [("after all passes", final)], True)] if final else []
    first_change = True
    for p in report.get("passes") or []:
        name = str(p.get("name"))
        before, after = p.get("graph_before"), p.get("graph_after")
        if not p.get("enabled") or before is None or after is None:
            slots.append((f"{name}: disabled", [], False))
        elif p.get("modified"):
            slots.append((f"{name}: changed the graph ({_stats_text(p.get('stats'))})",
                          [(f"before {name}", before), (f"after {name}", after)], first_change))
            first_change = False
        else:
            slots.append((f"{name}: no change", [(f"graph at {name} (unchanged)", after)], False))
    for key, caption in (("captured", "captured (torch level)"), ("aten", "lowered to core ATen")):
        if graphs.get(key):
            slots.append((f"graph {caption}", [(caption, graphs[key])], False))
    return slots


COMPACT_NOTE = ("Only the compiled graph is drawn here (by module when big). The explorer view draws every "
                "pass's graphs and kernel sources; view.save_html(path) writes them all to a page.")


def _graphs_section(slots: list, drawings: Iterable[GraphDrawing], compact: bool = False) -> str:
    drawings = iter(drawings)
    blocks = []
    for summary, captioned, is_open in slots:
        sides = "".join(_drawing_html(caption, next(drawings)) for caption, _ in captioned)
        body = f'<div class="tf-sides">{sides}</div>' if sides else '<p class="tf-note">Nothing to show.</p>'
        blocks.append(f"<details{' open' if is_open else ''}><summary>{_text(summary)}</summary>{body}</details>")
    note = f'<p class="tf-note">{_text(COMPACT_NOTE)}</p>' if compact else ""
    return "<h3>Graphs</h3>" + note + "".join(blocks)


def _kernels_section(report: dict, sources: bool = True) -> str:
    kernels = report.get("kernels") or []
    if not kernels:
        return '<h3>Kernels</h3><p class="tf-note">No OpenCL kernels.</p>'
    rows = []
    for k in kernels:
        cache = str(k.get("cache"))
        cache_html = f'<span class="{CACHE_CLASSES.get(cache, "")}">{_text(cache)}</span>'
        provenance = [_provenance(s) for s in k.get("sources") or []]
        sources = "<br>".join(_text(p) for p in provenance[:MAX_PROVENANCE_LINES])
        if len(provenance) > MAX_PROVENANCE_LINES:
            sources += f"<br>… and {len(provenance) - MAX_PROVENANCE_LINES} more"
        rows.append([f"<code>{_text(k.get('name'))}</code>", _text(k.get("node") or "—"), _text(k.get("kind")),
                     _text(k.get("group")), cache_html, _lane_html(k), _text(format_seconds(k.get("build_seconds"))),
                     _text(k.get("launches")), _text(format_seconds(k.get("mean_seconds"))),
                     _text(format_seconds(k.get("seconds"))), sources])
    # Equal specs share one OpenCL kernel (and name); "fused node" tells the uses apart in the graphs.
    table = _table(["kernel", "fused node", "kind", "group", "cache", "lane", "build", "launches", "mean time",
                    "total time", "from"], rows, numeric={3, 6, 7, 8, 9})
    return "<h3>Kernels</h3>" + table + (_kernel_sources(kernels) if sources else "")


LANE_MEANINGS = {"inline": "in the calling thread", "threaded": "on the device's worker threads"}


def _lane_html(kernel: dict) -> str:
    """Where the kernel ran; the reason (with the estimated costs) as the tooltip."""
    lane = kernel.get("lane")
    if not lane:
        return "—"
    lane = str(lane)
    reason = kernel.get("lane_reason") or LANE_MEANINGS.get(lane, "")
    css = "tf-lane-inline" if lane == "inline" else "tf-lane-threaded" if lane == "threaded" else ""
    title = f' title="{_text(reason)}"' if reason else ""
    return f'<span class="tf-lane {css}"{title}>{_text(lane)}</span>'


def _shortened(items: list, limit: int = 12) -> str:
    shown = ", ".join(map(str, items[:limit]))
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _kernel_sources(kernels: list[dict]) -> str:
    """Each distinct OpenCL program once: a transformer repeats the same few kernels per layer."""
    by_source: dict[tuple, list[dict]] = {}
    for k in kernels:
        by_source.setdefault((k.get("name"), k.get("cache_key"), k.get("source")), []).append(k)
    blocks = []
    for (name, cache_key, source), uses in by_source.items():
        first = uses[0]
        covered = [n for k in uses for n in k.get("nodes") or []]
        used_by = f"{len(uses)} fused nodes, " if len(uses) > 1 else ""
        blocks.append(
            f"<details><summary>OpenCL source of <code>{_text(name)}</code> ({_text(first.get('kind'))}; "
            f"{_text(used_by)}covers {_text(_shortened(covered))})</summary><pre>{_text(source)}</pre>"
            f'<p class="tf-note">spec: {_text(first.get("spec"))}; cache key {_text(cache_key)}</p></details>')
    return "".join(blocks)


def _fallbacks_section(report: dict) -> str:
    fallbacks = report.get("fallbacks") or []
    if not fallbacks:
        return '<h3>Fallbacks</h3><p class="tf-note">None: every op ran in an OpenCL kernel.</p>'
    rows = [[f"<code>{_text(f.get('op'))}</code>", _text(f.get("node")), _text(f.get("module") or "(top level)"),
             _text(_location(f)), f"<code>{_text(f.get('code'))}</code>", _text(f.get("reason"))] for f in fallbacks]
    return ("<h3>Fallbacks</h3><p>These ops ran in PyTorch between kernel launches.</p>"
            + _table(["op", "node", "module", "where", "code", "reason"], rows))


def _report_section(index: int, report: dict, slots: list, drawings: list[GraphDrawing], compact: bool,
                    warning: str) -> str:
    parts = [f'<section class="tf-graph-report" id="tf-report-{index}">',
             f"<h2>{index + 1}. {_text(report.get('title') or 'compiled graph')}</h2>"]
    if warning:
        parts.append(f'<p class="tf-warning">{_text(warning)}</p>')
    parts += [_device_line(report), _graph_break_html(report.get("graph_break")), _timing_section(report),
              _passes_section(report),
              _graphs_section(slots, drawings, compact), _kernels_section(report, sources=not compact),
              _fallbacks_section(report), "</section>"]
    return "".join(parts)


def _graph_break_html(graph_break: dict | None) -> str:
    """The break that ended this graph: Dynamo's reason, the user's line, what to do."""
    if not graph_break:
        return ""
    where = f" at {_location(graph_break)}" if graph_break.get("file") else ""
    code = f" <code>{_text(graph_break['code'])}</code>" if graph_break.get("code") else ""
    hints = "".join(f"<li>{_text(hint)}</li>" for hint in graph_break.get("hints") or [])
    return (f'<p class="tf-warning">Graph break{_text(where)}:{code} {_text(graph_break.get("reason"))}'
            f"{' — ' + _text(graph_break['explanation']) if graph_break.get('explanation') else ''}</p>"
            + (f"<ul>{hints}</ul>" if hints else ""))


def _readable(report: dict) -> tuple[dict, str]:
    """(the report with its graphs in full, a warning when its schema version is not one this code reads)."""
    try:
        return expand_report(report), ""
    except (ValueError, KeyError, TypeError, IndexError) as error:
        return report, f"This page may be incomplete: {error}"


def render_html(reports: list[dict], *, title: str | None = None, compact: bool = False) -> str:
    """A complete HTML document for one or more CompileReport dicts (either schema version, report.schema.json).

    compact (a notebook output): a report with a big graph shows the graph after all passes by module and the
    kernel table, without the per-pass graphs and kernel sources (the live view and save_html have them).
    Otherwise every graph is drawn, in full up to SAVED_PAGE_NODE_LIMIT nodes."""
    read = [_readable(r) for r in reports]
    reports = [report for report, _ in read]
    title = title or (reports[0].get("title") if len(reports) == 1 else None) or "TorchFuser compile report"
    slots_per_report = [_graph_slots(r, compact) for r in reports]
    graphs = [g for slots in slots_per_report for _, captioned, _ in slots for _, g in captioned]
    # all reports at once: one parallel batch of `dot` runs
    drawings = iter(draw_graphs(graphs, NOTEBOOK_GRAPH_NODE_LIMIT if compact else SAVED_PAGE_NODE_LIMIT))
    sections = []
    for index, ((report, warning), slots) in enumerate(zip(read, slots_per_report)):
        count = sum(len(captioned) for _, captioned, _ in slots)
        sections.append(_report_section(index, report, slots, [next(drawings) for _ in range(count)],
                                        _is_compact(report, compact), warning))
    if not reports:
        sections.append('<p class="tf-note">No graphs were compiled.</p>')
    summary = f'<pre class="tf-summary">{_text(render_text(reports))}</pre>' if reports else ""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_text(title)}</title><style>{STYLE}</style></head><body>"
            f'<div class="jp-torchfuser-report"><h1>{_text(title)}</h1>{summary}{"".join(sections)}</div>'
            "</body></html>\n")
