"""GRAPH dicts of a CompileReport → inline SVG for the static HTML page (report/html.py).

Layout is the system Graphviz `dot`, driven through the `graphviz` package. Every string in a report
may come from user code, so the SVG that comes back is not trusted either: it is parsed, reduced to
an allow-list of drawing elements and attributes (no script, foreignObject, image, event handlers or
external links) and re-serialised, so nothing in it can become live markup in the page. Node ids,
classes (`jp-torchfuser-kernel`) and tooltips (`xlink:title`) survive that.

Graphs with more than `node_limit` nodes are drawn as a module overview (one box per module path, cut at
the depth that keeps at most OVERVIEW_MAX_BOXES boxes): `dot` needs seconds and about a kilobyte of SVG per
node, too slow and too big for a notebook output (NOTEBOOK_GRAPH_NODE_LIMIT). A saved page (save_html)
draws graphs up to SAVED_PAGE_NODE_LIMIT nodes in full.
"""
from __future__ import annotations

import functools
import html
import os
import shutil
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import graphviz

from torchfuser.report.dot import dot_quote, graph_dot

NOTEBOOK_GRAPH_NODE_LIMIT = 150
SAVED_PAGE_NODE_LIMIT = 3000
OVERVIEW_MAX_BOXES = 60
NO_DOT_NOTE = "Graphviz `dot` is not on PATH: graphs are shown as DOT text."

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"

# Everything `dot -Tsvg` draws a graph with; anything else (script, foreignObject, image, use,
# style, animate...) is dropped.
ALLOWED_ELEMENTS = {"svg", "g", "title", "desc", "a", "polygon", "polyline", "path", "ellipse", "circle",
                    "rect", "line", "text", "tspan", "defs", "linearGradient", "radialGradient", "stop"}


@dataclass(frozen=True)
class GraphDrawing:
    """What the page shows for one GRAPH: an SVG, or DOT text when it can't be drawn, plus a note."""
    svg: str | None
    dot: str | None
    note: str = ""


def dot_available() -> bool:
    return shutil.which("dot") is not None


def _local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


ATTRIBUTE_PREFIXES = {XLINK_NS: "xlink:", "http://www.w3.org/XML/1998/namespace": "xml:"}


def _attribute_name(name: str) -> str | None:
    """`{ns}local` → `prefix:local`; None for namespaces an inline SVG has no use for."""
    if not name.startswith("{"):
        return name
    namespace, local = name[1:].split("}", 1)
    prefix = ATTRIBUTE_PREFIXES.get(namespace)
    return prefix + local if prefix else None


def _safe_attribute(name: str, value: str) -> bool:
    local = _local_name(name).lower()
    lowered = value.lower()
    if _attribute_name(name) is None or local.startswith("on") or "javascript:" in lowered:
        return False
    if local == "href":
        return value.startswith("#")
    if "url(" in lowered:
        return all(part.startswith("#") for part in lowered.split("url(")[1:])
    return True


def _is_allowed_element(element: ET.Element) -> bool:
    tag = element.tag
    return isinstance(tag, str) and tag.startswith("{" + SVG_NS + "}") and _local_name(tag) in ALLOWED_ELEMENTS


def _write(element: ET.Element, out: list[str]) -> None:
    """Serialise an allow-listed element; all text and attribute values are escaped again."""
    attributes = "".join(f' {_attribute_name(k)}="{html.escape(v, quote=True)}"'
                         for k, v in element.attrib.items() if _safe_attribute(k, v))
    tag = _local_name(element.tag)
    if tag == "svg":
        attributes += f' xmlns="{SVG_NS}" xmlns:xlink="{XLINK_NS}"'
    out.append(f"<{tag}{attributes}>")
    if element.text:
        out.append(html.escape(element.text, quote=False))
    for child in element:
        if _is_allowed_element(child):
            _write(child, out)
        if child.tail:
            out.append(html.escape(child.tail, quote=False))
    out.append(f"</{tag}>")


def sanitize_svg(svg_text: str) -> str:
    """Parse dot's SVG, keep only the allow-listed drawing vocabulary, serialise it again.

    Writing it out ourselves also drops the XML prolog, DOCTYPE (with its external DTD URL),
    comments and processing instructions, and re-escapes all text, so the result is safe to inline
    in HTML.
    """
    if "<!ENTITY" in svg_text:
        raise ValueError("SVG declares entities")
    root = ET.fromstring(svg_text.encode("utf-8"))
    if not _is_allowed_element(root) or _local_name(root.tag) != "svg":
        raise ValueError("not an SVG document")
    out: list[str] = []
    _write(root, out)
    return "".join(out)


