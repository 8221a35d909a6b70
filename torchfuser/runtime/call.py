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
from torchfuser.codegen.opencl.claimed import CLAIMED_SUFFIX, claimed_source
from torchfuser.ir.kernels import FusedKernel, set_standalone_runner
from torchfuser.runtime.bound import Bound, cl_module
from torchfuser.runtime.claims import ClaimCells, ClaimedSpan
from torchfuser.runtime.device import get_device
from torchfuser.runtime.kernel_cache import KERNELS, KernelBuildError
from torchfuser.runtime.lanes import (
    HOST_THREADS, INLINE, SPLIT, THREADED, SplitEvents, claimable, group_size, lane_rates, plan_lanes,
    split_cut, wait_for_worker, work_groups,
)
from torchfuser.runtime.launch import Launch, configure
from torchfuser.runtime.linger import LINGER_SECONDS, WorkerLinger
from torchfuser.runtime.memory import CopyingBinder, HostArena, ZeroCopyBinder, storage_span
from torchfuser.runtime.virtual_views import real

logger = logging.getLogger("torchfuser")

class Runtime:
    """Per-device state shared by all compiled graphs: binder, host arena, the lanes' rates."""

    _by_device: dict = {}

    def __init__(self, device):
        self.device = device
        self._rates = None  # measured on first use (lanes.py)
        self.arena = HostArena()
        self.binder = ZeroCopyBinder(device) if device.zero_copy else CopyingBinder(device)
        # On a CPU device without an in-thread companion kernels run on the host's cores: host work between
        # launches only slows them down (measured 15-30% per call on 2 vCPUs), so a call prepares every launch
        # first and enqueues them together when something waits. A GPU starts each kernel when it is enqueued.
        self.defer_launches = device.type_name == "CPU"
        # the workers' lingers: None without an in-thread companion (nothing splits), False until first needed
        self._linger: WorkerLinger | None | bool = None if device.inline is None or not LINGER_SECONDS else False
        self._claim_cells: ClaimCells | None = None
        self.worker_threads = device.cl_device.max_compute_units if device.inline is not None else 0

    @classmethod
    def for_device(cls, device) -> "Runtime":
        runtime = cls._by_device.get(device)
        if runtime is None:
            runtime = cls._by_device[device] = cls(device)
        return runtime

    def build(self, spec, lane: str = THREADED, claimed: bool = False) -> tuple[list, str]:
        """([BuiltKernel per device the lane uses: the workers' first], cache status of the first); raises
        KernelBuildError. claimed: a split launch's claimed form (codegen/opencl/claimed.py) where the kernel
        has one; its BuiltKernels are named with CLAIMED_SUFFIX."""
        devices = {INLINE: [self.device.inline], SPLIT: [self.device, self.device.inline]}.get(lane, [self.device])
        name, source = spec.kernel_name, kernel_source(spec)
        if claimed:
            claimed_form = claimed_source(source, name)
            if claimed_form is not None:
                name, source = name + CLAIMED_SUFFIX, claimed_form
        found = [KERNELS.get(device, name, source) for device in devices]
        return [built for built, _ in found], found[0][1]

    def claims(self, launch: Launch, lane: str) -> bool:
        """Whether a launch in this lane runs its kernel's claimed form, where it has one (lanes.claimable)."""
        return lane == SPLIT and claimable(launch, self.rates())

    @property
    def claim_cells(self) -> ClaimCells:
        if self._claim_cells is None:
            self._claim_cells = ClaimCells(self.device)
        return self._claim_cells

    def lane(self, launch: Launch) -> tuple[str, str]:
        """(lane, why): where this launch runs cheapest."""
        return self.lanes([launch])[0]

    def lanes(self, launches: list) -> list[tuple[str, str]]:
        """(lane, why) for each launch of a plan, in order (None entries: host steps between them;
        HOST_THREADS: PyTorch ops on its OpenMP threads)."""
        present = [x for x in launches if x is not None and x != HOST_THREADS]
        if self.device.inline is None:
            return [(THREADED, "the device has no in-thread companion") for _ in present]
        if not self.device.zero_copy:  # results are read back from device buffers, through the queue
            return [(THREADED, "buffers are copies (TORCHFUSER_ZERO_COPY=0): one queue serves them") for _ in present]
        works = []
        for x in launches:
            if x is None or x == HOST_THREADS:
                works.append(x)
            else:  # an extern GEMM's host BLAS runs on PyTorch's threads before its epilogue kernel
                works += [HOST_THREADS, (x.flops, x.nbytes)] if x.host_threads else [(x.flops, x.nbytes)]
        chosen = []
        for x, (lane, why) in zip(present, plan_lanes(self.rates(), works)):
            split = split_cut(x, 0.5) if lane == SPLIT else None
            if lane == SPLIT and split is None:  # nothing to divide (lanes.split_cut)
                lane, why = INLINE, ("in the calling thread: its kernel indexes by work-group"
                                     if x.spec.indexes_by_group else "in the calling thread: one work-group")
            elif split is not None:
                why += f"; divided along grid dim {split[0]} ({work_groups(x, split[0])} work-groups)"
            chosen.append((lane, why))
        return chosen

    def rates(self):
        if self._rates is None:
            self._rates = lane_rates(self.device)
        return self._rates

    @property
    def linger(self) -> WorkerLinger | None:
        """The workers' lingers (linger.py), on a device with an in-thread companion."""
        if self._linger is False:
            cl = cl_module()
            try:
                self._linger = WorkerLinger(self.device)
            except cl.Error as error:  # the launches still run, each split waking the workers
                logger.warning("torchfuser: the workers' linger kernel failed (%s); split launches wake them", error)
                self._linger = None
        return self._linger

    def release_workers(self) -> None:
        """Host work on PyTorch's threads is next: let the workers' cores go."""
        if self._linger:
            self._linger.release()

    def split_point(self, launch: Launch) -> tuple[int, int] | None:
        """(dim, cut): where a split launch divides; the calling thread's work-groups come first."""
        return split_cut(launch, self.rates().inline_share(launch.flops, launch.nbytes))


