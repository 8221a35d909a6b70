"""The GEMM benchmark section on small shapes: the rows it returns and the table it prints (no timing
assertions: these machines are shared and noisy), and the warm-call option of the interleaved timer."""

import pytest
import torch

from torchfuser.tools.bench.gemm import format_gemm, gemm_rows
from torchfuser.runtime.timing import interleaved_medians


@pytest.fixture(autouse=True)
def fresh_dynamo():
    yield
    torch._dynamo.reset()


def test_gemm_rows_give_after_idle_and_warm_speeds_for_both_sides():
    (row,) = gemm_rows(repeats=2, shapes={"33x40x48": (33, 40, 48)})
    speeds = ("torch", "torchfuser", "torch warm", "torchfuser warm")
    assert all(row[key] > 0 for key in speeds) and row["variant"].startswith("packed")
    lines = format_gemm([row], ceiling=1e11).splitlines()
    assert lines[2].startswith("33x40x48") and " idle " in lines[2] and " warm " in lines[3]
    assert lines[-1].startswith("FMA ceiling") and lines[2].rstrip().endswith(row["variant"])


def test_warm_calls_run_untimed_before_each_timed_call():
    calls = {"a": 0, "b": 0}

    def counter(name):
        def fn():
            calls[name] += 1
        return fn

    interleaved_medians({name: counter(name) for name in calls}, repeats=3, warmup=1, settle=0.0, warm_calls=2)
    assert calls == {"a": 1 + 3 * 3, "b": 1 + 3 * 3}
