"""fuse_attention alone: node-count change, a no-op second run, the `modified` flag, stats, numerics."""

import math

import torch
import torch.nn.functional as F

from eager_compare import aten_graph, assert_close, call_nodes as ops
from torchfuser.passes import PIPELINE
from torchfuser.passes.fuse_attention import fuse_attention
from torchfuser.ir.kernels import AttentionKernel


def bert_attention(q, k, v, mask):
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + mask
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def two_sdpa(q, k, v):
    first = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(first, k, v)


def kernels(gm):
    return [n for n in ops(gm) if isinstance(n.target, AttentionKernel)]


def test_explicit_pattern_becomes_one_node():
    q, k, v = (torch.randn(2, 4, 8, 32) for _ in range(3))
    mask = torch.randn(2, 1, 1, 8)
    gm = aten_graph(bert_attention, q, k, v, mask)
    before = len(ops(gm))
    assert before == 16  # permute, 4x expand/view, bmm, view, div, add, _softmax, expand, view, bmm, view
    result = fuse_attention(gm)
    assert result.modified
    assert len(ops(result.gm)) == 1 and len(kernels(result.gm)) == 1
    assert result.stats == {"attention": 1, "nodes_before": 16, "nodes_after": 1}
    (node,) = kernels(result.gm)
    assert {"bmm", "div", "add", "_softmax", "bmm_1"} <= set(node.meta["torchfuser_covers"])
    assert_close(result.gm(q, k, v, mask), bert_attention(q, k, v, mask))
    again = fuse_attention(result.gm)
    assert not again.modified and again.stats["attention"] == 0 and len(ops(again.gm)) == 1


def test_sdpa_nodes_and_their_getitems_become_one_node_each():
    q, k, v = (torch.randn(1, 2, 6, 64) for _ in range(3))
    gm = aten_graph(two_sdpa, q, k, v)
    sdpa_nodes = [n for n in ops(gm) if "scaled_dot_product" in str(n.target)]
    assert len(sdpa_nodes) == 2
    before = len(ops(gm))
    result = fuse_attention(gm)
    assert result.modified and result.stats["attention"] == 2
    assert len(kernels(result.gm)) == 2 and len(ops(result.gm)) == before - 2 * 2  # each: sdpa + getitem(s)
    assert_close(result.gm(q, k, v), two_sdpa(q, k, v))
    assert not fuse_attention(result.gm).modified


def test_probabilities_with_another_user_are_left_alone():
    def fn(q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2), dim=-1)
        return p @ v + p.sum()

    q, k, v = (torch.randn(1, 2, 4, 32) for _ in range(3))
    gm = aten_graph(fn, q, k, v)
    before = len(ops(gm))
    result = fuse_attention(gm)
    assert not result.modified and result.stats["attention"] == 0 and len(ops(result.gm)) == before


def test_dropout_in_training_is_not_fused():
    q, k, v = (torch.randn(1, 2, 4, 32) for _ in range(3))
    gm = aten_graph(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5), q, k, v)
    assert not fuse_attention(gm).modified


def test_pipeline_order():
    # in-place cache writes, numbers as tensors first, then rewrites into the forms the fusions take, siblings merged, attention first
    assert PIPELINE[:15] == ["index_put_in_place", "tensor_scalar_operands", "symbol_operands", "fold_batch_norm",
                             "conv_as_gemm", "pointwise_conv_as_gemm",
                             "channels_last_between_convs", "pool_as_windows", "depthwise_conv_as_windows",
                             "cat_as_last_dim", "reduce_over_last_dim", "layer_norm_over_last_dim",
                             "batch_norm_as_affine", "merge_sibling_gemms", "fuse_attention"]
    assert PIPELINE.index("fuse_attention") < PIPELINE.index("fuse_gemm_epilogue") < PIPELINE.index("fuse_reductions")


def merged_heads(q, k, v):
    """GPT-2's tail: attention, then [B, H, T, D] → [B, T, H·D] for the out-projection."""
    b, h, t, d = q.shape
    return (torch.softmax(q @ k.transpose(-1, -2) * d**-0.5, dim=-1) @ v).transpose(1, 2).reshape(b, t, h * d)


def test_heads_transpose_copy_becomes_the_kernel_output():
    q, k, v = (torch.randn(2, 4, 8, 32) for _ in range(3))
    gm = aten_graph(merged_heads, q, k, v)
    *_, transpose, copy, merge = ops(gm)
    assert [n.target.__name__ for n in (transpose, copy, merge)] == ["permute.default", "clone.default",
                                                                      "view.default"]
    result = fuse_attention(gm)
    assert result.modified and result.stats["nodes_after"] == 2
    (node,) = kernels(result.gm)
    assert node.target.heads_last
    assert {transpose.name, copy.name} <= set(node.meta["torchfuser_covers"])
    assert tuple(node.meta["val"].shape) == (2, 8, 4, 32) and node.meta["val"].is_contiguous()
    assert [n.target for n in ops(result.gm)][1] is torch.ops.aten.view.default  # only the free view is left
    actual = result.gm(q, k, v)
    assert_close(actual, merged_heads(q, k, v))
    assert actual.is_contiguous()
    assert not fuse_attention(result.gm).modified


def test_heads_transpose_kept_when_the_output_has_other_users():
    def also_returns_heads(q, k, v):
        o = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
        return o, o.transpose(1, 2).contiguous()

    q, k, v = (torch.randn(1, 2, 5, 32) for _ in range(3))
    result = fuse_attention(aten_graph(also_returns_heads, q, k, v))
    (node,) = kernels(result.gm)
    assert not node.target.heads_last
    assert "clone" in {n.target.__name__.split(".")[0] for n in ops(result.gm)}
    for actual, expected in zip(result.gm(q, k, v), also_returns_heads(q, k, v)):
        assert_close(actual, expected)
