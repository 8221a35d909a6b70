"""A bound launch: a configured launch with its own kernel copies and argument lists, enqueued again with only
a call's buffers swapped in (runtime/call.py), and the one place pyopencl is imported for launching."""

from __future__ import annotations

import numpy as np

from torchfuser.runtime.claims import Cell
from torchfuser.runtime.lanes import THREADED
from torchfuser.runtime.launch import Launch
from torchfuser.runtime.memory import OutputLayout

_cl = None  # pyopencl, imported on first use (an import statement per launch costs as much as a dict lookup)


def copy_kernel(kernel):
    """Another cl.Kernel of the same program function, with its own arguments (~0.1 ms, once per launch)."""
    cl = cl_module()
    return cl.Kernel(kernel.get_info(cl.kernel_info.PROGRAM), kernel.function_name)


def cl_module():
    """pyopencl, imported once (with its generated argument code kept in memory: _memoised)."""
    global _cl
    if _cl is None:
        import pyopencl
        import pyopencl.invoker

        generate = pyopencl.invoker.generate_enqueue_and_set_args
        if not getattr(generate, "memoised", False):
            pyopencl.invoker.generate_enqueue_and_set_args = _memoised(generate)
        _cl = pyopencl
    return _cl


def _memoised(generate):
    """pyopencl's generator of a kernel's enqueue and set_args code, kept in memory for this process: pyopencl
    keeps that code on disk only, and reads and compiles it again for every new cl.Kernel whose scalar types are
    declared, which each launch a plan binds for a new layout (a growing sequence) creates."""
    found: dict = {}

    def memoised(*args, **kwargs):
        key = tuple(tuple(a) if isinstance(a, list) else a for a in args) + tuple(
            (k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(kwargs.items()))
        code = found.get(key)
        if code is None:
            code = found[key] = generate(*args, **kwargs)
        return code

    memoised.memoised, memoised.found = True, found
    return memoised


class _Slot:
    """Stands for the buffer of operand `index` while an argument list is built once per layout."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


# what one set of a Bound's kernel copies holds: the kernels, their declared scalar types, the argument list they
# hold, the addresses it binds, its argument lists by input offsets, the input offsets of its last enqueue
_ARMING = ("kernels", "typed", "armed", "addresses", "arguments", "offsets")


class Bound:
    """A configured launch ready to enqueue again: kernels, output layouts, argument lists by input offsets.

    A plan's Bound is `exclusive`: it runs its own copies of the built cl.Kernels, so the arguments it set
    stay set (a steady call sets none) and a pending launch's arguments cannot be changed by another. One-off
    launches (run_single, the autotuner) use the built kernels themselves and set every argument each time.
    A split launch has two kernels, one per device (the workers' first), with the same arguments.
    """

    __slots__ = ("launch", "builts", "kernels", "exclusive", "typed", "armed", "outputs", "label", "prepares", "sized",
                 "arguments", "lane", "split_dim", "cut", "recent_cuts", "widened", "cell", "claim_arguments",
                 "planned", "planned_buffers", "memo", "offsets", "addresses", "spare", "tapes", "calls")

    def __init__(self, launch: Launch, builts: list | None, label: str, exclusive: bool = False,
                 lane: str = THREADED, split: tuple[int, int] | None = None, cell: Cell | None = None,
                 donor: "Bound | None" = None):
        self.launch, self.builts, self.label, self.lane = launch, builts or [], label, lane
        self.sized = False  # a plan's Bound for one set of symbol values (its grid and arguments may follow them)
        self.tapes = 0  # the plan's kept tapes that launch it (executor.Plan)
        self.calls = 0  # the plan's calls that ran it (kernel_step.KernelStep)
        self.split_dim, self.cut = split or (0, None)  # a split launch: the dim it divides and where
        # a claimed split launch (its kernels are the claimed form): its counter cell and the claimed form's
        # trailing arguments (the cell, the dim whose indices are claimed, the grid)
        self.cell = cell
        self.claim_arguments: list = [] if cell is None else [
            cell.buffer, np.int32(cell.index), np.int32(self.split_dim),
            *[np.int64(n) for n in (*launch.global_size, 1, 1)[:3]]]
        self.recent_cuts: list[float] = []  # balanced cuts estimated from recent profiles (lanes.SplitEvents)
        self.widened = False  # the workers' part has run once at its widest (call.Call._enqueue_here)
        self.exclusive = exclusive and bool(builts)
        self.typed = False  # scalar argument dtypes declared on self.kernels
        if donor is not None and self.exclusive and donor.exclusive and donor.builts is self.builts:
            # the kernel copies of a bound that is no longer used (same kernels: same argument types)
            self.kernels, self.typed, donor.kernels = donor.kernels, donor.typed, []
        else:
            self.kernels = [copy_kernel(b.kernel) if self.exclusive else b.kernel for b in self.builts]
        self.armed = None  # the argument list the kernels hold (exclusive kernels only)
        self.outputs = [OutputLayout.of(*o) for o in launch.outputs]
        self.planned: list | None = None  # outputs in a plan's planned blocks (the same tensors every call)
        self.planned_buffers: list | None = None
        # per input: [weak ref to the tensor, its address, buffer] of the last call where the input may be
        # long-lived (a weight, a planned result: the same tensor comes again), else None
        self.memo: list = []  # (empty: no input is remembered)
        self.offsets: tuple | None = None  # the input offsets of the last enqueue
        # The data addresses of the last enqueue's inputs and outputs, where the kernels still hold their
        # zero-copy buffers: a steady enqueue at the same addresses (so the same layouts and offsets) finds
        # them armed already. A buffer views host memory from its address on, whatever storage owns it now.
        self.addresses: list | None = None
        self.prepares = type(launch).prepare is not Launch.prepare
        self.arguments: dict[tuple, tuple[list, list]] = {}  # input offsets -> (argument list, slot positions)
        # A second set of kernel copies and what they hold (_ARMING), made when a steady enqueue first finds
        # other addresses: a caller that keeps the last result (`y = f(x)` in a loop) gets fresh outputs from
        # two arena blocks in turn, and each set stays armed for one of them.
        self.spare: tuple | None = None

    def switch_arming(self) -> None:
        """Swap in the spare set of kernel copies with the arguments they hold (unarmed when first made)."""
        current = tuple([getattr(self, field) for field in _ARMING])
        spare = self.spare or ([copy_kernel(b.kernel) for b in self.builts], False, None, None, {}, None)
        for field, value in zip(_ARMING, spare):
            setattr(self, field, value)
        self.spare = current

    def argument_list(self, offsets: tuple) -> tuple[list, list]:
        """The kernel arguments for inputs at these offsets, buffers still to be placed at the positions."""
        found = self.arguments.get(offsets)
        if found is None:
            n_in = len(offsets)
            slots = [_Slot(i) for i in range(n_in + len(self.outputs))]
            args = list(self.launch.arguments(slots[:n_in], list(offsets), slots[n_in:]))
            positions = [(k, a.index) for k, a in enumerate(args) if isinstance(a, _Slot)]
            found = (args, positions)
            if self.launch.static_arguments:
                self.arguments[offsets] = found
        return found
