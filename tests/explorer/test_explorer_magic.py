"""%%torchfuse in an in-process IPython shell, against FakeCore: arguments, namespace, display, errors."""
from __future__ import annotations

import pytest

import explorer.magic
from explorer.magic import TorchfuseMagics, enabled_passes_for
from explorer.widget import REPORT_MIME, ExplorerWidget

PIPELINE = ["fuse_gemm_epilogue", "fuse_pointwise", "eliminate_dead_code"]


@pytest.fixture
def shown(monkeypatch):
    """What the magic displayed."""
    displayed: list = []
    monkeypatch.setattr(explorer.magic, "display", displayed.append)
    return displayed


def run(shell, line: str, cell: str):
    return shell.run_cell(f"%%torchfuse {line}\n{cell}")


def test_load_ext_registers_the_cell_magic(shell):
    assert "torchfuse" in shell.magics_manager.magics["cell"]


def test_cell_assignments_land_in_user_ns_and_explorer_is_shown(fake_core, shell, shown):
    shell.user_ns["x"] = 20
    result = run(shell, "", "y = x + 1\nx = x * 2\nimport math\ny + 100")
    assert result.success, result.error_in_exec
    assert (shell.user_ns["y"], shell.user_ns["x"]) == (21, 40)
    assert shell.user_ns["math"].__name__ == "math"
    assert result.result == 121  # the last expression is the cell's value, as without the magic
    assert len(shown) == 1 and isinstance(shown[0], ExplorerWidget)
    data, _ = shown[0]._repr_mimebundle_()
    assert data[REPORT_MIME]["reports"][0]["title"] == "MLP forward"
    assert fake_core.compile_calls[-1]["disable"] == ()
    assert shell.user_ns["_torchfuse"] is shown[0]


def test_disable_only_and_device_reach_the_compiler(fake_core, shell, shown):
    assert run(shell, "--disable fuse_pointwise --device cpu", "a = 1").success
    assert fake_core.compile_calls[-1]["disable"] == ("fuse_pointwise",)
    assert fake_core.compile_calls[-1]["device"] == "cpu"
    assert run(shell, "--only fuse_gemm_epilogue", "a = 2").success
    assert fake_core.compile_calls[-1]["disable"] == ("fuse_pointwise", "eliminate_dead_code")
    assert run(shell, "--disable fuse_pointwise --disable eliminate_dead_code", "a = 3").success
    assert fake_core.compile_calls[-1]["disable"] == ("fuse_pointwise", "eliminate_dead_code")
    assert shown[-1].enabled_passes == ["fuse_gemm_epilogue"]


def test_enabled_passes_for_combines_only_and_disable():
    assert enabled_passes_for(PIPELINE, [], None) == PIPELINE
    assert enabled_passes_for(PIPELINE, ["fuse_pointwise"], ["fuse_pointwise", "eliminate_dead_code"]) == [
        "eliminate_dead_code"]


@pytest.mark.parametrize("line, message", [
    ("--disable fuse_everything", "UsageError: unknown pass 'fuse_everything'; the pipeline has: "
                                  "fuse_gemm_epilogue, fuse_pointwise, eliminate_dead_code"),
    ("--only", "UsageError: argument --only: expected at least one argument"),
    ("--frobnicate", "UsageError: unrecognized arguments: --frobnicate"),
    ("--bench many", "UsageError: argument --bench: invalid int value: 'many'"),
    ("--bench -1", "UsageError: --bench N needs N >= 0"),
])
def test_bad_argument_is_a_one_line_usage_error(fake_core, shell, shown, capsys, line, message):
    shell.user_ns.pop("never_assigned", None)
    result = run(shell, line, "never_assigned = 1")
    captured = capsys.readouterr()
    assert not result.success
    assert captured.err.strip() == message
    assert "Traceback" not in captured.out + captured.err
    assert "never_assigned" not in shell.user_ns and shown == [] and fake_core.compile_calls == []


def test_cell_that_cannot_be_a_function_is_a_one_line_usage_error(fake_core, shell, capsys):
    result = run(shell, "", "from os import *")
    assert not result.success
    assert capsys.readouterr().err.strip() == "UsageError: 'from ... import *' cannot run inside a %%torchfuse cell"


def test_error_in_the_cell_code_is_a_normal_traceback(fake_core, shell, shown, capsys):
    result = run(shell, "", "z = 1\nz / 0")
    assert isinstance(result.error_in_exec, ZeroDivisionError)
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert shown == []


def test_no_show_displays_nothing_but_still_runs(fake_core, shell, shown):
    assert run(shell, "--no-show", "quiet = 7").success
    assert shown == [] and shell.user_ns["quiet"] == 7 and len(fake_core.compile_calls) == 1


def test_bench_records_median_times_on_the_reports(fake_core, shell, shown):
    shell.user_ns["calls"] = []
    assert run(shell, "--bench 3", "calls.append(1)\nn = len(calls)").success
    # one compiled run, then 1 warm-up + 3 eager and 3 compiled timing runs
    assert len(shell.user_ns["calls"]) == 1 + 1 + 3 + 3
    assert shell.user_ns["n"] == 1  # the namespace holds the first, real run's values
    timings = shown[0].bundle["reports"][0]["timings"]
    assert timings["eager_seconds"] > 0 and timings["compiled_seconds"] > 0 and timings["speedup"] > 0


def test_without_bench_nothing_is_timed(fake_core, shell, shown):
    assert run(shell, "", "t = 1").success
    assert shown[0].bundle["reports"][0]["timings"]["eager_seconds"] == 0.0051  # the fixture's value, untouched


def test_html_option_writes_the_page(fake_core, shell, shown, tmp_path):
    target = tmp_path / "cell.html"
    assert run(shell, f"--html {target}", "h = 1").success
    assert target.read_text().startswith("<!DOCTYPE html>")


def test_rerun_from_the_explorer_reruns_the_cell_from_the_same_inputs(fake_core, shell, shown):
    shell.user_ns["counter"] = 0
    assert run(shell, "", "counter = counter + 1").success
    assert shell.user_ns["counter"] == 1
    view = shown[0]
    view.enabled_passes = ["fuse_pointwise"]
    view.rerun()
    assert shell.user_ns["counter"] == 1  # same starting value as the first run, not 2
    assert fake_core.compile_calls[-1]["disable"] == ("fuse_gemm_epilogue", "eliminate_dead_code")


def test_help_lists_every_option():
    doc = TorchfuseMagics.torchfuse.__doc__
    for option in ("--disable PASS", "--only PASS", "--device D", "--no-show", "--bench N", "--html FILE"):
        assert option in doc, option
    assert "Run the cell compiled by torchfuser" in doc