class KernelStats:
    def __init__(self):
        self.launches = 0
        self.profiled = 0
        self.seconds = 0.0


class Call:
    """State of one call: pending launches and what they keep alive."""

    __slots__ = ("runtime", "binding", "dirty", "alive", "events", "pending", "threaded", "steady", "steady_unsized",
                 "planned", "last_event", "claimed", "ahead", "splits", "recorder")

    def __init__(self, runtime: Runtime):
        self.runtime = runtime
        self.binding = runtime.binder.begin_call()
        self.dirty: set[int] = set()  # storage addresses that enqueued (or pending) workers' kernels write
        self.alive: list = []
        self.events: list = []
        # Threaded launches bound but not yet enqueued (see Runtime.defer_launches): only exclusive ones,
        # whose cl.Kernel no other launch sets arguments on before they are enqueued.
        self.pending: list | None = [] if runtime.defer_launches and runtime.device.inline is None else None
        self.threaded = False  # the workers have launches the calling thread has not waited for
        self.last_event = None  # the workers' last one
        self.claimed: ClaimedSpan | None = None  # the last launch, if a claimed split: what to wait for
        # split GEMM bound -> the weights the workers read ahead while they linger behind its part (a plan's
        # next split GEMM's, as its last call ran them); and this call's split GEMMs with their weights, in order
        self.ahead: dict = {}
        self.splits: list = []
        self.steady = False  # a plan's call with the input layouts of the call before (executor.Plan.run)
        self.steady_unsized = False  # the same but for the graph's symbol values
        self.planned = False  # its kernels may write into the plan's planned blocks
        self.recorder = None  # a steady_tape.Recorder following this call's launches

    def launch(self, target: FusedKernel, inputs, on_build=None, label=None):
        launch = configure(target, inputs, self.runtime.device.type_name)
        return self.run_launch(launch, target, inputs, on_build, label)

    def run_launch(self, launch, target: FusedKernel, inputs, on_build=None, label=None):
        """Allocate the outputs, bind the buffers and enqueue one configured launch (built on demand), in the
        lane where it runs cheapest."""
        builts, lane, split = None, THREADED, None
        if not launch.empty:
            lane = self.runtime.lane(launch)[0]
            builts = on_build(launch.spec, lane) if on_build else self.runtime.build(launch.spec, lane)[0]
            split = self.runtime.split_point(launch) if lane == SPLIT else None
        return self.enqueue(Bound(launch, builts, label or target.__name__, lane=lane, split=split), inputs)

    def enqueue(self, bound: Bound, inputs, outs: list | None = None, same_offsets: bool = False,
                alternate: bool = False):
        """Allocate the outputs (unless given: planned ones), bind this call's buffers into the bound argument
        list (unless the kernels hold them from the last enqueue) and enqueue. same_offsets: the inputs' storage
        offsets are those of the bound's last enqueue; alternate: a steady call, whose addresses may be those
        the bound's spare kernel copies hold (a caller keeping the last result)."""
        planned, given = outs is not None, inputs
        if outs is None:
            allocate = self.runtime.arena.allocate
            outs = [allocate(layout) for layout in bound.outputs]
        launch = bound.launch
        if not launch.empty:
            if launch.host_threads:
                self.runtime.release_workers()
            if bound.prepares:
                inputs = launch.prepare(inputs, self)
            if not (same_offsets and bound.addresses is not None and self._armed_for(bound, inputs, outs, alternate)):
                inputs = self._arm(bound, inputs, outs, same_offsets)
            if bound.lane == THREADED:
                self._enqueue_threaded(bound)
            else:
                self._enqueue_here(bound)
                if bound.lane == SPLIT and launch.spec.kind == "gemm" and isinstance(inputs[1], torch.Tensor):
                    self.splits.append((bound, inputs[1]))
            if bound.lane != INLINE:  # the workers may still be writing: host reads wait, inputs stay alive
                for o in outs:  # fresh outputs start their storage: data_ptr is the storage's address
                    self.dirty.add(o.data_ptr())
                self.alive.append((inputs, outs))
        if self.recorder is not None:
            self.recorder.launched(bound, given, inputs, outs, planned)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def _armed_for(bound: Bound, inputs, outs, alternate: bool) -> bool:
        """Whether the kernels, or else (alternate) the spare copies (then swapped in), hold these inputs' and
        outputs' buffers. Else the spare copies are swapped in to be armed: the other set keeps its buffers.
        Without `alternate` (new layouts, as a growing KV cache brings each call) the kernels are armed again
        in place: a spare set would only be one more to copy and type."""
        addresses = [t.data_ptr() for t in (*inputs, *outs)]
        if bound.addresses == addresses:
            return True
        if not alternate:
            return False
        bound.switch_arming()
        return bound.addresses == addresses

    def _arm(self, bound: Bound, inputs, outs, same_offsets: bool):
        """Bind this call's buffers into the bound's kernels; returns the inputs the kernels read (misaligned
        user memory is copied once into aligned memory)."""
        bound.addresses = None
        buffers = self._input_buffers(bound, inputs)
        if buffers is None:
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
        if self.binding.tracks_writes:
            for o, buffer in zip(outs, buffers[len(inputs):]):
                self.binding.wrote(o, buffer)
        elif bound.armed is not None and offsets is bound.offsets:
            bound.addresses = [t.data_ptr() for t in (*inputs, *outs)]
        return inputs

    def _enqueue_threaded(self, bound: Bound) -> None:
        launch = bound.launch
        if self.pending is not None and bound.exclusive:
            self.pending.append(bound)
        else:
            self.flush()  # launches run in call order
            cl = cl_module()
            event = cl.enqueue_nd_range_kernel(self.runtime.device.queue, bound.kernels[0], launch.global_size,
                                               launch.local_size)
            self.events.append((bound.label, event))
            self.threaded, self.last_event = True, event

    def _enqueue_here(self, bound: Bound) -> None:
        """An in-thread launch (done when this returns) or a split one (the workers' part started first, then
        the calling thread's part run; the workers' part is waited for before anything else runs here). A
        claimed split has no fixed parts: each side takes slices from the launch's cell (runtime/claims.py)."""
        if self.threaded or self.pending:
            self.wait_threaded()  # this launch may read what the workers write
        cl = cl_module()
        launch, device = bound.launch, self.runtime.device
        if bound.lane == INLINE:
            event = cl.enqueue_nd_range_kernel(device.inline.queue, bound.kernels[0], launch.global_size,
                                               launch.local_size)
            self.events.append((bound.label, event))
            return
        profiled, worker, self.claimed = start_split(self.runtime, bound, self.ahead.get(bound))
        self.events.append((bound.label, profiled))
        self.threaded, self.last_event = True, worker

    def _input_buffers(self, bound: Bound, inputs) -> list | None:
        """The buffers of the inputs (None if one is misaligned); long-lived inputs seen last time are not
        looked up again (a weight, a planned result: the same tensor at the same address)."""
        bind = self.binding.bind
        if self.binding.tracks_writes or not bound.memo:  # buffers are this call's uploads: no memo
            buffers = [bind(t) for t in inputs]
            return None if any(b is None for b in buffers) else buffers
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
        if bound.launch.static_arguments:
            args, positions = bound.argument_list(offsets)
            changed = bound.armed is not args
            for k, i in positions:
                if args[k] is not buffers[i]:
                    args[k] = buffers[i]
                    changed = True
            if not changed:
                return  # the kernels still hold exactly these arguments
        else:
            n_in = len(offsets)
            args = bound.launch.arguments(buffers[:n_in], list(offsets), buffers[n_in:])
        every = args + bound.claim_arguments if bound.claim_arguments else args
        if not bound.typed:  # declared scalar types make set_args ~50x cheaper in pyopencl
            for kernel, built in zip(bound.kernels, bound.builts):
                if bound.exclusive or not built.typed:  # BuiltKernel.typed: its own kernel is typed
                    kernel.set_scalar_arg_dtypes([getattr(a, "dtype", None) for a in every])
                built.typed |= not bound.exclusive
            bound.typed = True
        for kernel in bound.kernels:
            kernel.set_args(*every)
        # The list holds the buffers the kernels now point at, so none is released while set there.
        bound.armed = args if bound.exclusive and bound.launch.static_arguments else None

    def _aligned(self, t: torch.Tensor) -> torch.Tensor:
        return self.runtime.arena.empty_strided(t.shape, t.stride(), t.dtype).copy_(real(t))

    def reads_pending(self, tensors) -> bool:
        return bool(self.dirty) and any(storage_span(t)[0] in self.dirty for t in tensors)

    def before_host_read(self, tensors) -> None:
        """PyTorch is about to read these on the host: wait for the kernels that write them (and let the
        workers' cores go: the op may run on PyTorch's threads)."""
        self.runtime.release_workers()
        if self.reads_pending(tensors):
            self.sync()
        elif self.claimed is not None:  # the op may call a compiled graph, whose launches reuse their cells
            self.wait_threaded()

    def flush(self) -> None:
        """Enqueue the pending threaded launches, in order."""
        if self.pending:
            cl = cl_module()
            queue = self.runtime.device.queue
            for bound in self.pending:
                launch = bound.launch
                event = cl.enqueue_nd_range_kernel(queue, bound.kernels[0], launch.global_size, launch.local_size)
                self.events.append((bound.label, event))
            self.pending.clear()
            self.threaded, self.last_event = True, event

    def wait_threaded(self) -> None:
        """Enqueue what is pending and wait for every launch of the workers (for a claimed split, the last
        one: every slice done, whether or not its workers have left)."""
        self.flush()
        if self.threaded:
            if self.runtime.device.inline is not None:
                wait_for_workers(self.runtime, self.last_event, self.claimed)
                self.claimed = None
            else:
                self.binding.to_host()
            self.threaded, self.last_event = False, None
        self.dirty.clear()

    def sync(self) -> None:
        if self.binding.tracks_writes:  # results to copy back from a device with its own memory
            self.flush()
            self.binding.to_host()
            self.threaded, self.last_event = False, None
            self.dirty.clear()
        else:
            self.wait_threaded()
        self.alive.clear()


