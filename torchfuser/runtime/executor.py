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

import logging
import operator
import warnings

import torch
import torch.fx as fx

from torchfuser.codegen import kernel_source
from torchfuser.runtime.device import get_device
from torchfuser.runtime.kernel_cache import KERNELS, KernelBuildError
from torchfuser.runtime.launch import FusedKernel, Launch
from torchfuser.runtime.memory import CopyingBinder, HostArena, OutputLayout, ZeroCopyBinder, storage_span

logger = logging.getLogger("torchfuser")
aten = torch.ops.aten

# Ops that only make a new view of existing data: they read nothing, so they need no sync.
VIEW_OPS = {
    aten.view.default, aten._unsafe_view.default, aten.t.default, aten.permute.default,
    aten.transpose.int, aten.expand.default, aten.slice.Tensor, aten.select.int, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.as_strided.default, aten.alias.default,
    aten.detach.default, aten.unflatten.int, aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int,
}
PROFILE_FIRST_CALLS, PROFILE_EVERY = 20, 10
_cl = None  # pyopencl, imported on first use (an import statement per launch costs as much as a dict lookup)


def _copy_kernel(kernel):
    """Another cl.Kernel of the same program function, with its own arguments (~0.1 ms, once per launch)."""
    cl = _cl or _pyopencl()
    return cl.Kernel(kernel.get_info(cl.kernel_info.PROGRAM), kernel.function_name)


def _pyopencl():
    global _cl
    if _cl is None:
        import pyopencl

        _cl = pyopencl
    return _cl


class Runtime:
    """Per-device state shared by all compiled graphs: binder and host arena."""

    _by_device: dict = {}

    def __init__(self, device):
        self.device = device
        self.arena = HostArena()
        self.binder = ZeroCopyBinder(device) if device.zero_copy else CopyingBinder(device)
        # On a CPU device kernels run on the host's cores: host work between launches only slows them down
        # (measured 15-30% per call on 2 vCPUs), so a call prepares every launch first and enqueues them
        # together when something waits. A GPU starts each kernel as soon as it is enqueued.
        self.defer_launches = device.type_name == "CPU"

    @classmethod
    def for_device(cls, device) -> "Runtime":
        runtime = cls._by_device.get(device)
        if runtime is None:
            runtime = cls._by_device[device] = cls(device)
        return runtime

    def build(self, spec):
        """(BuiltKernel, cache status); raises KernelBuildError."""
        return KERNELS.get(self.device, spec.kernel_name, kernel_source(spec))


class KernelStats:
    def __init__(self):
        self.launches = 0
        self.profiled = 0
        self.seconds = 0.0


class _Slot:
    """Stands for the buffer of operand `index` while an argument list is built once per layout."""

    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


class Bound:
    """A configured launch ready to enqueue again: kernel, output layouts, argument lists by input offsets.

    A plan's Bound is `exclusive`: it runs its own copy of the built cl.Kernel, so the arguments it set
    stay set (a steady call sets none) and a pending launch's arguments cannot be changed by another. One-off
    launches (run_single, the autotuner) use the built kernel itself and set every argument each time.
    """

    __slots__ = ("launch", "built", "kernel", "exclusive", "typed", "armed", "outputs", "label", "prepares",
                 "arguments")

    def __init__(self, launch: Launch, built, label: str, exclusive: bool = False):
        self.launch, self.built, self.label = launch, built, label
        self.exclusive = exclusive and built is not None
        self.kernel = _copy_kernel(built.kernel) if self.exclusive else built.kernel if built is not None else None
        self.typed = False  # scalar argument dtypes declared on self.kernel
        self.armed = None  # the argument list self.kernel holds (exclusive kernels only)
        self.outputs = [OutputLayout.of(*o) for o in launch.outputs]
        self.prepares = type(launch).prepare is not Launch.prepare
        self.arguments: dict[tuple, tuple[list, list]] = {}  # input offsets -> (argument list, slot positions)

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


