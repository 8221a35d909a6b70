"""Each pass alone: node-count change, a no-op second run, the `modified` flag, and numerics."""

import copy

import pytest
import torch
import torch.nn.functional as F

from eager_compare import aten_graph, call_nodes as ops
from torch.fx.passes.infra.pass_base import PassBase
from torch.fx.passes.infra.pass_base import PassResult as FxPassResult
from torch.fx.passes.infra.pass_manager import PassManager
from torchfuser.passes import PIPELINE, PassResult, register_pass, run_pipeline, unregister_pass
from torchfuser.passes.eliminate_dead_code import eliminate_dead_code
from torchfuser.report.dot import graph_dot
from torchfuser.passes.fuse_gemm_epilogue import fuse_gemm_epilogue
from torchfuser.passes.fuse_pointwise import fuse_pointwise
from torchfuser.report.snapshot import GraphSnapshots
from torchfuser.ir.kernels import GemmKernel
from torchfuser.ir.kernels import FusedKernel, PointwiseKernel


def chain(x, y):
    return torch.tanh(F.silu(x) * y + 1.5) - x


def mlp(x, w1, b1, w2):
    return F.gelu(F.linear(x, w1, b1)) @ w2.t()


def test_fuse_pointwise_turns_a_chain_into_one_node():
    x, y = torch.randn(2, 8, 16)
    gm = aten_graph(chain, x, y)
    expected = chain(x, y)
    before = len(ops(gm))
    result = fuse_pointwise(gm)
    assert result.modified and before >= 5
    fused = [n for n in ops(result.gm) if isinstance(n.target, FusedKernel)]
    assert len(ops(result.gm)) == 1 and len(fused) == 1 and isinstance(fused[0].target, PointwiseKernel)
    assert result.stats["pointwise_groups"] == 1 and result.stats["nodes_after"] == 1
    torch.testing.assert_close(result.gm(x, y), expected)
    again = fuse_pointwise(result.gm)
    assert not again.modified and len(ops(again.gm)) == 1


def test_fuse_pointwise_keeps_groups_apart_that_would_need_a_cycle():
    def fn(x):
        a = torch.exp(x)  # elementwise
        s = a.sum(dim=-1, keepdim=True)  # not elementwise, depends on a
        return a / s  # elementwise, depends on a and on s

    x = torch.randn(4, 8)
    gm = aten_graph(fn, x)
    result = fuse_pointwise(gm)
    kernels = [n for n in ops(result.gm) if isinstance(n.target, PointwiseKernel)]
    assert len(kernels) == 2  # exp and div cannot share a kernel: the sum sits between them
    torch.testing.assert_close(result.gm(x), fn(x))


def test_fuse_gemm_epilogue_absorbs_bias_and_activation():
    x, w1, b1, w2 = torch.randn(2, 3, 16), torch.randn(32, 16), torch.randn(32), torch.randn(8, 32)
    gm = aten_graph(mlp, x, w1, b1, w2)
    names = [str(n.target) for n in ops(gm)]
    assert "aten.addmm.default" in names and "aten.gelu.default" in names
    before = len(ops(gm))
    result = fuse_gemm_epilogue(gm)
    assert result.modified and result.stats["gemm_epilogue"] == 2 and result.stats["epilogue_ops"] == 1
    assert len(ops(result.gm)) < before
    assert not any(str(n.target) in ("aten.addmm.default", "aten.gelu.default", "aten.mm.default")
                   for n in ops(result.gm))
    assert sum(isinstance(n.target, GemmKernel) for n in ops(result.gm)) == 2
    torch.testing.assert_close(result.gm(x, w1, b1, w2), mlp(x, w1, b1, w2), rtol=1e-4, atol=1e-5)
    again = fuse_gemm_epilogue(result.gm)
    assert not again.modified and len(ops(again.gm)) == len(ops(result.gm))


def test_eliminate_dead_code_removes_unused_nodes():
    def fn(x):
        torch.exp(x)  # result unused
        return x + 1

    gm = aten_graph(fn, torch.randn(4))
    assert len(ops(gm)) == 2
    result = eliminate_dead_code(gm)
    assert result.modified and result.stats["removed"] == 1 and len(ops(result.gm)) == 1
    again = eliminate_dead_code(result.gm)
    assert not again.modified and again.stats["removed"] == 0


