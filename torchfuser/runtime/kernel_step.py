"""A kernel step of a plan: one fused node's launches, a Bound per input layout (configured and built once).

A steady call (executor.Plan.run) finds its step's launch of the call before without looking at its arguments'
layouts; other calls look it up by layout (and symbol values, for a node whose own sizes are symbolic), binding a
new one the first time. Layouts that keep changing (a KV cache) hand the kernel copies of the last call's bound to
the new one, where its sizes came once; at most BOUNDS_KEPT are kept, the oldest that no kept tape launches
handing its kernel copies to the new one. A node whose kernel does not build for a layout runs in
PyTorch from then on.
"""

from __future__ import annotations

import math
import warnings

from torchfuser.codegen.opencl.claimed import is_claimed
from torchfuser.ir.kernels import FusedKernel
from torchfuser.ir.layout import contiguous_strides
from torchfuser.ir.symbolic import has_symbols
from torchfuser.runtime.bound import Bound
from torchfuser.runtime.call import Call, tensors_in
from torchfuser.runtime.kernel_cache import KernelBuildError
from torchfuser.runtime.lanes import INLINE, SPLIT, THREADED
from torchfuser.runtime.launch import configure
from torchfuser.runtime.memory import OutputLayout
from torchfuser.runtime.virtual_views import real

# bound launches a kernel step keeps, one per input layout: the oldest goes first, but one a kept tape launches
# only where every one is (twice executor.TAPES_KEPT: the kept tapes' and as many for the lengths walked)
BOUNDS_KEPT = 128


