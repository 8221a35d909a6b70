from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_core import FakeCore  # noqa: E402


@pytest.fixture
def fake_core(monkeypatch):
    """Route the explorer's torchfuser calls to FakeCore (no Dynamo, no OpenCL)."""
    import explorer.programs

    core = FakeCore()
    monkeypatch.setattr(explorer.programs, "compiler", lambda: core)
    monkeypatch.setattr(explorer.programs, "WARM", explorer.programs.WarmPrograms())
    return core


@pytest.fixture
def shell():
    """An in-process IPython shell with the explorer extension loaded and a clean namespace."""
    from IPython.core.interactiveshell import InteractiveShell

    real_main = sys.modules.get("__main__")
    ip = InteractiveShell.instance()
    sys.modules["__main__"] = ip.user_module  # what IPython does; undone below for the other tests
    ip.run_line_magic("load_ext", "explorer")
    names_before = set(ip.user_ns)
    yield ip
    for name in set(ip.user_ns) - names_before:
        if not name.startswith("__"):  # Dynamo removes its own `__builtins_dict___N` globals itself
            del ip.user_ns[name]
    if real_main is not None:
        sys.modules["__main__"] = real_main
