"""Device start-up: PoCL's worker threads pinned one per CPU, unless the user chose or the process may not
use every CPU."""

import os
import subprocess
import sys
import textwrap

import pytest

from torchfuser.runtime import device


@pytest.fixture
def no_affinity_setting(monkeypatch):
    monkeypatch.delenv("POCL_AFFINITY", raising=False)


def test_workers_are_pinned_where_the_process_may_use_every_cpu(monkeypatch, no_affinity_setting):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
    device.pin_pocl_workers()
    assert os.environ["POCL_AFFINITY"] == "1"


def test_a_cpu_subset_leaves_the_workers_unpinned(monkeypatch, no_affinity_setting):
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 3})  # taskset -c 2,3: CPU 0 is not ours
    device.pin_pocl_workers()
    assert "POCL_AFFINITY" not in os.environ


def test_the_users_choice_stands(monkeypatch):
    monkeypatch.setenv("POCL_AFFINITY", "0")
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(os.cpu_count())))
    device.pin_pocl_workers()
    assert os.environ["POCL_AFFINITY"] == "0"


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or os.sched_getaffinity(0) != set(range(os.cpu_count())),
                    reason="needs Linux and a process that may use every CPU")
def test_without_the_in_thread_device_a_new_process_runs_one_pinned_worker_per_cpu():
    child = textwrap.dedent("""
        import os, torch, torchfuser
        fn = torchfuser.compile(lambda x: x * 2 + 1)
        torch.testing.assert_close(fn(torch.ones(8)), torch.full((8,), 3.0))
        pinned = []
        for tid in os.listdir("/proc/self/task"):
            for line in open(f"/proc/self/task/{tid}/status"):
                if line.startswith("Cpus_allowed_list:") and line.split()[1].isdigit():
                    pinned.append(int(line.split()[1]))
        units = torchfuser.runtime.device.get_device().cl_device.max_compute_units
        print(sorted(pinned), list(range(units)))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POCL_")}
    env["TORCHFUSER_INLINE"] = "0"
    done = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    pinned, expected = done.stdout.strip().splitlines()[-1].split("] [")
    assert pinned + "]" == "[" + expected, done.stdout  # worker i on CPU i, one per compute unit


def test_by_default_a_new_process_gets_the_in_thread_device_and_a_worker_fewer_than_its_cpus():
    child = textwrap.dedent("""
        import os, torch, torchfuser
        from torchfuser.runtime.device import get_device, list_devices
        fn = torchfuser.compile(lambda x: x * 2 + 1)
        torch.testing.assert_close(fn(torch.ones(8)), torch.full((8,), 3.0))
        device = get_device()
        print(device.inline.name.split("-")[0], device.cl_device.max_compute_units, len(os.sched_getaffinity(0)),
              any(d.name.startswith("basic") for _, d in list_devices()), os.environ.get("POCL_AFFINITY"))
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith("POCL_") and k != "TORCHFUSER_INLINE"}
    done = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    companion, workers, cpus, listed, affinity = done.stdout.split()[-5:]
    assert companion == "basic" and int(workers) == max(1, int(cpus) - 1)
    assert listed == "False" and affinity == "None"  # the companion is not listed; the workers are not pinned
