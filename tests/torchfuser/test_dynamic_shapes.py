"""Symbolic sizes: when Dynamo makes a size dynamic (automatic dynamic shapes after a change, mark_dynamic or
dynamic=True), an inference graph is compiled once, its kernels take the sizes as arguments, and one plan
serves every size; training graphs still compile a plan per concrete signature."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from eager_compare import assert_close

SIZES = (2, 7, 128, 4097)  # along the dynamic dim (Dynamo specialises 0 and 1)


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 8)).eval()


def built_specs(report) -> set:
    return {spec for spec, _lane, _claimed in report.plan.built}


def test_changing_batch_sizes_share_one_symbolic_plan():
    model = mlp()
    compiled = torch.compile(model, backend="torchfuser")  # dynamic=None: Dynamo's automatic dynamic shapes
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for batch in (3, 7, 33, 7, 0, 1, 4097, 2):
            x = torch.randn(batch, 32)
            assert_close(compiled(x), model(x))
    dynamic = [r for r in reports if r.to_dict()["dynamic"]]
    assert len(dynamic) == 1 and "dynamic" in dynamic[0].title
    assert "size mismatch at index 0" in dynamic[0].recompile_reason  # Dynamo's reason, in the report
    assert reports[0].recompile_reason is None
    report = dynamic[0].to_dict()
    assert [k["kind"] for k in report["kernels"]] == ["gemm", "reduction", "gemm"] and not report["fallbacks"]
    runs = {tuple(r["sizes"]): r["calls"] for r in report["dynamic"]["runs"]}
    assert runs == {(7,): 2, (33,): 1, (4097,): 1, (2,): 1}
    # the first call's static plan, the symbolic one, and the sizes Dynamo specialises (0 and 1)
    assert len(reports) == 4
    shapes = [n["shape"] for n in report["graphs"]["aten"]["nodes"] if n["op"] == "placeholder"]
    assert [report["dynamic"]["symbols"][0], 32] in shapes  # the graph shows the symbol


def test_training_with_changing_shapes_matches_eager_gradients():
    model = mlp().train()
    compiled = torch.compile(model, backend="torchfuser")
    for batch in (4, 9, 17):
        x = torch.randn(batch, 32, requires_grad=True)
        compiled(x).square().sum().backward()
        got, x.grad = x.grad, None
        model(x).square().sum().backward()
        assert_close(got, x.grad)


@pytest.mark.parametrize("seq", [[5, 9, 13]])
def test_sequence_lengths_of_an_attention_block(seq):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).eval()
    compiled = torch.compile(layer, backend="torchfuser")
    with torch.no_grad():
        for t in seq:
            x = torch.randn(2, t, 32)
            assert_close(compiled(x), layer(x))


def pointwise(x, y):  # broadcasting against a static row, with an op that needs the flat schedule
    return torch.sigmoid(x) * y + x.abs().sqrt()


def reduction(x, w):  # a row reduction (layernorm) over the static dim, rows dynamic
    return F.layer_norm(x, (x.shape[-1],), w).softmax(-1)


def long_rows(x):  # the reduced dim is the dynamic one
    return x.softmax(-1) * x.sum(-1, keepdim=True)


def transposed(x):  # a strided read whose last dim is the dynamic one (the row schedule must not fix it)
    return (x.transpose(1, 2) * 2).contiguous()


def gemm(x, w, b):  # M dynamic, with a bias and activation epilogue
    return F.gelu(x @ w + b)


def attention(q, k, v):  # one query, a dynamic number of keys (decode with a KV cache)
    return F.scaled_dot_product_attention(q, k, v)


def causal_attention(x, w):  # prefill: queries and keys both dynamic, causal
    q = (x @ w).view(1, x.shape[1], 2, 16).transpose(1, 2)
    return F.scaled_dot_product_attention(q, q, q, is_causal=True)


def kv_append(past, new):  # a KV cache's append: the cat runs along the dynamic dim
    return torch.cat([past, new.transpose(1, 2)], 2)


CASES = {
    "pointwise": (pointwise, lambda n: [torch.randn(3, n, 9), torch.randn(9)], [(0, 1)]),
    "reduction": (reduction, lambda n: [torch.randn(n, 33), torch.randn(33)], [(0, 0)]),
    "long_rows": (long_rows, lambda n: [torch.randn(5, n)], [(0, 1)]),
    "strided_rows": (transposed, lambda n: [torch.randn(2, 3, 12, n)], [(0, 3)]),
    "gemm": (gemm, lambda n: [torch.randn(n, 24), torch.randn(24, 40), torch.randn(40)], [(0, 0)]),
    "attention": (attention, lambda n: [torch.randn(1, 2, 1, 16), torch.randn(1, 2, n, 16),
                                        torch.randn(1, 2, n, 16)], [(1, 2), (2, 2)]),
    "kv_append": (kv_append, lambda n: [torch.randn(1, 3, n, 16), torch.randn(1, 1, 3, 16)], [(0, 2)]),
    "causal_attention": (causal_attention, lambda n: [torch.randn(1, n, 32), torch.randn(32, 32)], [(0, 1)]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_build_serves_every_size(case):
    fn, make, dynamic_dims = CASES[case]
    compiled = torch.compile(fn, backend="torchfuser")
    torch.manual_seed(0)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for n in SIZES:
            args = make(n)
            for i, d in dynamic_dims:
                torch._dynamo.mark_dynamic(args[i], d)
            assert_close(compiled(*args), fn(*args), atol=1e-4)
            if n == SIZES[0]:
                specs = built_specs(reports[0])
    assert len(reports) == 1, [r.title for r in reports]
    report = reports[0]
    assert report.kernels and not report.fallbacks, report.summary()
    # every size ran the kernels built at the first, but where a schedule is chosen per size bucket: the GEMM's
    # (rows for M <= 32, packed above) and attention's query tile (runtime/attention_launch.cpu_tile)
    built = built_specs(report)
    assert all(spec.kind in ("gemm", "attention") for spec in built - specs)
    assert len({s.schedule for s in built if s.kind == "gemm"}) == len([s for s in built if s.kind == "gemm"]) <= 2
    assert len({(s.lanes, s.query_vectors) for s in built if s.kind == "attention"}) <= 4
    assert sorted(r["sizes"][0] for r in report.to_dict()["dynamic"]["runs"]) == sorted(SIZES)


def test_dynamic_true_compiles_one_plan():
    model = mlp()
    compiled = torch.compile(model, backend="torchfuser", dynamic=True)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for batch in (5, 6, 300):
            x = torch.randn(batch, 32)
            assert_close(compiled(x), model(x))
    assert len(reports) == 1 and reports[0].to_dict()["dynamic"]


def test_non_contiguous_and_sliced_inputs_of_changing_size():
    def fn(x):
        return torch.relu(x) + 1

    compiled = torch.compile(fn, backend="torchfuser")
    with torch.no_grad():
        for n in (6, 10, 31):
            base = torch.randn(n, 2 * n)
            for x in (base.t(), base[:, ::2], base[1:]):
                assert_close(compiled(x), fn(x))


def test_weight_transforms_are_kept_across_calls_of_new_sizes():
    """q/k/v merged into one GEMM: the concatenated weight (and its packed copy) is made once, not at every
    call with new sizes (such a call is not 'steady', but the weights' views are the same)."""
    torch.manual_seed(0)

    class QKV(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)

        def forward(self, x):
            return self.q(x), self.k(x), self.v(x)

    model = QKV().eval()
    compiled = torch.compile(model, backend="torchfuser", dynamic=True)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        made = []
        for n in (5, 9, 17, 33):
            x = torch.randn(n, 32)
            for got, expected in zip(compiled(x), model(x)):
                assert_close(got, expected)
            (concat,) = [node.target for r in reports for node in r.plan.gm.graph.nodes
                         if getattr(node.target, "weight_transform", False)][:1]
            made += concat.kept_results()
    assert len(made) == 4 and all(m is made[0] for m in made)


def test_size_arithmetic_runs_on_the_host_and_is_no_fallback():
    def fn(x):  # the view's size is computed from the symbol each call (operator.mul on a SymInt)
        return torch.tanh(x.view(x.shape[0] * 2, -1)) + 1

    compiled = torch.compile(fn, backend="torchfuser", dynamic=True)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for n in (4, 6, 11):
            x = torch.randn(n, 8)
            assert_close(compiled(x), fn(x))
    assert len(reports) == 1 and not reports[0].fallbacks and [k.kind for k in reports[0].kernels] == ["pointwise"]
