"""Views only kernels read, kept as metadata (runtime/virtual_views.py): the layout PyTorch's own view would have,
PyTorch's own view (and error) where the rules stop, and plans that use them agreeing with eager."""

import pytest
import torch

import torchfuser
from eager_compare import assert_close
from torchfuser.runtime.device import get_device
from torchfuser.runtime.executor import VIRTUAL
from torchfuser.runtime.virtual_views import VirtualView, virtual_view

aten = torch.ops.aten
BASE = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5)
BASES = {
    "contiguous": BASE,
    "permuted": BASE.permute(2, 0, 3, 1),
    "sliced": BASE[:, 1:, ::2],
    "expanded": BASE[:1, :, :1].expand(3, 3, 4, 5),
}
CALLS = [
    (aten.view.default, ([-1],)), (aten.view.default, ([6, -1],)), (aten.view.default, ([2, 3, 20],)),
    (aten.view.default, ([1, 2, 1, 60],)), (aten._unsafe_view.default, ([-1, 5],)),
    (aten.permute.default, ([3, -4, 1, 2],)), (aten.transpose.int, (-1, 1)), (aten.unsqueeze.default, (0,)),
    (aten.unsqueeze.default, (-1,)), (aten.unsqueeze.default, (2,)), (aten.squeeze.dim, (0,)),
    (aten.squeeze.dims, ([0, 2],)), (aten.squeeze.default, ()), (aten.expand.default, ([2, -1, -1, -1, -1],)),
    (aten.slice.Tensor, (1, 1, None)), (aten.slice.Tensor, (-1, -3, 100, 2)), (aten.slice.Tensor, (2, 7, 9)),
    (aten.slice.Tensor, (0, -100, -1)), (aten.select.int, (1, -1)), (aten.select.int, (3, 2)),
    (aten.unflatten.int, (-1, [1, -1])), (aten.alias.default, ()),
]


def _layout(t):
    return tuple(t.shape), tuple(t.stride()), t.storage_offset()


@pytest.mark.parametrize("base", BASES, ids=list(BASES))
@pytest.mark.parametrize("op, args", CALLS, ids=[f"{op}{args}" for op, args in CALLS])
def test_the_layout_is_pytorch_s(base, op, args):
    base = BASES[base]
    try:
        expected = op(base, *args)
    except RuntimeError:
        expected = None  # a view PyTorch refuses (a reshape of a layout it cannot view)
    if expected is None:
        with pytest.raises(RuntimeError):
            virtual_view(op, base, *args)
        return
    made = virtual_view(op, base, *args)
    assert _layout(made) == _layout(expected)
    assert torch.equal(made.real() if isinstance(made, VirtualView) else made, expected)
    twice = virtual_view(aten.unsqueeze.default, made, 0)  # a view of a virtual view: the same root
    assert _layout(twice) == _layout(expected.unsqueeze(0))


def test_where_the_rules_stop_pytorch_decides():
    with pytest.raises(IndexError):
        virtual_view(aten.select.int, BASE, 1, 3)
    assert isinstance(virtual_view(aten.view.default, torch.zeros(0, 4), [-1, 2]), torch.Tensor)  # empty


@pytest.mark.skipif(get_device() is None, reason="needs an OpenCL device")
@torch.no_grad()
def test_a_plan_reads_views_of_its_inputs_as_metadata():
    w = torch.randn(20, 6)

    def model(x):
        return torch.relu(x.view(-1, 20) @ w) + x.permute(2, 0, 1)[:1].reshape(1, -1)

    compiled = torchfuser.compile(model)
    for x in (torch.randn(2, 3, 20), torch.randn(3, 3, 20)[1:], torch.randn(2, 3, 20)):  # the second: an offset
        assert_close(compiled(x), model(x))
    plan = torchfuser.last_report().plan
    assert any(step[1] == VIRTUAL for step in plan.steps)


@pytest.mark.skipif(get_device() is None, reason="needs an OpenCL device")
@torch.no_grad()
def test_views_of_planned_results_are_kept_across_calls_of_new_sizes():
    """A dynamic plan's calls are not steady (the sizes change), yet a planned result (static shape, the same
    tensor every call) gives the same view by the same arguments: the view cache serves it in every call."""
    def model(x):
        return (torch.softmax(x, dim=-1).sum(0).view(4, 5) * 2).view(-1) + x.shape[0]

    compiled = torch.compile(model, backend="torchfuser", dynamic=True)
    made = []
    for rows in (3, 9, 4):
        x = torch.randn(rows, 20)
        assert_close(compiled(x), model(x))
        plan = torchfuser.last_report().plan
        caches = [step[7] for step in plan.steps if step[7] is not None and step[7].planned]
        made.append([cache.view for cache in caches])
    assert made[0] and all(v is not None for v in made[0])
    assert [id(v) for v in made[1]] == [id(v) for v in made[2]]  # one view object, kept from call to call
