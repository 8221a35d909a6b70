"""The report's JSON, schema_version 2 (report.schema.json): graphs stored once, and back.

Encoding: the ATen graph is stored in full; each pass that ran stores only its change to the graph before it
(nodes removed, added, rewritten, each placed by its index in the graph after). Module paths and source
lines are interned; kernels with the same cache key share one source entry. Expanding gives the full
per-pass graphs (the form snapshot.py builds and schema_version 1 stored), for the HTML page, the text
summary and Python users. Reading accepts both versions.
"""

from __future__ import annotations

from bisect import bisect_left

SCHEMA_VERSION = 2
_NODE_FIELDS = ("id", "op", "target", "label", "shape", "dtype", "group", "kernel")


class Interner:
    """Module paths ([path, type]) and user source lines ([file, line, code]), each stored once."""

    def __init__(self):
        self.modules: list[list] = []
        self.locations: list[list] = []
        self._module_index: dict[tuple, int] = {}
        self._location_index: dict[tuple, int] = {}

    def module(self, path: str, module_type: str) -> int:
        key = (path or "", module_type or "")
        if key not in self._module_index:
            self._module_index[key] = len(self.modules)
            self.modules.append(list(key))
        return self._module_index[key]

    def location(self, file: str | None, line: int | None, code: str | None) -> int | None:
        if file is None:
            return None
        key = (file, line, code)
        if key not in self._location_index:
            self._location_index[key] = len(self.locations)
            self.locations.append(list(key))
        return self._location_index[key]

    def provenance(self, entry: dict) -> tuple[int, int | None]:
        """(module index, location index) of anything carrying module/module_type/file/line/code."""
        return (self.module(entry.get("module", ""), entry.get("module_type", "")),
                self.location(entry.get("file"), entry.get("line"), entry.get("code")))


def encode_node(node: dict, interner: Interner) -> dict:
    module, location = interner.provenance(node)
    return {**{key: node[key] for key in _NODE_FIELDS}, "inputs": list(node.get("inputs", ())),
            "module": module, "location": location}


def encode_graph(graph: dict | None, interner: Interner, fused: dict | None = None) -> dict | None:
    if graph is None:
        return None
    encoded = {"nodes": [encode_node(n, interner) for n in graph["nodes"]]}
    if fused:
        encoded["fused_into"] = dict(fused)
    return encoded


def encode_change(before: dict, after: dict, fused: dict, interner: Interner) -> dict:
    """What turned `before` into `after`. A node kept in both is left out when it is equal and keeps its order
    relative to the other kept nodes (the longest run of kept nodes in their old order); otherwise it is
    `rewritten`, placed at its index in `after`."""
    old = {n["id"]: (index, n) for index, n in enumerate(before["nodes"])}
    after_ids = {n["id"] for n in after["nodes"]}
    kept = [(index, n) for index, n in enumerate(after["nodes"]) if n["id"] in old]
    in_order = _longest_increasing([old[n["id"]][0] for _, n in kept])
    added, rewritten = [], []
    for index, n in enumerate(after["nodes"]):
        if n["id"] not in old:
            added.append([index, encode_node(n, interner)])
    for position, (index, n) in enumerate(kept):
        if position not in in_order or n != old[n["id"]][1]:
            rewritten.append([index, encode_node(n, interner)])
    removed = [n["id"] for n in before["nodes"] if n["id"] not in after_ids]
    return {"removed": removed, "added": added, "rewritten": rewritten, "fused_into": dict(fused)}


def _longest_increasing(values: list[int]) -> set[int]:
    """Positions of one longest strictly increasing subsequence of `values` (patience sorting)."""
    tails: list[int] = []  # tails[k]: position of the smallest tail of an increasing run of length k + 1
    tail_values: list[int] = []
    previous = [-1] * len(values)
    for position, value in enumerate(values):
        k = bisect_left(tail_values, value)
        if k > 0:
            previous[position] = tails[k - 1]
        if k == len(tails):
            tails.append(position)
            tail_values.append(value)
        else:
            tails[k], tail_values[k] = position, value
    chosen, position = set(), tails[-1] if tails else -1
    while position >= 0:
        chosen.add(position)
        position = previous[position]
    return chosen


def encode_passes(records: list, start: dict | None, interner: Interner) -> list[dict]:
    """Each pass record with its change to the graph before it: `start` (the ATen graph), then the graph
    after the previous pass that ran."""
    passes, current = [], start
    for record in records:
        stats = dict(record.stats)
        error = stats.pop("error", None)
        change = None
        if record.enabled and current is not None and record.graph_after is not None:
            change = encode_change(current, record.graph_after, record.fused_into, interner)
            current = record.graph_after
        passes.append({"name": record.name, "enabled": record.enabled, "modified": record.modified,
                       "seconds": record.seconds, "stats": stats, "error": error, "change": change,
                       "unfused": [list(entry) for entry in record.unfused]})
    return passes


def encode_kernels(kernels: list[dict], interner: Interner) -> tuple[dict, list[dict]]:
    """(kernel_sources by cache key, kernel entries without source and spec, provenance interned)."""
    sources = {}
    entries = []
    for kernel in kernels:
        kernel = dict(kernel)
        shared = {"source": kernel.pop("source"), "spec": kernel.pop("spec")}  # equal keys: equal sources
        sources.setdefault(kernel["cache_key"], shared)
        kernel["sources"] = [list(interner.provenance(s)) for s in kernel["sources"]]
        entries.append(kernel)
    return sources, entries


