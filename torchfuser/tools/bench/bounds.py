"""Physical ceilings for the bench, measured in the same run as the rows they judge: the FMA throughput of the
torchfuser device (the FLOP bound of GEMM-bound rows) and the copy bandwidth of this machine (the bound of
rows that stream weights: one-token decode, GEMV). These CPUs change from session to session (Zen 4, Zen 5,
Xeon), so a ceiling from a data sheet or an earlier session would judge today's rows against the wrong machine.
"""

from __future__ import annotations

import numpy as np
import torch

import torchfuser
from torchfuser.runtime.device import get_device
from torchfuser.runtime.lanes import wait_for_worker
from torchfuser.runtime.timing import interleaved_medians

COPY_BYTES = 64 << 20  # per copy operand: well over any L3 here (32 MiB on the EPYCs), so DRAM is what is measured


def _fma_source(chains: int, width: int) -> str:
    # c = c * 0.999 + a tends to 1000 a: with a >= 1 no chain ever reaches a denormal (a = 0 did, in the
    # longest launches, where each FMA on one costs many cycles) or overflows
    decl = ", ".join(f"c{i} = a + {i}" for i in range(chains))
    body = " ".join(f"c{i} = fma(c{i}, b, a);" for i in range(chains))
    total = " + ".join(f"c{i}" for i in range(chains))
    return (f"__kernel void fma_probe_{chains}(__global float* out, const int n) {{\n"
            f"  float{width} a = (float{width})(1.0f + get_global_id(0) * 1e-9f), b = (float{width})(0.999f);\n"
            f"  float{width} {decl};\n"
            f"  for (int i = 0; i < n; ++i) {{ {body} }}\n"
            f"  vstore{width}({total}, get_global_id(0), out);\n}}\n")


# (independent FMA chains per work-item, explicit local size), on vectors of the device's native width (a
# float16 on AVX2 is two registers, and 16 chains of them spill: the probe then read 109 GFLOP/s where MKL ran
# at 180). Which one PoCL runs fastest depends on the CPU (register count, FMA latency x ports) and on how
# PoCL vectorises across a work-group's items, so the probe runs all of them and keeps the best.
FMA_VARIANTS = ((8, 1), (8, 4), (12, 4), (16, 4), (16, 16))


def fma_ceiling(rounds: int = 20, flop_per_launch: float = 2e9) -> float | None:
    """FLOP/s upper bound of the torchfuser device: the best of independent FMA chains on native vectors.

    Each variant of FMA_VARIANTS (chains per work-item, explicit local size) is launched as 16 work-groups per
    compute unit: many more work-groups than PoCL has worker threads, so that no thread idles (the previous
    probe left the local size to PoCL, which put all 256 items in one work-group: one of the two threads idled
    and it measured 117 GFLOP/s while our GEMM ran at 174-196). Every launch does ~flop_per_launch FLOP (~10 ms),
    the variants launch in turn for `rounds` rounds (~1 s in all, so that a burst of another process's work
    does not cover every launch), and each launch's profiled time (kernel only) counts: the result is the best
    launch of the best variant, as noise only slows a launch down. No data is read in
    the loop, so nothing but the FMA units limits it; a FMA counts 2 FLOP. None without an OpenCL device.
    Where the device has an in-thread companion, each launch is split as the runtime splits big launches (half
    of the work-groups in the calling thread, half on the workers, one core fewer than the CPUs), and its
    time runs from the earlier part's start to the later part's end.
    """
    import pyopencl as cl

    device = get_device()
    if device is None:
        return None
    groups = 16 * (device.cl_device.max_compute_units + (device.inline is not None))
    devices = [device.cl_device] + ([device.inline.cl_device] if device.inline is not None else [])
    width = device.vector_widths["float32"]
    programs = {c: cl.Program(device.context, _fma_source(c, width)).build(devices=devices)
                for c in {c for c, _ in FMA_VARIANTS}}
    launches = []
    for chains, local in FMA_VARIANTS:
        if local > device.cl_device.max_work_group_size:
            continue
        items = groups * local
        loops = max(1, int(flop_per_launch / (items * chains * width * 2)))
        kernels = [cl.Kernel(programs[chains], f"fma_probe_{chains}") for _ in devices]
        out = cl.Buffer(device.context, cl.mem_flags.WRITE_ONLY, 4 * width * items)
        launches.append((kernels, out, items, local, loops, items * loops * chains * width * 2))
    best = 0.0
    for _ in range(rounds):
        for kernels, out, items, local, loops, flop in launches:
            for kernel in kernels:
                kernel.set_args(out, np.int32(loops))
            if device.inline is None:
                events = [cl.enqueue_nd_range_kernel(device.queue, kernels[0], (items,), (local,))]
                events[0].wait()
            else:
                cut = items // 2 // local * local
                events = [cl.enqueue_nd_range_kernel(device.queue, kernels[0], (items - cut,), (local,),
                                                     global_work_offset=(cut,))]
                device.queue.flush()
                events.append(cl.enqueue_nd_range_kernel(device.inline.queue, kernels[1], (cut,), (local,)))
                wait_for_worker(device, events[0])
            seconds = (max(e.profile.end for e in events) - min(e.profile.start for e in events)) * 1e-9
            if seconds > 0:
                best = max(best, flop / seconds)
    return best or None