def test_pipeline_records_every_pass_with_snapshots_and_counts():
    x, w1, b1, w2 = torch.randn(2, 3, 16), torch.randn(32, 16), torch.randn(32), torch.randn(8, 32)
    gm, records = run_pipeline(aten_graph(mlp, x, w1, b1, w2), disable=["eliminate_dead_code"],
                               instruments=[GraphSnapshots()])
    assert [r.name for r in records] == PIPELINE
    by_name = {r.name: r for r in records}
    assert not by_name["eliminate_dead_code"].enabled and by_name["eliminate_dead_code"].graph_before is None
    gemm = by_name["fuse_gemm_epilogue"]
    assert gemm.enabled and gemm.modified and gemm.seconds > 0
    before_groups = {n["id"]: gemm.fused_into.get(n["id"], n["group"]) for n in gemm.graph_before["nodes"]}
    after_kernels = [n for n in gemm.graph_after["nodes"] if n["kernel"]]
    assert {n["group"] for n in after_kernels} == {0, 1}
    assert before_groups["gelu"] == before_groups["addmm"]  # fused together: one colour before and after
    assert 'class="jp-torchfuser-kernel"' in graph_dot(gemm.graph_after)


def test_the_runner_renders_nothing_itself_and_instruments_see_every_enabled_pass():
    seen = []

    class Recorder:
        def before_pass(self, record, gm):
            seen.append(("before", record.name, len(ops(gm))))

        def after_pass(self, record, gm):
            seen.append(("after", record.name, len(ops(gm))))

    gm = aten_graph(chain, *torch.randn(2, 4))
    _, records = run_pipeline(gm, disable=["fuse_attention"], instruments=[Recorder()])
    assert all(r.graph_before is None and r.graph_after is None for r in records)
    enabled = [name for name in PIPELINE if name != "fuse_attention"]
    assert [name for when, name, _ in seen if when == "before"] == enabled
    pointwise = [count for _, name, count in seen if name == "fuse_pointwise"]
    assert pointwise[0] > pointwise[1] == 1  # the chain became one kernel between before and after


def test_an_fx_pass_base_runs_in_the_pipeline_and_ours_in_fx_pass_manager():
    class ReluToNeg(PassBase):  # a torch.fx pass: modifies in place, returns torch.fx's PassResult
        def call(self, gm):
            hits = [n for n in gm.graph.nodes if n.target is torch.ops.aten.relu.default]
            for node in hits:
                node.target = torch.ops.aten.neg.default
            gm.recompile()
            return FxPassResult(gm, bool(hits))

    def fn(x):
        return torch.relu(x) * 2

    x = torch.randn(8)
    register_pass("relu_to_neg", ReluToNeg(), after="fuse_attention")
    try:
        gm, records = run_pipeline(aten_graph(fn, x))
        record = next(r for r in records if r.name == "relu_to_neg")
        assert record.enabled and record.modified
        torch.testing.assert_close(gm(x), -x * 2)
    finally:
        unregister_pass("relu_to_neg")
    result = PassManager(passes=[fuse_pointwise])(aten_graph(fn, x))  # ours, driven by torch.fx
    assert result.modified and isinstance(result, FxPassResult)
    torch.testing.assert_close(result.graph_module(x), fn(x))


def test_unknown_pass_names_are_refused():
    gm = aten_graph(chain, *torch.randn(2, 4))
    with pytest.raises(ValueError, match="unknown pass name"):
        run_pipeline(gm, disable=["fuse_everything"])


def test_a_registered_pass_runs_in_order_and_can_be_disabled():
    seen = []

    def count_nodes(gm):
        seen.append(len(ops(gm)))
        return PassResult(gm, False, {"nodes": len(ops(gm))})

    register_pass("count_nodes", count_nodes, after="fuse_gemm_epilogue")
    try:
        assert PIPELINE.index("count_nodes") == PIPELINE.index("fuse_gemm_epilogue") + 1
        gm = aten_graph(chain, *torch.randn(2, 4))
        _, records = run_pipeline(copy.deepcopy(gm))
        assert seen and [r for r in records if r.name == "count_nodes"][0].stats == {"nodes": seen[0]}
        run_pipeline(gm, disable=["count_nodes"])
        assert len(seen) == 1
    finally:
        unregister_pass("count_nodes")
    assert "count_nodes" not in PIPELINE


def test_a_pass_that_raises_is_left_out_and_reported():
    def broken(gm):
        next(n for n in gm.graph.nodes if n.op == "call_function").target = "half-rewritten"
        raise RuntimeError("boom")

    register_pass("broken_pass", broken, after="fuse_gemm_epilogue")
    try:
        x, y = torch.randn(2, 8, 16)
        gm = aten_graph(chain, x, y)
        with pytest.warns(RuntimeWarning, match="pass broken_pass failed: RuntimeError: boom"):
            gm, records = run_pipeline(gm)
        record = next(r for r in records if r.name == "broken_pass")
        assert not record.enabled and "boom" in record.stats["error"]
        assert next(r for r in records if r.name == "fuse_pointwise").modified
        torch.testing.assert_close(gm(x, y), chain(x, y))
    finally:
        unregister_pass("broken_pass")