def encode_line_nodes(line_nodes: dict[int, list[str]]) -> dict[str, list[str]]:
    """line -> nodes as runs: consecutive lines naming the same nodes become one "first-last" key (a GEMM's
    tile loop is a hundred lines of one matmul)."""
    runs: list[list] = []  # [first, last, nodes]
    for line in sorted(line_nodes):
        nodes = list(line_nodes[line])
        if runs and runs[-1][1] == line - 1 and runs[-1][2] == nodes:
            runs[-1][1] = line
        else:
            runs.append([line, line, nodes])
    return {(f"{a}-{b}" if b > a else str(a)): nodes for a, b, nodes in runs}


def expand_line_nodes(encoded: dict[str, list[str]]) -> dict[str, list[str]]:
    """The inverse of encode_line_nodes, one key per line."""
    lines = {}
    for key, nodes in encoded.items():
        first, _, last = key.partition("-")
        for line in range(int(first), int(last or first) + 1):
            lines[str(line)] = list(nodes)
    return lines


def encode_fallback(fallback: dict, interner: Interner) -> dict:
    module, location = interner.provenance(fallback)
    return {"op": fallback["op"], "node": fallback["node"], "reason": fallback["reason"], "module": module,
            "location": location}


# ---- reading ---------------------------------------------------------------------------------------------


def expand_report(report: dict) -> dict:
    """A report dict of either schema version with every graph in full (the schema_version 1 layout, with
    nodes' `inputs`, and `error` on passes), kernels with their source and spec. DOT is not included:
    dot.graph_dot draws a graph. Raises ValueError for a version this code does not read."""
    version = report.get("schema_version")
    if version == 1:
        return report
    if version != SCHEMA_VERSION:
        raise ValueError(f"TorchFuser report schema_version {version!r} is not one this version reads (1, 2)")
    provenance = _Provenance(report["modules"], report["locations"])
    graphs = report["graphs"]
    aten = provenance.graph(graphs.get("aten"))
    passes, current = [], aten
    for p in report["passes"]:
        expanded = {key: p[key] for key in ("name", "enabled", "modified", "seconds", "stats", "error")}
        expanded["unfused"] = p.get("unfused", [])
        change = p.get("change")
        if change is None or current is None:
            expanded.update(graph_before=None, graph_after=None)
        else:
            after = provenance.graph_of(apply_change(current["nodes"], change, provenance))
            expanded.update(graph_before=with_fused_groups(current, change["fused_into"]), graph_after=after)
            current = after
        passes.append(expanded)
    kernels = []
    for k in report["kernels"]:
        shared = report["kernel_sources"].get(k["cache_key"], {"source": "", "spec": ""})
        kernels.append({**k, "source": shared["source"], "spec": shared["spec"],
                        "sources": [provenance.fields(m, loc) for m, loc in k["sources"]],
                        "line_nodes": expand_line_nodes(k.get("line_nodes", {}))})
    fallbacks = [{"op": f["op"], "node": f["node"], "reason": f["reason"], **provenance.fields(f["module"], f["location"])}
                 for f in report["fallbacks"]]
    drawn_aten = with_fused_groups(aten, (graphs.get("aten") or {}).get("fused_into", {})) if aten else None
    return {**{k: v for k, v in report.items() if k not in ("modules", "locations", "kernel_sources")},
            "graphs": {"captured": provenance.graph(graphs.get("captured")), "aten": drawn_aten},
            "passes": passes, "kernels": kernels, "fallbacks": fallbacks}


def apply_change(nodes: list[dict], change: dict, provenance: "_Provenance") -> list[dict]:
    """The node list after a pass: see report.schema.json's Change."""
    replaced = set(change["removed"]) | {n["id"] for _, n in change["rewritten"]}
    result = [n for n in nodes if n["id"] not in replaced]
    for index, node in sorted(change["added"] + change["rewritten"], key=lambda placed: placed[0]):
        result.insert(index, provenance.node(node))
    return result


def with_fused_groups(graph: dict, fused: dict[str, int]) -> dict:
    """The graph as drawn: each node absorbed by a kernel shows that kernel's group."""
    if not fused:
        return graph
    nodes = [dict(n, group=fused[n["id"]]) if n["id"] in fused else n for n in graph["nodes"]]
    return {**graph, "nodes": nodes}


class _Provenance:
    """Resolves a v2 report's interned module and location indices."""

    def __init__(self, modules: list, locations: list):
        self.modules, self.locations = modules, locations

    def fields(self, module: int, location: int | None) -> dict:
        path, module_type = self.modules[module]
        file, line, code = self.locations[location] if location is not None else (None, None, None)
        return {"module": path, "module_type": module_type, "file": file, "line": line, "code": code}

    def node(self, node: dict) -> dict:
        return {**{key: node[key] for key in _NODE_FIELDS}, **self.fields(node["module"], node["location"]),
                "inputs": list(node["inputs"])}

    def graph(self, graph: dict | None) -> dict | None:
        return None if graph is None else self.graph_of([self.node(n) for n in graph["nodes"]])

    @staticmethod
    def graph_of(nodes: list[dict]) -> dict:
        modules: dict[str, list[str]] = {}
        for n in nodes:
            modules.setdefault(n["module"], []).append(n["id"])
        return {"nodes": nodes, "edges": [[source, n["id"]] for n in nodes for source in n["inputs"]],
                "modules": modules}
