"""Fused kernels as graph targets, and the registry of kernel kinds.

A fusion pass puts a `FusedKernel` into the graph as a `call_function` target. The node holds what it
computes (an SSA program, an epilogue, a row reduction, ...) and its meaning in PyTorch (`reference`: the
fallback path and the tests' oracle). How it becomes OpenCL is the business of the layers above, which find
it through `KINDS`.

A kind of kernel is one `KernelKind` entry, registered by torchfuser/kinds/: its node and spec classes, its
code generator, its launch configuration and, optionally, a tuner and the compile-time transforms it relies
on. Codegen, the executor and the driver look kinds up here and never name one.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Callable


class FusedKernel:
    """Base of the graph targets: a readable __name__ for FX printing, the group shown in the explorer."""

    kind = "fused"

    def __init__(self, group: int):
        self.group = group
        self.__name__ = f"tf_{self.kind}_group{group}"
        self.__module__ = "torchfuser.fused"

    def __repr__(self) -> str:
        return self.__name__

    def reference(self, *inputs):
        """The kernel's meaning in PyTorch."""
        raise NotImplementedError

    def __call__(self, *inputs):
        """Standalone run (e.g. the fused GraphModule called directly): one launch, synchronised."""
        return _standalone[0](self, list(inputs))


def _run_reference(kernel: FusedKernel, inputs: list):
    return kernel.reference(*inputs)


_standalone: list[Callable] = [_run_reference]


def set_standalone_runner(run: Callable) -> None:
    """What calling a fused node directly does: the runtime installs its one-launch runner here."""
    _standalone[0] = run


class KernelSpec:
    """Base of the frozen specs (each a frozen dataclass with a `kind` and an exact `key_text()`): the kernel's
    name derives from the key text, so equal specs share a kernel and a name."""

    kind = "fused"

    def key_text(self) -> str:
        raise NotImplementedError

    @property
    def kernel_name(self) -> str:
        return f"tf_{self.kind}_{hashlib.sha256(self.key_text().encode()).hexdigest()[:10]}"


@dataclass(frozen=True)
class KernelKind:
    """Everything that makes one kind of fused node run: registered once, looked up by `kind` name."""

    name: str
    node: type  # the FusedKernel subclass the passes create
    spec: type  # the frozen spec its launches build
    source: Callable  # spec -> OpenCL C
    configure: Callable  # (node, inputs, device type) -> Launch: spec, sizes, arguments for these layouts
    tune: Callable | None = None  # (runtime, node, fake inputs, search) -> record for the report, or None
    transforms: Callable | None = None  # (launch, inputs) -> one-time constant transforms, in words


KINDS: dict[str, KernelKind] = {}


def register_kind(kind: KernelKind) -> KernelKind:
    if kind.node.kind != kind.name or kind.spec.kind != kind.name:
        raise ValueError(f"kernel kind {kind.name!r}: its node and spec classes must say kind = {kind.name!r}")
    KINDS[kind.name] = kind
    return kind


def kind_of(node_or_spec) -> KernelKind:
    """The registered kind of a fused node or a spec."""
    kind = KINDS.get(getattr(node_or_spec, "kind", None))
    if kind is None:
        raise TypeError(f"no kernel kind is registered for {type(node_or_spec).__name__}; known: {sorted(KINDS)}")
    return kind
