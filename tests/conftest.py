"""Suite-wide set-up: a private kernel cache directory, so tests never see a developer's cache."""

import os
import tempfile

os.environ.setdefault("TORCHFUSER_CACHE_DIR", tempfile.mkdtemp(prefix="torchfuser-test-cache-"))

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from scratch: Dynamo's code cache would otherwise reuse an earlier backend."""
    torch._dynamo.reset()
    yield
