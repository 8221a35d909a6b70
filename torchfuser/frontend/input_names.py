"""Graph inputs named as the user knows them: `fc1.weight`, `layers.0.bias`, `x`, not `arg0_1`.

Dynamo records where each input of its graph came from (a `Source`: `L['self']._modules['fc1']._parameters
['weight']`, `L['x']`); lowering keeps the inputs in order (lifted module state first), so the name follows
each input into the ATen graph. The report shows it as the placeholder's label; the node id stays the FX name.
"""

from __future__ import annotations

import re

import torch.fx as fx

from torchfuser.ir.aten import INPUT_NAME
_ROOT = re.compile(r"^[LG]\['([^']*)'\]")
_MODULE_PART = re.compile(r"\._(?:modules|parameters|buffers)\['([^']*)'\]")
_ITEM = re.compile(r"\[(?:'([^']*)'|(\d+))\]")


def user_name(source_name: str) -> str:
    """`L['self']._modules['fc1']._parameters['weight']` -> `fc1.weight`; `L['x']` -> `x`; `L['args'][0]` ->
    `args.0`. Inside a module the path starts at the module (its own name is the model's, not the input's)."""
    root = _ROOT.match(source_name)
    rest = source_name[root.end():] if root else source_name
    if root and (_MODULE_PART.match(rest) or root.group(1) == "self"):
        text = _MODULE_PART.sub(lambda m: "." + m.group(1), rest)
    else:
        text = (root.group(1) if root else "") + _MODULE_PART.sub(lambda m: "." + m.group(1), rest)
    text = _ITEM.sub(lambda m: "." + (m.group(1) or m.group(2)), text)
    return text.strip(".") or source_name


def name_dynamo_inputs(gm: fx.GraphModule) -> list[str | None]:
    """The user's name of each placeholder of a Dynamo graph (None where Dynamo kept no source); also stored
    on the placeholders' meta."""
    names = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        source = getattr(node.meta.get("grapharg"), "source", None)
        name = user_name(source.name) if source is not None else None
        if name:
            node.meta[INPUT_NAME] = name
        names.append(name)
    return names


def name_inputs(gm: fx.GraphModule, names: list[str | None]) -> None:
    """Give a lowered graph's placeholders these names, in order (nothing if the counts differ)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(names):
        return
    for node, name in zip(placeholders, names):
        if name:
            node.meta[INPUT_NAME] = name
