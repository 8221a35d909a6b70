"""The passes, one per file, and their order: `PIPELINE` is the list of names, in the order they run.

A pass is a function GraphModule -> PassResult(gm, modified, stats) (pipeline.py runs them). Researchers
add their own with `register_pass(name, fn, after=...)` (an fx `PassBase` works too); `disable=` takes any
of the names.
"""

from __future__ import annotations

from torchfuser.passes import (
    batch_norm_as_affine, cat_as_copies, cat_as_last_dim, channels_last_between_convs, conv_as_gemm,
    depthwise_conv_as_windows, eliminate_dead_code, index_put_in_place, fold_batch_norm, fuse_attention, fuse_gemm_epilogue,
    fuse_pointwise, fuse_reductions, fuse_window_into_gemm, gemm_result_channels_first, layer_norm_over_last_dim, merge_sibling_gemms, pointwise_conv_as_gemm,
    pool_as_windows, reduce_over_last_dim, symbol_operands, tensor_scalar_operands,
)
from torchfuser.passes.base import PassResult
from torchfuser.passes.pipeline import (
    PASSES, PIPELINE, Instrument, PassRecord, check_pass_names, kept_ops, register_pass, run_pipeline, unregister_pass,
)

# a graph input's functionalised update written back (a static KV cache's) as the in-place write it was
register_pass("index_put_in_place", index_put_in_place.index_put_in_place)
# numbers Dynamo passes as 0-d tensors (dynamic shapes) first, so that every fusion below sees them as inputs
register_pass("tensor_scalar_operands", tensor_scalar_operands.tensor_scalar_operands)
# and integer inputs (sizes the code computes with: a KV cache's position) as 0-d tensors the plan writes
register_pass("symbol_operands", symbol_operands.symbol_operands)
# inference batch norm after a convolution folded into its weights (made once per weight version)
register_pass("fold_batch_norm", fold_batch_norm.fold_batch_norm, handles=fold_batch_norm.handles)
# dense convolutions as GEMMs over their patches, read in place (a patch embedding's: one reordering copy)
register_pass("conv_as_gemm", conv_as_gemm.conv_as_gemm, handles=conv_as_gemm.handles)
# 1x1 stride-1 convolutions as plain GEMMs over their channels-last input (what conv_as_gemm takes first; with
# it disabled, these alone)
register_pass("pointwise_conv_as_gemm", pointwise_conv_as_gemm.pointwise_conv_as_gemm,
              handles=pointwise_conv_as_gemm.handles)
# then their results stay channels-last up to the next convolution: no layout copies between them
register_pass("channels_last_between_convs", channels_last_between_convs.channels_last_between_convs)
# pooling where its input's layout is known: max pooling of a channels-last batch as a window kernel, other
# pooling as elementwise max / sum over one strided view per window tap (its padding is concatenations: before
# cat_as_last_dim, which makes those row kernels)
register_pass("pool_as_windows", pool_as_windows.pool_as_windows, handles=pool_as_windows.handles)
# depthwise convolutions as pooling's windows: a per-channel weighted sum of one strided view per tap
register_pass("depthwise_conv_as_windows", depthwise_conv_as_windows.depthwise_conv_as_windows,
              handles=depthwise_conv_as_windows.handles)
# cats along inner dims (a KV cache's append) as cats along the last dim of flattening views: row kernels
register_pass("cat_as_last_dim", cat_as_last_dim.cat_as_last_dim)
# reductions over any dims as reductions over the last dim of a view, the form fuse_reductions takes
register_pass("reduce_over_last_dim", reduce_over_last_dim.reduce_over_last_dim, handles=reduce_over_last_dim.handles)
# and layer norms over several trailing dims as layer norms over the last dim of a view
register_pass("layer_norm_over_last_dim", layer_norm_over_last_dim.layer_norm_over_last_dim,
              handles=layer_norm_over_last_dim.handles)
# other inference batch norm as its per-channel affine, elementwise ops the fusions below take in
register_pass("batch_norm_as_affine", batch_norm_as_affine.batch_norm_as_affine, handles=batch_norm_as_affine.handles)
# (opt-in, slower than eager here for now: group_norm_as_layer_norm; torchfuser.passes.<name>.register())
# siblings next: GEMMs that share an input become one, before the passes that fuse around GEMMs see them
register_pass("merge_sibling_gemms", merge_sibling_gemms.merge_sibling_gemms)
# attention next: its bmms and softmax would otherwise go to fuse_gemm_epilogue and fuse_reductions
register_pass("fuse_attention", fuse_attention.fuse_attention, handles=fuse_attention.handles,
              keeps=fuse_attention.KEEP)
# GEMM next: it claims the bias add and activation that fuse_pointwise would otherwise take
register_pass("fuse_gemm_epilogue", fuse_gemm_epilogue.fuse_gemm_epilogue, handles=fuse_gemm_epilogue.handles)
# with both epilogues in place: a depthwise convolution (or pooling) only a GEMM reads is made inside that GEMM
register_pass("fuse_window_into_gemm", fuse_window_into_gemm.fuse_window_into_gemm)
# row reductions before fuse_pointwise: they take the elementwise ops around them (mask add, scale, weight,
# bias, rmsnorm's chain) as prologue and epilogue instead of separate kernels; after the GEMMs so a Linear
# keeps its bias and activation
register_pass("fuse_reductions", fuse_reductions.fuse_reductions, handles=fuse_reductions.handles)
# then every remaining elementwise chain
register_pass("fuse_pointwise", fuse_pointwise.fuse_pointwise, handles=fuse_pointwise.handles,
              keeps=fuse_pointwise.KEEP)
# GEMMs whose results only pointwise kernels read in eager's NCHW order store them so (the copies go)
register_pass("gemm_result_channels_first", gemm_result_channels_first.gemm_result_channels_first)
# a cat none of them took (along a dynamic dim: a KV cache's append) as a copy kernel with sizes as arguments
register_pass("cat_as_copies", cat_as_copies.cat_as_copies, handles=cat_as_copies.handles)
# last: clean up whatever the fusions left unused
register_pass("eliminate_dead_code", eliminate_dead_code.eliminate_dead_code)

__all__ = ["PIPELINE", "PASSES", "PassResult", "PassRecord", "Instrument", "register_pass", "unregister_pass",
           "run_pipeline", "check_pass_names", "kept_ops"]
