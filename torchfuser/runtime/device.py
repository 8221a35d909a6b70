"""OpenCL device selection: one context and one in-order, profiling queue per device.

TORCHFUSER_DEVICE picks a device: "P:D" (platform and device index) or a substring of the device or
platform name. Without it, the first GPU wins, else the first device. No OpenCL platform at all is not
an error: `get_device()` returns None after one clear warning, and graphs then run in PyTorch.

On PoCL, the threaded CPU device (`pthread`) gets a companion: PoCL's `basic` device, which runs a kernel in
the thread that enqueues it (about 1 us a launch, where waking the pthread device's workers costs 30-150 us).
Both share one context, so buffers (zero-copy views of host memory) serve either; small launches run on the
companion (`Device.inline`). The companion is not listed as a device of its own.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from functools import cached_property

logger = logging.getLogger("torchfuser")

_devices: dict[str, "Device | None"] = {}
_warned_no_opencl = False


class DeviceSelectionError(ValueError):
    """TORCHFUSER_DEVICE (or device=) names no available device."""


@dataclass(eq=False)
class Device:
    cl_device: object
    context: object
    queue: object
    index: str  # "P:D"
    inline: "Device | None" = None  # a device of the same context that runs kernels in the calling thread

    @property
    def name(self) -> str:
        return self.cl_device.name.strip()

    @property
    def platform(self) -> str:
        return self.cl_device.platform.name.strip()

    @property
    def type_name(self) -> str:
        import pyopencl as cl

        kind = self.cl_device.type
        if kind & cl.device_type.GPU:
            return "GPU"
        if kind & cl.device_type.CPU:
            return "CPU"
        return "ACCELERATOR"

    @cached_property
    def host_unified_memory(self) -> bool:
        try:
            return bool(self.cl_device.host_unified_memory)
        except Exception:  # OpenCL 3.0 devices may not report it
            return self.type_name == "CPU"

    @cached_property
    def vector_widths(self) -> dict[str, int]:
        """Elements per vector, by dtype, in GEMM panels, reductions and attention tiles: one SIMD register of
        a CPU (16 floats on AVX-512, 8 below it: a wider vector is split over several registers and register
        tiles spill), 16 elsewhere. (Pointwise kernels keep 16: see pointwise_launch.POINTWISE_WIDTHS.)"""
        if self.type_name == "CPU" and self.cl_device.native_vector_width_float < 16:
            return {"float32": 8, "float64": 4}
        return {"float32": 16, "float64": 8}

    @cached_property
    def zero_copy(self) -> bool:
        """Buffers are views of torch's host memory (USE_HOST_PTR), never copied."""
        if os.environ.get("TORCHFUSER_ZERO_COPY", "1") == "0":
            return False
        return self.host_unified_memory

    @cached_property
    def driver_caches_builds(self) -> bool:
        """The driver keeps its own on-disk cache of programs built from source (PoCL, NVIDIA).

        Asking such a driver for a program's binary makes PoCL compile a second, generic copy of every
        kernel (half of a cold build), and buys nothing: a rebuild from source is a lookup in its cache.
        """
        from pyopencl.characterize import has_src_build_cache

        if self.platform == "Portable Computing Language" and os.environ.get("POCL_KERNEL_CACHE") == "0":
            return False
        return bool(has_src_build_cache(self.cl_device))

    @cached_property
    def identity(self) -> str:
        """What a built binary depends on: enters every cache key."""
        d = self.cl_device
        return f"{self.platform}|{self.name}|{d.driver_version}|{d.version}|{self.cl_device.platform.version}"

    def describe(self) -> dict:
        return {
            "name": self.name,
            "platform": self.platform,
            "type": self.type_name,
            "driver": self.cl_device.driver_version,
            "index": self.index,
            "host_unified_memory": self.host_unified_memory,
            "zero_copy": self.zero_copy,
            "inline": self.inline.name if self.inline is not None else None,
        }


def pin_pocl_workers() -> None:
    """Ask PoCL to pin its worker thread i to CPU i (POCL_AFFINITY=1, read when PoCL starts its threads),
    unless the user chose. Unpinned, Linux often wakes both workers of a 2-vCPU machine on one CPU and
    leaves the other idle for milliseconds: a 1024^3 GEMM ran at 101-170 GFLOP/s with 10-41 % of the CPU
    time idle, pinned at 178-221 with 0-5 % idle. Only where CPU i exists for every i (no taskset/cpuset
    subset), since a worker pinned to a CPU the process may not use would be refused."""
    if "POCL_AFFINITY" in os.environ or not hasattr(os, "sched_getaffinity"):  # the latter: not Linux
        return
    if os.sched_getaffinity(0) == set(range(os.cpu_count() or 0)):
        os.environ["POCL_AFFINITY"] = "1"


