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

import logging
import math
import weakref

import torch

from torchfuser.codegen.opencl.chained import chained_source
from torchfuser.runtime.bound import Bound, cl_module, copy_kernel
from torchfuser.runtime.call import start_split, wait_for_workers
from torchfuser.runtime.kernel_cache import KERNELS, KernelBuildError
from torchfuser.runtime.lanes import INLINE, SPLIT, THREADED
from torchfuser.runtime.memory import storage_span
from torchfuser.runtime.virtual_views import VirtualView

logger = logging.getLogger("torchfuser")

CHAIN_ITEMS = 64  # work-items of a launch with wider groups that still runs in a chain, one by one
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
    """See the module docstring. `launches` / `lanes` / `labels`: one launch per Bound, as the steps made them (a
    profiled call replays these: each kernel's own time); `fast`: the same, with runs of in-thread launches chained
    into one (codegen/opencl/chained.py) where they can be."""

    __slots__ = ("launches", "lanes", "labels", "fast", "runtime", "unprofiled", "enqueue", "binder", "arena",
                 "input_ptrs", "input_offsets", "input_positions", "derived", "fresh_layouts", "fresh_ptrs",
                 "fresh_positions", "held", "output_kind", "output_fresh")

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
        if events is not None:
            self._run_lanes(self.launches, self.lanes, events)
        elif self.runtime is None:  # every launch in the calling thread: done when its enqueue returns
            enqueue = self.enqueue
            for queue, kernel, global_size, local_size in self.fast[0]:
                enqueue(queue, kernel, global_size, local_size)
        else:
            self._run_lanes(*self.fast, None)
        if self.output_kind is None:
            return outs[self.output_fresh[0]]
        return self.output_kind([outs[f] for f in self.output_fresh])

    def _run_lanes(self, launches: list, lanes: list, events: list | None) -> None:
        """Launches in every lane, as Call runs them: an in-thread or split launch first waits for the workers'
        launches before it (it may read what they write), the call for the last of them."""
        enqueue, runtime = self.enqueue, self.runtime
        worker = claimed = None
        for k, ((queue, kernel, global_size, local_size), (lane, bound, ahead)) in enumerate(zip(launches, lanes)):
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
                events.append((self.labels[k], profiled))
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
        for kernels, k, bound in positions:
            for kernel in kernels:
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
    derived = {j for j in (input_of.get(storage_span(_root(t))[0]) for t in recorder.derived_from) if j is not None}
    tape = SteadyTape()
    tape.fresh_layouts, tape.fresh_ptrs, fresh_of, fresh_tensors = [], [], {}, []
    sources = []  # per launch: (argument position, ("in", input) or ("out", fresh output)) for what can move
    for bound, given, inputs, outs, planned in recorder.launches:
        if bound.prepares and inputs[1] is not given[1]:  # prepare() read a packed copy of B, kept while B's root is unchanged
            j = input_of.get(storage_span(_root(given[1]))[0])
            if j is None:  # packed anew each call (an activation, a planned result)
                return None
            derived.add(j)
        n_in, moving = len(inputs), []
        if not planned:
            for layout, out in zip(bound.outputs, outs):
                fresh_of[out.data_ptr()] = len(tape.fresh_layouts)
                tape.fresh_layouts.append(layout)
                tape.fresh_ptrs.append(out.data_ptr())
                fresh_tensors.append(out)
        for k, i in bound.arguments[bound.offsets][1]:
            if i >= n_in:
                if not planned:
                    moving.append((k, ("out", fresh_of[outs[i - n_in].data_ptr()])))
                continue
            address = storage_span(inputs[i])[0]
            if address in input_of:
                moving.append((k, ("in", input_of[address])))
            elif address in fresh_of:
                moving.append((k, ("out", fresh_of[address])))
        sources.append(moving)
    flat = output if isinstance(output, (tuple, list)) else [output]
    index = {id(t): f for f, t in enumerate(fresh_tensors)}
    if any(id(t) not in index for t in flat):
        return None  # an output the steps make otherwise (an input, a view): the steps make it
    tape.output_kind = type(output) if isinstance(output, (tuple, list)) else None
    tape.output_fresh = [index[id(t)] for t in flat]
    positions = {("in", j): [] for j in range(len(args))} | {("out", f): [] for f in range(len(fresh_tensors))}
    bounds = [bound for bound, *_ in recorder.launches]
    for bound, moving in zip(bounds, sources):
        for k, source in moving:
            positions[source].append((bound.kernels, k, bound))
    tape.held = {}
    tape.launches, tape.lanes = _launches(bounds, runtime, ahead)
    tape.fast = _chained(bounds, sources, positions, tape, runtime, ahead)
    tape.input_positions = [positions[("in", j)] for j in range(len(args))]
    tape.fresh_positions = [positions[("out", f)] for f in range(len(fresh_tensors))]
    tape.labels = [bound.label for bound in bounds]
    tape.unprofiled = [(label, None) for label in tape.labels]  # what an unprofiled call counts
    # None where every launch runs in the calling thread: no lane to look at
    tape.runtime = None if all(bound.lane == INLINE for bound in bounds) else runtime
    tape.binder, tape.arena, tape.enqueue = runtime.binder, runtime.arena, cl_module().enqueue_nd_range_kernel
    tape.input_ptrs = [a.data_ptr() for a in args]
    tape.input_offsets = [a.storage_offset() for a in args]
    tape.derived = [(j, weakref.ref(args[j]), args[j]._version) for j in sorted(derived)]
    return tape


