"""The fused-node classes (one module per kind: its frozen spec and its node) and the kind registry."""

from torchfuser.ir.kernels.attention import AttentionKernel, AttentionSpec
from torchfuser.ir.kernels.cat import CatKernel, CatSpec
from torchfuser.ir.kernels.window import WindowKernel, WindowSpec, Window
from torchfuser.ir.kernels.base import (
    KINDS, FusedKernel, KernelKind, KernelSpec, kind_of, register_kind, set_standalone_runner,
)
from torchfuser.ir.kernels.gemm import ConvPatches, GemmKernel, GemmSpec
from torchfuser.ir.kernels.pointwise import PointwiseKernel, PointwiseSpec
from torchfuser.ir.kernels.reduction import ReductionKernel, ReductionSpec

__all__ = ["FusedKernel", "KernelKind", "KernelSpec", "KINDS", "kind_of", "register_kind", "set_standalone_runner", "PointwiseKernel", "PointwiseSpec",
           "ConvPatches", "GemmKernel", "GemmSpec", "ReductionKernel", "ReductionSpec", "AttentionKernel", "AttentionSpec",
           "CatKernel", "CatSpec",
           "WindowKernel", "WindowSpec", "Window"]
