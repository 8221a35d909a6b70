"""fuse_reductions alone: node-count change, a no-op second run, the `modified` flag, stats, numerics."""

import torch
import torch.nn.functional as F

from eager_compare import aten_graph, assert_close, call_nodes as ops
from torchfuser.passes import PIPELINE
from torchfuser.passes.fuse_pointwise import fuse_pointwise
from torchfuser.passes.fuse_reductions import fuse_reductions
from torchfuser.ir.kernels import ReductionKernel


def masked_softmax(x, mask):
    return torch.softmax(x * 0.125 + mask, dim=-1)


def rmsnorm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def two_norms(x, w, b):
    return F.layer_norm(x, (16,), w, b) + F.log_softmax(x, -1)


def kernels(gm):
    return [n for n in ops(gm) if isinstance(n.target, ReductionKernel)]


def test_softmax_with_its_prologue_becomes_one_node():
    x, mask = torch.randn(2, 4, 16), torch.randn(2, 1, 16)
    gm = aten_graph(masked_softmax, x, mask)
    assert len(ops(gm)) == 3  # mul, add, _softmax
    result = fuse_reductions(gm)
    assert result.modified
    assert len(ops(result.gm)) == 1 and len(kernels(result.gm)) == 1
    assert result.stats == {"reductions": 1, "prologue_ops": 2, "epilogue_ops": 0, "nodes_before": 3, "nodes_after": 1}
    assert_close(result.gm(x, mask), masked_softmax(x, mask))
    again = fuse_reductions(result.gm)
    assert not again.modified and again.stats["reductions"] == 0 and len(ops(again.gm)) == 1


def test_rmsnorm_chain_is_one_node_and_leaves_nothing_for_fuse_pointwise():
    x, w = torch.randn(3, 32), torch.randn(32)
    gm = aten_graph(rmsnorm, x, w)
    before = len(ops(gm))
    result = fuse_reductions(gm)
    assert before == 6 and len(ops(result.gm)) == 1
    assert result.stats["reductions"] == 1 and result.stats["prologue_ops"] == 1
    assert result.stats["epilogue_ops"] == 4  # add, rsqrt (row level), mul, mul (element level)
    (node,) = kernels(result.gm)
    assert node.meta["torchfuser_covers"] == ["pow_1", "mean", "add", "rsqrt", "mul", "mul_1"]
    assert not fuse_pointwise(result.gm).modified
    assert_close(result.gm(x, w), rmsnorm(x, w))


def test_two_reductions_sharing_an_input():
    x, w, b = torch.randn(5, 16), torch.randn(16), torch.randn(16)
    gm = aten_graph(two_norms, x, w, b)
    result = fuse_reductions(gm)
    assert result.stats["reductions"] == 2
    assert len(kernels(result.gm)) == 2
    assert_close(result.gm(x, w, b), two_norms(x, w, b))
    assert not fuse_reductions(result.gm).modified


def test_nothing_to_do():
    gm = aten_graph(lambda x: torch.softmax(x, 0) * 2, torch.randn(4, 4))
    result = fuse_reductions(gm)
    assert not result.modified and result.stats["reductions"] == 0 and len(ops(result.gm)) == 2


def test_pipeline_order():
    assert PIPELINE.index("fuse_gemm_epilogue") < PIPELINE.index("fuse_reductions") < PIPELINE.index("fuse_pointwise")


def test_a_second_reduction_of_an_epilogue_value_is_one_more_stage():
    def manual_softmax(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    x = torch.randn(3, 24)
    gm = aten_graph(manual_softmax, x)
    result = fuse_reductions(gm)
    assert len(ops(result.gm)) == 1 and result.stats["reductions"] == 1
    assert result.stats["epilogue_ops"] == 4  # sub, exp, sum, div
    (node,) = kernels(result.gm)
    assert len(node.target.reduction.stages) == 2
    assert_close(result.gm(x), manual_softmax(x))
    assert not fuse_reductions(result.gm).modified
