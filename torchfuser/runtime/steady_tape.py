"""A plan's steady calls replayed from a tape of the launches one steady call made.

A steady call (executor.Plan.run: its inputs have the layouts and storage offsets of the call before) repeats the
call before launch for launch: the same Bound launches, armed with the same buffers except where an input now lies
at another address or a fresh output gets another arena block. Walking the plan's steps to find that out costs
microseconds of Python per launch, more than a small kernel runs. A tape keeps what one steady walk found: the
launches in order, in their lanes (in the calling thread, split, the workers'), and for each storage that can move
between calls (a graph input, a fresh output) the kernel arguments that hold its buffer. A replay compares the
inputs' addresses, sets the buffers of what moved, allocates the fresh outputs and enqueues.

Unprofiled replays run consecutive in-thread launches chained into one (codegen/opencl/chained.py); profiled ones
run the Bounds' own launches, so each kernel keeps its own time. Where every launch runs in the calling thread,
the tape launches kernels of its own, in two armings: a caller that keeps each result until the next call returns
gets its outputs in two arena blocks in turn, and each arming stays set for one of them.

Recorded (Recorder: Call.enqueue and the plan's steps fill it in during a steady call) only where that is all a
steady call does: launches with static arguments (Launch.static_arguments) and no host work in prepare() beyond
finding a kept copy of weights or of a weight transform's result (Launch.prepare_from_weights) or checking inputs
(Launch.prepare_checks_only: an embedding's indices, checked again each replay: before the first launch where they
are graph inputs, in their place where a kernel writes them into a planned block), no step a PyTorch op but one
writing a graph input in place (host_ops.py: a static KV cache's update, run between the launches), every graph
output a fresh kernel output or a view of one. A replay declines (returns None: the plan walks its steps, and
records again) when an input the plan keeps derived copies of (packed weights, weight transforms) has moved or
been written (its version), or an input moved to another storage offset. Before:

    Plan.run -> per step: fetch args, find the Bound, prepare (packed B), compare addresses, enqueue; sync, record
After (a replay):

    compare input addresses and weight versions -> allocate fresh outputs -> enqueue (one chained launch)
"""

from __future__ import annotations

import logging
import math
import weakref

import torch

from torchfuser.codegen.opencl.chained import chained_source
from torchfuser.runtime.bound import Bound, cl_module, copy_kernel
from torchfuser.runtime.call import start_split, wait_for_workers
from torchfuser.runtime.host_ops import PLAIN_TENSORS, host_check, host_op, writes_input_in_place
from torchfuser.runtime.kernel_cache import KERNELS, KernelBuildError
from torchfuser.runtime.lanes import INLINE, SPLIT, THREADED
from torchfuser.runtime.memory import storage_span
from torchfuser.runtime.virtual_views import VirtualView

logger = logging.getLogger("torchfuser")

HOST = "host"  # a tape's lane for a PyTorch op writing a graph input (host_ops.py), run between its launches
CHAIN_ITEMS = 64  # work-items of a launch with wider groups that still runs in a chain, one by one
_data_ptr = torch.Tensor.data_ptr


