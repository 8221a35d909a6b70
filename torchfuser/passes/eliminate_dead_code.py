"""eliminate_dead_code: remove nodes whose results nothing uses.

Rule: a node with no users that has no side effects (FX's `is_impure` is False) is erased; repeat until
none is left. Preconditions: none. Placeholders and the output are kept.

    before:  a = relu(x); b = exp(x); return a          after:  a = relu(x); return a
"""

from __future__ import annotations

import torch.fx as fx

from torchfuser.passes.base import PassResult, count_ops


def eliminate_dead_code(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    modified = gm.graph.eliminate_dead_code()
    if modified:
        gm.recompile()
    return PassResult(gm, modified, {"removed": before - count_ops(gm)})
