"""GEMM autotuner: time a small space of variants on the real device, keep the winner in a database.

For each (device, shapes, strides, epilogue) the tuner runs every candidate (template tiles; on shared-
memory devices also the host BLAS + OpenCL epilogue) on random inputs with the graph's layouts, checks it
against the PyTorch reference, and keeps the fastest that is right. A tiled (GPU) variant whose work-group
or local memory exceeds the device's limits is rejected with the reason, not run. Choices live in
$TORCHFUSER_CACHE_DIR/tuning.json, keyed by device and driver identity; a damaged file is ignored with a
warning, and a search during which other processes took more than BUSY_SHARE of the CPUs is used but not kept
(runtime/machine_load.py). The search is "default" (GEMMs of SEARCH_MIN_FLOPS and up that do not stream a
weight: see COLD_B_ROWS), "max" (every GEMM: mode="max-autotune") or "off" (TORCHFUSER_AUTOTUNE=0, or the
autotune option): the heuristic choice, no search.
"""

from __future__ import annotations

import hashlib
import math
import os
import statistics
import sys
import time
import warnings

import numpy as np
import torch

from torchfuser.ir.kernels import GemmKernel
from torchfuser.runtime import gemm_launch
from torchfuser.runtime.call import Call
from torchfuser.runtime.gemm_launch import (GemmVariant, candidate_variants, default_variant, gemm_state, launch_for,
                                            mm_rows)
from torchfuser.runtime.kernel_cache import KernelBuildError
from torchfuser.runtime.machine_load import OtherLoad
from torchfuser.runtime.timing import SETTLE_SECONDS
from torchfuser.runtime.tuning_db import DB_VERSION, TuningDatabase  # noqa: F401  (DB_VERSION: tests)

REPEATS = 7  # interleaved timing rounds per search
EXTERN_MARGIN = 1.1  # the host BLAS wins only when 10 % faster than every template variant (see _winner)
# ...and by this much time at least: PyTorch's OpenMP threads spin on after it and slow the plan's next kernels,
# whatever the GEMM's size (Whisper's conv1d: a host BLAS 1 ms faster than the variants in isolation made the next
# convolution 3.8 ms slower, 0.6x eager)
EXTERN_SPIN_SECONDS = 4e-3
# another variant replaces the heuristic's choice only when this much faster: medians of a few rounds on a shared
# machine differ by more than the variants do (searches picked slower variants: the notes)
PRIOR_MARGIN = 1.03
PROGRESS_AFTER_SECONDS = 1.0
# A search during which other processes took more than this share of the CPUs is used but not kept: timed on a
# busy machine, every candidate ran slower and not all by as much (the host BLAS won such a search of a
# convolution at 1.5x its quiet time, and the record would have made the model slower than eager for good)
BUSY_SHARE = 0.25
# Below this (about 1 ms a call here) the heuristic choice: a search costs ~1 s of PoCL compile per candidate
# at its first launch, and the best variant is rarely more than 10 % ahead, so it pays off only after
# about 100k calls of a small GEMM.
SEARCH_MIN_FLOPS = 2.5e8
# A GEMM of at most COLD_B_ROWS rows over a B of at least COLD_B_BYTES streams B (a weight, read once per model
# call and from memory when the model's weights outgrow the caches): each timed call finds B evicted. Timed
# warm, variants that pass over B several times (more, smaller row stacks) win, and lose in the model (ResNet's
# last convolutions, 64x512x4608: the notes). Timed cold, 8x16 and 4x64 tiles won, and lost in the model to the
# heuristic's one pass over B: the default search leaves these GEMMs to the heuristic.
COLD_B_ROWS, COLD_B_BYTES, EVICT_BYTES = 128, 1 << 20, 64 << 20


def streams_b(m: int, b) -> bool:
    """Whether a GEMM of m rows over b streams b (see COLD_B_ROWS)."""
    return m <= COLD_B_ROWS and b.numel() * b.element_size() >= COLD_B_BYTES


SEARCHES = ("off", "default", "max")  # no search; GEMMs of SEARCH_MIN_FLOPS and up, but streaming ones; all


def default_search() -> str:
    """TORCHFUSER_AUTOTUNE=0 turns the search off where no option says otherwise."""
    return "off" if os.environ.get("TORCHFUSER_AUTOTUNE", "1") == "0" else "default"


def tuning_key(kernel: GemmKernel, inputs) -> str:
    layout = "|".join(f"{tuple(t.shape)}:{t.stride()}" for t in inputs)
    epilogue = hashlib.sha256(kernel.epilogue.text().encode()).hexdigest()[:16]
    # a convolution's window too: two convolutions of one input and weight shape may stride differently
    producer = kernel.producer
    producer_text = (f"{producer.window.text()} {producer.reduction} {producer.epilogue.text()}"
                     if producer is not None else "")
    return (f"{layout}|{epilogue}" + (f"|{kernel.window.text()}" if kernel.window is not None else "")
            + (f"|channels-first {kernel.channels_first}" if kernel.channels_first is not None else "")
            + (f"|producer {hashlib.sha256(producer_text.encode()).hexdigest()[:16]}" if producer is not None else ""))


