"""Kernel specs → OpenCL C (codegen/opencl/: the C column of the op table and one template per kind)."""

from torchfuser.ir.kernels import kind_of


def kernel_source(spec) -> str:
    """The OpenCL C of a spec, from its kind's code generator."""
    return kind_of(spec).source(spec)