def _launches(bounds: list, runtime, ahead: dict) -> tuple[list, list]:
    """(queue, kernel, global size, local size) and (lane, bound, what its workers read ahead) per launch."""
    launches, lanes = [], []
    for bound in bounds:
        launch = bound.launch
        queue = runtime.device.queue if bound.lane == THREADED else runtime.device.inline.queue
        launches.append((queue, bound.kernels[0], launch.global_size, launch.local_size))
        lanes.append((bound.lane, bound, ahead.get(bound)))
    return launches, lanes


def _chained(bounds: list, sources: list, positions: dict, tape: SteadyTape, runtime, ahead: dict) -> tuple:
    """The tape's launches with each run of consecutive in-thread launches that chain as one launch (its kernel
    armed with all their arguments, and set where theirs are)."""
    runs, run = [], []
    for bound in bounds + [None]:
        if bound is not None and bound.lane == INLINE and _chains(bound):
            run.append(bound)
            continue
        runs += [run] if len(run) > 1 else [[b] for b in run]
        run = []
        if bound is not None:
            runs.append([bound])
    launches, lanes, first = [], [], 0
    for run in runs:
        chain = _chain(run, runtime) if len(run) > 1 else None
        if chain is None:
            kept = _launches(run, runtime, ahead)
            launches += kept[0]
            lanes += kept[1]
        else:
            kernel, offsets, arguments = chain
            for i, offset in enumerate(offsets):
                for k, source in sources[first + i]:
                    positions[source].append(((kernel,), offset + k, run[i]))
            tape.held[("chain", first)] = arguments
            launches.append((runtime.device.inline.queue, kernel, (1,), (1,)))
            lanes.append((INLINE, None, None))
        first += len(run)
    return launches, lanes


def _chains(bound: Bound) -> bool:
    """Whether a launch may run in a chain: its kernel holds a known argument list, and its work-items are single
    (a chain runs them one by one, where PoCL would vectorise a wider group across them) or few."""
    launch = bound.launch
    return (bound.armed is not None and not bound.claim_arguments
            and (all(n == 1 for n in launch.local_size or (1,)) or math.prod(launch.global_size) <= CHAIN_ITEMS))


def _chain(run: list, runtime) -> tuple | None:
    """(chained kernel, each part's first argument position, the arguments it holds) for these in-thread launches,
    or None where they do not chain."""
    chained = chained_source([(b.builts[0].source, b.builts[0].name, b.launch.global_size) for b in run])
    if chained is None:
        return None
    try:
        built, _ = KERNELS.get(runtime.device.inline, *chained)
    except KernelBuildError as error:
        logger.debug("torchfuser: launches not chained: %s", error)
        return None
    kernel = copy_kernel(built.kernel)  # its own arguments
    arguments, offsets = [], []
    for bound in run:
        offsets.append(len(arguments))
        arguments += bound.armed
    kernel.set_scalar_arg_dtypes([getattr(a, "dtype", None) for a in arguments])
    kernel.set_args(*arguments)
    return kernel, offsets, arguments


def _root(t):
    return t.root if type(t) is VirtualView else t