def tune_gemm(runtime, kernel: GemmKernel, inputs, search: str | None = None, sizes_vary: bool = False) -> dict | None:
    """Choose the variant for these (fake or real) inputs; sets the node's choice and returns the record.
    search: "off", "default" or "max" (None: default_search()). Empty GEMMs need no choice (None).
    sizes_vary: the inputs are one example of symbolic sizes. The default search then takes the database's
    choice where it has one and else the heuristic: a search (seconds for a big GEMM, at compile time and so in
    the middle of a user's first call) would tune only the example's sizes, which later calls rarely have."""
    if not (inputs[0].numel() and inputs[1].numel()):
        return None
    search = search or default_search()
    if search not in SEARCHES:
        raise ValueError(f"autotune search must be one of {SEARCHES}, got {search!r}")
    device = runtime.device
    state = gemm_state(kernel)
    state.limits = gemm_launch.device_limits(device)
    shape_key = kernel.shape_key(inputs)
    m, k, n = kernel.mnk(inputs)
    flops = 2 * m * k * n * (inputs[0].shape[0] if inputs[0].dim() == 3 else 1)
    record = None
    # the default search reads the database only where it would search itself: a max-autotune run's choices
    # for small GEMMs, timed in isolation, can be far slower inside a plan than the heuristic (ResNet-18)
    streams = streams_b(m, inputs[1])
    if search == "max" or search == "default" and flops >= SEARCH_MIN_FLOPS and not streams:
        database, key = TuningDatabase(), tuning_key(kernel, inputs)
        record = database.get(device.identity, key)
        if record is not None:
            record = {**record, "source": "tuning database"}
        elif search == "max" or not sizes_vary:  # (the default search is here for big GEMMs only)
            from torch._subclasses.fake_tensor import unset_fake_temporarily

            with unset_fake_temporarily(), torch.no_grad():  # compilers run under fake mode: time real data
                record, busy = _search(runtime, kernel, [_real_like(t) for t in inputs])
            if busy is None or busy <= BUSY_SHARE:
                database.put(device.identity, key, {k: v for k, v in record.items() if k != "source"})
            else:
                record["source"] = (f"tuned while other processes took {busy:.0%} of the CPUs: used in this process, "
                                    "not kept")
    if record is None:
        why = _not_searched(search, flops, streams)
        variant = default_variant(device.type_name, inputs[1].shape[-1], mm_rows(inputs))
        variant, misfit_note = gemm_launch.fitted(variant, state.limits)
        record = {"winner": variant.name, "candidates": {},
                  "source": f"heuristic ({why}{f'; {misfit_note}' if misfit_note else ''})"}
    state.choices[shape_key] = GemmVariant.parse(record["winner"])
    return record


def _not_searched(search: str, flops: int, streams: bool) -> str:
    """Why tune_gemm took the heuristic's choice (the cases in which it does not search)."""
    if search == "off":
        return "autotuning is off"
    if flops < SEARCH_MIN_FLOPS:
        return f"{flops:.0f} FLOP: too small to tune"
    if streams:
        return "few rows over a large weight: timed alone, no call is as in a model"
    return "sizes vary between calls: not tuned at one example"