class KernelStep:
    """A fused node in a plan: per input layout, its Bound launch (configured and built once)."""

    __slots__ = ("target", "name", "plan", "bound", "last", "last_key", "blocks", "trusts_layouts", "long_lived",
                 "symbolic", "reads_virtual", "sized_inputs", "sized_layouts", "reshaped")

    def __init__(self, target: FusedKernel, name: str, plan, blocks: list | None, trusts_layouts: bool,
                 long_lived: list[bool], reads_virtual: bool = False, sized_inputs: tuple | None = None):
        self.target, self.name, self.plan = target, name, plan  # the executor.Plan it is a step of
        self.bound: dict[tuple, Bound] = {}
        self.last: Bound | None = None  # the launch of the last call
        self.last_key: tuple | None = None  # its key in self.bound
        self.blocks = blocks  # planned block per output, or None: fresh outputs (they reach the graph's outputs)
        self.trusts_layouts = trusts_layouts  # every input comes from the graph's inputs or kernels
        self.long_lived = long_lived  # per input: a graph input, a constant or a planned result (or views)
        self.symbolic = has_symbols(target.sized_dims())
        self.reads_virtual = reads_virtual  # some input may be a VirtualView
        # per input: its layout may depend on the graph's symbols (None: any may)
        self.sized_inputs = sized_inputs or (True,) * len(long_lived)
        # some input's layout, or the node's own sizes, depend on the graph's symbols (else a call with new
        # symbol values but the trusted layouts of the call before gives this step the same layouts again)
        self.sized_layouts = any(self.sized_inputs) or self.symbolic
        # the shape its only reader views its fresh result in (plan_analysis.reshaped_results): allocated so
        self.reshaped: tuple | None = None

    def __call__(self, call: Call | None, args, sizes: tuple):
        target = self.target.at_sizes(self.plan.bindings.symbols, sizes) if self.symbolic else self.target
        if call is not None and self.name not in self.plan.fallback_nodes:
            steady = (call.steady or call.steady_unsized and not self.sized_layouts) and self.trusts_layouts
            bound = self.last if steady else None
            try:
                if bound is None:
                    key = tuple([(t.shape, t.stride(), t.storage_offset(), t.dtype) for t in args])
                    if self.symbolic:  # a node's own sizes need not follow its inputs' (an arange)
                        key += (sizes,)
                    bound = self.bound.get(key)
                    if bound is None:
                        args = [real(a) for a in args]
                        bound = self._bind(call, target, args, key)
                    self.last, self.last_key = bound, key
                bound.calls += 1
                if bound.prepares and self.reads_virtual:  # host-side preparation reads tensors
                    reads = bound.launch.prepare_reads
                    if reads != ():
                        args = [real(a) if reads is None or i in reads else a for i, a in enumerate(args)]
                # a bound is found by its inputs' layouts, storage offsets included: they are its last enqueue's
                return call.enqueue(bound, args, bound.planned if call.planned else None, True, steady)
            except KernelBuildError as error:  # a new input layout whose kernel does not build
                self.plan.fallback_nodes[self.name] = f"OpenCL build failed: {error.log.strip()[:2000]}"
                warnings.warn(f"torchfuser: {error}; {self.name} runs in PyTorch from now on", RuntimeWarning)
        args = [real(a) for a in args]
        if call is not None:
            call.before_host_read(tensors_in(args))  # the PyTorch fallback reads on the host
            if call.recorder is not None:
                call.recorder.decline(f"{self.name} runs in PyTorch")
        return target.reference(*args)

    def _bind(self, call: Call, target: FusedKernel, args, key: tuple) -> Bound:
        launch = configure(target, args, call.runtime.device.type_name)
        lane = THREADED if launch.empty else self.plan.lanes.get(self.name) or call.runtime.lane(launch)[0]
        split = call.runtime.split_point(launch) if lane == SPLIT else None
        if lane == SPLIT and split is None:  # another layout than the plan's, too small to split
            lane = INLINE
        builts = None if launch.empty else self.plan.kernel_for(launch.spec, lane, call.runtime.claims(launch, lane))
        donor = self._evicted(call, builts)
        cell = None
        if builts and is_claimed(builts[0].name):
            cell = donor.cell if donor is not None and donor.cell is not None else call.runtime.claim_cells.take()
        bound = Bound(launch, builts, self.name, exclusive=True, lane=lane, split=split, cell=cell, donor=donor)
        bound.sized = self.sized_layouts
        # only a step's first layout runs its first split at the widest cut: a layout that keeps changing (a KV
        # cache) would otherwise leave most of every call's launch to the workers
        bound.widened = bool(self.bound) or donor is not None
        if self.reshaped is not None and len(bound.outputs) == 1:  # allocated in its reader's shape (same bytes)
            out = bound.outputs[0]
            if out.stride == tuple(contiguous_strides(out.shape)) and math.prod(out.shape) == math.prod(self.reshaped):
                bound.outputs = [OutputLayout.of(self.reshaped, contiguous_strides(self.reshaped), out.dtype)]
        if self.blocks is not None:
            planned = [self.plan.memory.tensor(block, layout) for block, layout in zip(self.blocks, bound.outputs)]
            bound.planned = None if any(t is None for t in planned) else planned  # `in` would call Tensor.__eq__
        if not launch.fresh_prepared:
            bound.memo = [[_dead, 0, None] if keep else None for keep in self.long_lived]
        self.bound[key] = bound
        return bound

    def _evicted(self, call: Call, builts) -> Bound | None:
        """The bound that gives its kernel copies (and claim cell) to a new one, taken out of the kept ones, where
        it ran the same kernels (copying each kernel and declaring its argument types per call costs more than
        a small kernel runs). Layouts that keep changing (a KV cache one longer each call)
        must not grow the bounds without end, nor copy kernels each call: the last call's bound goes where it
        was for sizes that came once (it ran in one call, no kept tape launches it: the sizes of a generate), else
        at BOUNDS_KEPT the oldest one that no kept tape launches (else the oldest, and its tapes). Only in a call
        that is not re-entrant: no other call of the plan is running, so each of its launches has been waited for."""
        last = self.last
        if (self.sized_layouts and last is not None and last.calls == 1 and not last.tapes and call.planned
                and builts and last.builts is builts):
            key = self.last_key
        elif len(self.bound) >= BOUNDS_KEPT:
            untaped = (k for k, bound in self.bound.items() if not bound.tapes)
            key = next(untaped, next(iter(self.bound)))
        else:
            return None
        gone = self.bound.pop(key)
        if gone is last:
            self.last = None
        self.plan.drop_tapes_using(gone)  # they launch its kernels, which the new bound may take
        return gone if call.planned and builts and gone.builts is builts else None


def _dead():
    return None
