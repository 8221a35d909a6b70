"""FX graph → the report's GRAPH dict: nodes with provenance, edges, module groups and Graphviz DOT.

See schema.md. Fused groups get one colour, the same on the before and after side of a pass;
fused kernel nodes carry the DOT class `jp-torchfuser-kernel`. Everything from user code (module paths,
source lines) is data here; DOT quoting keeps it inert in the SVG that Graphviz writes.
"""

from __future__ import annotations

import re

import torch
import torch.fx as fx

from torchfuser.ir.dtypes import DTYPE_NAMES
from torchfuser.ir.kernels import FusedKernel
from torchfuser.ir.symbolic import text as symbolic_text

GROUP_COLOURS = (
    "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69", "#fccde5",
    "#bc80bd", "#ccebc5", "#ffed6f", "#a6cee3",
)
_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_LOCAL_ROOT = re.compile(r"^(?:L\['[^']*'\]|L__self__)\.?")  # the compiled function's own argument
_GLOBAL_ROOT = re.compile(r"^G\['([^']*)'\]")
_GETATTR = re.compile(r"getattr\(([^()]*), '([^']*)'\)")
_INDEX = re.compile(r"\[(?:'([^']*)'|(\d+))\]")


def group_colour(group: int) -> str:
    return GROUP_COLOURS[group % len(GROUP_COLOURS)]


def module_path(nn_module_stack) -> tuple[str, str]:
    """('layers.0.mlp', 'Linear') from Dynamo's nn_module_stack; ('', '') at top level."""
    if not nn_module_stack:
        return "", ""
    path, kind = list(nn_module_stack.values())[-1]
    path = str(path)
    while _GETATTR.search(path):  # getattr(L['self'].blocks, '0') -> L['self'].blocks.0
        path = _GETATTR.sub(lambda m: f"{m.group(1)}.{m.group(2)}", path)
    path = _GLOBAL_ROOT.sub(lambda m: m.group(1), _LOCAL_ROOT.sub("", path))  # globals keep their name
    path = _INDEX.sub(lambda m: "." + (m.group(1) or m.group(2)), path).strip(".")
    kind = kind.__name__ if isinstance(kind, type) else str(kind).rsplit(".", 1)[-1]
    return path, kind


def source_location(stack_trace: str | None) -> dict:
    """The innermost user frame of a node's stack trace: file, line and the code on that line."""
    if not stack_trace:
        return {"file": None, "line": None, "code": None}
    lines = stack_trace.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        frame = _FRAME.search(lines[i])
        if frame:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.search(lines[i + 1]) else None
            return {"file": frame["file"], "line": int(frame["line"]), "code": code}
    return {"file": None, "line": None, "code": None}


def target_name(node: fx.Node) -> str:
    target = node.target
    if isinstance(target, FusedKernel):
        return target.__name__
    if isinstance(target, str):
        return target
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def _short(node: fx.Node) -> str:
    if isinstance(node.target, FusedKernel):
        return node.target.__name__
    if isinstance(node.target, torch._ops.OpOverload):
        return node.target._opname
    return node.name if node.op in ("placeholder", "output", "get_attr") else target_name(node).rsplit(".", 1)[-1]


def snapshot_graph(gm: fx.GraphModule) -> dict:
    nodes, edges, modules = [], [], {}
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        is_tensor = isinstance(val, torch.Tensor)
        module, module_type = module_path(node.meta.get("nn_module_stack"))
        fused = node.target if isinstance(node.target, FusedKernel) else None
        nodes.append({
            "id": node.name,
            "op": node.op,
            "target": target_name(node),
            "label": _short(node),
            "shape": [symbolic_text(s) for s in val.shape] if is_tensor else None,
            "dtype": DTYPE_NAMES.get(val.dtype, str(val.dtype).replace("torch.", "")) if is_tensor else None,
            "group": fused.group if fused else node.meta.get("torchfuser_group"),
            "kernel": node.name if fused else None,  # = the report kernel's "node"
            "module": module,
            "module_type": module_type,
            **source_location(node.meta.get("stack_trace")),
        })
        edges += [[inp.name, node.name] for inp in node.all_input_nodes]
        modules.setdefault(module, []).append(node.name)
    graph = {"nodes": nodes, "edges": edges, "modules": modules}
    graph["dot"] = graph_dot(graph)
    return graph


def mark_fused_groups(before: dict, gm_after: fx.GraphModule) -> None:
    """Colour the nodes of `before` that a pass fused with the group of the kernel that absorbed them."""
    group_of = {}
    for node in gm_after.graph.nodes:
        if isinstance(node.target, FusedKernel):
            for name in node.meta.get("torchfuser_covers", ()):
                group_of[name] = node.target.group
    if not group_of:
        return
    for entry in before["nodes"]:
        if entry["id"] in group_of:
            entry["group"] = group_of[entry["id"]]
    before["dot"] = graph_dot(before)


def _quote(text) -> str:
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
        attrs = [f"id={_quote(node['id'])}", f"label={_quote(label)}", f"tooltip={_quote(_tooltip(node))}"]
        if node["group"] is not None:
            attrs.append(f"fillcolor={_quote(group_colour(node['group']))}")
        if node["kernel"]:
            attrs += ['class="jp-torchfuser-kernel"', "penwidth=2", "shape=box3d"]
        elif node["op"] in ("placeholder", "output"):
            attrs.append("shape=ellipse")
        lines.append(f"  {_quote(node['id'])} [{', '.join(attrs)}];")
    lines += [f"  {_quote(a)} -> {_quote(b)};" for a, b in graph["edges"]]
    lines.append("}")
    return "\n".join(lines)


class GraphSnapshots:
    """A pass-pipeline instrument: the graph before and after every pass, fused groups coloured alike on
    both sides, stored on the pass's record for the report."""

    def __init__(self):
        self._before: dict | None = None

    def before_pass(self, record, gm: fx.GraphModule) -> None:
        self._before = snapshot_graph(gm)

    def after_pass(self, record, gm: fx.GraphModule) -> None:
        mark_fused_groups(self._before, gm)
        record.graph_before, record.graph_after = self._before, snapshot_graph(gm)
