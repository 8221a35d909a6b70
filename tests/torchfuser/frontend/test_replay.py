"""Replayed steady calls (frontend/replay.py): same results as eager, and every call Dynamo would compile
again (or run otherwise) goes through Dynamo."""

import functools

import pytest
import torch
import torch.nn as nn

import torchfuser
from tests.eager_compare import assert_close


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


class Scaled(nn.Module):  # compiled through its own forward's frame (not an inlined torch.nn module)
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 24)
        self.scale = 2.0

    def forward(self, x, y=None, *, shift=0.0):
        out = torch.relu(self.linear(x)) * self.scale + shift
        return out if y is None else out + y


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).eval()


@torch.no_grad()
def test_sequential_calls_are_replayed_with_eager_results():
    model = _mlp()
    compiled = torchfuser.compile(model)
    for m in (1, 2, 7):
        x = torch.randn(m, 16)
        for _ in range(3):
            assert_close(compiled(x), model(x))
    assert compiled.replay.calls == 6  # every call but the first of each shape
    assert isinstance(compiled, torch._dynamo.eval_frame.OptimizedModule)
    assert compiled._orig_mod is model


def _passing_through(forward):
    """A forward decorator as Hugging Face puts on its blocks: the code Dynamo translates is the wrapper's
    (self, *args, **kwargs), while inspect.signature, following __wrapped__, shows the forward's own."""
    @functools.wraps(forward)
    def wrapper(self, *args, **kwargs):
        return forward(self, *args, **kwargs)
    return wrapper


class DecoratedScaled(Scaled):
    forward = _passing_through(Scaled.forward)


@pytest.mark.parametrize("module", [Scaled, DecoratedScaled], ids=["plain", "decorated forward"])
@torch.no_grad()
def test_user_module_with_keywords_defaults_and_new_parameter(module):
    torch.manual_seed(0)
    model = module().eval()
    compiled = torchfuser.compile(model)
    x, y = torch.randn(3, 16), torch.randn(3, 24)
    for _ in range(3):
        assert_close(compiled(x), model(x))
        assert_close(compiled(x, y, shift=0.5), model(x, y, shift=0.5))
    assert compiled.replay.calls >= 4
    model.linear.weight = nn.Parameter(torch.randn(24, 16))  # the translation reads parameters each call
    assert_close(compiled(x), model(x))
    model.linear.weight.mul_(3)  # and in-place updates are seen
    assert_close(compiled(x), model(x))


@torch.no_grad()
def test_a_changed_attribute_fails_dynamo_s_guard_and_recompiles():
    torch.manual_seed(0)
    model = Scaled().eval()
    compiled = torchfuser.compile(model)
    x = torch.randn(3, 16)
    compiled(x)
    compiled(x)
    replayed = compiled.replay.calls
    model.scale = 5.0
    assert_close(compiled(x), model(x))  # a constant of the graph: Dynamo's guard fails, it compiles again
    assert compiled.replay.calls == replayed
    assert_close(compiled(x), model(x))
    assert compiled.replay.calls == replayed + 1