def _clone(x):
    return x.clone()


def copy_bandwidth(nbytes: int = COPY_BYTES, repeats: int = 15) -> dict:
    """Bytes/s of copying nbytes (read + write counted) three ways, timed in the same interleaved rounds:
    'opencl copy' (torchfuser.compile(x.clone()): the kernel's profiled time, i.e. the OpenCL device's own
    streaming speed without launch overhead), 'torch copy_' (into a preallocated tensor) and 'torch clone'
    (a fresh output each call: page faults included). Each way's figure is its best round (a ceiling is what
    the machine can do; noise only slows a round down); 'ceiling' is the best way.

    Why the best way: a bound must be something this machine can do, and each way reaches it only when nothing
    else gets in the way (clone pays for fresh pages, an OpenCL call for its launch, torch's copy for its
    OpenMP threads); the fastest way measured is the closest to the memory system's own limit, and any
    lower figure would let a kernel look better than "100 % of bandwidth" for no physical reason."""
    n = max(1, nbytes // 4)
    x = torch.randn(n)
    y = torch.empty_like(x)
    candidates = {"torch copy_": lambda: y.copy_(x), "torch clone": lambda: x.clone()}
    kernel_seconds = []  # profiled kernel time of each opencl copy call
    if get_device() is not None:
        fused = torchfuser.compile(_clone)
        fused(x)
        report = torchfuser.last_report()
        if report.plan is not None and report.kernels:

            def opencl_copy():
                report.plan.stats.clear()
                fused(x)
                kernel_seconds.append(sum(mean for _, mean in report.kernel_seconds().values() if mean))

            candidates["opencl copy"] = opencl_copy
    medians = interleaved_medians(candidates, repeats=repeats)
    moved = 2 * n * 4
    result = {name: moved / min(samples) for name, samples in medians.samples.items() if name != "opencl copy"}
    if any(kernel_seconds):
        result["opencl copy"] = moved / min(t for t in kernel_seconds if t > 0)
    if "opencl copy" in candidates:
        torch._dynamo.reset()
    result["ceiling"] = max(result.values())
    result["bytes"] = n * 4
    return result


def format_ceilings(copy: dict | None, fma: float | None) -> str:
    lines = []
    if copy:
        ways = ", ".join(f"{name} {copy[name] / 1e9:.1f}" for name in ("opencl copy", "torch copy_", "torch clone")
                         if name in copy)
        lines.append(f"copy bandwidth ({copy['bytes'] >> 20} MiB, read + write, best round): {ways} GB/s "
                     f"-> ceiling {copy['ceiling'] / 1e9:.1f} GB/s (the best way)")
    if fma:
        lines.append(f"FMA ceiling: {fma / 1e9:.0f} GFLOP/s (OpenCL FMA chains, "
                     f"{len(FMA_VARIANTS)} shapes x 20 launches, best)")
    return "\n".join(lines)
