"""Shared test helpers: compare with eager PyTorch at the suite's tolerances; compile and report; trace aten
graphs."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import torchfuser
from torchfuser.frontend.lowering import decompositions


def assert_close(actual, expected, rtol=1e-4, atol=1e-5):
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True)


def compiled(fn, *inputs, **options):
    """fn compiled afresh (Dynamo's caches reset) and called once without grad: (its result, the last report)."""
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torchfuser.compile(fn, **options)(*inputs)
    return out, reports[-1]


def aten_graph(fn, *inputs):
    """The core-ATen graph of fn, traced with the compiler's decompositions."""
    return make_fx(fn, decomposition_table=decompositions(), tracing_mode="fake")(*inputs)


def call_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function"]
