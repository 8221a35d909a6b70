"""PyTorch's OpenMP worker threads, sent away before a plan's call that needs the cores.

After each parallel region (an eager op, MKL's GEMM, inductor's kernels) libgomp's workers keep spinning on
their cores before they sleep (GOMP_SPINCOUNT: milliseconds here), in case another region follows. Between the
ops of a user's loop there usually is one: HF generate() runs an argmax over GPT-2's 50257 logits (a parallel
reduction) before every decode step, so the worker spins through the whole of the next step, and PoCL's worker
shares its core with it. OpenMP 5.0's `omp_pause_resource_all` frees the calling thread's pool: its workers
exit at once, and PyTorch's next parallel region starts new ones (tens of microseconds, once).

So a plan releases them at the start of each call whose kernels use PoCL's workers and take at least
RELEASE_MIN_SECONDS (executor.Plan.run): against that, the next PyTorch op's thread start is small, and a
spinning worker would take up to half of the plan's second core. Only libgomp's pause is called (PyTorch's
Linux wheels link it; its pause frees the calling thread's own pool and nothing else), found among the
libraries the process has loaded; with another OpenMP runtime, or TORCHFUSER_RELEASE_OPENMP=0, nothing
happens.
"""

from __future__ import annotations

import ctypes
import os

RELEASE_MIN_SECONDS = 0.0005  # a plan's kernel time per call from which a call starts by releasing them
_OMP_PAUSE_SOFT = 1

_pause = []  # [the pause function, or None]: looked up once


def _loaded_libgomp() -> str | None:
    """The path of the libgomp this process has loaded (PyTorch's own copy first), or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if "libgomp" in line and "/" in line}
    except (OSError, IndexError):
        return None
    import torch  # (loaded already: a plan exists) where PyTorch keeps its own copy

    own = os.path.dirname(torch.__file__)
    return min(paths, key=lambda p: (not p.startswith(own), p), default=None)


def _find_pause():
    if os.environ.get("TORCHFUSER_RELEASE_OPENMP", "1") == "0":
        return None
    path = _loaded_libgomp()
    if path is None:
        return None
    try:
        pause = ctypes.CDLL(path).omp_pause_resource_all
    except (OSError, AttributeError):  # an older libgomp (OpenMP 4.5) has no pause
        return None
    pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    return pause


def release_openmp_workers() -> bool:
    """End the spin of the calling thread's OpenMP workers (they exit; PyTorch starts new ones when it needs
    them). False where there is no libgomp pause to call (or it is switched off)."""
    if not _pause:
        _pause.append(_find_pause())
    pause = _pause[0]
    return pause is not None and pause(_OMP_PAUSE_SOFT) == 0
