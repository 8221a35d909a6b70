"""The kernel kinds TorchFuser knows: one registration line each (node, spec, codegen, launch, tuner, transforms).

A new kind adds its node and spec (ir/kernels/), its code generator (codegen/opencl/), its launch
configuration (runtime/) and a line here; the driver, codegen and executor find it through the registry.
"""

from torchfuser.codegen.opencl.attention import attention_source
from torchfuser.codegen.opencl.cat import cat_source
from torchfuser.codegen.opencl.window import window_source
from torchfuser.codegen.opencl.gemm import gemm_source
from torchfuser.codegen.opencl.pointwise import pointwise_source
from torchfuser.codegen.opencl.reduction import reduction_source
from torchfuser.ir.kernels import (
    AttentionKernel, AttentionSpec, CatKernel, CatSpec, WindowKernel, WindowSpec, GemmKernel, GemmSpec,
    KernelKind, PointwiseKernel, PointwiseSpec, ReductionKernel, ReductionSpec, register_kind,
)
from torchfuser.runtime.attention_launch import configure_attention
from torchfuser.runtime.autotune import tune_gemm
from torchfuser.runtime.cat_launch import configure_cat
from torchfuser.runtime.window_launch import configure_window
from torchfuser.runtime.gemm_launch import configure_gemm, gemm_transforms
from torchfuser.runtime.pointwise_launch import configure_pointwise
from torchfuser.runtime.reduction_launch import configure_reduction

register_kind(KernelKind("pointwise", PointwiseKernel, PointwiseSpec, pointwise_source, configure_pointwise))
register_kind(KernelKind("gemm", GemmKernel, GemmSpec, gemm_source, configure_gemm, tune_gemm, gemm_transforms))
register_kind(KernelKind("reduction", ReductionKernel, ReductionSpec, reduction_source, configure_reduction))
register_kind(KernelKind("attention", AttentionKernel, AttentionSpec, attention_source, configure_attention))
register_kind(KernelKind("cat", CatKernel, CatSpec, cat_source, configure_cat))
register_kind(KernelKind("window", WindowKernel, WindowSpec, window_source, configure_window))
