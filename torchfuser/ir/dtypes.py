"""The dtypes kernels compute in, by name, and their torch counterparts."""

from __future__ import annotations

import torch

DTYPES = ("bool", "int32", "int64", "float32", "float64")
FLOAT_DTYPES = ("float32", "float64")
TORCH_DTYPES = {
    "bool": torch.bool,
    "int32": torch.int32,
    "int64": torch.int64,
    "float32": torch.float32,
    "float64": torch.float64,
}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES
