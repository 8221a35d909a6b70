"""The public API contract: entry points, decorators, FX path, report, errors, fallbacks, no-OpenCL."""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from eager_compare import assert_close


def run_python(code, **env):
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_backend_entry_point_works_in_a_fresh_process_without_import():
    out = run_python("""
        import sys, torch
        f = torch.compile(lambda x: torch.relu(x) * 2 + 1, backend="torchfuser")
        x = torch.randn(64)
        torch.testing.assert_close(f(x), torch.relu(x) * 2 + 1)
        import torchfuser
        print("imported-by-dynamo", torchfuser.last_log["pointwise_groups"])
    """)
    assert "imported-by-dynamo 1" in out


def test_jit_decorator_with_and_without_options():
    @torchfuser.jit
    def plain(x):
        return torch.sigmoid(x) + 1

    @torchfuser.jit(disable=["fuse_pointwise"])
    def unfused(x):
        return torch.sigmoid(x) + 1

    x = torch.randn(32)
    assert_close(plain(x), torch.sigmoid(x) + 1)
    assert torchfuser.last_log["pointwise_groups"] == 1
    assert_close(unfused(x), torch.sigmoid(x) + 1)
    assert torchfuser.last_log["pointwise_groups"] == 0
    reasons = {f.reason for f in torchfuser.last_report().fallbacks}
    assert reasons == {"fuse_pointwise is disabled"}


def test_trace_module_and_compile_fx_with_and_without_example_inputs():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).eval()
    gm = torchfuser.trace_module(model)
    assert isinstance(gm, torch.fx.GraphModule)
    x = torch.randn(5, 8)
    with torch.no_grad():
        assert_close(torchfuser.compile_fx(gm, [x])(x), model(x))
        lazy = torchfuser.compile_fx(gm)
        assert_close(lazy(x), model(x))
        assert_close(lazy(torch.randn(3, 8)).shape, torch.Size([3, 4]))
    assert torchfuser.last_log["gemm_epilogue"] == 2


def test_trace_module_error_says_what_and_where():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # data-dependent: FX cannot trace this
                return x * 2
            return x

    with pytest.raises(torchfuser.CaptureError) as caught:
        torchfuser.trace_module(Branchy())
    message = str(caught.value)
    assert "Branchy" in message and "test_public_api.py" in message and "if x.sum() > 0" in message


def test_bad_inputs_get_clear_errors():
    with pytest.raises(ValueError, match="unknown pass name"):
        torchfuser.compile(lambda x: x, disable=["fuse_all_the_things"])
    with pytest.raises(torchfuser.DeviceSelectionError, match="available"):
        torchfuser.compile(lambda x: x, device="no-such-device")
    with pytest.raises(TypeError, match="nn.Module or a function"):
        torchfuser.compile(42)


def test_device_by_index_and_by_name_substring():
    x = torch.randn(16)
    for device in ("0:0", "pthread", None):
        out = torchfuser.compile(lambda t: t * 3 - 1, device=device)(x)
        assert_close(out, x * 3 - 1)
        torch._dynamo.reset()


def test_report_contract_and_live_counts():
    fn = torchfuser.compile(lambda x, y: F.gelu(x @ y) * 2)
    x, y = torch.randn(16, 32), torch.randn(32, 8)
    for _ in range(3):
        fn(x, y)
    report = torchfuser.last_report()
    d = json.loads(report.to_json())
    assert d["schema_version"] == 2 and set(d) >= {"device", "passes", "kernels", "fallbacks", "timings", "graphs"}
    assert d["device"]["type"] in ("CPU", "GPU", "ACCELERATOR")
    for p in d["passes"]:
        assert set(p) >= {"name", "enabled", "modified", "seconds", "stats", "error", "change"}
    node = d["graphs"]["aten"]["nodes"][-2]
    assert set(node) >= {"id", "op", "target", "shape", "dtype", "group", "inputs", "module", "location"}
    assert "digraph" in report.to_dot("fuse_gemm_epilogue")
    d = report.expanded()  # every pass's graphs in full, kernels with their source
    node = d["passes"][0]["graph_before"]["nodes"][-2]
    assert set(node) >= {"id", "op", "target", "shape", "dtype", "group", "module", "file", "line", "code"}
    (kernel,) = d["kernels"]  # the * 2 joins the GEMM's epilogue
    assert "__kernel" in kernel["source"] and kernel["cache"] in ("hit", "miss", "disk")
    assert kernel["launches"] == 3 and kernel["mean_seconds"] > 0 and kernel["nodes"]
    assert any(s["file"] and s["file"].endswith("test_public_api.py") for s in kernel["sources"])
    assert d["timings"]["calls"] == 3 and d["timings"]["compile_seconds"] > 0
    report.record_timing(eager_seconds=2.0, compiled_seconds=0.5)
    assert report.to_dict()["timings"]["speedup"] == 4.0
    assert set(torchfuser.last_log) >= {"gemm_epilogue", "pointwise_groups", "fallbacks"}
    assert set(torchfuser.cache_stats()) >= {"hits", "misses", "disk_hits", "entries"}


def test_ops_without_kernels_fall_back_and_are_named():
    def fn(x):
        h = torch.exp(x) + 1  # kernel
        c = torch.cumsum(h, dim=-1)  # PyTorch, reading the kernel's output
        return torch.tanh(c) * 2  # kernel again

    x = torch.randn(8, 50)
    assert_close(torchfuser.compile(fn)(x), fn(x))
    report = torchfuser.last_report()
    assert [f.op for f in report.fallbacks] == ["aten.cumsum.default"]
    assert "no OpenCL kernel" in report.fallbacks[0].reason
    assert report.fallbacks[0].file.endswith("test_public_api.py")
    assert len(report.kernels) == 2 and torchfuser.last_log["fallbacks"] == 1


def test_a_kernel_that_fails_to_build_falls_back_with_its_build_log(monkeypatch):
    import torchfuser.runtime.call as call

    real = call.kernel_source
    monkeypatch.setattr(call, "kernel_source", lambda spec: real(spec) + "\nnot C at all;\n")
    fn = lambda x: torch.sigmoid(x) * 7 + 0.125  # noqa: E731
    x = torch.randn(100)
    with pytest.warns(RuntimeWarning, match="tf_pointwise"):
        out = torchfuser.compile(fn)(x)
    assert_close(out, fn(x))
    report = torchfuser.last_report()
    assert report.kernels == [] and "OpenCL build failed" in report.fallbacks[0].reason
    assert "error" in report.fallbacks[0].reason.lower()


def test_without_any_opencl_platform_the_graph_runs_in_pytorch(tmp_path):
    out = run_python("""
        import warnings, torch, torchfuser
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            f = torchfuser.compile(lambda x, w: torch.relu(x @ w) + 1)
            x, w = torch.randn(4, 8), torch.randn(8, 3)
            torch.testing.assert_close(f(x, w), torch.relu(x @ w) + 1)
        messages = [str(w.message) for w in caught if "OpenCL" in str(w.message)]
        report = torchfuser.last_report()
        print("WARNINGS", len(messages), messages[0][:40])
        print("DEVICE", report.device, [f.reason for f in report.fallbacks])
    """, OCL_ICD_VENDORS=str(tmp_path), OPENCL_VENDOR_PATH=str(tmp_path))
    assert "WARNINGS 1 torchfuser: no OpenCL platform found" in out
    assert "DEVICE None" in out and "no OpenCL device" in out


def test_copying_binder_for_devices_without_shared_memory():
    out = run_python("""
        import torch, torchfuser
        def fn(x, w):
            h = torch.relu(x @ w.t())
            c = torch.cumsum(h, -1)       # a fallback between kernels forces a read-back
            return (c.t() * 0.5).sigmoid()  # a view of a kernel result feeds a kernel
        x, w = torch.randn(7, 5), torch.nn.Parameter(torch.randn(9, 5))
        f = torchfuser.compile(fn)
        with torch.no_grad():
            for _ in range(2):
                torch.testing.assert_close(f(x, w), fn(x, w), rtol=1e-4, atol=1e-5)
        print("ZERO_COPY", torchfuser.last_report().device["zero_copy"])
    """, TORCHFUSER_ZERO_COPY="0")
    assert "ZERO_COPY False" in out


def test_misaligned_user_memory_is_copied_not_crashed():
    raw = np.random.randn(10001).astype(np.float32)
    x = torch.from_numpy(raw[1:])  # 4 bytes past an aligned address
    fn = lambda t: torch.tanh(t) * 2  # noqa: E731
    assert_close(torchfuser.compile(fn)(x), fn(x))


def test_training_compiles_forward_and_backward():
    model = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 3))
    reference = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 3))
    reference.load_state_dict(model.state_dict())
    x = torch.randn(6, 12)
    with torchfuser.collect_reports() as reports:
        loss = torchfuser.compile(model)(x).square().mean()
        loss.backward()
    reference(x).square().mean().backward()
    assert {r.title.rsplit(" ", 1)[-1] for r in reports} == {"forward", "backward"}
    for p, q in zip(model.parameters(), reference.parameters()):
        assert_close(p.grad, q.grad, atol=1e-5)


def test_report_gives_peak_intermediate_memory_beside_eager():
    def fn(x):
        a = torch.exp(x)
        b = torch.sigmoid(a) * 2
        return torch.tanh(b) + a

    x = torch.randn(1000)
    torchfuser.compile(fn)(x)
    memory = torchfuser.last_report().to_dict()["memory"]
    assert memory["eager_peak_intermediate_bytes"] == 3 * 4000  # exp, sigmoid, mul live together at most
    assert memory["peak_intermediate_bytes"] == 0  # one kernel: no intermediate buffers at all


def test_an_error_in_a_fallback_op_waits_for_running_kernels_and_propagates():
    def fn(x, index):
        h = torch.exp(x) * 2  # a kernel, enqueued first
        return torch.index_select(h, 0, index) + 1  # PyTorch, which raises for a bad index

    compiled = torchfuser.compile(fn)
    x = torch.randn(1 << 16)
    assert_close(compiled(x, torch.tensor([1, 5])), fn(x, torch.tensor([1, 5])))
    with pytest.raises(IndexError):
        compiled(x, torch.tensor([1 << 20, 0]))
    assert_close(compiled(x, torch.tensor([7])), fn(x, torch.tensor([7])))  # still healthy


def test_splitting_a_result_into_views_is_not_a_fallback():
    """GPT-2's q, k, v = c_attn(x).split(width, dim=2) lowers to split_with_sizes: views, not PyTorch work."""
    w = torch.randn(16, 48)

    def fn(x):
        q, k, v = (x @ w).split([16, 16, 16], dim=1)
        return torch.relu(q) + k * v

    x = torch.randn(5, 16)
    assert_close(torchfuser.compile(fn)(x), fn(x), atol=1e-4)
    assert torchfuser.last_report().fallbacks == []
