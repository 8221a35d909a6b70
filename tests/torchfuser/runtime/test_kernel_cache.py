"""The kernel cache: in-memory hits, loads from disk in a new process, damaged entries, concurrency."""

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import torch

import torchfuser

# A child process compiles one pointwise graph whose constant makes its kernel unique to the test.
CHILD = textwrap.dedent("""
    import sys, warnings, torch, torchfuser
    c = float(sys.argv[1])
    fn = torchfuser.compile(lambda x: torch.sigmoid(x) * c + 1)
    x = torch.linspace(-3, 3, 1001)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(x)
    torch.testing.assert_close(out, torch.sigmoid(x) * c + 1)
    print("STATUS", torchfuser.last_report().kernels[0].cache)
    print("WARNINGS", " | ".join(str(w.message) for w in caught))
""")


def run_child(cache_dir, constant, driver_cache=None):
    """Without driver_cache (a directory) PoCL's own kernel cache is off, so entries hold binaries."""
    env = {**os.environ, "TORCHFUSER_CACHE_DIR": str(cache_dir), "POCL_KERNEL_CACHE": "0"}
    if driver_cache is not None:
        env.update(POCL_KERNEL_CACHE="1", POCL_CACHE_DIR=str(driver_cache))
    done = subprocess.run([sys.executable, "-c", CHILD, repr(constant)], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    return lines["STATUS"], lines.get("WARNINGS", "")


def entries(cache_dir):
    return sorted(Path(cache_dir).glob("*.clbin"))


def test_second_compile_of_the_same_graph_is_a_memory_hit():
    fn = lambda x: torch.exp(x) * 3.25 - 1  # noqa: E731
    x = torch.randn(100)
    torchfuser.compile(fn)(x)
    first = torchfuser.last_report().kernels[0]
    hits = torchfuser.cache_stats()["hits"]
    torch._dynamo.reset()
    torchfuser.compile(fn)(x)
    second = torchfuser.last_report().kernels[0]
    assert first.cache in ("miss", "disk") and second.cache == "hit"
    assert second.cache_key == first.cache_key and second.build_seconds == 0
    assert torchfuser.cache_stats()["hits"] == hits + 1


def test_with_a_caching_driver_the_entry_records_the_build_and_the_driver_keeps_the_binary(tmp_path):
    ours, pocls = tmp_path / "torchfuser", tmp_path / "pocl"
    assert run_child(ours, 1.375, driver_cache=pocls)[0] == "miss"
    (entry,) = entries(ours)
    assert entry.stat().st_size < 200  # a record, not a program binary
    assert any(pocls.rglob("*")), "PoCL kept no build of its own"
    assert run_child(ours, 1.375, driver_cache=pocls)[0] == "disk"
    # the driver's cache turned off later: the record is replaced by a binary, quietly
    status, warnings = run_child(ours, 1.375)
    assert status == "miss" and not warnings
    assert entry.stat().st_size > 200 and run_child(ours, 1.375)[0] == "disk"


def compile_in_this_process(constant):
    """Like the child: a pointwise kernel unique to `constant`, after forgetting the in-memory cache (so the
    lookup goes to disk, as in a new process). (cache status, warning messages)."""
    torchfuser.clear_cache()
    torch._dynamo.reset()  # the lambda's code object is the same each time: Dynamo would reuse its graph
    fn = torchfuser.compile(lambda x: torch.sigmoid(x) * constant + 1)
    x = torch.linspace(-3, 3, 1001)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.testing.assert_close(fn(x), torch.sigmoid(x) * constant + 1)
    return torchfuser.last_report().kernels[0].cache, " | ".join(str(w.message) for w in caught)


def test_a_damaged_entry_is_rebuilt_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))
    assert compile_in_this_process(2.5)[0] == "miss"
    (entry,) = entries(tmp_path)
    data = bytearray(entry.read_bytes())
    data[len(data) // 2] ^= 0xFF
    entry.write_bytes(bytes(data))
    status, caught = compile_in_this_process(2.5)
    assert status == "miss" and "damaged kernel cache entry" in caught
    assert compile_in_this_process(2.5)[0] == "disk"  # rewritten whole


def test_a_truncated_entry_is_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))
    compile_in_this_process(3.5)
    (entry,) = entries(tmp_path)
    entry.write_bytes(entry.read_bytes()[:10])
    status, caught = compile_in_this_process(3.5)
    assert status == "miss" and "damaged" in caught


def test_concurrent_processes_share_one_cache_dir(tmp_path):
    env = {**os.environ, "TORCHFUSER_CACHE_DIR": str(tmp_path), "POCL_KERNEL_CACHE": "0"}
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, "4.75"], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    for child in children:
        out, err = child.communicate(timeout=240)
        assert child.returncode == 0, err[-3000:]
        assert "STATUS" in out
    assert len(entries(tmp_path)) == 1
    assert not list(tmp_path.glob("*.tmp"))  # atomic writes leave no partial files
    assert run_child(tmp_path, 4.75)[0] == "disk"  # a new process loads the kernel from disk


def test_clear_cache_forgets_memory_and_optionally_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))
    torchfuser.clear_cache()
    torchfuser.compile(lambda x: x * 5.5 + 0.25)(torch.randn(10))
    assert torchfuser.cache_stats()["entries"] == 1 and len(entries(tmp_path)) == 1
    torchfuser.clear_cache(disk=True)
    assert torchfuser.cache_stats()["entries"] == 0 and entries(tmp_path) == []


def test_a_build_leaves_the_compilers_own_notes_out_of_stderr(capfd):
    import uuid

    import pyopencl as cl

    from torchfuser.runtime.device import get_device
    from torchfuser.runtime.kernel_cache import build_quietly

    device = get_device(None)
    source = (f'#warning "torchfuser test {uuid.uuid4().hex}"\n'  # unique: no driver cache answers it
              "__kernel void k(__global float* x) { x[0] = 1.0f; }\n")
    build_quietly(cl.Program(device.context, source), [device.cl_device])
    assert "warning" not in capfd.readouterr().err

    # builds in several threads at once leave stderr where it was
    import threading

    before = os.fstat(2).st_ino
    threads = [threading.Thread(target=build_quietly, args=(cl.Program(device.context, source.replace(
        "torchfuser test", f"torchfuser thread {n}")), [device.cl_device])) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert os.fstat(2).st_ino == before
