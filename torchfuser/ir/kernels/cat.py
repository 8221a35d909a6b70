"""Concatenation kernels: each operand copied into its part of the result, sizes as kernel arguments.

The result is contiguous, as eager's cat is; along the cat dim d and every dim after it, each operand is one run
of memory (`CatSpec` reads it at offset + outer coordinates · outer strides, then consecutively), so a result row
(its dims from d on) is the operands' runs one after another. Every size, stride and run length is an argument:
one build serves every length of a growing sequence (a KV cache's append, whose length Dynamo marks dynamic).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torchfuser.ir.dtypes import DTYPES
from torchfuser.ir.kernels.base import FusedKernel, KernelSpec


@dataclass(frozen=True)
class CatSpec(KernelSpec):
    """Copies `n_inputs` operands of `dtype` into rows of the result; `outer_ndim` collapsed dims before the cat
    dim index the rows (each operand has its own strides along them)."""

    dtype: str
    n_inputs: int
    outer_ndim: int = 1
    index_type: str = "int"

    kind = "cat"

    def __post_init__(self):
        if self.dtype not in DTYPES or self.n_inputs < 1 or self.outer_ndim < 1:
            raise ValueError(f"dtype among {DTYPES}, n_inputs >= 1, outer_ndim >= 1")
        if self.index_type not in ("int", "long"):
            raise ValueError("index_type is 'int' or 'long'")

    def key_text(self) -> str:
        return f"cat dtype={self.dtype} inputs={self.n_inputs} outer={self.outer_ndim} index={self.index_type}"


def skipped_by_cat(t) -> bool:
    """An empty 1-d tensor (or its fake value), which eager's cat skips whatever the other operands' rank (Hugging
    Face's KV cache starts as `torch.tensor([])`)."""
    return t.dim() == 1 and t.shape[0] == 0


class CatKernel(FusedKernel):
    """out = torch.cat(inputs, dim)."""

    kind = "cat"

    def __init__(self, dim: int, group: int):
        super().__init__(group)
        self.dim = dim

    def reference(self, *inputs):
        return torch.cat(inputs, self.dim)

    def structure(self) -> tuple | None:
        return self._attributes()
