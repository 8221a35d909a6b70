"""Transforms of weights made once and kept while the weights are unchanged (graph targets run on the host).

A `WeightTransform` is a function of tensors whose result is kept from call to call: while every tensor
argument is the same tensor, with the same storage and version, the call returns the tensor it made before
(a GEMM that reads it then finds its packed copy of it too). A new version of any argument (an optimiser step,
an in-place update) makes it anew. Its meaning is its `make` whatever the inputs, so a graph with it is
correct for activations too, only slower (the transform runs every call).

- `ConcatWeights`: torch.cat(parts, dim) (merged sibling GEMMs).
- `FoldedBatchNorm`: a convolution's weight or bias with the inference batch norm after it folded in.
- `ConvWeightAsMatrix`: a convolution's weight as the B matrix of its GEMM.
- `ConvWeightFromMatrix`: that B back as a convolution's weight (PyTorch's convolution runs a GEMM node).
"""

from __future__ import annotations

import weakref

import torch


def version_of(t: torch.Tensor):
    """What says whether t was written since it was last seen: its version counter. An inference tensor (made
    under torch.inference_mode) has none and may be written in place there: it gets a token equal to nothing, so
    whatever is kept by version is made again each call (correct, only slower)."""
    return object() if t.is_inference() else t._version


# Argument sets kept per transform: two instances of one model class share Dynamo's graph and so our plan, each
# with its own weights; kept by one slot, calling them in turn re-made (and re-packed) every weight per call.
KEPT_SETS = 8


class WeightTransform:
    """make(*args), kept while its tensor arguments are unchanged, for up to KEPT_SETS sets of arguments (the
    least recently made is forgotten first; sets whose tensors have died are forgotten at the next make)."""

    weight_transform = True  # made once per version of its inputs: not an op of every call

    def __init__(self, name: str):
        self.__name__ = name
        self.__module__ = "torchfuser.weights"
        # {ids of the tensor arguments: ((weak ref, address, version) per tensor argument, result)}
        self._made: dict = {}

    def __repr__(self) -> str:
        return self.__name__

    def make(self, *args):
        raise NotImplementedError

    def kept(self, args) -> torch.Tensor | None:
        """The result made for these arguments, if each is still the same tensor, storage and version."""
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        entry = self._made.get(tuple(map(id, tensors)))
        if entry is None:
            return None
        seen, result = entry
        if all(ref() is t and address == t.data_ptr() and version == version_of(t)
               for (ref, address, version), t in zip(seen, tensors)):
            return result
        return None

    def kept_results(self) -> list:
        """The results kept now, one per argument set."""
        return [result for _, result in self._made.values()]

    def __call__(self, *args):
        result = self.kept(args)
        if result is None:
            result = self.make(*args)
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            made = {key: entry for key, entry in self._made.items()
                    if all(ref() is not None for ref, _, _ in entry[0])}
            key = tuple(map(id, tensors))
            made.pop(key, None)  # a new version of a kept set: the newest again
            made[key] = (tuple((weakref.ref(t), t.data_ptr(), version_of(t)) for t in tensors), result)
            while len(made) > KEPT_SETS:
                del made[next(iter(made))]
            self._made = made
        return result


class ConcatWeights(WeightTransform):
    """torch.cat(parts, dim), kept while the parts are unchanged."""

    def __init__(self, dim: int):
        super().__init__("tf_concat_weights")
        self.dim = dim

    def make(self, *parts: torch.Tensor) -> torch.Tensor:
        return torch.cat(parts, self.dim)


class ConvWeightAsMatrix(WeightTransform):
    """A convolution's weight [Cout, C, KH, KW] (conv1d: [Cout, C, KW]) as the B of its GEMM over channels-last
    patches: [KH * KW * C, Cout], row (kh, kw, c) (ir/window.Window's order)."""

    def __init__(self):
        super().__init__("tf_conv_weight_as_matrix")

    def make(self, weight: torch.Tensor) -> torch.Tensor:
        taps_first = weight.permute(2, 3, 1, 0) if weight.dim() == 4 else weight.permute(2, 1, 0)
        return taps_first.reshape(-1, weight.shape[0]).contiguous()


class ConvWeightFromMatrix(WeightTransform):
    """B [KH * KW * C, Cout] (ConvWeightAsMatrix's rows (kh, kw, c)) back as the convolution's weight [Cout, C,
    KH, KW], channels-last: what PyTorch's convolution takes when it runs a convolution's GEMM."""

    def __init__(self, kernel_h: int, kernel_w: int, channels: int):
        super().__init__("tf_conv_weight_from_matrix")
        self.kernel_h, self.kernel_w, self.channels = kernel_h, kernel_w, channels

    def make(self, b: torch.Tensor) -> torch.Tensor:
        return b.t().reshape(b.shape[1], self.kernel_h, self.kernel_w, self.channels).contiguous().permute(0, 3, 1, 2)


class FoldedBatchNorm(WeightTransform):
    """The weight ("weight") or bias ("bias") of conv(x, w, b) such that conv(x, w', b') is the inference
    batch norm of conv(x, w, b): per output channel, scale = gamma / sqrt(var + eps), w' = w * scale and
    b' = (b - mean) * scale + beta (b, gamma, beta None: 0, 1, 0)."""

    def __init__(self, part: str, eps: float):
        if part not in ("weight", "bias"):
            raise ValueError("part is 'weight' or 'bias'")
        super().__init__(f"tf_fold_batch_norm_{part}")
        self.part, self.eps = part, float(eps)

    def make(self, weight, bias, mean, var, gamma, beta) -> torch.Tensor:
        scale = torch.rsqrt(var + self.eps)
        if gamma is not None:
            scale = scale * gamma
        if self.part == "weight":
            return weight * scale.view(-1, *[1] * (weight.dim() - 1))
        folded = -mean * scale if bias is None else (bias - mean) * scale
        return folded if beta is None else folded + beta