class Recorder:
    """What a steady call launched, in order, and the tensors its weight transforms read."""

    __slots__ = ("launches", "host_ops", "derived_from", "transformed", "why_not")

    def __init__(self):
        self.launches: list[tuple] = []  # (bound, inputs as given, inputs the kernel read, outputs, planned)
        self.host_ops: list[tuple] = []  # (launches before it, op, args, kwargs): PyTorch ops writing an input
        self.derived_from: list = []
        self.transformed: list = []  # the weight transforms' results (kept while what they read is unchanged)
        self.why_not: str | None = None  # why the call cannot be replayed, once something says so

    def launched(self, bound: Bound, given, inputs, outs, planned: bool) -> None:
        launch = bound.launch
        if launch.empty:
            self.decline(f"{bound.label} has nothing to compute (zero-size)")
        elif not launch.static_arguments:
            self.decline(f"{bound.label}'s arguments are made anew each call")
        elif bound.prepares and not (launch.prepare_from_weights or launch.prepare_checks_only):
            self.decline(f"{bound.label} prepares its inputs on the host each call")
        elif bound.addresses is None:
            self.decline(f"{bound.label}'s buffers are bound anew each call (copies of misaligned inputs, or of "
                         "every tensor for a device with its own memory)")
        else:
            self.launches.append((bound, given, inputs, outs, planned))

    def transforms(self, tensors, made) -> None:
        """A weight transform read `tensors` and made `made`: kept while they are unchanged."""
        self.derived_from += tensors
        self.transformed += [t for t in (made if isinstance(made, (tuple, list)) else [made])
                             if isinstance(t, torch.Tensor)]

    def ran_in_pytorch(self, target, args, kwargs: dict) -> None:
        """A PyTorch op ran: taped where it writes a graph input in place (host_ops.py), else no tape."""
        if writes_input_in_place(target):
            self.host_ops.append((len(self.launches), target, args, kwargs))
        else:
            self.decline(f"{getattr(target, '__name__', target)} runs in PyTorch")

    def decline(self, why: str) -> None:
        """Something a replay would not repeat happened (a PyTorch op ran)."""
        self.why_not = self.why_not or why