@functools.lru_cache(maxsize=64)
def dot_to_svg(dot_text: str) -> str:
    """Lay out DOT with the system `dot`; cached because reports repeat snapshots between passes."""
    raw = graphviz.Source(dot_text).pipe(format="svg", encoding="utf-8", quiet=True)
    return sanitize_svg(raw)


def _overview_depth(module_paths: set[str], max_boxes: int) -> int:
    deepest = max((p.count(".") + 1 for p in module_paths if p), default=1)
    depth = 1
    for d in range(1, deepest + 1):
        if len({".".join(p.split(".")[:d]) for p in module_paths}) > max_boxes:
            break
        depth = d
    return depth


def module_overview_dot(graph: dict, max_boxes: int = OVERVIEW_MAX_BOXES) -> tuple[str, int]:
    """DOT for a collapsed view of a big graph: one box per module path prefix, edges aggregated.

    Returns (dot text, depth used). Boxes holding fused kernels get the class jp-torchfuser-module-fused.
    """
    module_of = {n["id"]: (n.get("module") or "") for n in graph.get("nodes", [])}
    for path, ids in (graph.get("modules") or {}).items():
        for node_id in ids:
            module_of.setdefault(node_id, path)
    depth = _overview_depth(set(module_of.values()), max_boxes)
    box_of = {nid: ".".join(path.split(".")[:depth]) for nid, path in module_of.items()}
    counts: dict[str, list[int]] = {}  # box -> [nodes, fused kernels]
    for n in graph.get("nodes", []):
        box_counts = counts.setdefault(box_of[n["id"]], [0, 0])
        box_counts[0] += 1
        box_counts[1] += 1 if n.get("kernel") else 0
    edge_counts: dict[tuple[str, str], int] = {}
    for a, b in graph.get("edges", []):
        pair = (box_of.get(a, ""), box_of.get(b, ""))
        if pair[0] != pair[1]:
            edge_counts[pair] = edge_counts.get(pair, 0) + 1
    lines = ["digraph modules {", '  node [shape=box style="rounded,filled" fillcolor=white fontsize=10];']
    for index, (box, (node_count, kernel_count)) in enumerate(counts.items()):
        text = f"{box or '(top level)'}\n{node_count} nodes, {kernel_count} fused kernels"
        attrs = [f"id={dot_quote(f'module-{index}')}", f"label={dot_quote(text)}", f"tooltip={dot_quote(text)}"]
        if kernel_count:
            attrs += ['fillcolor="#aec7e8"', 'class="jp-torchfuser-module-fused"']
        lines.append(f"  {dot_quote('m:' + box)} [{' '.join(attrs)}];")
    for (a, b), count in edge_counts.items():
        label = f" [label={dot_quote(count)}]" if count > 1 else ""
        lines.append(f"  {dot_quote('m:' + a)} -> {dot_quote('m:' + b)}{label};")
    lines.append("}")
    return "\n".join(lines), depth


def _plan(graph: dict, node_limit: int) -> tuple[str, str]:
    """(DOT to draw, note) for one GRAPH."""
    node_count = len(graph.get("nodes", []))
    if node_count > node_limit:
        dot_text, depth = module_overview_dot(graph)
        return dot_text, (f"{node_count} nodes: too many to draw here, so this is a module overview "
                          f"(module paths cut at depth {depth}). The explorer view draws every node.")
    return graph.get("dot") or graph_dot(graph), ""  # v1 reports carried their DOT


def draw_graphs(graphs: list[dict], node_limit: int) -> list[GraphDrawing]:
    """Draw many GRAPHs at once; distinct layouts run in parallel `dot` processes."""
    plans = [_plan(g, node_limit) for g in graphs]
    if not dot_available():
        return [GraphDrawing(svg=None, dot=dot_text or None, note=f"{NO_DOT_NOTE} {note}".strip())
                for dot_text, note in plans]
    distinct = sorted({dot_text for dot_text, _ in plans if dot_text})
    workers = max(1, min(len(distinct), os.cpu_count() or 1))
    drawn: dict[str, str | Exception] = {}

    def draw(dot_text: str) -> None:
        try:
            drawn[dot_text] = dot_to_svg(dot_text)
        except Exception as error:  # a bad DOT must not take the whole page down
            drawn[dot_text] = error

    if distinct:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(draw, distinct))
    result = []
    for dot_text, note in plans:
        svg = drawn.get(dot_text)
        if isinstance(svg, str):
            result.append(GraphDrawing(svg=svg, dot=None, note=note))
        else:
            why = f"Graphviz could not draw this graph ({type(svg).__name__}: {svg})." if svg else "No DOT text."
            result.append(GraphDrawing(svg=None, dot=dot_text or None, note=(why + " " + note).strip()))
    return result
