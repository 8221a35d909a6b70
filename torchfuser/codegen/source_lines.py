"""Which graph nodes each line of a kernel's OpenCL source computes: the explorer's source ↔ graph map.

The source is generated once more with line tagging on (program_c.LINE_TAGS): every line that computes a
program value ends with a marker standing for the nodes that value came from (the program's `origins`,
recorded while the passes lowered each node). The markers are stripped and the text must then be the
built source exactly; if it is not, there is no map rather than a wrong one. Statement lines that no
program value accounts for (loads, index arithmetic, a GEMM's tile loop, a reduction's accumulation,
attention's softmax) compute the kernel's other covered nodes: the matmul, the reduction, the views and
the index ops.
"""

from __future__ import annotations

import re

from torchfuser.codegen import kernel_source
from torchfuser.codegen.opencl.program_c import LINE_TAGS

_TAG = re.compile(r" /\*@tf(\d+)\*/")


def source_line_nodes(spec, source: str, covers) -> dict[int, list[str]]:
    """1-based line number of `source` (the spec's built OpenCL C) -> the graph nodes that line computes."""
    tags: list = []
    token = LINE_TAGS.set(tags)
    try:
        traced = kernel_source(spec)
    finally:
        LINE_TAGS.reset(token)
    lines = traced.split("\n")
    if _TAG.sub("", traced) != source:
        return {}
    tagged = {i: [n for m in _TAG.finditer(line) for n in tags[int(m.group(1))]] for i, line in enumerate(lines)}
    tagged = {i: names for i, names in tagged.items() if names}
    computed = {n for names in tagged.values() for n in names}
    rest = [n for n in covers if n not in computed]
    body = next((i for i, line in enumerate(lines) if line.startswith("__kernel")), len(lines))
    mapping = {}
    for i, line in enumerate(lines):
        nodes = tagged.get(i) or (rest if i > body and _is_statement(line) else [])
        if nodes:
            mapping[i + 1] = list(dict.fromkeys(nodes))
    return mapping


def _is_statement(line: str) -> bool:
    """Code that does work: not a brace, a comment or a line of the parameter list."""
    text = line.strip()
    return ";" in text and not text.startswith(("//", "/*"))
