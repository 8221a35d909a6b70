"""tensor_scalar_operands: numbers Dynamo passes as 0-d tensors (dynamic=True) join kernels; numerics as eager."""

import copy
import math

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.passes import register_pass
from torchfuser.passes.tensor_scalar_operands import tensor_scalar_operands


class RMSNorm(nn.Module):
    """LLaMA's RMSNorm and an attention-style scale: two Python floats Dynamo does not specialise."""

    def __init__(self, width=16):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(width) + 0.5)
        self.eps, self.scale = 1e-6, 0.125

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps)) * self.scale


def compiled(model, dynamic, *args):
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torch.compile(model, backend="torchfuser", dynamic=dynamic)(*args)
    return out, reports[-1]


@pytest.mark.parametrize("t", [1, 7, 33])
def test_dynamic_floats_run_in_kernels(t):
    model, x = RMSNorm(), torch.randn(2, t, 16)
    out, report = compiled(model, True, x)
    assert_close(out, model(x))
    assert report.fallbacks == []  # no _local_scalar_dense, no add or mul left in PyTorch
    (record,) = [p for p in report.passes if p.name == "tensor_scalar_operands"]
    assert record.modified and record.stats["operands"] == 2
    assert {n for k in report.kernels for n in k.nodes} >= {"add", "mul_2"}


def test_a_new_value_of_the_float_is_read_at_run_time():
    model, x = RMSNorm(), torch.randn(2, 5, 16)
    torch._dynamo.reset()
    with torch.no_grad():
        fn = torch.compile(model, backend="torchfuser", dynamic=True)
        fn(x)
        model.scale = 0.5  # an unspecialised float: the same graph, a new runtime value
        assert_close(fn(x), model(x))


def test_static_shapes_specialise_the_number_and_the_pass_has_nothing_to_do():
    model, x = RMSNorm(), torch.randn(2, 5, 16)
    out, report = compiled(model, False, x)
    assert_close(out, model(x))
    (record,) = [p for p in report.passes if p.name == "tensor_scalar_operands"]
    assert not record.modified


def test_a_zero_dim_partner_keeps_the_number():
    """0-d float32 * number stays float32 in eager; 0-d float32 * 0-d float64 would be float64: not rewritten."""
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = 0.1

        def forward(self, x, s):
            return x * (s * self.scale)

    model, x, s = Scaled(), torch.randn(3, 4), torch.tensor(3.0)
    out, report = compiled(model, True, x, s)
    assert_close(out, model(x, s))
    assert out.dtype == torch.float32
    (record,) = [p for p in report.passes if p.name == "tensor_scalar_operands"]
    assert not record.modified, "s * scale has a 0-d partner: the number must stay a number"


class HostArithmetic(nn.Module):
    """GPT-2's gelu_new scale, math.sqrt(2.0 / pi), and the other host operations on unspecialised floats."""

    def __init__(self):
        super().__init__()
        self.pi, self.a, self.b = math.pi, 0.3, 2.5

    def forward(self, x):
        scale = math.sqrt(2.0 / self.pi)
        y = 0.5 * x * (1.0 + torch.tanh(scale * (x + 0.044715 * torch.pow(x, 3.0))))
        return y * (1.0 - self.a) + x * (-self.b) + x / (self.a * self.b + 0.5)


@pytest.mark.parametrize("t", [1, 9])
def test_host_arithmetic_on_dynamic_floats_runs_in_kernels_with_the_hosts_values(t):
    model, x = HostArithmetic(), torch.randn(2, t, 16)
    out, report = compiled(model, True, x)
    assert_close(out, model(x))
    assert report.fallbacks == [], [(f.op, f.reason) for f in report.fallbacks]
    (record,) = [p for p in report.passes if p.name == "tensor_scalar_operands"]
    assert record.modified and record.stats["host_arithmetic"] == 6  # /, sqrt, 1 - a, -b, a * b, + 0.5


def test_a_number_from_host_arithmetic_used_as_a_number_stays_on_the_host():
    """torch.full's fill value is a number, not an elementwise operand: that chain is not carried over."""
    class Fill(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = 0.25

        def forward(self, x):
            return x + torch.full((x.shape[-1],), 2.0 * self.a)

    model, x = Fill(), torch.randn(3, 8)
    out, report = compiled(model, True, x)
    assert_close(out, model(x))
    (record,) = [p for p in report.passes if p.name == "tensor_scalar_operands"]
    assert record.stats["host_arithmetic"] == 0


def test_the_pass_alone_removes_the_host_steps_and_a_second_run_changes_nothing():
    runs = []

    def twice(gm):
        first = tensor_scalar_operands(gm)
        second = tensor_scalar_operands(copy.deepcopy(first.gm))
        runs.append((first, second))
        return first

    register_pass("tensor_scalar_operands", twice)
    try:
        model, x = HostArithmetic(), torch.randn(2, 5, 16)
        out, _ = compiled(model, True, x)
    finally:
        register_pass("tensor_scalar_operands", tensor_scalar_operands)
    assert_close(out, model(x))
    (first, second), = runs
    assert first.modified and first.stats["nodes_after"] < first.stats["nodes_before"]
    assert not any(n.target is torch.ops.aten._local_scalar_dense.default for n in first.gm.graph.nodes)
    assert not second.modified and second.stats["nodes_after"] == first.stats["nodes_after"]


def test_a_dynamic_epsilon_stays_in_the_rmsnorm_kernel():
    """The eps Dynamo passes as a 0-d tensor joins the reduction kernel (its row value, which reads a load, is
    computed per element): RMSNorm is one kernel with dynamic shapes as with static ones."""
    model, x = RMSNorm(), torch.randn(2, 7, 16)
    out_dynamic, dynamic = compiled(model, True, x)
    out_static, static = compiled(model, False, x)
    assert_close(out_dynamic, model(x))
    assert_close(out_static, model(x))
    assert [k.kind for k in dynamic.kernels] == [k.kind for k in static.kernels] == ["reduction"]


def test_a_row_value_with_a_dynamic_epsilon_read_outside_the_kernel_is_still_right():
    """Such a row value computed per element cannot also be a row output: the reduction is left unfused."""
    class MeanSquarePlusEps(nn.Module):
        def __init__(self):
            super().__init__()
            self.eps = 1e-5

        def forward(self, x):
            ms = x.pow(2).mean(-1, keepdim=True) + self.eps
            return x * torch.rsqrt(ms), ms

    model, x = MeanSquarePlusEps(), torch.randn(3, 5, 16)
    out, report = compiled(model, True, x)
    for got, want in zip(out, model(x)):
        assert_close(got, want)
        assert got.shape == want.shape
