"""Runs a fused graph: the whole plan enqueued on one in-order queue, synchronised once per call.

The plan is the graph's nodes in order, each a step: a kernel launch, a view (metadata only, no data
read, so no sync), or a PyTorch fallback. A fallback that reads memory a pending kernel writes first
synchronises; otherwise the queue is finished once, at the end. Tensors that enqueued kernels use stay
referenced until that sync, so neither torch nor the arena can recycle memory a kernel still reads.
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
from torchfuser.runtime.launch import FusedKernel
from torchfuser.runtime.memory import CopyingBinder, HostArena, ZeroCopyBinder, storage_span

logger = logging.getLogger("torchfuser")
aten = torch.ops.aten

# Ops that only make a new view of existing data: they read nothing, so they need no sync.
VIEW_OPS = {
    aten.view.default, aten._unsafe_view.default, aten.t.default, aten.permute.default,
    aten.transpose.int, aten.expand.default, aten.slice.Tensor, aten.select.int, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.as_strided.default, aten.alias.default,
    aten.detach.default, aten.unflatten.int, aten.split.Tensor, aten.unbind.int,
}
PROFILE_FIRST_CALLS, PROFILE_EVERY = 20, 10


class Runtime:
    """Per-device state shared by all compiled graphs: binder and host arena."""

    _by_device: dict = {}

    def __init__(self, device):
        self.device = device
        self.arena = HostArena()
        self.binder = ZeroCopyBinder(device) if device.zero_copy else CopyingBinder(device)

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


class _Call:
    """State of one call: pending launches and what they keep alive."""

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.binding = runtime.binder.begin_call()
        self.dirty: set[int] = set()
        self.alive: list = []
        self.events: list = []

    def launch(self, target: FusedKernel, inputs, on_build=None, label=None):
        launch = target.configure(inputs, self.runtime.device.type_name)
        return self.run_launch(launch, target, inputs, on_build, label)

    def run_launch(self, launch, target: FusedKernel, inputs, on_build=None, label=None):
        """Allocate the outputs, bind the buffers and enqueue one configured launch."""
        arena = self.runtime.arena
        outs = [arena.empty_strided(*o) for o in launch.outputs]
        if not launch.empty:
            built = on_build(launch.spec) if on_build else self.runtime.build(launch.spec)[0]
            inputs = launch.prepare(inputs, self)
            in_buffers, offsets = [], []
            for i, t in enumerate(inputs):
                buffer = self.binding.bind(t)
                if buffer is None:  # misaligned user memory: copy it once into aligned memory
                    t = inputs[i] = arena.empty_strided(t.shape, t.stride(), t.dtype).copy_(t)
                    buffer = self.binding.bind(t)
                in_buffers.append(buffer)
                offsets.append(t.storage_offset())
            out_buffers = [self.binding.output_buffer(o) for o in outs]
            arguments = launch.arguments(in_buffers, offsets, out_buffers)
            if not built.typed:  # declared scalar types make set_args ~50x cheaper in pyopencl
                built.kernel.set_scalar_arg_dtypes([getattr(a, "dtype", None) for a in arguments])
                built.typed = True
            built.kernel.set_args(*arguments)
            import pyopencl as cl

            event = cl.enqueue_nd_range_kernel(self.runtime.device.queue, built.kernel, launch.global_size,
                                               launch.local_size)
            self.events.append((label or target.__name__, event))
            self.alive.append((inputs, in_buffers, out_buffers))
            for o, buffer in zip(outs, out_buffers):
                self.binding.wrote(o, buffer)
                self.dirty.add(storage_span(o)[0])
        return outs[0] if len(outs) == 1 else tuple(outs)

    def reads_pending(self, tensors) -> bool:
        return bool(self.dirty) and any(storage_span(t)[0] in self.dirty for t in tensors)

    def before_host_read(self, tensors) -> None:
        """PyTorch is about to read these on the host: wait for the kernels that write them."""
        if self.reads_pending(tensors):
            self.sync()

    def sync(self) -> None:
        self.binding.to_host()
        self.dirty.clear()
        self.alive.clear()


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
                kwargs = _fetcher(tuple(node.kwargs.values()), index) if node.kwargs else None
                self.steps.append((i, kind, node.target, node.name, _fetcher(node.args, index),
                                   tuple(node.kwargs), kwargs, free_after[i]))
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
        if call is not None:
            self._record(call)
        self.calls += 1
        return output

    def _run_steps(self, env: list, call):
        for slot, kind, target, name, get_args, kw_names, get_kwargs, free in self.steps:
            args = get_args(env)
            kwargs = dict(zip(kw_names, get_kwargs(env))) if get_kwargs else {}
            if kind == KERNEL:
                env[slot] = self._launch(call, target, name, args)
            elif kind == VIEW:
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

    def _launch(self, call, target, name, args):
        if call is not None and name not in self.fallback_nodes:
            try:
                return call.launch(target, args, self.kernel_for, name)
            except KernelBuildError as error:  # a new input layout whose kernel does not build
                self.fallback_nodes[name] = f"OpenCL build failed: {error.log.strip()[:2000]}"
                warnings.warn(f"torchfuser: {error}; {name} runs in PyTorch from now on", RuntimeWarning)
        if call is not None:
            call.before_host_read(_tensors_in(args))  # the PyTorch fallback reads on the host
        return target.reference(*args)

    def _record(self, call: _Call) -> None:
        profile = self.calls < PROFILE_FIRST_CALLS or self.calls % PROFILE_EVERY == 0
        for name, event in call.events:
            stats = self.stats.setdefault(name, KernelStats())
            stats.launches += 1
            if profile:
                stats.profiled += 1
                stats.seconds += (event.profile.end - event.profile.start) * 1e-9


def _fetch_attr(gm, target: str):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value
