"""A plan's steady calls replayed from a tape of the launches one steady call made.

A steady call (executor.Plan.run: its inputs have the layouts and storage offsets of the call before) repeats the
call before launch for launch: the same Bound launches, armed with the same buffers except where an input now lies
at another address or a fresh output gets another arena block. Walking the plan's steps to find that out costs
microseconds of Python per launch, more than a small kernel runs. A tape keeps what one steady walk found: the
launches in order and, for each storage that can move between calls (a graph input, a fresh output), the kernel
arguments that hold its buffer. A replay compares the inputs' addresses, sets the buffers of what moved, allocates
the fresh outputs and enqueues.

Recorded (Recorder: Call.enqueue and the plan's steps fill it in during a steady call) only where that is all a
steady call does: every launch in the calling thread (its kernel done when its enqueue returns), with static
arguments (Launch.static_arguments) and no host work in prepare() beyond finding a kept copy of weights
(Launch.prepare_from_weights), and no step a PyTorch op; every graph output is a fresh kernel output.
A replay declines (returns None: the plan walks its steps, and records again) when an input the plan keeps derived
copies of (packed weights, weight transforms) has moved or been written (its version), or an input moved to another
storage offset. Before:

    Plan.run -> per step: fetch args, find the Bound, prepare (packed B), compare addresses, enqueue; sync, record
After (a replay):

    compare input addresses and weight versions -> allocate fresh outputs -> enqueue, enqueue
"""

from __future__ import annotations

import weakref

import torch

from torchfuser.runtime.bound import Bound, cl_module
from torchfuser.runtime.call import start_split, wait_for_workers
from torchfuser.runtime.lanes import INLINE, SPLIT, THREADED
from torchfuser.runtime.memory import storage_span
from torchfuser.runtime.virtual_views import VirtualView

_PLAIN = (torch.Tensor, torch.nn.Parameter)
_data_ptr = torch.Tensor.data_ptr


class Recorder:
    """What a steady call launched, in order, and the tensors its weight transforms read."""

    __slots__ = ("launches", "derived_from", "valid")

    def __init__(self):
        self.launches: list[tuple] = []  # (bound, inputs as given, inputs the kernel read, outputs, planned)
        self.derived_from: list = []
        self.valid = True

    def launched(self, bound: Bound, given, inputs, outs, planned: bool) -> None:
        launch = bound.launch
        if (launch.empty or not launch.static_arguments or bound.addresses is None
                or (bound.prepares and not launch.prepare_from_weights)):
            self.valid = False
        else:
            self.launches.append((bound, given, inputs, outs, planned))

    def transforms(self, tensors) -> None:
        """A weight transform read these: kept while they are unchanged."""
        self.derived_from += tensors

    def decline(self) -> None:
        """A step a replay would not repeat (a PyTorch op) ran."""
        self.valid = False


class SteadyTape:
    __slots__ = ("launches", "lanes", "runtime", "labels", "unprofiled", "enqueue", "binder", "arena", "input_ptrs", "input_offsets", "input_positions",
                 "derived", "fresh_layouts", "fresh_ptrs", "fresh_positions", "held", "output_kind", "output_fresh")

    def replay(self, args, events: list | None = None):
        """The call's output, or None where a replay would not do what the plan's steps do. events: where to put
        (label, event) per launch, for a profiled call."""
        for j, ref, version in self.derived:
            a = args[j]
            if ref() is not a or a._version != version:
                return None
        ptrs = list(map(_data_ptr, args))
        if ptrs != self.input_ptrs and not self._rebind_inputs(args, ptrs):
            return None
        outs = list(map(self.arena.allocate, self.fresh_layouts))
        ptrs = list(map(_data_ptr, outs))
        if ptrs != self.fresh_ptrs:
            self._rebind_outputs(outs, ptrs)
        if self.runtime is None:  # every launch in the calling thread: done when its enqueue returns
            enqueue = self.enqueue
            if events is None:
                for queue, kernel, global_size, local_size in self.launches:
                    enqueue(queue, kernel, global_size, local_size)
            else:
                for label, (queue, kernel, global_size, local_size) in zip(self.labels, self.launches):
                    events.append((label, enqueue(queue, kernel, global_size, local_size)))
        else:
            self._run_lanes(events)
        if self.output_kind is None:
            return outs[self.output_fresh[0]]
        return self.output_kind([outs[f] for f in self.output_fresh])

    def _run_lanes(self, events: list | None) -> None:
        """Launches in every lane, as Call runs them: an in-thread or split launch first waits for the workers'
        launches before it (it may read what they write), the call for the last of them."""
        enqueue, runtime = self.enqueue, self.runtime
        worker = claimed = None
        for label, (queue, kernel, global_size, local_size), (lane, bound, ahead) in zip(
                self.labels, self.launches, self.lanes):
            if lane != THREADED and worker is not None:
                wait_for_workers(runtime, worker, claimed)
                worker = None
            if lane == SPLIT:
                profiled, worker, claimed = start_split(runtime, bound, ahead)
            else:
                profiled = enqueue(queue, kernel, global_size, local_size)
                if lane == THREADED:
                    worker, claimed = profiled, None
            if events is not None:
                events.append((label, profiled))
        if worker is not None:
            wait_for_workers(runtime, worker, claimed)

    def _rebind_outputs(self, outs, ptrs) -> None:
        for f, (recorded, ptr) in enumerate(zip(self.fresh_ptrs, ptrs)):
            if recorded != ptr:
                self._set(self.fresh_positions[f], ("out", f), self.binder.output_buffer(outs[f]))
                self.fresh_ptrs[f] = ptr

    def _rebind_inputs(self, args, ptrs) -> bool:
        derived = {j for j, _, _ in self.derived}
        for j, (recorded, ptr) in enumerate(zip(self.input_ptrs, ptrs)):
            if recorded == ptr:
                continue
            a = args[j]
            if j in derived or a.storage_offset() != self.input_offsets[j]:
                return False
            buffer = self.binder.bind(a)
            if buffer is None:  # misaligned user memory: the plan's steps copy it
                return False
            self._set(self.input_positions[j], ("in", j), buffer)
            self.input_ptrs[j] = ptr
        return True

    def _set(self, positions, source, buffer) -> None:
        """Set the buffer where the tape's kernels take this source's; their Bounds no longer know what they
        hold, so the plan's next walk sets every argument again."""
        for bound, k in positions:
            for kernel in bound.kernels:
                kernel.set_arg(k, buffer)
            bound.addresses = bound.armed = None
        self.held[source] = buffer  # a kernel argument does not keep its buffer alive


