"""One call's launches: the per-device runtime, bound launches and the state of a call.

A `Bound` launch is configured and built once and enqueued again with only this call's buffers swapped in.
Each runs in a lane (lanes.py): on the device's worker threads, or, on CPU devices with an in-thread
companion, in the calling thread (done when its enqueue returns). A `Call` enqueues threaded launches on
one in-order queue and synchronises once, keeping alive what enqueued kernels read until then; on CPU
devices they are enqueued together when something first waits for them. An in-thread launch first waits
for the threaded ones before it (it may read their results, and PoCL must not see one device wait on the
other's events).
"""

from __future__ import annotations

import logging
import warnings
import weakref

import torch

from torchfuser.codegen import kernel_source
from torchfuser.ir.kernels import FusedKernel, set_standalone_runner
from torchfuser.runtime.device import get_device
from torchfuser.runtime.kernel_cache import KERNELS, KernelBuildError
from torchfuser.runtime.lanes import INLINE, THREADED, lane_rates, plan_lanes
from torchfuser.runtime.launch import Launch, configure
from torchfuser.runtime.memory import CopyingBinder, HostArena, OutputLayout, ZeroCopyBinder, storage_span

logger = logging.getLogger("torchfuser")

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
        self._rates = None  # measured on first use (lanes.py)
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

    def build(self, spec, lane: str = THREADED):
        """(BuiltKernel, cache status) for the lane's device; raises KernelBuildError."""
        device = self.device.inline if lane == INLINE else self.device
        return KERNELS.get(device, spec.kernel_name, kernel_source(spec))

    def lane(self, launch: Launch) -> tuple[str, str]:
        """(lane, why): where this launch, on its own, runs cheapest."""
        return self.lanes([launch])[0]

    def lanes(self, launches: list) -> list[tuple[str, str]]:
        """(lane, why) for each launch of a plan, in order; None entries are host steps between them, which
        wait for the launches before them (lanes.plan_lanes)."""
        if self.device.inline is None:
            return [(THREADED, "the device has no in-thread companion") for launch in launches if launch is not None]
        if not self.device.zero_copy:  # results are read back from device buffers, through the queue
            return [(THREADED, "buffers are copies (TORCHFUSER_ZERO_COPY=0): one queue serves them")
                    for launch in launches if launch is not None]
        if self._rates is None:
            self._rates = lane_rates(self.device)
        return plan_lanes(self._rates, [None if launch is None else (launch.flops, launch.nbytes) for launch in launches])

    def queue(self, lane: str):
        return self.device.inline.queue if lane == INLINE else self.device.queue


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
                 "arguments", "inline", "planned", "planned_buffers", "memo", "offsets")

    def __init__(self, launch: Launch, built, label: str, exclusive: bool = False, lane: str = THREADED):
        self.launch, self.built, self.label = launch, built, label
        self.inline = lane == INLINE
        self.exclusive = exclusive and built is not None
        self.kernel = _copy_kernel(built.kernel) if self.exclusive else built.kernel if built is not None else None
        self.typed = False  # scalar argument dtypes declared on self.kernel
        self.armed = None  # the argument list self.kernel holds (exclusive kernels only)
        self.outputs = [OutputLayout.of(*o) for o in launch.outputs]
        self.planned: list | None = None  # outputs in a plan's planned blocks (the same tensors every call)
        self.planned_buffers: list | None = None
        # per input: [weak ref to the tensor, its address, buffer] of the last call where the input may be
        # long-lived (a weight, a planned result: the same tensor comes again), else None
        self.memo: list = []  # (empty: no input is remembered)
        self.offsets: tuple | None = None  # the input offsets of the last enqueue
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


