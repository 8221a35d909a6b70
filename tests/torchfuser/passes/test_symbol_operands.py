"""symbol_operands: integer inputs (dynamic=True) feed elementwise ops as 0-d tensors the plan writes each call;
the ops join kernels, steady calls replay a tape, and the numbers match eager's, dtypes included."""

import pytest
import torch
import torch.nn as nn

import torchfuser
from eager_compare import assert_close
from torchfuser.ir.symbolic import symbol_tensor


def positions(x, n: int):
    """A KV cache's positions past + arange(length), as HF's cache_position reaches the graph."""
    return (torch.arange(x.shape[1]) + n) * 2 + x.sum(-1).to(torch.int64)


def compiled(fn):
    """Dynamo's default: the second call's new number makes it a symbol (the tensors' sizes stay static)."""
    torch._dynamo.reset()
    return torch.compile(fn, backend="torchfuser")


def test_an_integer_input_joins_the_kernel_and_every_value_is_read_at_run_time():
    f = compiled(positions)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for n in (3, 7, 128, 4097, 3, 0):
            x = torch.randint(0, 5, (2, 6, 4)).float()  # (3 compiles a graph of its own, 7 on share one)
            out = f(x, n)
            assert out.dtype == torch.int64
            assert torch.equal(out, positions(x, n))
    report = reports[-1]
    assert report.fallbacks == []  # no add left in PyTorch
    (record,) = [p for p in report.passes if p.name == "symbol_operands"]
    assert record.modified and record.stats["operands"] == 1
    assert any(n.target is symbol_tensor for n in report.plan.gm.graph.nodes)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8, torch.bool, torch.float32])
def test_the_result_dtype_is_eager_s(dtype):
    """A Python int and a 0-d int64 tensor promote alike beside a dimensioned tensor."""

    def shifted(x, n: int):
        return x + n

    f = compiled(shifted)
    x = torch.randint(0, 2, (3, 5)).to(dtype) if dtype != torch.float32 else torch.randn(3, 5)
    with torch.no_grad():
        for n in (2, 9, 30):
            out = f(x, n)
            assert out.dtype == shifted(x, n).dtype
            assert_close(out, shifted(x, n))


def test_steady_calls_replay_and_each_length_writes_its_value():
    """Tapes are per symbol values; a call of another length in between writes the plan's tensor again, and a
    replay writes its own value back before the first launch."""
    f = compiled(positions)
    x = torch.randint(0, 5, (1, 3, 4)).float()
    with torch.no_grad():
        for n in [5, 5, 5, 9, 9, 9, 5, 9, 5, 9, 17, 5, 9]:
            assert torch.equal(f(x, n), positions(x, n))
    plan = torchfuser.last_report().plan
    if plan.runtime is not None and plan.runtime.device.zero_copy:
        assert plan.tape_calls >= 4


class Positional(nn.Module):
    """A position embedding at positions a kernel computes from an integer input and a tensor offset."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.table = nn.Embedding(16, 8)

    def forward(self, x, offset, n: int):
        return self.table(torch.arange(x.shape[1]) + n + offset) * x


def test_indices_a_kernel_computes_are_checked_in_every_replay():
    """The embedding's host check reads indices a kernel writes: a replay checks them in their place."""
    model = Positional().eval()
    f = compiled(model)
    x = torch.randn(1, 3, 8)
    good, bad = torch.tensor([2]), torch.tensor([11])  # position 2 + 3 + 11 = 16: past the table
    with torch.no_grad():
        f(x, good, 1)  # n symbolic from the next call on
        for _ in range(6):
            assert_close(f(x, good, 3), model(x, good, 3))
        replayed = torchfuser.last_report().plan.tape_calls
        with pytest.raises(IndexError):
            model(x, bad, 3)
        with pytest.raises(IndexError):
            f(x, bad, 3)  # in a replay (the tape raising is dropped: the next calls record another)
        for _ in range(4):
            assert_close(f(x, good, 3), model(x, good, 3))
    plan = torchfuser.last_report().plan
    if plan.runtime is not None and plan.runtime.device.zero_copy:
        assert replayed >= 2 and plan.tape_calls > replayed


def test_a_zero_dim_partner_keeps_the_number():
    """Beside a 0-d tensor the number would promote differently: the pass leaves the op as it is."""

    def scaled(s, n: int):
        return s * n

    f = compiled(scaled)
    s = torch.tensor(3, dtype=torch.int32)
    with torch.no_grad():
        for n in (4, 11, 30):
            out = f(s, n)
            assert out.dtype == scaled(s, n).dtype and torch.equal(out, scaled(s, n))