class SteadyTape:
    """See the module docstring. `launches` / `lanes` / `labels`: one launch per Bound, as the steps made them (a
    profiled call replays these: each kernel's own time); `fast`: the same, with runs of in-thread launches chained
    into one (codegen/opencl/chained.py) where they can be."""

    __slots__ = ("launches", "lanes", "labels", "fast", "runtime", "unprofiled", "enqueue", "binder", "arena",
                 "input_ptrs", "input_offsets", "input_positions", "derived", "fresh_layouts", "fresh_ptrs",
                 "fresh_positions", "held", "output_kind", "output_fresh", "arming", "spare", "launches_armed",
                 "fast_positions", "slow_positions", "checks", "numbers", "unread", "derived_slots", "bounds", "used",
                 "returns_fresh")

    def replay(self, args, events: list | None = None):
        """The call's output, or None where a replay would not do what the plan's steps do. events: where to put
        (label, event) per launch, for a profiled call."""
        for j, ref, version in self.derived:
            a = args[j]
            if ref() is not a or a._version != version:
                return None
        ptrs = _addresses(args, self.numbers, self.unread)
        if ptrs != self.input_ptrs and not self._rebind_inputs(args, ptrs):
            return None
        for check in self.checks:  # an embedding's indices from the graph inputs, as its launch checks them
            check(args)
        outs = list(map(self.arena.allocate, self.fresh_layouts))
        ptrs = list(map(_data_ptr, outs))
        arming = self.arming
        if arming is not None:  # every launch in the calling thread, its kernels the tape's own
            if ptrs != arming.fresh_ptrs:
                arming = self._switch_arming(outs, ptrs)
            if events is not None:
                self._arm_launches(arming)
                self.run_lanes(self.launches, self.lanes, events, args)
            else:
                enqueue = self.enqueue
                for (queue, _, global_size, local_size), kernel in zip(self.fast[0], arming.kernels):
                    enqueue(queue, kernel, global_size, local_size)
        else:
            if ptrs != self.fresh_ptrs:
                self._rebind_outputs(outs, ptrs)
            if events is not None:
                self.run_lanes(self.launches, self.lanes, events, args)
            else:
                self.run_lanes(*self.fast, None, args)
        return self.outputs(outs)

    def outputs(self, outs: list):
        """The call's output made of its fresh outputs (each graph output one of them, or a view of one)."""
        n = self.returns_fresh
        if n:  # the first n fresh outputs themselves, in order
            return outs[0] if self.output_kind is None else self.output_kind(outs if n == len(outs) else outs[:n])
        made = [outs[f] if view is None else outs[f].as_strided(*view) for f, view in self.output_fresh]
        return made[0] if self.output_kind is None else self.output_kind(made)

    def run_lanes(self, launches: list, lanes: list, events: list | None, args) -> None:
        """Launches in every lane, as Call runs them: an in-thread or split launch, or a PyTorch op, first waits for
        the workers' launches before it (it may read what they write), the call for the last of them."""
        enqueue, runtime = self.enqueue, self.runtime
        worker = claimed = None
        for k, ((queue, kernel, global_size, local_size), (lane, bound, ahead)) in enumerate(zip(launches, lanes)):
            if lane != THREADED and worker is not None:
                wait_for_workers(runtime, worker, claimed)
                worker = None
            if lane == HOST:  # `bound` is the HostOp
                bound(args)
                continue
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

    def forget(self) -> None:
        """Something else set the Bounds' kernels since this tape last ran (a walk, another tape of the plan): the
        next replay sets every input's and output's buffer again (the weights' stay: the same for every tape)."""
        kept = self.derived_slots | self.numbers
        self.input_ptrs = [p if j in kept else None for j, p in enumerate(self.input_ptrs)]
        self.fresh_ptrs = [None] * len(self.fresh_ptrs)
        self.launches_armed = None

    def _switch_arming(self, outs, ptrs) -> "_Arming":
        """The arming for fresh outputs at these addresses: the spare one (made from this one the first time), with
        the buffers of the outputs that are elsewhere set. A caller that keeps each result until the next call
        returns gets its outputs in two arena blocks in turn, and each arming stays set for one of them."""
        current, spare = self.arming, self.spare or self.arming.copy()
        for f, (held, ptr) in enumerate(zip(spare.fresh_ptrs, ptrs)):
            if held != ptr:
                spare.set(self.fast_positions[("out", f)], ("out", f), self.binder.output_buffer(outs[f]))
                spare.fresh_ptrs[f] = ptr
        self.arming, self.spare, self.launches_armed = spare, current, None
        return spare

    def _arm_launches(self, arming: "_Arming") -> None:
        """Set the one-per-Bound launches (a profiled call's) to the arming's buffers, where another arming's are."""
        if self.launches_armed is arming:
            return
        for source, buffer in arming.buffers.items():
            for kernels, k, bound in self.slow_positions[source]:
                for kernel in kernels:
                    kernel.set_arg(k, buffer)
                bound.addresses = bound.armed = None
        self.launches_armed = arming

    def _rebind_outputs(self, outs, ptrs) -> None:
        for f, (recorded, ptr) in enumerate(zip(self.fresh_ptrs, ptrs)):
            if recorded != ptr:
                set_buffer(self.fresh_positions[f], self.binder.output_buffer(outs[f]), self.held, ("out", f))
                self.fresh_ptrs[f] = ptr

    def _rebind_inputs(self, args, ptrs) -> bool:
        derived = self.derived_slots
        for j, (recorded, ptr) in enumerate(zip(self.input_ptrs, ptrs)):
            if recorded == ptr:
                continue
            a = args[j]
            if j in derived or j in self.numbers or a.storage_offset() != self.input_offsets[j]:
                return False
            buffer = self.binder.bind(a)
            if buffer is None:  # misaligned user memory: the plan's steps copy it
                return False
            if self.arming is None:
                set_buffer(self.input_positions[j], buffer, self.held, ("in", j))
            else:
                for arming in (self.arming, self.spare):
                    if arming is not None:
                        arming.set(self.fast_positions[("in", j)], ("in", j), buffer)
                self.launches_armed = None
            self.input_ptrs[j] = ptr
        return True

def set_buffer(positions: list, buffer, held: dict, source) -> None:
    """Set the buffer where a tape's kernels take this source's (a graph input, a fresh output); their Bounds no
    longer know what they hold, so the plan's next walk sets every argument again."""
    for kernels, k, bound in positions:
        for kernel in kernels:
            kernel.set_arg(k, buffer)
        bound.addresses = bound.armed = None
    held[source] = buffer  # a kernel argument does not keep its buffer alive