class Call:
    """State of one call: pending launches and what they keep alive."""

    __slots__ = ("runtime", "binding", "dirty", "alive", "events", "pending", "threaded", "steady", "planned")

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.binding = runtime.binder.begin_call()
        self.dirty: set[int] = set()  # storage addresses that enqueued (or pending) threaded kernels write
        self.alive: list = []
        self.events: list = []
        # Threaded launches bound but not yet enqueued (see Runtime.defer_launches): only exclusive ones,
        # whose cl.Kernel no other launch sets arguments on before they are enqueued.
        self.pending: list | None = [] if runtime.defer_launches else None
        self.threaded = False  # threaded launches were enqueued since the last wait for them
        self.steady = False  # a plan's call with the input layouts of the call before (executor.Plan.run)
        self.planned = False  # its kernels may write into the plan's planned blocks

    def launch(self, target: FusedKernel, inputs, on_build=None, label=None):
        launch = configure(target, inputs, self.runtime.device.type_name)
        return self.run_launch(launch, target, inputs, on_build, label)

    def run_launch(self, launch, target: FusedKernel, inputs, on_build=None, label=None):
        """Allocate the outputs, bind the buffers and enqueue one configured launch (built on demand), in the
        lane where it runs cheapest."""
        built, lane = None, THREADED
        if not launch.empty:
            lane = self.runtime.lane(launch)[0]
            built = on_build(launch.spec, lane) if on_build else self.runtime.build(launch.spec, lane)[0]
        return self.enqueue(Bound(launch, built, label or target.__name__, lane=lane), inputs)

    def enqueue(self, bound: Bound, inputs, outs: list | None = None, same_offsets: bool = False):
        """Allocate the outputs (unless given: planned ones), bind this call's buffers into the bound argument
        list and enqueue. same_offsets: the inputs' storage offsets are those of the bound's last enqueue."""
        if outs is None:
            allocate = self.runtime.arena.allocate
            outs = [allocate(layout) for layout in bound.outputs]
        launch = bound.launch
        if not launch.empty:
            if bound.prepares:
                inputs = launch.prepare(list(inputs), self)
            buffers = self._input_buffers(bound, inputs)
            if buffers is None:  # misaligned user memory: copy it once into aligned memory
                bind = self.binding.bind
                inputs = [self._aligned(t) if bind(t) is None else t for t in inputs]
                buffers = [bind(t) for t in inputs]
                offsets = tuple([t.storage_offset() for t in inputs])  # this call's only
            elif not same_offsets or bound.offsets is None:
                offsets = bound.offsets = tuple([t.storage_offset() for t in inputs])
            else:
                offsets = bound.offsets
            if outs is bound.planned and not self.binding.tracks_writes:
                if bound.planned_buffers is None:
                    bound.planned_buffers = [self.binding.output_buffer(o) for o in outs]
                buffers += bound.planned_buffers
            else:
                buffers += [self.binding.output_buffer(o) for o in outs]
            self._set_arguments(bound, buffers, offsets)
            cl = _cl or _pyopencl()
            if bound.inline:  # runs now, in this thread, once what the threaded queue holds is done
                if self.threaded or self.pending:
                    self.wait_threaded()
                event = cl.enqueue_nd_range_kernel(self.runtime.device.inline.queue, bound.kernel,
                                                   launch.global_size, launch.local_size)
                self.events.append((bound.label, event))
            else:
                if self.pending is not None and bound.exclusive:
                    self.pending.append(bound)
                else:
                    self.flush()  # launches run in call order
                    event = cl.enqueue_nd_range_kernel(self.runtime.device.queue, bound.kernel, launch.global_size,
                                                       launch.local_size)
                    self.events.append((bound.label, event))
                    self.threaded = True
                for o in outs:  # fresh outputs start their storage: data_ptr is the storage's address
                    self.dirty.add(o.data_ptr())
                self.alive.append((inputs, outs))
            if self.binding.tracks_writes:
                for o, buffer in zip(outs, buffers[len(inputs):]):
                    self.binding.wrote(o, buffer)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _input_buffers(self, bound: Bound, inputs) -> list | None:
        """The buffers of the inputs (None if one is misaligned); long-lived inputs seen last time are not
        looked up again (a weight, a planned result: the same tensor at the same address)."""
        bind = self.binding.bind
        if self.binding.tracks_writes or not bound.memo:  # buffers are this call's uploads: no memo
            buffers = [bind(t) for t in inputs]
            return None if None in buffers else buffers
        buffers = []
        for t, seen in zip(inputs, bound.memo):
            if seen is not None and seen[0]() is t and seen[1] == t.data_ptr():
                buffers.append(seen[2])
                continue
            buffer = bind(t)
            if buffer is None:
                return None
            if seen is not None:  # weakly: the memo must not keep user memory alive
                seen[0], seen[1], seen[2] = weakref.ref(t), t.data_ptr(), buffer
            buffers.append(buffer)
        return buffers

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
        """Enqueue the pending threaded launches, in order."""
        if self.pending:
            cl = _cl or _pyopencl()
            queue = self.runtime.device.queue
            for bound in self.pending:
                launch = bound.launch
                event = cl.enqueue_nd_range_kernel(queue, bound.kernel, launch.global_size, launch.local_size)
                self.events.append((bound.label, event))
            self.pending.clear()
            self.threaded = True

    def wait_threaded(self) -> None:
        """Enqueue what is pending and wait for every threaded launch."""
        self.flush()
        if self.threaded:
            self.binding.to_host()
            self.threaded = False
        self.dirty.clear()

    def sync(self) -> None:
        if self.binding.tracks_writes:  # results to copy back from a device with its own memory
            self.flush()
            self.binding.to_host()
            self.threaded = False
            self.dirty.clear()
        else:
            self.wait_threaded()
        self.alive.clear()


def run_single(target: FusedKernel, inputs):
    """One fused kernel on the default device, synchronised; PyTorch when there is no device."""
    device = get_device()
    if device is None:
        return target.reference(*inputs)
    call = Call(Runtime.for_device(device))
    try:
        result = call.launch(target, list(inputs))
    except KernelBuildError as error:
        warnings.warn(f"torchfuser: {error}; running {target.__name__} in PyTorch", RuntimeWarning, stacklevel=2)
        return target.reference(*inputs)
    call.sync()
    return result



set_standalone_runner(run_single)


def tensors_in(values):
    found = []
    for v in values:
        if isinstance(v, torch.Tensor):
            found.append(v)
        elif isinstance(v, (list, tuple)):
            found += tensors_in(v)
    return found