def test_grad_mode_and_training_are_guarded():
    model = _mlp()
    compiled = torchfuser.compile(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        compiled(x)
        compiled(x)
    replayed = compiled.replay.calls
    out = compiled(x.requires_grad_())  # grad mode on: another graph, through Dynamo
    out.sum().backward()
    assert x.grad is not None
    assert compiled.replay.calls == replayed


def test_function_with_closure_and_default():
    bias = torch.randn(5)

    def fn(a, b, alpha=2.0):
        return torch.sigmoid(a * alpha) + b * bias

    compiled = torchfuser.compile(fn)
    a, b = torch.randn(3, 5), torch.randn(3, 5)
    for _ in range(3):
        assert_close(compiled(a, b), fn(a, b))
    assert_close(compiled(a, b, alpha=3.0), fn(a, b, alpha=3.0))
    assert compiled.replay.calls >= 2
    with pytest.raises(TypeError):
        compiled(a)  # a missing argument: Python's own error, through Dynamo


def test_function_of_varargs_and_a_keyword_only_argument():
    def fn(*tensors, scale=1.0):
        total = tensors[0]
        for t in tensors[1:]:
            total = total + torch.relu(t)
        return total * scale

    compiled = torchfuser.compile(fn)
    a, b, c = torch.randn(4, 6), torch.randn(4, 6), torch.randn(4, 6)
    for _ in range(3):
        assert_close(compiled(a, b, c), fn(a, b, c))
        assert_close(compiled(a, b, c, scale=0.5), fn(a, b, c, scale=0.5))
    assert_close(compiled(a, b), fn(a, b))  # another number of arguments: Dynamo compiles it
    assert compiled.replay.calls >= 4


def test_graph_breaks_are_not_replayed():
    def fn(x):
        y = torch.relu(x) + 1
        print("", end="")  # a graph break: the rest runs in a resume function
        return y * 2

    compiled = torchfuser.compile(fn)
    x = torch.randn(8)
    for _ in range(3):
        assert_close(compiled(x), fn(x))
    assert compiled.replay.calls == 0


@torch.no_grad()
def test_hooks_and_stances_go_through_dynamo():
    model = _mlp()
    compiled = torchfuser.compile(model)
    x = torch.randn(4, 16)
    compiled(x)
    seen = []
    handle = compiled.register_forward_hook(lambda module, args, out: seen.append(out))
    assert_close(compiled(x), model(x))
    assert len(seen) == 1 and compiled.replay.calls == 0
    handle.remove()
    with torch.compiler.set_stance("force_eager"):
        assert_close(compiled(x), model(x))
    assert compiled.replay.calls == 0
    compiled(x)
    assert compiled.replay.calls == 1


@torch.no_grad()
def test_each_wrapper_replays_only_its_own_backend_s_entries():
    model = _mlp()
    plain = torchfuser.compile(model)
    unfused = torchfuser.compile(model, disable=["fuse_gemm_epilogue"])
    x = torch.randn(4, 16)
    assert_close(plain(x), model(x))
    plain_report = torchfuser.last_report()
    assert_close(unfused(x), model(x))
    unfused_report = torchfuser.last_report()
    assert len(plain_report.kernels) != len(unfused_report.kernels)  # two plans
    for _ in range(2):
        assert_close(plain(x), model(x))
        assert_close(unfused(x), model(x))
    assert plain.replay.calls == 2 and unfused.replay.calls == 2
    assert plain_report.plan.calls == 3 and unfused_report.plan.calls == 3
    assert "replay" not in vars(model)  # kept on the wrappers, not on the module they share


@torch.no_grad()
def test_a_compiled_module_called_inside_another_compiled_function(recwarn):
    """Dynamo tracing the outer function reads the replay's checks: it must find nothing it cannot trace."""
    model = _mlp()
    inner = torchfuser.compile(model)
    x = torch.randn(4, 16)
    inner(x)
    outer = torch.compile(lambda t: inner(t) * 2, backend="torchfuser")
    for _ in range(2):
        assert_close(outer(x), model(x) * 2)
    assert not [w for w in recwarn if "does not know how to trace" in str(w.message)]


def _scaled_sum(x, y):
    return torch.relu(x) * 2.0 + y


@torch.no_grad()
def test_replayed_code_calls_the_graph_without_dynamo_s_disable_wrappers_and_keeps_the_profiler_marks():
    compiled = torchfuser.compile(_scaled_sum)
    x, y = torch.randn(5, 7), torch.randn(7)
    for _ in range(3):
        assert_close(compiled(x, y), _scaled_sum(x, y))
    assert compiled.replay.calls == 2
    direct = [v for n, v in globals().items() if n.startswith("__torchfuser_direct___compiled_fn")]
    assert direct and all(hasattr(v, "compiled") for v in direct)  # the backend's own callable, unwrapped
    with torch.profiler.profile() as profiler:
        assert_close(compiled(x, y), _scaled_sum(x, y))
    assert compiled.replay.calls == 3
    assert any(e.name == "Pregraph bytecode" for e in profiler.events())