class _Arming:
    """A set of the tape's own kernels for its fast launches, with the arguments each holds and, per source (a graph
    input, a fresh output), the buffer set for it."""

    __slots__ = ("kernels", "arguments", "fresh_ptrs", "buffers")

    def __init__(self, kernels: list, arguments: list, fresh_ptrs: list, buffers: dict):
        self.kernels, self.arguments, self.fresh_ptrs, self.buffers = kernels, arguments, fresh_ptrs, buffers

    def copy(self) -> "_Arming":
        kernels = [_armed_copy(kernel, arguments) for kernel, arguments in zip(self.kernels, self.arguments)]
        return _Arming(kernels, [list(a) for a in self.arguments], list(self.fresh_ptrs), dict(self.buffers))

    def set(self, positions: list, source, buffer) -> None:
        for i, k in positions:
            self.kernels[i].set_arg(k, buffer)
            self.arguments[i][k] = buffer  # the list keeps the buffer alive while a kernel holds it
        self.buffers[source] = buffer


def _armed_copy(kernel, arguments: list):
    """A copy of a kernel holding these arguments."""
    copied = copy_kernel(kernel)
    copied.set_scalar_arg_dtypes([getattr(a, "dtype", None) for a in arguments])
    copied.set_args(*arguments)
    return copied


