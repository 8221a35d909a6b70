"""A plan with symbols replays its steady tape at symbol values it has no tape of: a generate's every new length.

A plan with symbols keeps one steady tape per symbol values (steady_tape.py), recorded once those values come
again; a generate's first run has new ones every call (its KV cache one longer each time), so each call walks the
plan's steps: microseconds of Python per step, and a new configured launch (Bound) for every step whose layouts
follow the symbols. Yet most launches of such a call are the same as at any other length: a decode step's
projections, norms and MLP read layouts no symbol reaches; only the KV cache's growth and the attention over it
(the `sized` launches) change. A resized tape keeps a recorded tape's launches and, for each sized one, where
its inputs come from (a graph input, a result of an earlier launch of the call, a view of a planned result that
no symbol reaches); a replay enqueues the unsized launches as the tape does and runs each sized one through its
plan step at this call's sizes (its Bound found or bound by layout, kernel_step.py), between them: in the tape's
lanes (SteadyTape.run_lanes) a sized launch is a host op, run once the workers' launches before it are done.

Made from a tape (resizable) only where that is all a call at other sizes does: no PyTorch op between launches,
each sized launch's inputs found as above, an unsized launch reading a sized one's result only through a
planned block (its address the same at every size), every graph output a fresh result as it is (not a view,
whose layout would be the recorded call's). A replay declines (None: the plan walks) where the tape's would
(a weight written or moved, an input at another storage offset). Before (a call at new sizes):

    Plan.run -> per step: fetch args, find the Bound (a new one for each sized step), compare addresses, enqueue
After:

    compare input addresses -> allocate fresh outputs -> enqueue the unsized launches; per sized one, its step
"""

from __future__ import annotations

import torch

from torchfuser.runtime.call import Call
from torchfuser.runtime.host_ops import GraphInput
from torchfuser.runtime.memory import storage_span
from torchfuser.runtime.steady_tape import HOST, Recorder, SteadyTape, set_buffer

ARG, MADE, KEPT = range(3)  # where a sized launch's input comes from: a graph input, a launch's result, as recorded


class ResizedTape:
    """See the module docstring. `sized`: launch index -> (its plan step, per input (ARG, j) / (MADE, (launch,
    output)) / (KEPT, tensor), the fresh output index of each of its results or None); `made`: the launches whose
    results a sized one reads -> per result (its fresh output index or None, the recorded tensor), None for a
    sized launch (its results are this call's)."""

    __slots__ = ("tape", "sized", "made", "launches", "lanes", "input_positions", "fresh_positions", "unsized_fresh",
                 "tensor_slots", "input_ptrs", "fresh_ptrs", "bounds", "held", "running")

    def replay(self, args, sizes: tuple, runtime, ahead: dict, events: list | None = None):
        """The call's output at these sizes, or None where the plan must walk its steps. events: where to put
        (label, event) per launch, for a profiled call."""
        tape = self.tape
        for j, ref, version in tape.derived:
            a = args[j]
            if ref() is not a or a._version != version:
                return None
        ptrs = [args[j].data_ptr() for j in self.tensor_slots]
        if ptrs != self.input_ptrs and not self._rebind_inputs(args, ptrs):
            return None
        for check in tape.checks:
            check(args)
        allocate = tape.arena.allocate
        outs = [allocate(layout) if f in self.unsized_fresh else None for f, layout in enumerate(tape.fresh_layouts)]
        for f in self.unsized_fresh:
            self._rebind_output(f, outs[f])
        call = Call(runtime)
        call.planned, call.ahead = True, ahead
        made = {k: None if results is None else [o if f is None else outs[f] for f, o in results]
                for k, results in self.made.items()}
        self.running = (call, sizes, made, outs)
        try:
            tape.run_lanes(self.launches, self.lanes, events, args)  # a sized launch runs as a host op
        except BaseException:
            runtime.device.queue.finish()  # no worker may still write into what the caller gets back
            raise
        finally:
            self.running = None
            call.sync()
        if events is not None:
            events += call.events
        return tape.outputs(outs)

    def run_sized(self, k: int, args) -> None:
        """Launch k through its plan step at this call's sizes (the tape's launches before it are done); its
        fresh results go to the call's outputs."""
        call, sizes, made, outs = self.running
        step, sources, fresh = self.sized[k]
        inputs = [args[x] if kind == ARG else made[x[0]][x[1]] if kind == MADE else x for kind, x in sources]
        result = step(call, inputs, sizes)
        call.wait_threaded()  # the tape's next launch may read it
        results = list(result) if isinstance(result, tuple) else [result]
        if k in made:
            made[k] = results
        for f, t in zip(fresh, results):
            if f is not None:
                outs[f] = t
                self._rebind_output(f, t)

    def forget(self) -> None:
        """Something else set the Bounds' kernels since this tape last ran: set every buffer again (the weights'
        stay: the same for every tape)."""
        derived = self.tape.derived_slots
        self.input_ptrs = [p if j in derived else None for j, p in zip(self.tensor_slots, self.input_ptrs)]
        self.fresh_ptrs = [None] * len(self.fresh_ptrs)

    def _rebind_inputs(self, args, ptrs) -> bool:
        tape = self.tape
        for n, (recorded, ptr) in enumerate(zip(self.input_ptrs, ptrs)):
            if recorded == ptr:
                continue
            j = self.tensor_slots[n]
            a = args[j]
            if j in tape.derived_slots or a.storage_offset() != tape.input_offsets[j]:
                return False
            if self.input_positions[j]:
                buffer = tape.binder.bind(a)
                if buffer is None:  # misaligned user memory: the plan's steps copy it
                    return False
                set_buffer(self.input_positions[j], buffer, self.held, ("in", j))
            self.input_ptrs[n] = ptr
        return True

    def _rebind_output(self, f: int, t) -> None:
        ptr = t.data_ptr()
        if self.fresh_ptrs[f] != ptr:
            if self.fresh_positions[f]:
                set_buffer(self.fresh_positions[f], self.tape.binder.output_buffer(t), self.held, ("out", f))
            self.fresh_ptrs[f] = ptr