def record(recorder: Recorder, args, output, runtime, ahead: dict) -> SteadyTape | None:
    """The tape of the steady call the recorder followed (args, output: the call's; ahead: what the workers of
    each split launch read ahead, executor.Plan._ahead), or None where a replay would not repeat it."""
    if not recorder.valid or not recorder.launches or any(type(a) not in _PLAIN for a in args):
        return None
    input_of = {}  # storage address -> the first graph input on it
    for j, a in enumerate(args):
        input_of.setdefault(storage_span(a)[0], j)
    derived = set()
    for t in recorder.derived_from:
        j = input_of.get(storage_span(_root(t))[0])
        if j is not None:
            derived.add(j)
    tape = SteadyTape()
    tape.input_positions = [[] for _ in args]
    tape.fresh_layouts, tape.fresh_ptrs, tape.fresh_positions = [], [], []
    fresh_of, fresh_tensors, launches, lanes = {}, [], [], []
    for bound, given, inputs, outs, planned in recorder.launches:
        if bound.prepares and inputs[1] is not given[1]:  # prepare() read a packed copy of B, kept while B's root is unchanged
            j = input_of.get(storage_span(_root(given[1]))[0])
            if j is None:  # packed anew each call (an activation, a planned result)
                return None
            derived.add(j)
        n_in = len(inputs)
        if not planned:
            for o, (layout, out) in enumerate(zip(bound.outputs, outs)):
                fresh_of[out.data_ptr()] = len(tape.fresh_layouts)
                tape.fresh_layouts.append(layout)
                tape.fresh_ptrs.append(out.data_ptr())
                tape.fresh_positions.append([])
                fresh_tensors.append(out)
        for k, i in bound.arguments[bound.offsets][1]:
            if i >= n_in:
                if not planned:
                    tape.fresh_positions[fresh_of[outs[i - n_in].data_ptr()]].append((bound, k))
                continue
            address = storage_span(inputs[i])[0]
            if address in input_of:
                tape.input_positions[input_of[address]].append((bound, k))
            elif address in fresh_of:
                tape.fresh_positions[fresh_of[address]].append((bound, k))
        launch = bound.launch
        queue = runtime.device.queue if bound.lane == THREADED else runtime.device.inline.queue
        launches.append((queue, bound.kernels[0], launch.global_size, launch.local_size))
        lanes.append((bound.lane, bound, ahead.get(bound)))
    flat = output if isinstance(output, (tuple, list)) else [output]
    index = {id(t): f for f, t in enumerate(fresh_tensors)}
    if any(id(t) not in index for t in flat):
        return None  # an output the steps make otherwise (an input, a view): the steps make it
    tape.output_kind = type(output) if isinstance(output, (tuple, list)) else None
    tape.output_fresh = [index[id(t)] for t in flat]
    tape.launches, tape.lanes = launches, lanes
    # None where every launch runs in the calling thread: no lane to look at
    tape.runtime = None if all(lane == INLINE for lane, _, _ in lanes) else runtime
    tape.labels = [bound.label for bound, *_ in recorder.launches]
    tape.unprofiled = [(label, None) for label in tape.labels]  # what an unprofiled call counts
    tape.binder, tape.arena, tape.enqueue = runtime.binder, runtime.arena, cl_module().enqueue_nd_range_kernel
    tape.input_ptrs = [a.data_ptr() for a in args]
    tape.input_offsets = [a.storage_offset() for a in args]
    tape.derived = [(j, weakref.ref(args[j]), args[j]._version) for j in sorted(derived)]
    tape.held = {}
    return tape


def _root(t):
    return t.root if type(t) is VirtualView else t