def record(recorder: Recorder, args, output, runtime, ahead: dict, shared: bool = False) -> SteadyTape | str:
    """The tape of the steady call the recorder followed (args, output: the call's; ahead: what the workers of
    each split launch read ahead, executor.Plan._ahead), or why a replay would not repeat it. shared: one of
    several tapes of a plan (one per symbol values): chains of the launches whose grids are the same at every size
    only (the chained kernel built once, a copy per tape holding its arguments), and no kernels of its own
    (copies for every tape), only the Bounds'."""
    if recorder.why_not or not recorder.launches:
        return recorder.why_not or "it launches no kernel"
    if any(type(a) not in PLAIN_TENSORS and type(a) is not int for a in args):
        return "an input is neither a plain tensor nor an integer (a subclass, a float)"
    input_of = {}  # storage address -> the first graph input on it
    for j, a in enumerate(args):
        if type(a) is not int:  # (an integer is a symbol's value: the same for every call of this tape)
            input_of.setdefault(storage_span(a)[0], j)
    derived = {j for j in (input_of.get(storage_span(_root(t))[0]) for t in recorder.derived_from) if j is not None}
    transformed = {storage_span(t)[0] for t in recorder.transformed}  # whose inputs are `derived`
    tape = SteadyTape()
    tape.used = 0  # the plan's call that last recorded or replayed it (executor.Plan keeps tapes by it)
    tape.fresh_layouts, tape.fresh_ptrs, fresh_of, fresh_tensors = [], [], {}, []
    tape.checks = []  # host_ops.host_check of launches whose checked indices are all graph inputs
    sources = []  # per launch: (argument position, ("in", input) or ("out", fresh output)) for what can move
    hosts = []  # (launches before it, 0 for a PyTorch op or 1 for an index check, HostOp)
    for position, (bound, given, inputs, outs, planned) in enumerate(recorder.launches):
        if bound.prepares and inputs[1] is not given[1]:  # a packed copy of B, kept while B's root is unchanged
            root = storage_span(_root(given[1]))[0]
            j = input_of.get(root)
            if j is None and root not in transformed:  # packed anew each call (an activation, a planned result)
                return f"{bound.label}'s B is packed anew each call (it is not a weight)"
            if j is not None:
                derived.add(j)
        n_in, moving = len(inputs), []
        if bound.prepares and bound.launch.prepare_checks_only:
            check = host_check(bound.launch, bound.label, inputs, args, input_of, fresh_of)
            if isinstance(check, str):
                return check
            if all(storage_span(inputs[index])[0] in input_of for index, _ in bound.launch.checks):
                tape.checks.append(check)  # graph inputs: checked before the replay's first launch
            else:  # a kernel writes them: checked in their place, once the kernels before are done
                hosts.append((position, 1, check))
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
    if any(args[j].is_inference() for j in derived):  # no version to see it written by
        return "a weight is an inference tensor (made under torch.inference_mode)"
    flat = output if isinstance(output, (tuple, list)) else [output]
    tape.output_kind = type(output) if isinstance(output, (tuple, list)) else None
    tape.output_fresh = []
    fresh_storage = {storage_span(t)[0]: f for f, t in enumerate(fresh_tensors)}
    for t in flat:  # a fresh output, or a view of one (its layout is the call's, as the guards keep the inputs')
        f = fresh_storage.get(storage_span(t)[0]) if isinstance(t, torch.Tensor) else None
        if f is None:
            return "an output is not made by a kernel (an input, a constant)"
        view = None if t is fresh_tensors[f] else (tuple(t.shape), t.stride(), t.storage_offset())
        tape.output_fresh.append((f, view))
    n = len(tape.output_fresh)
    tape.returns_fresh = n if n and tape.output_fresh == [(f, None) for f in range(n)] else 0
    for before, target, given, kwargs in recorder.host_ops:
        op = host_op(target, given, kwargs, args, input_of, fresh_of)
        if isinstance(op, str):
            return op
        hosts.append((before, 0, op))
    hosts = [(before, op) for before, _, op in sorted(hosts, key=lambda h: h[:2])]  # a launch's check after ops
    positions = {("in", j): [] for j in range(len(args))} | {("out", f): [] for f in range(len(fresh_tensors))}
    bounds = [bound for bound, *_ in recorder.launches]
    tape.bounds = frozenset(bounds)  # whose kernels it launches (executor.Plan.drop_tapes_using)
    for bound, moving in zip(bounds, sources):
        for k, source in moving:
            positions[source].append((bound.kernels, k, bound))
    tape.held = {}
    launches, lanes = _launches(bounds, runtime, ahead)
    starts = range(len(bounds))
    tape.launches = _placed(launches, starts, hosts, lambda op: (None, op, None, None))
    tape.lanes = _placed(lanes, starts, hosts, lambda op: (HOST, op, None))
    fast = _fast_launches(bounds, runtime, ahead, unsized_only=shared, breaks={before for before, _ in hosts})
    fast = _placed(fast, [parts[0][0] for _, _, parts, _ in fast], hosts,
                   lambda op: ((None, op, None, None), (HOST, op, None), [], None))
    tape.fast = ([launch for launch, *_ in fast], [lane for _, lane, *_ in fast])
    tape.fast_positions = {source: [] for source in positions}
    for i, (_, _, parts, _) in enumerate(fast):
        for b, offset in parts:
            for k, source in sources[b]:
                tape.fast_positions[source].append((i, offset + k))
    tape.arming = tape.spare = None
    if not shared and not hosts and all(bound.lane == INLINE and bound.armed is not None for bound in bounds):
        tape.arming = _own_arming(fast, bounds, tape.fast_positions, tape.fresh_ptrs)
        tape.launches_armed, tape.slow_positions = tape.arming, positions
    else:  # the chained kernels are set with the Bounds' own
        for i, (launch, _, parts, arguments) in enumerate(fast):
            if arguments is not None:
                tape.held[("chain", i)] = arguments
                for b, offset in parts:
                    for k, source in sources[b]:
                        positions[source].append(((launch[1],), offset + k, bounds[b]))
    tape.input_positions = [positions[("in", j)] for j in range(len(args))]
    tape.fresh_positions = [positions[("out", f)] for f in range(len(fresh_tensors))]
    tape.labels = _placed([bound.label for bound in bounds], starts, hosts, lambda op: None)
    tape.unprofiled = [(label, None) for label in tape.labels if label is not None]  # what an unprofiled call counts
    # None where every launch runs in the calling thread: no lane to look at
    tape.runtime = None if all(bound.lane == INLINE for bound in bounds) else runtime
    tape.binder, tape.arena, tape.enqueue = runtime.binder, runtime.arena, cl_module().enqueue_nd_range_kernel
    tape.numbers = {j for j, a in enumerate(args) if type(a) is int}  # inputs that are symbols' values
    # tensors no launch reads (a float Dynamo passes as a 0-d tensor that no node uses): where they are is no concern
    tape.unread = frozenset(j for j in range(len(args))
                            if not positions[("in", j)] and j not in derived and j not in tape.numbers)
    tape.input_ptrs = _addresses(args, tape.numbers, tape.unread)
    tape.input_offsets = [a if type(a) is int else a.storage_offset() for a in args]
    tape.derived = [(j, weakref.ref(args[j]), args[j]._version) for j in sorted(derived)]
    tape.derived_slots = derived
    return tape