class _Call:
    """State of one call: pending launches and what they keep alive."""

    __slots__ = ("runtime", "binding", "dirty", "alive", "events", "pending")

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.binding = runtime.binder.begin_call()
        self.dirty: set[int] = set()  # storage addresses that enqueued (or pending) kernels write
        self.alive: list = []
        self.events: list = []
        # Launches bound but not yet enqueued (see Runtime.defer_launches): only exclusive ones, whose
        # cl.Kernel no other launch sets arguments on before they are enqueued.
        self.pending: list | None = [] if runtime.defer_launches else None

    def launch(self, target: FusedKernel, inputs, on_build=None, label=None):
        launch = target.configure(inputs, self.runtime.device.type_name)
        return self.run_launch(launch, target, inputs, on_build, label)

    def run_launch(self, launch, target: FusedKernel, inputs, on_build=None, label=None):
        """Allocate the outputs, bind the buffers and enqueue one configured launch (built on demand)."""
        built = None
        if not launch.empty:
            built = on_build(launch.spec) if on_build else self.runtime.build(launch.spec)[0]
        return self.enqueue(Bound(launch, built, label or target.__name__), inputs)

    def enqueue(self, bound: Bound, inputs):
        """Allocate the outputs, bind this call's buffers into the bound argument list and enqueue."""
        allocate = self.runtime.arena.allocate
        outs = [allocate(layout) for layout in bound.outputs]
        launch = bound.launch
        if not launch.empty:
            if bound.prepares:
                inputs = launch.prepare(list(inputs), self)
            bind = self.binding.bind
            buffers = [bind(t) for t in inputs]
            if None in buffers:  # misaligned user memory: copy it once into aligned memory
                inputs = [self._aligned(t) if b is None else t for t, b in zip(inputs, buffers)]
                buffers = [bind(t) for t in inputs]
            buffers += [self.binding.output_buffer(o) for o in outs]
            offsets = tuple([t.storage_offset() for t in inputs])
            self._set_arguments(bound, buffers, offsets)
            if self.pending is not None and bound.exclusive:
                self.pending.append(bound)
            else:
                self.flush()  # launches run in call order
                cl = _cl or _pyopencl()
                event = cl.enqueue_nd_range_kernel(self.runtime.device.queue, bound.kernel, launch.global_size,
                                                   launch.local_size)
                self.events.append((bound.label, event))
            self.alive.append((inputs, outs))
            for o in outs:  # fresh outputs start their storage: data_ptr is the storage's address
                self.dirty.add(o.data_ptr())
            if self.binding.tracks_writes:
                for o, buffer in zip(outs, buffers[len(inputs):]):
                    self.binding.wrote(o, buffer)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _set_arguments(self, bound: Bound, buffers: list, offsets: tuple) -> None:
        kernel = bound.kernel
        if bound.launch.static_arguments:
            args, positions = bound.argument_list(offsets)
            changed = bound.armed is not args
            for k, i in positions:
                if args[k] is not buffers[i]:
                    args[k] = buffers[i]
                    changed = True
            if not changed:
                return  # the kernel still holds exactly these arguments
        else:
            n_in = len(offsets)
            args = bound.launch.arguments(buffers[:n_in], list(offsets), buffers[n_in:])
        if not bound.typed:  # declared scalar types make set_args ~50x cheaper in pyopencl
            if bound.exclusive or not bound.built.typed:  # BuiltKernel.typed: its own kernel is typed
                kernel.set_scalar_arg_dtypes([getattr(a, "dtype", None) for a in args])
            bound.built.typed |= not bound.exclusive
            bound.typed = True
        kernel.set_args(*args)
        # The list holds the buffers the kernel now points at, so none is released while set there.
        bound.armed = args if bound.exclusive and bound.launch.static_arguments else None

    def _aligned(self, t: torch.Tensor) -> torch.Tensor:
        return self.runtime.arena.empty_strided(t.shape, t.stride(), t.dtype).copy_(t)

    def reads_pending(self, tensors) -> bool:
        return bool(self.dirty) and any(storage_span(t)[0] in self.dirty for t in tensors)

    def before_host_read(self, tensors) -> None:
        """PyTorch is about to read these on the host: wait for the kernels that write them."""
        if self.reads_pending(tensors):
            self.sync()

    def flush(self) -> None:
        """Enqueue the pending launches, in order."""
        if self.pending:
            cl = _cl or _pyopencl()
            queue = self.runtime.device.queue
            for bound in self.pending:
                launch = bound.launch
                event = cl.enqueue_nd_range_kernel(queue, bound.kernel, launch.global_size, launch.local_size)
                self.events.append((bound.label, event))
            self.pending.clear()

    def sync(self) -> None:
        self.flush()
        self.binding.to_host()
        self.dirty.clear()
        self.alive.clear()


class KernelStep:
    """A fused node in a plan: per input layout, its Bound launch (configured and built once)."""

    __slots__ = ("target", "name", "plan", "bound")

    def __init__(self, target: FusedKernel, name: str, plan: "Plan"):
        self.target, self.name, self.plan = target, name, plan
        self.bound: dict[tuple, Bound] = {}

    def __call__(self, call: _Call | None, args):
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
            call.before_host_read(_tensors_in(args))  # the PyTorch fallback reads on the host
        return self.target.reference(*args)

    def _bind(self, call: _Call, args) -> Bound:
        launch = self.target.configure(args, call.runtime.device.type_name)
        built = None if launch.empty else self.plan.kernel_for(launch.spec)
        bound = Bound(launch, built, self.name, exclusive=True)
        if len(self.bound) >= 64:  # layouts that keep changing: do not grow without bound
            self.bound.clear()
        self.bound[tuple([(t.shape, t.stride(), t.storage_offset(), t.dtype) for t in args])] = bound
        return bound


def run_single(target: FusedKernel, inputs):
    """One fused kernel on the default device, synchronised; PyTorch when there is no device."""
    device = get_device()
    if device is None:
        return target.reference(*inputs)
    call = _Call(Runtime.for_device(device))
    try:
        result = call.launch(target, list(inputs))
    except KernelBuildError as error:
        warnings.warn(f"torchfuser: {error}; running {target.__name__} in PyTorch", RuntimeWarning, stacklevel=2)
        return target.reference(*inputs)
    call.sync()
    return result


def _tensors_in(values):
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found += _tensors_in(v)
    return found


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
        self.built: dict = {}  # spec -> BuiltKernel (skips the cache lookup on steady calls)
        self.calls = 0

    def kernel_for(self, spec):
        built = self.built.get(spec)
        if built is None:
            built, _ = self.runtime.build(spec)
            self.built[spec] = built
        return built

    def run(self, args):
        if len(args) != len(self.placeholders):
            raise TypeError(f"compiled graph takes {len(self.placeholders)} inputs, got {len(args)}")
        env: list = [None] * self.size
        for slot, value in zip(self.placeholders, args):
            env[slot] = value
        call = _Call(self.runtime) if self.runtime is not None else None
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
                        call.before_host_read(_tensors_in(list(args) + list(kwargs.values())))
                    env[slot] = target(*args, **kwargs)
                else:
                    env[slot] = _fetch_attr(self.gm, target)
            for dead in free:
                env[dead] = None
        return self.output(env)[0]

    def _record(self, call: _Call) -> None:
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
