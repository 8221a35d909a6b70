"""Kernel specs → OpenCL C. The op → C text mapping is a table (pointwise_ops.OPS), not if-chains."""

from torchfuser.codegen.attention import attention_source
from torchfuser.codegen.gemm import gemm_source
from torchfuser.codegen.pointwise import pointwise_source
from torchfuser.codegen.reduction import reduction_source
from torchfuser.ir.specs import AttentionSpec, GemmSpec, PointwiseSpec, ReductionSpec


def kernel_source(spec) -> str:
    if isinstance(spec, PointwiseSpec):
        return pointwise_source(spec)
    if isinstance(spec, GemmSpec):
        return gemm_source(spec)
    if isinstance(spec, ReductionSpec):
        return reduction_source(spec)
    if isinstance(spec, AttentionSpec):
        return attention_source(spec)
    raise TypeError(f"no code generator for {type(spec).__name__}")