def _own_arming(fast: list, bounds: list, positions: dict, fresh_ptrs: list) -> _Arming:
    """The tape's own kernels for its fast launches (chained ones already are), armed as the Bounds' are now."""
    kernels, arguments = [], []
    for (_, kernel, *_), _, parts, chained in fast:
        if chained is None:
            chained = list(bounds[parts[0][0]].armed)
            kernel = _armed_copy(kernel, chained)
        kernels.append(kernel)
        arguments.append(chained)
    buffers = {source: arguments[found[0][0]][found[0][1]] for source, found in positions.items() if found}
    return _Arming(kernels, arguments, list(fresh_ptrs), buffers)


def _launches(bounds: list, runtime, ahead: dict) -> tuple[list, list]:
    """(queue, kernel, global size, local size) and (lane, bound, what its workers read ahead) per launch."""
    launches, lanes = [], []
    for bound in bounds:
        launch = bound.launch
        queue = runtime.device.queue if bound.lane == THREADED else runtime.device.inline.queue
        launches.append((queue, bound.kernels[0], launch.global_size, launch.local_size))
        lanes.append((bound.lane, bound, ahead.get(bound)))
    return launches, lanes


def _fast_launches(bounds: list, runtime, ahead: dict, unsized_only: bool = False, breaks=frozenset()) -> list[tuple]:
    """The tape's launches with each run of consecutive in-thread launches that chain as one launch: per launch,
    (queue, kernel, global size, local size), (lane, bound, what its workers read ahead), the Bounds it runs as
    (index, where its arguments start), and the chained kernel's arguments (None: a Bound's own kernel).
    unsized_only: chain only launches whose grid is the same at every size (a chained kernel's source holds its
    parts' grids: a sized part would make a new kernel to build for every length).
    breaks: the launches a chain must not run on into (a PyTorch op runs before them)."""
    runs, run = [], []
    for i, bound in enumerate(bounds + [None]):
        if i in breaks and run:
            runs += [run] if len(run) > 1 else [[j] for j in run]
            run = []
        if (bound is not None and bound.lane == INLINE and _chains(bound)
                and not (unsized_only and bound.sized)):
            run.append(i)
            continue
        runs += [run] if len(run) > 1 else [[j] for j in run]
        run = []
        if bound is not None:
            runs.append([i])
    fast = []
    for run in runs:
        chain = _chain([bounds[i] for i in run], runtime) if len(run) > 1 else None
        if chain is None:
            launches, lanes = _launches([bounds[i] for i in run], runtime, ahead)
            fast += [(launch, lane, [(i, 0)], None) for launch, lane, i in zip(launches, lanes, run)]
        else:
            kernel, offsets, arguments = chain
            fast.append(((runtime.device.inline.queue, kernel, (1,), (1,)), (INLINE, None, None),
                         list(zip(run, offsets)), arguments))
    return fast


def _placed(entries: list, starts, hosts: list, host_entry) -> list:
    """entries (each starting at launch `starts[i]`) with each host op's entry placed before the first launch
    after it (host: (launches before it, op))."""
    placed, h = [], 0
    for entry, start in zip(entries, starts):
        while h < len(hosts) and hosts[h][0] <= start:
            placed.append(host_entry(hosts[h][1]))
            h += 1
        placed.append(entry)
    return placed + [host_entry(op) for _, op in hosts[h:]]


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


def _addresses(args, numbers: set, unread: frozenset = frozenset()) -> list:
    """Each input's data address (an integer input as it is, None for a tensor no launch reads)."""
    if not numbers and not unread:
        return list(map(_data_ptr, args))
    return [None if j in unread else a if type(a) is int else a.data_ptr() for j, a in enumerate(args)]


def _root(t):
    return t.root if type(t) is VirtualView else t
