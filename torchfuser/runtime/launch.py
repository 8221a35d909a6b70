"""Launches: how a fused node runs on a device for one input layout.

`configure(node, inputs, device_type)` asks the node's kind (ir/kernels KINDS) for the frozen spec to build,
the launch size, the scalar arguments and the output layouts, from the inputs' shapes and strides (real or
fake tensors). Configurations are memoised per node and input layout, so a steady call costs one dict
lookup per launch.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from torchfuser.ir.kernels import FusedKernel, kind_of
from torchfuser.ir.layout import extent, layout_signature
from torchfuser.runtime.device import get_device


def vector_widths() -> dict[str, int]:
    """Elements per vector by dtype on the current device (Device.vector_widths; 16 floats without one)."""
    device = get_device()
    return device.vector_widths if device is not None else {"float32": 16, "float64": 8}


class NoLaunch(ValueError):
    """This device has no kernel schedule for the node (a convolution's implicit patches off CPUs): the node runs
    in PyTorch, named in the report with this reason."""


@dataclass
class Launch:
    spec: object
    global_size: tuple[int, ...]
    outputs: list[tuple[tuple, tuple, torch.dtype]]  # (shape, stride, dtype) of each fresh output
    scalars: list = field(default_factory=list)  # trailing scalar kernel arguments
    empty: bool = False  # nothing to compute (zero-size): outputs are allocated, no launch
    # Work-group size. Left to PoCL it picks groups of up to 4096 items, and a launch of one group
    # leaves all but one CPU thread idle: the kernels choose small groups (global sizes are padded).
    local_size: tuple | None = None
    flops: float = 0.0  # the arithmetic it does (GEMMs, attention; 0 where bytes decide)
    nbytes: int = 0  # the bytes it reads and writes (configure() fills it in)
    # arguments() only places the buffers it is given (never looks at them), and everything else in it
    # follows from the input layout and offsets: the executor then builds the list once and swaps in
    # buffers per call. A subclass whose arguments change otherwise sets this False.
    static_arguments: ClassVar[bool] = True
    # prepare() hands the kernel tensors made anew each call (not the inputs, nor long-lived copies of them)
    fresh_prepared: ClassVar[bool] = False
    # prepare() runs a PyTorch op on its intra-op (OpenMP) threads, which keep spinning after it (lanes.py)
    host_threads: ClassVar[bool] = False
    # the inputs prepare() reads as tensors (None: any of them); the others may be virtual views
    prepare_reads: ClassVar[tuple | None] = None
    # prepare() only swaps input 1 for a copy kept while that input's root tensor is unchanged (its address and
    # version): a steady call whose input 1 is unchanged gets the same list (runtime/steady_tape.py)
    prepare_from_weights: ClassVar[bool] = False
    # prepare() only checks its inputs (raising on bad ones) and returns them: a replay runs it on the call's inputs
    prepare_checks_only: ClassVar[bool] = False

    def prepare(self, inputs: list, call=None) -> list:
        """The tensors the kernel reads (e.g. a weight in its pre-packed layout), as a new list (the inputs are
        not changed); default: the inputs. Host work that reads tensors must first call
        `call.before_host_read(tensors)`."""
        return inputs

    def arguments(self, in_buffers, in_offsets, out_buffers) -> list:
        raise NotImplementedError


_configured: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # node -> {layout key: Launch}
# (node structure, layout key) -> Launch: the layers of a model configure each of their kernels once per layout (a
# decode step at a new KV length configures one cat and one attention, not one per layer); a launch is not changed
# after configure, so nodes may share it
_by_structure: dict = {}
STRUCTURES_KEPT = 4096


def configure(node: FusedKernel, inputs, device_type: str = "CPU") -> Launch:
    """The node's launch for these input layouts on this type of device (memoised, also across nodes of one
    structure: FusedKernel.structure)."""
    memo = _configured.get(node)
    if memo is None:
        memo = _configured[node] = {}
    key = (layout_signature(inputs), device_type)
    launch = memo.get(key)
    if launch is None:
        structure = node.structure()
        shared = None if structure is None else (structure, key, get_device())  # its vector widths
        launch = None if shared is None else _by_structure.get(shared)
        if launch is None:
            launch = kind_of(node).configure(node, inputs, device_type)
            launch.nbytes = sum(extent(t) * t.dtype.itemsize for t in inputs) + sum(
                math.prod(shape) * dtype.itemsize for shape, _, dtype in launch.outputs)
            if shared is not None:
                if len(_by_structure) >= STRUCTURES_KEPT:  # sizes that keep changing: start again
                    _by_structure.clear()
                _by_structure[shared] = launch
        memo[key] = launch
    return launch


def configurations(node: FusedKernel) -> list[Launch]:
    """The launches configured for a node so far."""
    return list(_configured.get(node, {}).values())