def start_split(runtime: Runtime, bound: Bound, ahead=None) -> tuple:
    """Enqueue a split launch's workers' part, then run the calling thread's (see Call._enqueue_here; ahead: the
    weights the lingering workers read while they wait behind their part). Returns (what the launch's profile
    reads, the workers' event, the claimed span where the launch is claimed, else None)."""
    cl = cl_module()
    launch, device = bound.launch, runtime.device
    dim, cut, size, cell = bound.split_dim, bound.cut, launch.global_size, bound.cell
    balanced = True  # this launch's cut is the bound's, which its profile may move (lanes.SplitEvents)
    if cell is not None:  # claimed: a work-item per thread, each taking slices until none is left
        cell.reset()
        span = ClaimedSpan(cell, size[dim])
        theirs, mine, local, offset = (runtime.worker_threads,), (1,), (1,), None
    else:
        # PoCL keeps a work-group function per kernel and widest part launched (128 in all, per process): a part
        # wider than any before adds one, and two parts of a kernel in flight at once can release the wrong one,
        # pinning it; once full, every launch reloads its kernel. The workers' first part, at its widest (all
        # but one group), serves every later cut.
        if bound.exclusive and not bound.widened:  # a plan's (one-off launches keep the measured cut)
            cut, balanced, bound.widened = group_size(launch, dim), False, True
        theirs, offset, mine = list(size), [0] * len(size), list(size)
        theirs[dim], offset[dim], mine[dim] = size[dim] - cut, cut, cut
        local = launch.local_size
    worker = cl.enqueue_nd_range_kernel(device.queue, bound.kernels[0], theirs, local, global_work_offset=offset)
    linger = runtime.linger
    if linger is not None:
        # the workers, still awake, take their part now; the next linger queues behind it at once: after this
        # thread's part (a GEMV streams megabytes through the caches) the same enqueue costs several times more
        linger.follow(ahead)
    device.queue.flush()
    here = cl.enqueue_nd_range_kernel(device.inline.queue, bound.kernels[1], mine, local)
    if cell is None:
        return SplitEvents(worker, here, bound if balanced else None), worker, None
    span.here_done()
    cell.worker_event = worker
    return span, worker, span


def wait_for_workers(runtime: Runtime, event, claimed: ClaimedSpan | None) -> None:
    """Wait for the workers' last launch (event), or for a claimed split's last slice (whether or not its workers
    have left)."""
    if claimed is not None:
        claimed.wait()
    else:
        wait_for_worker(runtime.device, event, finish=runtime.linger is None)


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
