"""Runs a fused graph: the whole plan enqueued on one in-order queue, synchronised once per call.

The plan is the graph's nodes in order, each a step: a kernel launch, a view (metadata only, no data
read, so no sync), or a PyTorch fallback. A fallback that reads memory a pending kernel writes first
synchronises; otherwise the queue is finished once, at the end. Tensors that enqueued kernels use stay
referenced until that sync, so neither torch nor the arena can recycle memory a kernel still reads.

Steady calls replay what the call before them set up. Intermediate results that no output can reach live
in blocks planned once by liveness (memory.PlannedBlocks), so their kernels keep the same buffers bound;
outputs come fresh from the host arena, as eager's do. Each kernel step (kernel_step.py) keeps, per input
layout, its configured launch and argument list (offsets and scalars filled in once); a call only swaps in the
buffers of this call's tensors, and sets a kernel's arguments only when one of them changed. When a call's inputs
have the layouts of the call before it (the caller's guards vouch for shapes and strides: `trusted`),
every step whose inputs come from the graph's inputs, its kernels or views of them reuses its last launch
without looking at its arguments' layouts, and views of unchanged tensors are reused as they are. Where a steady
call's steps only launch kernels, the next ones replay a tape of its launches without walking the steps at all
(steady_tape.py); a plan with symbols replays one at symbol values it has no tape of (resized_tape.py). How
steps get their arguments: step_args.py; launch counts and profiling: kernel_counts.py.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from torchfuser.ir.aten import VIEW_OPS
from torchfuser.ir.kernels import FusedKernel
from torchfuser.ir.liveness import buffer_owners, last_uses
from torchfuser.ir.symbolic import Bindings, is_symbolic, symbol_tensor, tensor_has_symbols
from torchfuser.runtime.call import Call, KernelStats, Runtime, tensors_in
from torchfuser.runtime.kernel_counts import KernelCounts
from torchfuser.runtime.kernel_step import KernelStep
from torchfuser.runtime.memory import PlannedBlocks
from torchfuser.runtime.plan_analysis import (
    plan_blocks, reaching_output, reads_kernel_results, reshaped_results, trusted_values, virtual_view_nodes,
)
from torchfuser.runtime.openmp_workers import RELEASE_MIN_SECONDS, release_openmp_workers
from torchfuser.runtime.resized_tape import ResizedTape, resizable
from torchfuser.runtime.steady_tape import Recorder, SteadyTape, record
from torchfuser.runtime.step_args import ViewCache, fetcher, flatten, output_fetcher, view_function
from torchfuser.runtime.virtual_views import virtual_view

TAPE_DECLINES_KEPT, TAPE_RETRY_EVERY = 4, 64  # steady tapes (steady_tape.py): recorded again after a decline
TAPES_KEPT = 64  # tapes a plan with symbols keeps, one per symbol values (the oldest goes first)
# ...but only once it has gone this many calls without a replay: a generate longer than TAPES_KEPT tokens, run
# again, cycles through more lengths than there are tapes, and evicting the least recently replayed one for each
# new recording left none to replay (every step paid a recording, none replayed). Longer than such a cycle (a
# generate of up to ~1000 tokens), so the kept tapes replay in every one; new lengths walk meanwhile.
STALE_TAPE_CALLS = 16 * TAPES_KEPT
SIZES_KEPT = 256  # distinct symbol values a plan records


KERNEL, VIEW, FALLBACK, ATTR, VIRTUAL, WEIGHT, RESHAPE, SYMBOL = range(8)


class Plan:
    """The steps of one graph, with liveness so intermediates are dropped after their last use."""

    def __init__(self, gm: fx.GraphModule, runtime: Runtime | None, fallback_nodes: dict[str, str]):
        self.gm, self.runtime = gm, runtime
        self.fallback_nodes = fallback_nodes  # fused node name -> why it runs in PyTorch
        nodes = list(gm.graph.nodes)
        self.bindings = _bindings(nodes)
        self.sized = bool(self.bindings)  # some input's sizes are symbols, bound per call
        index = {n: i for i, n in enumerate(nodes)}
        owner = buffer_owners(nodes)
        last_use = last_uses(nodes, owner)
        free_after = [[] for _ in nodes]
        for node in nodes:  # a value is dropped after its own last use (its buffer may live on in a view)
            if node.users:
                free_after[max(index[u] for u in node.users)].append(index[node])
        blocks = plan_blocks(nodes, owner, last_use)
        self.memory = PlannedBlocks(blocks.capacities)
        trusted = trusted_values(nodes, owner)
        to_output = reaching_output(nodes)
        virtual = virtual_view_nodes(nodes, owner, to_output, blocks)
        reshaped = reshaped_results(nodes, blocks, virtual)
        self.size = len(nodes)
        self.placeholders = [index[n] for n in nodes if n.op == "placeholder"]
        self._sized_inputs = {j for j, n in enumerate(n for n in nodes if n.op == "placeholder") if _sized_layout(n)}
        self._symbol_writes: list[tuple] = []  # (kept symbol tensor, the integer input it holds)
        self.steps = []
        for i, node in enumerate(nodes):
            if node.op == "output":
                self.output = output_fetcher(node.args[0], index)
            elif node.op in ("call_function", "get_attr"):
                kind = (ATTR if node.op == "get_attr" else KERNEL if isinstance(node.target, FusedKernel)
                        else SYMBOL if node.target is symbol_tensor
                        else VIRTUAL if node in virtual else RESHAPE if node in reshaped
                        else VIEW if node.target is operator.getitem or node.target in VIEW_OPS
                        else WEIGHT if (getattr(node.target, "weight_transform", False) and not node.kwargs
                                        and not reads_kernel_results(node, owner))
                        else FALLBACK)
                target = view_function(node) if kind in (VIEW, RESHAPE) else node.target
                if kind == RESHAPE:
                    target = (reshaped[node], target)
                if kind == SYMBOL:  # the plan's own 0-d tensor, which each call writes the input's value into
                    target = _KeptSymbol()
                    self._symbol_writes.append((target, self.placeholders.index(index[node.args[0]])))
                if kind == FALLBACK and getattr(target, "weight_transform", False):  # of kernel results: made anew
                    target = target.make
                if kind == KERNEL:
                    long_lived = [isinstance(a, fx.Node) and (owner[a].op in ("placeholder", "get_attr")
                                                              or owner[a] in blocks.of) for a in node.args]
                    target = KernelStep(node.target, node.name, self, blocks.of.get(node),
                                        all(i in trusted for i in node.all_input_nodes), long_lived,
                                        any(a in virtual for a in node.all_input_nodes),
                                        tuple([any(_sized_layout(x) for x in flatten([a]) if isinstance(x, fx.Node))
                                               for a in node.args]))
                    target.reshaped = next((reshaped[u] for u in node.users if u in reshaped), None)
                cache = None
                if (kind in (VIEW, VIRTUAL) and node.target is not operator.getitem and node not in to_output
                        and isinstance(node.args[0], fx.Node) and node.args[0] in trusted
                        and not any(isinstance(a, fx.Node) for a in node.args[1:])):
                    cache = ViewCache(owner[node] in blocks.of)
                kwargs = fetcher(tuple(node.kwargs.values()), index) if node.kwargs else None
                self.steps.append((i, kind, target, fetcher(node.args, index), tuple(node.kwargs), kwargs,
                                   tuple(free_after[i]), cache))
        self.counts = KernelCounts()
        self.built: dict = {}  # (spec, lane, claimed) -> [BuiltKernel] (skips the cache lookup on steady calls)
        self.lanes: dict[str, str] = {}  # kernel node -> its lane, chosen for the whole plan at compile time
        self.uses_workers = False  # some launch runs on a CPU device's worker threads (set with the lanes)
        self.calls = 0
        self.sizes_run: dict[tuple, int] = {}  # symbol values -> calls (the report's "sizes each plan ran with")
        self._last_signature = None  # the input layouts of the last call that completed
        self._running = False
        self._ahead: dict = {}  # what a call's lingering workers read ahead (Call.ahead), from the last call
        # symbol values -> the launches of a steady call with them, to replay (one entry, (), without symbols)
        self._tapes: dict[tuple, SteadyTape] = {}  # least recently replayed first
        self._replayed: SteadyTape | None = None  # the tape that set the Bounds' kernels last, if one did
        self._hot: SteadyTape | None = None  # without symbols: the kept tape, while it is the one that ran last
        self._tape_declines = 0  # replays declined in a row
        self.tape_calls = 0  # calls replayed from a tape
        self.resized_calls = 0  # ... of them, from the resized tape
        self.tape_launches = (0, 0)  # the last tape's launches: one per kernel, and as replays run them (chained)
        # why the last steady call recorded no tape (None: it did, or none has recorded yet)
        self.tape_note: str | None = None
        # a plan with symbols: its tape replayed at symbol values it has no tape of, or why it has none (None: not
        # recorded yet)
        self.resized: ResizedTape | str | None = None

    def kernel_for(self, spec, lane: str, claimed: bool = False) -> list:
        builts = self.built.get((spec, lane, claimed))
        if builts is None:
            builts, _ = self.runtime.build(spec, lane, claimed)
            self.built[(spec, lane, claimed)] = builts
        return builts

    def run(self, args, trusted: bool = False):
        """Run the graph on `args`. trusted: the caller guarantees shapes, strides and dtypes of these inputs
        are those it compiled for (Dynamo's guards), so only storage offsets are compared between calls."""
        if self.uses_workers and self.counts.call_seconds >= RELEASE_MIN_SECONDS:
            release_openmp_workers()  # (openmp_workers.py) PyTorch's would spin on the cores these kernels need
        profiled = self.counts.profiles(self.calls)
        hot = self._hot
        if hot is not None and not profiled and trusted and not self._running:
            output = self._replay_hot(hot, args)
            if output is not None:
                return output
        if len(args) != len(self.placeholders):
            raise TypeError(f"compiled graph takes {len(self.placeholders)} inputs, got {len(args)}")
        sizes = ()
        if self.sized:
            sizes = self.bindings.values(args)
            if sizes in self.sizes_run or len(self.sizes_run) < SIZES_KEPT:
                self.sizes_run[sizes] = self.sizes_run.get(sizes, 0) + 1
        tape = self._tapes.pop(sizes, None)  # kept again only if it replays (dropped if a replay raises)
        replayed = False
        try:
            if tape is not None and trusted and not self._running:
                for kept, j in self._symbol_writes:  # the kernels read them: the walk writes them at their steps
                    kept.write(args[j])
                if tape is not self._replayed:  # a walk or another tape set the Bounds' kernels since it last ran
                    tape.forget()
                events = [] if profiled else None
                output = tape.replay(args, events)
                if output is not None:
                    replayed = True
                    self._tapes[sizes], self._replayed, self._tape_declines = tape, tape, 0
                    self._hot = None if self.sized else tape
                    tape.used = self.calls
                    self._count_replay(tape.unprofiled, events)
                    return output
                self._tape_declines += 1
            elif (type(self.resized) is ResizedTape and trusted and not self._running
                  and not self._records_length(sizes)):
                output = self._replay_resized(args, sizes, profiled)
                if output is not None:
                    return output
        finally:
            if tape is not None and not replayed:
                _untaped(tape)
        self._replayed = self._hot = None  # the walk sets the Bounds' kernels
        env: list = [None] * self.size
        for slot, value in zip(self.placeholders, args):
            env[slot] = value
        signature = (_signature(args, trusted, self.sized), sizes)
        call = None
        if self.runtime is not None:
            call = Call(self.runtime)
            last = self._last_signature
            call.steady = signature == last
            call.steady_unsized = last is not None and signature[0] == last[0]
            call.planned = not self._running  # a re-entrant call must not share the planned blocks
            call.ahead = self._ahead
            # a plan with symbols records a tape per symbol values, once they come again (a generate of a
            # length seen before): a first generate's every call has new ones, and recording costs a walk's time
            # (and once for its resized tape, which serves every new length)
            repeats = (call.steady_unsized and (self.sizes_run.get(sizes, 0) > 1 or self.resized is None)
                       if self.sized else call.steady)
            if repeats and trusted and call.planned and self._records_tape() and self._room_for_tape():
                call.recorder = Recorder()
        self._last_signature = None
        reentrant, self._running = self._running, True
        try:
            output = self._run_steps(env, call, sizes)
        finally:  # also when a step raises: kernels still running must not outlive their buffers
            self._running = reentrant
            if call is not None:
                call.sync()
        self._last_signature = signature
        if call is not None and (call.splits or self._ahead):  # most small plans split nothing: no work per call
            self._ahead = _read_ahead(call.splits)
        if call is not None and call.events:
            self.counts.count(call.events, profiled)
        if call is not None and call.recorder is not None:
            tape = record(call.recorder, args, output, self.runtime, self._ahead, shared=self.sized)
            if isinstance(tape, str):
                self.tape_note = tape
            else:
                if len(self._tapes) >= TAPES_KEPT:
                    _untaped(self._tapes.pop(next(iter(self._tapes))))
                for bound in tape.bounds:
                    bound.tapes += 1
                self._tapes[sizes], self._replayed = tape, tape
                self._hot = None if self.sized else tape
                tape.used = self.calls
                self.tape_note, self.tape_launches = None, (len(tape.launches), len(tape.fast[0]))
                if self.sized and type(self.resized) is not ResizedTape:
                    self._keep_resized(resizable(tape, call.recorder, args, self._kernel_steps(),
                                                 self.memory.storages(), self._sized_inputs))
        self.calls += 1
        return output

    def _replay_hot(self, tape: SteadyTape, args):
        """An unprofiled call of a plan without symbols replayed from the tape that ran last, or None (it declined:
        the plan walks, as for any declined replay)."""
        try:
            output = tape.replay(args, None)
        except BaseException:
            self._drop_hot()
            raise
        if output is None:
            self._drop_hot()
            self._tape_declines += 1
            return None
        tape.used = self.calls
        self._count_replay(tape.unprofiled, None)
        return output

    def _count_replay(self, unprofiled: list, events: list | None) -> None:
        """A call replayed from a tape: its launches counted (events: a profiled call's, else the tape's own)."""
        self.tape_calls += 1
        self.counts.count(unprofiled if events is None else events, events is not None)
        self.calls += 1

    def _drop_hot(self) -> None:
        _untaped(self._tapes.pop((), self._hot))
        self._hot = self._replayed = None

    def _replay_resized(self, args, sizes: tuple, profiled: bool):
        """The call replayed from the resized tape at these sizes, or None (the plan walks its steps)."""
        resized = self.resized
        for kept, j in self._symbol_writes:
            kept.write(args[j])
        if resized is not self._replayed:
            resized.forget()
        # the sized steps set their Bounds' kernels, and the tape the unsized ones'; the sized steps' last Bounds are
        # this call's (a walk after a failed replay looks every step's Bound up)
        last, self._replayed, self._last_signature = self._last_signature, None, None
        events = [] if profiled else None
        self._running = True
        try:
            output = resized.replay(args, sizes, self.runtime, self._ahead, events)
        finally:
            self._running = False
        if output is None:
            return None
        self._replayed = resized
        if last is not None and last[0] == _signature(args, True, True):  # the unsized steps' last Bounds fit it
            self._last_signature = (last[0], sizes)
        self.resized_calls += 1
        self._count_replay(resized.tape.unprofiled, events)
        return output

    def _keep_resized(self, resized) -> None:
        """Keep a new resized tape (its unsized Bounds counted as a kept tape's), or why there is none."""
        if type(self.resized) is ResizedTape:
            _untaped(self.resized)
        if type(resized) is ResizedTape:
            for bound in resized.bounds:
                bound.tapes += 1
        self.resized = resized

    def _kernel_steps(self) -> dict:
        return {target.name: target for _, kind, target, *_ in self.steps if kind == KERNEL}

    def drop_tapes_using(self, bound) -> None:
        """Forget the tapes that launch `bound`'s kernels (it is gone, and another bound may take its kernels)."""
        if type(self.resized) is ResizedTape and bound in self.resized.bounds:
            self._keep_resized(None)
        if bound.tapes:
            for tape in self._tapes.values():
                if bound in tape.bounds:
                    _untaped(tape)
            self._tapes = {sizes: tape for sizes, tape in self._tapes.items() if bound not in tape.bounds}
        if self._replayed is not None and bound in self._replayed.bounds:
            self._replayed = self._hot = None

    def _records_length(self, sizes: tuple) -> bool:
        """Whether a call at these symbol values walks to record their own tape rather than replay the resized one:
        they came before (a generate run again), and a tape per length replays faster."""
        return self.sizes_run.get(sizes, 0) > 1 and self._records_tape() and self._room_for_tape()

    def _room_for_tape(self) -> bool:
        """Whether a new tape may be recorded: there is room, or the least recently replayed tape has gone
        STALE_TAPE_CALLS calls without a replay (it then makes room)."""
        if len(self._tapes) < TAPES_KEPT:
            return True
        return self.calls - next(iter(self._tapes.values())).used >= STALE_TAPE_CALLS

    def _records_tape(self) -> bool:
        """Whether this steady call records a tape: while tapes replay, and now and then after several in a row
        declined (a call that writes a weight each time would otherwise record in vain every call)."""
        return self._tape_declines < TAPE_DECLINES_KEPT or self.calls % TAPE_RETRY_EVERY == 0

    def _run_steps(self, env: list, call, sizes: tuple):
        for slot, kind, target, get_args, kw_names, get_kwargs, free, cache in self.steps:
            args = get_args(env)
            if kind == KERNEL:
                env[slot] = target(call, args, sizes)
            elif kind == VIRTUAL:
                if cache is not None and cache.holds(args[0]):
                    env[slot] = cache.view
                else:
                    env[slot] = virtual_view(target, *args)
                    if cache is not None:
                        cache.keep(args[0], env[slot])
            elif kind == WEIGHT:  # kept while its weights are unchanged: then no host work, nor any wait for it
                made = target.kept(args)
                if made is None:
                    if call is not None:
                        call.before_host_read(tensors_in(args))
                    made = target(*args)
                if call is not None and call.recorder is not None:
                    call.recorder.transforms(tensors_in(args), made)
                env[slot] = made
            elif kind == SYMBOL:  # a re-entrant call must not overwrite the running call's value: a tensor of its own
                env[slot] = target.write(args[0]) if call is not None and call.planned else symbol_tensor(args[0])
            elif kind == RESHAPE:  # the kernel's result in this shape already, unless it ran otherwise (a fallback)
                shape, view = target
                env[slot] = args[0] if args[0].shape == shape else view(*args)
            elif cache is not None and cache.holds(args[0]):
                env[slot] = cache.view
            else:
                kwargs = dict(zip(kw_names, get_kwargs(env))) if get_kwargs else {}
                if kind == VIEW:
                    env[slot] = target(*args, **kwargs)
                    if cache is not None:
                        cache.keep(args[0], env[slot])
                elif kind == FALLBACK:
                    tensors = tensors_in(list(args) + list(kwargs.values()))
                    if call is not None:
                        call.before_host_read(tensors)
                        # arithmetic on the symbols' values (no tensor) gives what the same values gave before
                        if call.recorder is not None and (tensors or target not in _SIZE_ARITHMETIC):
                            call.recorder.ran_in_pytorch(target, args, kwargs)
                    env[slot] = target(*args, **kwargs)
                else:
                    env[slot] = _fetch_attr(self.gm, target)
            for dead in free:
                env[dead] = None
        return self.output(env)

    def profile_next(self, calls: int) -> None:
        """Profile the next `calls` calls, whatever their number: kernel times of back-to-back calls, a user's
        steady state, after calls that ran between other work (a benchmark's warm-up, its interleaved rounds)."""
        self.counts.profile_next(calls)

    @property
    def stats(self) -> dict[str, KernelStats]:
        """Launches and profiled seconds per kernel (kernel_counts.py)."""
        return self.counts.stats


class _KeptSymbol:
    """A plan's 0-d int64 tensor for a symbol_tensor node (passes/symbol_operands.py): the same memory every call,
    so kernels reading it keep their buffers bound and a tape replays with it."""

    __slots__ = ("tensor", "_view")

    def __init__(self):
        self.tensor = torch.zeros((), dtype=torch.int64)
        self._view = self.tensor.numpy()

    def write(self, value: int) -> torch.Tensor:
        self._view[()] = value
        return self.tensor


_SIZE_ARITHMETIC = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg,
                    operator.truediv, torch.sym_max, torch.sym_min, torch.sym_int, torch.sym_float}


