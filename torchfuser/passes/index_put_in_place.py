"""index_put_in_place: an index_put into a graph input that the graph then copies back into that input (a static KV
cache's update, functionalised) becomes the in-place index_put_ on the input.

Functionalisation turns `cache.index_copy_(2, pos, k)` (Hugging Face's StaticCache) into an index_put that makes a
new cache tensor, read by attention, and a copy_ of it back into the cache at the end of the graph: two copies of
the whole cache per layer and step, where eager writes one position. Written in place, the step touches only the
new rows, and attention reads the cache itself.

Rule: r = index_put(x, indices, v) ... copy_(x, r) -> r = index_put_(x, indices, v), the copy_ erased, where x is a
graph input whose only users are these two nodes (no other node reads x's old values, which the write replaces
earlier than before), accumulate is False and the copy_'s result is unused.
Preconditions: none (it runs first; the nodes stay PyTorch ops, which the plan runs in place).

    before: r = index_put(cache, [None, None, pos], k); o = sdpa(q, r, ...); copy_(cache, r); return o
    after:  r = index_put_(cache, [None, None, pos], k); o = sdpa(q, r, ...); return o
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.passes.base import PassResult, count_ops, rewrites_done

aten = torch.ops.aten


def index_put_in_place(gm: fx.GraphModule) -> PassResult:
    before = count_ops(gm)
    rewritten = 0
    for copy in [n for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.copy_.default]:
        put = _written_back(copy)
        if put is None:
            continue
        gm.graph.erase_node(copy)
        put.target, put.args = aten.index_put_.default, put.args[:3]  # its readers now read the input written
        rewritten += 1
    return rewrites_done(gm, before, "written_in_place", rewritten)


def _written_back(copy: fx.Node) -> fx.Node | None:
    """The index_put that `copy` writes back into the graph input it indexes, where it can be done in place."""
    if len(copy.args) != 2 or copy.kwargs or copy.users:
        return None
    x, put = copy.args
    if not (isinstance(x, fx.Node) and x.op == "placeholder" and isinstance(put, fx.Node)):
        return None
    if put.target is not aten.index_put.default or put.args[0] is not x or set(x.users) != {put, copy}:
        return None
    accumulate = put.args[3] if len(put.args) > 3 else put.kwargs.get("accumulate", False)
    if accumulate or put.kwargs.keys() - {"accumulate"}:
        return None
    value = x.meta.get("val")  # the copy_ would also cast or broadcast: only the same layout is written as is
    made = put.meta.get("val")
    if not isinstance(value, torch.Tensor) or not isinstance(made, torch.Tensor) or value.dtype != made.dtype \
            or value.shape != made.shape:
        return None
    return put
