"""Runs a fused graph: the whole plan enqueued on one in-order queue, synchronised once per call.

The plan is the graph's nodes in order, each a step: a kernel launch, a view (metadata only, no data
read, so no sync), or a PyTorch fallback. A fallback that reads memory a pending kernel writes first
synchronises; otherwise the queue is finished once, at the end. Tensors that enqueued kernels use stay
referenced until that sync, so neither torch nor the arena can recycle memory a kernel still reads.

Steady calls are cheap: each kernel step keeps, per input layout, its configured launch, output layouts
and kernel argument list (offsets and scalars filled in once); a call only swaps in the buffers of this
call's tensors, and sets the kernel's arguments only when one of them differs from what the kernel holds.
On CPU devices the launches of a call are enqueued together when something first waits for them.
"""

from __future__ import annotations

import operator
import warnings

import torch.fx as fx

from torchfuser.ir.aten import VIEW_OPS
from torchfuser.ir.kernels import FusedKernel
from torchfuser.runtime.call import Bound, Call, KernelStats, Runtime, tensors_in
from torchfuser.runtime.kernel_cache import KernelBuildError
from torchfuser.runtime.lanes import THREADED
from torchfuser.runtime.launch import configure

PROFILE_FIRST_CALLS, PROFILE_EVERY = 20, 10


class KernelStep:
    """A fused node in a plan: per input layout, its Bound launch (configured and built once)."""

    __slots__ = ("target", "name", "plan", "bound")

    def __init__(self, target: FusedKernel, name: str, plan: "Plan"):
        self.target, self.name, self.plan = target, name, plan
        self.bound: dict[tuple, Bound] = {}

    def __call__(self, call: Call | None, args):
        if call is not None and self.name not in self.plan.fallback_nodes:
            bound = self.bound.get(tuple([(t.shape, t.stride(), t.storage_offset(), t.dtype) for t in args]))
            try:
                if bound is None:
                    bound = self._bind(call, args)
                return call.enqueue(bound, args)
            except KernelBuildError as error:  # a new input layout whose kernel does not build
                self.plan.fallback_nodes[self.name] = f"OpenCL build failed: {error.log.strip()[:2000]}"
                warnings.warn(f"torchfuser: {error}; {self.name} runs in PyTorch from now on", RuntimeWarning)
        if call is not None:
            call.before_host_read(tensors_in(args))  # the PyTorch fallback reads on the host
        return self.target.reference(*args)

    def _bind(self, call: Call, args) -> Bound:
        launch = configure(self.target, args, call.runtime.device.type_name)
        lane = THREADED if launch.empty else call.runtime.lane(launch)[0]
        built = None if launch.empty else self.plan.kernel_for(launch.spec, lane)
        bound = Bound(launch, built, self.name, exclusive=True, lane=lane)
        if len(self.bound) >= 64:  # layouts that keep changing: do not grow without bound
            self.bound.clear()
        self.bound[tuple([(t.shape, t.stride(), t.storage_offset(), t.dtype) for t in args])] = bound
        return bound


def _fetcher(value, index):
    """env -> value with graph nodes replaced by their values; flat argument tuples take a fast path."""
    nested = any(isinstance(x, fx.Node) for v in value if isinstance(v, (tuple, list, dict)) for x in _flatten(v))
    if isinstance(value, tuple) and not nested:
        if all(isinstance(v, fx.Node) for v in value):  # the common case: every argument is a node
            slots = [index[v] for v in value]
            return lambda env: [env[s] for s in slots]
        slots = [(index[v], None) if isinstance(v, fx.Node) else (None, v) for v in value]
        return lambda env: [env[s] if s is not None else v for s, v in slots]
    return lambda env: fx.node.map_arg(value, lambda n: env[index[n]])


def _flatten(value):
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in _flatten(v)]
    if isinstance(value, dict):
        return _flatten(list(value.values()))
    return [value]


KERNEL, VIEW, FALLBACK, ATTR = range(4)


class Plan:
    """The steps of one graph, with liveness so intermediates are dropped after their last use."""

    def __init__(self, gm: fx.GraphModule, runtime: Runtime | None, fallback_nodes: dict[str, str]):
        self.gm, self.runtime = gm, runtime
        self.fallback_nodes = fallback_nodes  # fused node name -> why it runs in PyTorch
        nodes = list(gm.graph.nodes)
        index = {n: i for i, n in enumerate(nodes)}
        last_use = {}
        for i, node in enumerate(nodes):
            for inp in node.all_input_nodes:
                last_use[inp] = i
        free_after = [[] for _ in nodes]
        for node, i in last_use.items():
            free_after[i].append(index[node])
        self.size = len(nodes)
        self.placeholders = [index[n] for n in nodes if n.op == "placeholder"]
        self.steps = []
        for i, node in enumerate(nodes):
            if node.op == "output":
                self.output = _fetcher((node.args[0],), index)
            elif node.op in ("call_function", "get_attr"):
                kind = (ATTR if node.op == "get_attr" else KERNEL if isinstance(node.target, FusedKernel)
                        else VIEW if node.target is operator.getitem or node.target in VIEW_OPS else FALLBACK)
                target = KernelStep(node.target, node.name, self) if kind == KERNEL else node.target
                kwargs = _fetcher(tuple(node.kwargs.values()), index) if node.kwargs else None
                self.steps.append((i, kind, target, _fetcher(node.args, index), tuple(node.kwargs), kwargs,
                                   tuple(free_after[i])))
        self.stats: dict[str, KernelStats] = {}
        self.built: dict = {}  # (spec, lane) -> BuiltKernel (skips the cache lookup on steady calls)
        self.calls = 0

    def kernel_for(self, spec, lane: str):
        built = self.built.get((spec, lane))
        if built is None:
            built, _ = self.runtime.build(spec, lane)
            self.built[(spec, lane)] = built
        return built

    def run(self, args):
        if len(args) != len(self.placeholders):
            raise TypeError(f"compiled graph takes {len(self.placeholders)} inputs, got {len(args)}")
        env: list = [None] * self.size
        for slot, value in zip(self.placeholders, args):
            env[slot] = value
        call = Call(self.runtime) if self.runtime is not None else None
        try:
            output = self._run_steps(env, call)
        finally:  # also when a step raises: kernels still running must not outlive their buffers
            if call is not None:
                call.sync()
        if call is not None and call.events:
            self._record(call)
        self.calls += 1
        return output

    def _run_steps(self, env: list, call):
        for slot, kind, target, get_args, kw_names, get_kwargs, free in self.steps:
            args = get_args(env)
            if kind == KERNEL:
                env[slot] = target(call, args)
            else:
                kwargs = dict(zip(kw_names, get_kwargs(env))) if get_kwargs else {}
                if kind == VIEW:
                    env[slot] = target(*args, **kwargs)
                elif kind == FALLBACK:
                    if call is not None:
                        call.before_host_read(tensors_in(list(args) + list(kwargs.values())))
                    env[slot] = target(*args, **kwargs)
                else:
                    env[slot] = _fetch_attr(self.gm, target)
            for dead in free:
                env[dead] = None
        return self.output(env)[0]

    def _record(self, call: Call) -> None:
        profile = self.calls < PROFILE_FIRST_CALLS or self.calls % PROFILE_EVERY == 0
        for name, event in call.events:
            stats = self.stats.get(name)
            if stats is None:
                stats = self.stats[name] = KernelStats()
            stats.launches += 1
            if profile:
                stats.profiled += 1
                stats.seconds += (event.profile.end - event.profile.start) * 1e-9


def _fetch_attr(gm, target: str):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value
