"""Transforms of weights made once and kept while the weights are unchanged (graph targets run on the host).

`ConcatWeights` is `torch.cat(parts, dim)` whose result is kept from call to call: while every part is the same
tensor, with the same storage and version, the call returns the tensor it made before (a GEMM that reads it then
finds its packed copy of it too). A new version of any part (an optimiser step, an in-place update) makes it
anew. Its meaning is torch.cat's whatever the inputs, so a graph with it is correct for activations too, only
slower (a copy per call).
"""

from __future__ import annotations

import weakref

import torch


class ConcatWeights:
    """torch.cat(parts, dim), kept while the parts are unchanged."""

    weight_transform = True  # made once per version of its inputs: not an op of every call

    def __init__(self, dim: int):
        self.dim = dim
        self.__name__ = "tf_concat_weights"
        self.__module__ = "torchfuser.weights"
        self._made: tuple = ((), None)  # ((weak ref, address, version) per part, result)

    def __repr__(self) -> str:
        return self.__name__

    def __call__(self, *parts: torch.Tensor) -> torch.Tensor:
        seen, result = self._made
        if len(seen) == len(parts) and all(ref() is t and address == t.data_ptr() and version == t._version
                                           for (ref, address, version), t in zip(seen, parts)):
            return result
        result = torch.cat(parts, self.dim)
        self._made = (tuple((weakref.ref(t), t.data_ptr(), t._version) for t in parts), result)
        return result
