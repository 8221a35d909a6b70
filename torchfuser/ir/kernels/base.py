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

import copy
import hashlib
from dataclasses import dataclass
from typing import Callable

import torch

from torchfuser.ir.symbolic import evaluate, has_symbols


_IDENTITY = frozenset({"group", "__name__", "__module__", "_at_sizes"})  # a node's own, not what it computes


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

    def sized_dims(self) -> list:
        """The sizes the node holds itself (not read off its inputs); symbolic ones are bound per call."""
        return []

    def structure(self) -> tuple | None:
        """Everything its kind's launch configuration reads of this node, for a kind whose configuration reads
        nothing else of it (no per-node state, such as a GEMM's tuned choices): two nodes of one structure (the
        same cat or attention in every layer of a model) then configure alike. None: configure each node."""
        return None

    def _attributes(self) -> tuple | None:
        """structure() for a kind whose configuration reads only the node's attributes: its class and them (its
        group and names aside), or None where one is not a plain hashable value."""
        fields = tuple(sorted((k, v) for k, v in vars(self).items() if k not in _IDENTITY))
        if any(isinstance(v, torch.Tensor) for _, v in fields):  # equality would compare their values
            return None
        try:
            hash(fields)
        except TypeError:  # a list, a SymInt
            return None
        return type(self), fields

    def at_sizes(self, symbols: tuple, values: tuple) -> "FusedKernel":
        """This node with its symbolic sizes evaluated at these symbol values (memoised): what launches
        configure and the reference runs at one call's sizes. A node whose sizes are all ints is itself."""
        if not has_symbols(self.sized_dims()):
            return self
        memo = self.__dict__.setdefault("_at_sizes", {})
        node = memo.get(values)
        if node is None:
            if len(memo) >= 64:  # sizes that keep changing (a growing sequence): do not grow without bound
                memo.clear()
            node = memo[values] = copy.copy(self)
            node.__dict__.pop("_at_sizes", None)
            node._evaluate_sizes(lambda dims: evaluate(dims, symbols, values))
        return node

    def _evaluate_sizes(self, evaluate_dims) -> None:
        """Replace the node's own sizes with evaluate_dims(sizes) (called on a copy)."""

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

    @property
    def indexes_by_group(self) -> bool:
        """The kernel finds its work from its work-group ids (get_group_id), which do not include a launch's
        global offset: it cannot run as two parts of one grid (a split launch)."""
        return False

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
    # (runtime, node, fake inputs, search, sizes_vary) -> record for the report, or None; sizes_vary: the inputs'
    # sizes are symbolic (the fake inputs are at Dynamo's example sizes, one of many the launch will see)
    tune: Callable | None = None
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
