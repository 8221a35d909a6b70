"""Suite-wide set-up: a private kernel cache directory, so tests never see a developer's cache, and the
GEMM autotuner off (its own tests switch it on) so that every Linear does not cost a search."""

import os
import tempfile

os.environ.setdefault("TORCHFUSER_CACHE_DIR", tempfile.mkdtemp(prefix="torchfuser-test-cache-"))
os.environ.setdefault("TORCHFUSER_AUTOTUNE", "0")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from scratch: Dynamo's code cache would otherwise reuse an earlier backend."""
    torch._dynamo.reset()
    yield


@pytest.fixture
def vector_width(monkeypatch):
    """set(width): kernels configured next use float32 vectors of `width` (8: AVX2's, 16: AVX-512's) and
    float64 ones of half, whatever this CPU's own, so both code paths are checked on every machine."""
    def set_width(width: int) -> None:
        from torchfuser.runtime.device import get_device

        monkeypatch.setitem(get_device().__dict__, "vector_widths", {"float32": width, "float64": width // 2})

    return set_width
