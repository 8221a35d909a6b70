"""host_ops: which PyTorch ops a steady tape runs between its launches, and that a taped op writes this call's input
(or the same view of it) with the recorded call's other operands."""

import torch

from torchfuser.runtime.host_ops import HostOp, host_op, writes_input_in_place
from torchfuser.runtime.memory import storage_span

aten = torch.ops.aten


def test_only_ops_writing_their_first_argument_are_taped():
    assert writes_input_in_place(aten.copy_.default) and writes_input_in_place(aten.index_put_.default)
    assert not writes_input_in_place(aten.copy.default)  # functional: a new tensor
    assert not writes_input_in_place(aten.add.Tensor) and not writes_input_in_place(torch.add)


def test_a_taped_op_writes_the_input_of_each_call_and_keeps_other_operands():
    cache, positions, values = torch.zeros(2, 6, 3), torch.tensor([1, 4]), torch.randn(2, 2, 3)
    args = [cache]
    op = host_op(aten.index_put_.default, (cache, [None, positions], values), {}, args,
                 {storage_span(cache)[0]: 0}, {})
    assert isinstance(op, HostOp)
    other = torch.ones(2, 6, 3)  # the next call's cache: another tensor
    op([other])
    expected = torch.ones(2, 6, 3)
    expected[:, [1, 4]] = values
    assert torch.equal(other, expected) and not cache.any()
    view = host_op(aten.copy_.default, (cache[1, 2:4], values[0]), {}, args, {storage_span(cache)[0]: 0}, {})
    view([other])  # the same view of the new input
    expected[1, 2:4] = values[0]
    assert torch.equal(other, expected)


def test_ops_the_tape_cannot_repeat_say_why():
    cache, fresh = torch.zeros(4), torch.ones(4)
    inputs = {storage_span(cache)[0]: 0}
    why = host_op(aten.copy_.default, (cache, fresh), {}, [cache], inputs, {storage_span(fresh)[0]: 0})
    assert isinstance(why, str) and "fresh output" in why  # another block each call
    planned = torch.zeros(4)
    why = host_op(aten.copy_.default, (planned, cache), {}, [cache], inputs, {})
    assert isinstance(why, str) and "not a graph input" in why
