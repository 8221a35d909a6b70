"""Kernel cache: built kernels in memory by key, and on disk for later processes.

The key hashes the generated source, the build options, the device and driver identity and the
torchfuser version; the source is a pure function of the frozen kernel spec, so specs determine keys.
Disk entries (TORCHFUSER_CACHE_DIR, default ~/.cache/torchfuser) are written atomically (temporary file +
rename, so concurrent processes never see half a file) and carry a checksum: a damaged entry is rebuilt
from source with a warning and rewritten.

An entry holds the program binary, except on drivers that cache source builds themselves (PoCL, NVIDIA):
there it only records that the kernel was built, and a later process rebuilds from source, which the
driver answers from its cache. Fetching the binary would cost PoCL a second compile of every kernel
(a cold GPT-2 block: 18.6 s to its first output with binaries, 10.7 s without).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from torchfuser.version import __version__

logger = logging.getLogger("torchfuser")

BUILD_OPTIONS = ""  # strict IEEE: no fast-math, so results match eager
_MAGIC = b"TFCLBIN1"
_DRIVER_CACHED = b"built from source; the driver's own cache holds the binary"



_STDERR_REDIRECT = threading.Lock()  # one redirect at a time: two overlapping ones would not restore fd 2


@contextlib.contextmanager
def _stderr_to_debug_log():
    """The process's stderr (file descriptor 2) goes to the debug log meanwhile: PoCL's compiler writes
    "N warnings generated." there itself, below Python, into a user's terminal or notebook."""
    with _STDERR_REDIRECT:
        yield from _redirected_stderr()


def _redirected_stderr():
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr at all: nothing to keep quiet
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            text = captured.read().decode(errors="replace").strip()
            if text:
                logger.debug("OpenCL compiler's own output: %s", text[:4000])


def build_quietly(program, devices: list, options: str = BUILD_OPTIONS):
    """program.build(), the compiler's notes on a build that succeeded going to the debug log rather than out as
    warnings: PoCL on CPUs without AVX-512 notes the ABI of every float16 vector in every kernel, which says
    nothing a user can act on (a failed build still raises with its log)."""
    import pyopencl as cl

    with warnings.catch_warnings(), _stderr_to_debug_log():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        program = program.build(options=options, devices=devices)
    if logger.isEnabledFor(logging.DEBUG):
        for device in devices:
            log = program.get_build_info(device, cl.program_build_info.LOG).strip()
            if log:
                logger.debug("OpenCL compiler output on %s: %s", device.name, log[:4000])
    return program


class KernelBuildError(RuntimeError):
    """The OpenCL compiler rejected a generated kernel; carries its name and build log."""

    def __init__(self, kernel_name: str, log: str):
        self.kernel_name, self.log = kernel_name, log
        super().__init__(f"OpenCL build of kernel {kernel_name} failed:\n{log}")


@dataclass
class BuiltKernel:
    name: str
    key: str
    source: str
    kernel: object  # cl.Kernel, created once and reused
    status: str  # how it was obtained the first time in this process: miss | disk
    build_seconds: float
    typed: bool = False  # scalar argument dtypes declared to pyopencl


def cache_dir() -> Path:
    return Path(os.environ.get("TORCHFUSER_CACHE_DIR") or Path.home() / ".cache" / "torchfuser")


def cache_key(source: str, device_identity: str) -> str:
    text = "\0".join([__version__, device_identity, BUILD_OPTIONS, source])
    return hashlib.sha256(text.encode()).hexdigest()


class KernelCache:
    def __init__(self):
        self._memory: dict[str, BuiltKernel] = {}
        self._lock = threading.Lock()
        self.counts = Counter()  # hits, misses, disk_hits, build_errors, damaged
        self.per_key = Counter()

    def get(self, device, name: str, source: str) -> tuple[BuiltKernel, str]:
        """(built kernel, status of this lookup: hit | miss | disk). Raises KernelBuildError."""
        key = cache_key(source, device.identity)
        with self._lock:
            self.per_key[key] += 1
            built = self._memory.get(key)
            if built is not None:
                self.counts["hits"] += 1
                return built, "hit"
            start = time.perf_counter()
            program = self._load_from_disk(device, name, source, key)
            status = "disk"
            if program is None:
                program = self._build_from_source(device, name, source)
                self._store_on_disk(device, program, key)
                status = "miss"
            import pyopencl as cl

            built = BuiltKernel(name, key, source, cl.Kernel(program, name), status, time.perf_counter() - start)
            self._memory[key] = built
            self.counts["disk_hits" if status == "disk" else "misses"] += 1
            return built, status

    def _build_from_source(self, device, name: str, source: str):
        import pyopencl as cl

        try:
            return build_quietly(cl.Program(device.context, source), [device.cl_device])
        except cl.Error as error:
            self.counts["build_errors"] += 1
            raise KernelBuildError(name, str(error)) from None

    def _load_from_disk(self, device, name: str, source: str, key: str):
        path = cache_dir() / f"{key}.clbin"
        try:
            blob = path.read_bytes()
        except OSError:
            return None
        binary = _unpack(blob)
        if binary is None:
            self.counts["damaged"] += 1
            warnings.warn(f"torchfuser: damaged kernel cache entry {path}; rebuilding it", RuntimeWarning, stacklevel=4)
            return None
        if binary == _DRIVER_CACHED:
            return self._build_from_source(device, name, source) if device.driver_caches_builds else None
        import pyopencl as cl

        try:
            return build_quietly(cl.Program(device.context, [device.cl_device], [binary]), [device.cl_device])
        except cl.Error as error:
            self.counts["damaged"] += 1
            warnings.warn(f"torchfuser: unusable kernel cache entry {path} ({error}); rebuilding it", RuntimeWarning, stacklevel=4)
            return None

    def _store_on_disk(self, device, program, key: str) -> None:
        import pyopencl as cl

        directory = cache_dir()
        try:
            binary = _DRIVER_CACHED if device.driver_caches_builds else program.get_info(cl.program_info.BINARIES)[0]
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key[:16]}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(_pack(binary))
            os.replace(tmp, directory / f"{key}.clbin")
        except (OSError, cl.Error) as error:  # a read-only or full disk costs speed, not correctness
            logger.warning("torchfuser: could not write kernel cache entry %s: %s", key, error)

    def stats(self) -> dict:
        return {
            "hits": self.counts["hits"],
            "misses": self.counts["misses"],
            "disk_hits": self.counts["disk_hits"],
            "entries": len(self._memory),
            "build_errors": self.counts["build_errors"],
            "damaged": self.counts["damaged"],
            "dir": str(cache_dir()),
        }

    def clear(self, disk: bool = False) -> None:
        with self._lock:
            self._memory.clear()
            self.counts.clear()
            self.per_key.clear()
            if disk:
                for path in cache_dir().glob("*.clbin"):
                    path.unlink(missing_ok=True)


def _pack(binary: bytes) -> bytes:
    return _MAGIC + hashlib.sha256(binary).digest() + binary


def _unpack(blob: bytes) -> bytes | None:
    head, digest, binary = blob[: len(_MAGIC)], blob[len(_MAGIC) : len(_MAGIC) + 32], blob[len(_MAGIC) + 32 :]
    if head != _MAGIC or not binary or hashlib.sha256(binary).digest() != digest:
        return None
    return binary


KERNELS = KernelCache()