def _untaped(tape: SteadyTape) -> None:
    """A tape the plan no longer keeps: its Bounds count one kept tape fewer (kernel_step evicts untaped ones
    first)."""
    for bound in tape.bounds:
        bound.tapes -= 1


def _read_ahead(splits: list) -> dict:
    """Each split GEMM of a call -> the weights (B) of the one after it; the last one's workers read the first's
    (the next call's) ahead."""
    return {bound: weights for (bound, _), (_, weights) in zip(splits, splits[1:] + splits[:1])}


def _sized_layout(node: fx.Node) -> bool:
    """node's layout may depend on the graph's symbols (or is not known)."""
    value = node.meta.get("val")
    return not isinstance(value, torch.Tensor) or tensor_has_symbols(value)


def _signature(args, trusted: bool, sized: bool = False) -> tuple:
    """What a steady call must share with the call before it: storage offsets (trusted), else full layouts; and
    other values, but the integers of a plan with symbols (the symbols' values, which the call's sizes hold: a
    call with new sizes but the same layouts otherwise keeps its unsized steps' launches)."""
    if trusted:
        return tuple([a.storage_offset() if isinstance(a, torch.Tensor) else None if sized and isinstance(a, int)
                      else a for a in args])
    return tuple([(a.shape, a.stride(), a.storage_offset(), a.dtype) if isinstance(a, torch.Tensor) else a
                  for a in args])


def _bindings(nodes) -> Bindings:
    """Where each call reads the graph's symbols; every symbol a kernel's own sizes use must be one of them."""
    bindings = Bindings([n.meta.get("val") for n in nodes if n.op == "placeholder"])
    for node in nodes:
        if any(isinstance(a, torch.SymInt) for a in flatten([node.args, node.kwargs])):
            raise UnboundSize(f"{node.name} holds a symbolic size as a constant argument")
        if isinstance(node.target, FusedKernel):
            free = {s for d in node.target.sized_dims() if is_symbolic(d) for s in d.node.expr.free_symbols}
            if free - set(bindings.symbols):
                raise UnboundSize(f"{node.name}'s sizes use {sorted(map(str, free))}, which no graph input's "
                                  "size is: compile per input signature instead")
    return bindings


class UnboundSize(ValueError):
    """A symbolic size no call can read off the graph's inputs."""


def _fetch_attr(gm, target: str):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value
