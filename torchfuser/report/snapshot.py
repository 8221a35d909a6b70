"""FX graph → the report's GRAPH dict (expanded form): nodes with provenance and inputs, edges, module groups.

Fused groups get one colour, the same on the before and after side of a pass (`fused_into`). Everything from
user code (module paths, source lines) is data here. wire.py encodes these for the report's JSON; dot.py
draws them.
"""

from __future__ import annotations

import functools
import re

import torch
import torch.fx as fx

from torchfuser.ir.aten import INPUT_NAME
from torchfuser.ir.dtypes import DTYPE_NAMES
from torchfuser.ir.kernels import FusedKernel
from torchfuser.ir.symbolic import text as symbolic_text

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)')
_LOCAL_ROOT = re.compile(r"^(?:L\['[^']*'\]|L__self__)\.?")  # the compiled function's own argument
_GLOBAL_ROOT = re.compile(r"^G\['([^']*)'\]")
_GETATTR = re.compile(r"getattr\(([^()]*), '([^']*)'\)")
_INDEX = re.compile(r"\[(?:'([^']*)'|(\d+))\]")


def module_path(nn_module_stack) -> tuple[str, str]:
    """('layers.0.mlp', 'Linear') from Dynamo's nn_module_stack; ('', '') at top level."""
    if not nn_module_stack:
        return "", ""
    path, kind = next(reversed(nn_module_stack.values()))
    return _module_path(str(path), kind if isinstance(kind, (type, str)) else str(kind))


# every node of a module shares its path and stack trace, and every pass's snapshot reads them again: parsed once
@functools.lru_cache(maxsize=4096)
def _module_path(path: str, kind) -> tuple[str, str]:
    while _GETATTR.search(path):  # getattr(L['self'].blocks, '0') -> L['self'].blocks.0
        path = _GETATTR.sub(lambda m: f"{m.group(1)}.{m.group(2)}", path)
    path = _GLOBAL_ROOT.sub(lambda m: m.group(1), _LOCAL_ROOT.sub("", path))  # globals keep their name
    path = _INDEX.sub(lambda m: "." + (m.group(1) or m.group(2)), path).strip(".")
    kind = kind.__name__ if isinstance(kind, type) else str(kind).rsplit(".", 1)[-1]
    return path, kind


def source_location(stack_trace: str | None) -> dict:
    """The innermost user frame of a node's stack trace: file, line and the code on that line."""
    file, line, code = _innermost_frame(stack_trace) if stack_trace else (None, None, None)
    return {"file": file, "line": line, "code": code}


@functools.lru_cache(maxsize=4096)
def _innermost_frame(stack_trace: str) -> tuple:
    lines = stack_trace.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        frame = _FRAME.search(lines[i])
        if frame:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.search(lines[i + 1]) else None
            return frame["file"], int(frame["line"]), code
    return None, None, None


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
    if node.op == "placeholder":
        return node.meta.get(INPUT_NAME) or node.name  # the user's name (fc1.weight, x) where Dynamo had one
    return node.name if node.op in ("output", "get_attr") else target_name(node).rsplit(".", 1)[-1]


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
            "inputs": [inp.name for inp in node.all_input_nodes],
        })
        edges += [[inp.name, node.name] for inp in node.all_input_nodes]
        modules.setdefault(module, []).append(node.name)
    return {"nodes": nodes, "edges": edges, "modules": modules}


def fused_into(graph: dict, gm_after: fx.GraphModule) -> dict[str, int]:
    """Node id of `graph` -> the group of the fused kernel in `gm_after` that absorbed it (drawn instead of
    the node's own group, so a fused group has one colour before and after)."""
    ids = {entry["id"] for entry in graph["nodes"]}
    return {name: node.target.group for node in gm_after.graph.nodes if isinstance(node.target, FusedKernel)
            for name in node.meta.get("torchfuser_covers", ()) if name in ids}


class GraphSnapshots:
    """A pass-pipeline instrument: the graph after every pass, and which kernel absorbed each node of the
    graph before it, stored on the pass's record for the report. A pass's graph before is the graph after
    the pass that ran before it (one snapshot, shared)."""

    def __init__(self, first: dict | None = None):
        self._first = first  # a snapshot of the graph the pipeline starts from, when the caller took one
        self._last = first

    def start(self) -> None:
        self._last = self._first

    def before_pass(self, record, gm: fx.GraphModule) -> None:
        if self._last is None:
            self._last = snapshot_graph(gm)

    def after_pass(self, record, gm: fx.GraphModule) -> None:
        # a pass that changed nothing leaves the graph it was given: the same snapshot
        after = self._last if not record.modified and self._last is not None else snapshot_graph(gm)
        record.graph_before, record.graph_after = self._last, after
        record.fused_into = fused_into(self._last, gm)
        self._last = record.graph_after
