"""A report GRAPH (expanded form, see wire.py) → Graphviz DOT text.

Reports do not store DOT (schema v2): the view derives it (labextension/src/view/graph_dot.ts mirrors this
function exactly), the static HTML page derives it here. Every node statement carries `id`, a `tooltip`
(shape, dtype, module, source line) and, for fused kernel nodes, `class="jp-torchfuser-kernel"`; nodes of
a fused group share a `fillcolor`. Quoting keeps user text (module paths, source lines) inert.
"""

from __future__ import annotations

GROUP_COLOURS = (
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
    "#bc80bd", "#ccebc5", "#ffed6f", "#a6cee3",
)


def group_colour(group: int) -> str:
    return GROUP_COLOURS[group % len(GROUP_COLOURS)]


def dot_quote(text) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _tooltip(node: dict) -> str:
    parts = [node["target"]]
    if node["shape"] is not None:
        parts.append(f"{node['dtype']}{node['shape']}")
    if node["module"]:
        parts.append(f"module {node['module']} ({node['module_type']})")
    if node["file"]:
        parts.append(f"{node['file']}:{node['line']}" + (f"  {node['code']}" if node["code"] else ""))
    return "\n".join(parts)


def graph_dot(graph: dict) -> str:
    lines = [
        "digraph G {",
        '  graph [rankdir=TB, nodesep=0.25, ranksep=0.3, fontname="Helvetica"];',
        '  node [shape=box, style="rounded,filled", fillcolor="#f5f5f5", fontname="Helvetica", fontsize=10, '
        "height=0.3, margin=\"0.08,0.04\"];",
        "  edge [arrowsize=0.6];",
    ]
    for node in graph["nodes"]:
        label = node["label"] + (f"\n{node['shape']}" if node["shape"] is not None else "")
        attrs = [f"id={dot_quote(node['id'])}", f"label={dot_quote(label)}", f"tooltip={dot_quote(_tooltip(node))}"]
        if node["group"] is not None:
            attrs.append(f"fillcolor={dot_quote(group_colour(node['group']))}")
        if node["kernel"]:
            attrs += ['class="jp-torchfuser-kernel"', "penwidth=2", "shape=box3d"]
        elif node["op"] in ("placeholder", "output"):
            attrs.append("shape=ellipse")
        lines.append(f"  {dot_quote(node['id'])} [{', '.join(attrs)}];")
    lines += [f"  {dot_quote(a)} -> {dot_quote(b)};" for a, b in graph["edges"]]
    lines.append("}")
    return "\n".join(lines)
