"""TorchFuser: a PyTorch fusion compiler with its own OpenCL runtime.

    import torchfuser
    fast = torchfuser.compile(model)              # or torch.compile(model, backend="torchfuser")
    y = fast(x)
    print(torchfuser.last_report().summary())

Public API only; see README.md. Environment: TORCHFUSER_DEVICE ("P:D" or a name substring),
TORCHFUSER_CACHE_DIR (kernel binaries), TORCHFUSER_LOG (info | debug).
"""

from __future__ import annotations

import logging as _logging
import os as _os

from torchfuser import ops as _ops  # noqa: F401  (registers torch.ops.torchfuser.*)
from torchfuser import passes
from torchfuser.api import compile, compile_fx, jit
from torchfuser.driver import _Session as _session
from torchfuser.driver import collect_reports
from torchfuser.frontend.capture import CaptureError, trace_module
from torchfuser.frontend.dynamo import register as _register_backend
from torchfuser.frontend.dynamo import torchfuser_backend
from torchfuser.report import CompileReport
from torchfuser.runtime.device import DeviceSelectionError
from torchfuser.runtime.kernel_cache import KERNELS as _kernels
from torchfuser.runtime.kernel_cache import KernelBuildError
from torchfuser.version import __version__

if _os.environ.get("TORCHFUSER_LOG"):
    _logging.basicConfig()
    _logging.getLogger("torchfuser").setLevel(_os.environ["TORCHFUSER_LOG"].upper())

last_log = _session.last_log  # counts from the most recent compile (updated in place; 0 for what none made)


def last_report() -> CompileReport | None:
    """The CompileReport of the most recent compile."""
    return _session.last_report


def cache_stats() -> dict:
    """Kernel cache counters: hits, misses, disk_hits, entries (+ build_errors, damaged, dir)."""
    return _kernels.stats()


def clear_cache(disk: bool = False) -> None:
    """Forget built kernels (and with disk=True, delete the on-disk binaries too)."""
    _kernels.clear(disk=disk)


def load_ipython_extension(ipython) -> None:
    """`%load_ext torchfuser` registers the %%torchfuse cell magic of the explorer. IPython calls this hook;
    the explorer (a layer above the compiler) is imported only then."""
    from explorer import load_ipython_extension as _load

    _load(ipython)


_register_backend()

__all__ = [
    "compile", "jit", "trace_module", "compile_fx", "last_log", "last_report", "cache_stats", "clear_cache",
    "collect_reports", "passes", "CompileReport", "CaptureError", "KernelBuildError", "DeviceSelectionError",
    "torchfuser_backend", "__version__",
]