def resizable(tape: SteadyTape, recorder: Recorder, args, steps: dict, planned_storages: set,
              sized_args: set) -> ResizedTape | str:
    """The resized tape of a plan's steady tape (recorded with the recorder, args: the call's), or why a call at
    other sizes would not do what it does. steps: the plan's kernel steps by name; planned_storages: the addresses
    of the plan's planned blocks; sized_args: the graph inputs whose layouts follow the symbols."""
    if recorder.host_ops:
        return "a PyTorch op runs between its launches"
    checks = [op for lane, op, _ in tape.lanes if lane == HOST]  # index checks where a kernel writes the indices
    if any(type(a) is GraphInput and a.view is not None and a.index in sized_args
           for op in checks for a in op.template):
        return "it checks indices in a view of a graph input (its layout is the recorded call's)"
    at = [k for k, (lane, *_) in enumerate(tape.lanes) if lane != HOST]  # each launch's place in the tape
    if any(view is not None for _, view in tape.output_fresh):
        return "an output is a view (its layout is the recorded call's)"
    arg_of = {id(a): j for j, a in enumerate(args) if isinstance(a, torch.Tensor)}
    made_by: dict = {}  # id(tensor) -> (launch, output): the results of the call's launches
    fresh_of = {p: f for f, p in enumerate(tape.fresh_ptrs)}
    resized = ResizedTape()
    resized.tape, resized.sized, resized.made = tape, {}, {}
    fresh_sized: set = set()  # storage addresses of the sized launches' fresh results
    for r, (bound, given, inputs, outs, planned) in enumerate(recorder.launches):
        k = at[r]
        fresh = [None if planned else fresh_of[o.data_ptr()] for o in outs]
        if bound.sized:
            step = steps[bound.label]
            sources = []
            for i, t in enumerate(given):
                if id(t) in arg_of:
                    sources.append((ARG, arg_of[id(t)]))
                elif id(t) in made_by:
                    sources.append((MADE, made_by[id(t)]))
                    resized.made.setdefault(made_by[id(t)][0], None)
                elif (isinstance(t, torch.Tensor) and not step.sized_inputs[i]
                      and storage_span(t)[0] in planned_storages):
                    sources.append((KEPT, t))  # a view of a planned result, its layout the same at every size
                else:
                    return f"{bound.label}'s input {i} is neither a graph input, a launch's result nor a planned one"
            resized.sized[k] = (step, sources, fresh)
            fresh_sized |= {storage_span(o)[0] for o, f in zip(outs, fresh) if f is not None}
        elif any(isinstance(t, torch.Tensor) and storage_span(t)[0] in fresh_sized for t in given):
            return f"{bound.label} reads a fresh result of a launch whose sizes follow the symbols"
        for i, o in enumerate(outs):
            made_by[id(o)] = (k, i)
    for k in resized.made:  # an unsized launch's results a sized one reads: fresh ones are this call's
        if k not in resized.sized:
            _, _, _, outs, planned = recorder.launches[at.index(k)]
            resized.made[k] = [(None, o) if planned else (fresh_of[o.data_ptr()], None) for o in outs]
    sized_fresh = {f for _, _, fresh in resized.sized.values() for f in fresh if f is not None}
    resized.unsized_fresh = [f for f in range(len(tape.fresh_layouts)) if f not in sized_fresh]
    unsized = lambda positions: [p for p in positions if not p[2].sized and p[0] is p[2].kernels]
    resized.input_positions = [unsized(p) for p in tape.input_positions]
    resized.fresh_positions = [unsized(p) for p in tape.fresh_positions]
    resized.tensor_slots = [j for j in range(len(args)) if j not in tape.numbers and j not in tape.unread]
    resized.input_ptrs = [tape.input_ptrs[j] for j in resized.tensor_slots]
    resized.fresh_ptrs = list(tape.fresh_ptrs)
    resized.bounds = frozenset(bound for bound, *_ in recorder.launches if not bound.sized)
    resized.held, resized.running = {}, None
    # the tape's launches, each sized one a host op that runs it through its step
    resized.launches = [(None, None, None, None) if k in resized.sized else launch
                        for k, launch in enumerate(tape.launches)]
    resized.lanes = [(HOST, _Sized(resized, k), None) if k in resized.sized else lane
                     for k, lane in enumerate(tape.lanes)]
    return resized


class _Sized:
    """A sized launch in a resized tape's launches: called as the tape calls a host op."""

    __slots__ = ("tape", "k")

    def __init__(self, tape: ResizedTape, k: int):
        self.tape, self.k = tape, k

    def __call__(self, args) -> None:
        self.tape.run_sized(self.k, args)