def expose_inline_device() -> bool:
    """Ask PoCL for its in-thread `basic` device beside the threaded one (POCL_DEVICES, read when the OpenCL
    platform starts), with one worker thread fewer than the CPUs this process may use (the calling thread
    takes a share of every split launch: lanes.py), unless the user chose PoCL's devices (or
    TORCHFUSER_INLINE=0). True when it did."""
    if "POCL_DEVICES" in os.environ or os.environ.get("TORCHFUSER_INLINE", "1") == "0":
        return False
    os.environ["POCL_DEVICES"] = "pthread basic"
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("POCL_MAX_PTHREAD_COUNT", str(max(1, cpus - 1)))
    return True


_pocl_configured = []


def configure_pocl() -> None:
    """PoCL's environment, set once per process before its platform starts: the in-thread device, or else
    pinned workers. Pinned workers each keep a CPU of their own; beside the calling thread (which computes
    its share of every split launch), a worker pinned to its CPU would wait for the calling thread to move
    off it, so they stay unpinned then."""
    if not _pocl_configured:
        _pocl_configured.append(True)
        if not expose_inline_device():
            pin_pocl_workers()


def _companion(devices: list, device) -> object | None:
    """The in-thread device that serves `device` (PoCL: basic beside pthread), or None."""
    if not device.name.startswith("pthread"):
        return None
    return next((d for d in devices if d.name.startswith("basic")), None)


def _platform_devices() -> list[tuple[str, object, object | None]]:
    """(P:D, device, its in-thread companion) for every listed device; companions are not listed."""
    configure_pocl()
    import pyopencl as cl

    try:
        platforms = cl.get_platforms()
    except cl.Error:
        return []
    found = []
    for p, platform in enumerate(platforms):
        try:
            devices = platform.get_devices()
        except cl.Error:
            continue
        companions = {id(c) for c in (_companion(devices, d) for d in devices) if c is not None}
        listed = [d for d in devices if id(d) not in companions]
        found += [(f"{p}:{i}", d, _companion(devices, d)) for i, d in enumerate(listed)]
    return found


def list_devices() -> list[tuple[str, object]]:
    """[("P:D", cl.Device)] for every device of every platform; [] when there is no OpenCL."""
    return [(index, device) for index, device, _ in _platform_devices()]


def _choose(devices, wanted: str | None):
    if wanted:
        for index, device in devices:
            if index == wanted:
                return index, device
        needle = wanted.lower()
        for index, device in devices:
            if needle in device.name.lower() or needle in device.platform.name.lower():
                return index, device
        available = "; ".join(f"{i} {d.name.strip()} ({d.platform.name.strip()})" for i, d in devices)
        raise DeviceSelectionError(
            f"no OpenCL device matches {wanted!r}; available: {available or 'none'} "
            "(give 'P:D' or part of a device or platform name)"
        )
    import pyopencl as cl

    gpus = [(i, d) for i, d in devices if d.type & cl.device_type.GPU]
    return (gpus or devices)[0]


def get_device(wanted: str | None = None) -> Device | None:
    """The Device for `wanted` (default: TORCHFUSER_DEVICE), created once; None without OpenCL."""
    global _warned_no_opencl
    wanted = wanted if wanted is not None else os.environ.get("TORCHFUSER_DEVICE") or None
    key = wanted or ""
    if key in _devices:
        return _devices[key]
    found = _platform_devices()
    devices = [(index, device) for index, device, _ in found]
    if not devices:
        if not _warned_no_opencl:
            warnings.warn(
                "torchfuser: no OpenCL platform found; compiled graphs will run in PyTorch. "
                "Install an OpenCL driver (on Debian: apt-get install pocl-opencl-icd ocl-icd-libopencl1).",
                RuntimeWarning,
                stacklevel=2,
            )
            _warned_no_opencl = True
        _devices[key] = None
        return None
    import pyopencl as cl

    index, cl_device = _choose(devices, wanted)
    same = next((d for d in _devices.values() if d is not None and d.index == index), None)
    if same is not None:  # one context per physical device, however it was named
        _devices[key] = same
        return same
    companion = next(c for i, _, c in found if i == index)
    context = cl.Context([cl_device] + ([companion] if companion is not None else []))
    profiling = cl.command_queue_properties.PROFILING_ENABLE
    inline = None
    if companion is not None:
        inline = Device(companion, context, cl.CommandQueue(context, companion, properties=profiling), f"{index}/inline")
    device = Device(cl_device, context, cl.CommandQueue(context, cl_device, properties=profiling), index, inline)
    logger.info("torchfuser device %s: %s (%s)%s", index, device.name, device.platform,
                f", small launches in the calling thread on {inline.name}" if inline else "")
    _devices[key] = device
    return device
