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