def _real_like(t: torch.Tensor) -> torch.Tensor:
    """Random data with t's shape, strides and offset (t may be a fake tensor)."""
    span = t.storage_offset() + sum((s - 1) * st for s, st in zip(t.shape, t.stride())) + 1 if t.numel() else 0
    base = torch.randn(max(span, 1), dtype=t.dtype) if t.dtype.is_floating_point else torch.zeros(max(span, 1), dtype=t.dtype)
    return base.as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _search(runtime, kernel: GemmKernel, inputs) -> tuple[dict, float | None]:
    """Build and check every candidate, then time the correct ones in interleaved rounds (medians): the load
    of a shared machine changes by the second, and sequential timing would hand the win to whichever
    candidate ran in a quiet moment. Returns the record and the share of the CPUs other processes took
    meanwhile (None: not known)."""
    m, k, n = kernel.mnk(inputs)
    expected = kernel.reference(*inputs)
    # small plain mms: also the rows schedule; a convolution's patches: the packed schedule alone
    candidates = candidate_variants(runtime.device, mm_rows(inputs), kernel.window is not None,
                                    kernel.producer is not None, n=inputs[1].shape[-1])
    state = gemm_state(kernel)
    ready, rejected = {}, {}
    started, others = time.perf_counter(), OtherLoad()
    live = sys.stderr.isatty()

    def progress(what: str) -> None:
        if live and time.perf_counter() - started > PROGRESS_AFTER_SECONDS:
            print(f"\rtorchfuser: tuning GEMM {m}x{n}x{k}: {what:<32}", end="", file=sys.stderr, flush=True)

    for step, variant in enumerate(candidates, start=1):
        progress(f"building [{step}/{len(candidates)}] {variant.name}")
        why = gemm_launch.misfit(variant, state.limits)
        if why:
            rejected[variant.name] = f"does not fit the device: {why}"
            continue
        launch = launch_for(kernel, variant, inputs)
        try:
            (built,), _ = runtime.build(launch.spec)  # the device's own build: its limits
        except KernelBuildError as error:
            rejected[variant.name] = f"build failed: {error.log.strip()[:200]}"
            continue
        why = _kernel_group_limit(built, runtime.device, launch.local_size)
        if why:
            rejected[variant.name] = f"does not fit the device: {why}"
            continue
        if not torch.allclose(_timed_call(runtime, kernel, launch, inputs)[0], expected, rtol=1e-3, atol=1e-3,
                              equal_nan=True):
            rejected[variant.name] = "wrong result"
            continue
        ready[variant.name] = launch
    if not ready:
        raise KernelBuildError(f"gemm {m}x{n}x{k}", f"no GEMM variant built and computed correctly: {rejected}")
    samples = {name: [] for name in ready}
    names = list(ready)
    b = inputs[1]
    cold = streams_b(m, b)
    for round_ in range(REPEATS):
        progress(f"timing round {round_ + 1}/{REPEATS}")
        # rotate the order, so that no candidate always runs right after the host BLAS (whose OpenMP threads
        # keep spinning for ~20 ms) or first after an idle moment (vCPUs wake slowly)
        for name in names[round_ % len(names):] + names[: round_ % len(names)]:
            if cold:
                _evict_caches()
            samples[name].append(_timed_call(runtime, kernel, ready[name], inputs)[1])
            if name == "extern":
                time.sleep(SETTLE_SECONDS)
    times = {name: statistics.median(values) for name, values in samples.items()}
    winner = _winner(times, _heuristic_name(runtime.device, inputs))
    elapsed = time.perf_counter() - started
    if elapsed > PROGRESS_AFTER_SECONDS:  # long searches say what they did (a live bar on terminals)
        print(f"{chr(13) if live else ''}torchfuser: tuned GEMM {m}x{n}x{k}: {winner} of {len(candidates)} "
              f"variants in {elapsed:.1f} s", file=sys.stderr)
    return {"winner": winner, "candidates": times, "rejected": rejected, "source": "tuned"}, others.share()


_scratch: list = []


def _evict_caches() -> None:
    """Write EVICT_BYTES (twice the largest L3 seen) from this thread: what the caches held is gone."""
    if not _scratch:
        _scratch.append(np.empty(EVICT_BYTES // 4, np.float32))
    _scratch[0].fill(0.0)


def _heuristic_name(device, inputs) -> str | None:
    """The no-search choice for these inputs, where the search space has one (a test may empty it)."""
    try:
        return default_variant(device.type_name, inputs[1].shape[-1], mm_rows(inputs)).name
    except IndexError:
        return None


def _winner(times: dict, prior: str | None = None) -> str:
    """The fastest, except that the host BLAS must beat the best template variant by EXTERN_MARGIN and by
    EXTERN_SPIN_SECONDS (it costs more than its own time, a wait for pending kernels before it and OpenMP threads
    that keep spinning after it and slow the kernels that follow: an attention kernel ran 2.9 ms alone, 6.4 ms
    right after MKL), and any variant the heuristic's choice `prior` by PRIOR_MARGIN."""
    handicapped = {name: (max(t * EXTERN_MARGIN, t + EXTERN_SPIN_SECONDS) if name == "extern" else t)
                   / (PRIOR_MARGIN if name == prior else 1.0) for name, t in times.items()}
    return min(handicapped, key=handicapped.get)


def _timed_call(runtime, kernel: GemmKernel, launch, inputs) -> tuple[torch.Tensor, float]:
    call = Call(runtime)
    started = time.perf_counter()
    out = call.run_launch(launch, kernel, list(inputs))
    call.sync()
    return out, time.perf_counter() - started


def _kernel_group_limit(built, device, local_size) -> str | None:
    """A built kernel may allow fewer items per group than the device (register pressure): check ours."""
    if local_size is None:
        return None
    import pyopencl as cl

    group = math.prod(local_size)
    try:
        allowed = built.kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device.cl_device)
    except cl.Error:
        return None
    return f"the built kernel allows {allowed} items per group, not {group}" if group > allowed else None
