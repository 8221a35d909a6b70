"""tensor_scalar_operands: numbers Dynamo passes as 0-d tensors (dynamic=True) join kernels; numerics as eager."""

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close


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
