"""Steady calls replayed from a tape (runtime/steady_tape.py): the same results as eager wherever the tape could go
stale (new inputs, kept or dropped outputs, weights written or swapped, other storage offsets), and no tape where
a call does more than its launches."""

import pytest
import torch
import torch.nn as nn

import torchfuser
from torchfuser.runtime.call import Runtime
from torchfuser.runtime.device import get_device
from torchfuser.runtime.executor import KERNEL
from torchfuser.runtime.lanes import INLINE, SPLIT, THREADED
from torchfuser.runtime.memory import ZeroCopyBinder
from torchfuser.runtime.steady_tape import _chains

pytestmark = pytest.mark.skipif(get_device() is None, reason="needs an OpenCL device")

TOL = dict(rtol=1e-4, atol=1e-5)


def small_mlp(width=64, hidden=128):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, hidden), nn.ReLU(), nn.Linear(hidden, width)).eval()


def compiled_with_plan(model, x):
    f = torchfuser.compile(model)
    f(x)
    plan = torchfuser.last_report().plan
    return f, plan


def zero_copy() -> bool:
    """Kernels read and write the tensors' own memory (what a tape binds): not with TORCHFUSER_ZERO_COPY=0."""
    return isinstance(Runtime.for_device(get_device()).binder, ZeroCopyBinder)


def in_thread(plan) -> bool:
    """Every launch runs in the calling thread (so on CPU devices for these small graphs), where tapes record."""
    return zero_copy() and all(step[2].last is not None and step[2].last.lane == INLINE
                               for step in plan.steps if step[1] == KERNEL)


def test_steady_calls_replay_with_new_inputs_and_kept_outputs():
    model = small_mlp()
    xs = [torch.randn(4, 64) for _ in range(3)]
    with torch.no_grad():
        f, plan = compiled_with_plan(model, xs[0])
        results = []
        for i in range(40):  # a new input each call, every result kept: the output blocks move each call
            results.append(f(xs[i % 3]))
        for i, y in enumerate(results):
            torch.testing.assert_close(y, model(xs[i % 3]), **TOL)
        for i in range(20):  # results dropped: the arena hands the same block back
            torch.testing.assert_close(f(xs[i % 3]).clone(), model(xs[i % 3]), **TOL)
    if in_thread(plan):
        assert plan.tape_calls > 30
        tape = plan._tapes[()]
        summary = torchfuser.last_report().summary()
        assert f"{plan.tape_calls} of {plan.calls} replayed from a tape" in summary
        if all(_chains(bound) for _, bound, _ in tape.lanes):  # the two GEMMs chained into one launch
            assert len(tape.fast[0]) == 1 < len(tape.launches) and "2 launches run as 1" in summary
    assert sum(s.launches for s in plan.stats.values()) == 2 * plan.calls  # replayed launches are counted
    assert all(s.profiled > 0 and s.seconds > 0 for s in plan.stats.values())


def test_a_weight_written_in_place_or_swapped_is_seen_at_once():
    model = small_mlp()
    x = torch.randn(4, 64)
    with torch.no_grad():
        f, plan = compiled_with_plan(model, x)
        for _ in range(5):
            f(x)
        replayed = plan.tape_calls
        model[0].weight.mul_(-2)  # a new version: the packed copy of the weight is stale
        torch.testing.assert_close(f(x), model(x), **TOL)
        model[2].weight.data = torch.randn(64, 128)  # another address, the version of a fresh tensor
        torch.testing.assert_close(f(x), model(x), **TOL)
        for _ in range(5):
            torch.testing.assert_close(f(x), model(x), **TOL)
    if in_thread(plan):
        assert plan.tape_calls > replayed  # recorded again after the declines


def test_inputs_at_other_storage_offsets_and_odd_values():
    model = small_mlp(width=33, hidden=7)
    with torch.no_grad():
        base = torch.randn(12, 33)
        f, plan = compiled_with_plan(model, base[0:5])
        for start in (0, 0, 3, 3, 7, 0, 7):
            x = base[start:start + 5].clone() if start == 7 else base[start:start + 5]
            torch.testing.assert_close(f(x), model(x), **TOL)
        special = base[0:5].clone()
        special[0, 0], special[1, 1], special[2, 2] = float("inf"), float("-inf"), float("nan")
        for _ in range(3):
            torch.testing.assert_close(f(special), model(special), equal_nan=True, **TOL)


def test_no_tape_where_a_call_runs_a_pytorch_op():
    def with_fallback(x, w):
        h = torch.relu(x @ w)
        return (torch.cumsum(h, -1) + 1).tanh()  # cumsum runs in PyTorch between two kernels

    x, w = torch.randn(4, 16), torch.randn(16, 8)
    f = torchfuser.compile(with_fallback)
    with torch.no_grad():
        for _ in range(6):
            torch.testing.assert_close(f(x, w), with_fallback(x, w), **TOL)
    plan = torchfuser.last_report().plan
    assert plan.tape_calls == 0 and plan.calls == 6
    if zero_copy():
        assert "steady calls walk the plan: cumsum.default runs in PyTorch" in torchfuser.last_report().summary()


def test_an_input_no_launch_reads_may_move_without_a_rebind():
    """Dynamo passes some floats as 0-d tensors that no kernel ends up reading: a new one each call is no change."""
    graph = torch.fx.Graph()
    x, unused = graph.placeholder("x"), graph.placeholder("unused")
    graph.output(graph.call_function(torch.add, (graph.call_function(torch.sin, (x,)), 1.0)))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    xs = torch.randn(4, 33)
    f = torchfuser.compile_fx(gm, [xs, torch.tensor(0.5, dtype=torch.float64)])
    plan = torchfuser.last_report().plan
    with torch.no_grad():
        for i in range(8):
            torch.testing.assert_close(f(xs, torch.tensor(float(i), dtype=torch.float64)), xs.sin() + 1, **TOL)
    if in_thread(plan):
        assert plan.tape_calls >= 6
        (tape,) = plan._tapes.values()
        assert tape.unread == {1}  # the second input


def test_views_of_outputs_and_packed_weight_transforms_replay():
    """A graph returning views of its kernels' results (a transpose), and GEMMs whose B is a weight transform's
    result (the convolution's weight as a matrix): replayed, and a written weight is seen at once."""

    class PatchEmbedding(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Conv2d(3, 24, 4, 4)

        def forward(self, x):
            y = self.proj(x)
            return y.flatten(2).transpose(1, 2), y.mean()

    torch.manual_seed(0)
    model = PatchEmbedding().eval()
    xs = [torch.randn(2, 3, 16, 20) for _ in range(2)]
    with torch.no_grad():
        f, plan = compiled_with_plan(model, xs[0])
        kept = [f(xs[i % 2]) for i in range(12)]
        for i, (patches, mean) in enumerate(kept):
            want = model(xs[i % 2])
            torch.testing.assert_close(patches, want[0], **TOL)
            torch.testing.assert_close(mean, want[1], **TOL)
            assert patches.stride() == want[0].stride()
        model.proj.weight.mul_(0.5)
        torch.testing.assert_close(f(xs[0])[0], model(xs[0])[0], **TOL)
    if in_thread(plan):
        assert plan.tape_calls > 5


@pytest.mark.parametrize("m, k, n", [(1, 768, 3072), (2, 257, 1031), (7, 512, 96)])
def test_split_launches_replay_with_new_inputs(m, k, n):
    """GEMVs and skinny GEMMs whose launches split between the calling thread and the workers (on CPU devices):
    each replay waits for the workers before returning, so every kept result is complete."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(k, n), nn.GELU(), nn.Linear(n, 64)).eval()
    xs = [torch.randn(m, k) for _ in range(3)]
    with torch.no_grad():
        f, plan = compiled_with_plan(model, xs[0])
        results = [f(xs[i % 3]) for i in range(30)]
        for i, y in enumerate(results):
            torch.testing.assert_close(y, model(xs[i % 3]), rtol=1e-4, atol=1e-4)
    lanes = {step[2].last.lane for step in plan.steps if step[1] == KERNEL}
    if lanes & {SPLIT, THREADED} and zero_copy():
        assert plan.tape_calls > 20


def test_a_model_made_under_inference_mode_is_compiled_and_its_weights_written_in_place_are_seen():
    """Inference tensors keep no version: nothing is kept by version for them (packed copies, transforms, tapes)."""
    with torch.inference_mode():
        model = small_mlp()
        x = torch.randn(4, 64)
        f = torchfuser.compile(model)
        for _ in range(4):
            torch.testing.assert_close(f(x), model(x), **TOL)
        model[0].weight.mul_(-1)
        torch.testing.assert_close(f(x), model(x), **TOL)
        model[2].weight.add_(1)
        torch.testing.assert_close(f(x), model(x), **TOL)


def test_an_embedding_s_indices_are_checked_on_every_replay():
    """The gather's host check (an index out of range raises, as eager's embedding does) runs in replays too."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 16), nn.Linear(16, 8)).eval()
    ids = [torch.randint(0, 50, (2, 5)) for _ in range(3)]
    with torch.no_grad():
        f, plan = compiled_with_plan(model, ids[0])
        for i in range(12):
            torch.testing.assert_close(f(ids[i % 3]), model(ids[i % 3]), **TOL)
        replayed = plan.tape_calls
        bad = ids[0].clone()
        bad[1, 2] = 50
        with pytest.raises(IndexError):
            f(bad)
        torch.testing.assert_close(f(ids[1]), model(ids[1]), **TOL)
    if in_thread(plan):
        assert replayed > 5


def test_a_plan_with_symbols_replays_a_tape_per_length_that_comes_again():
    """One tape per symbol values once they repeat (a generate of a length seen before), every tape sharing the
    plan's Bounds: going from one tape to another, or through a walk for a new length, sets every buffer again."""

    def mlp(x, w1, w2):
        return torch.relu(torch.softmax(x @ w1, dim=-1) @ w2) + x.mean(-1, keepdim=True)

    torch.manual_seed(0)
    w1, w2 = torch.randn(16, 24), torch.randn(24, 16)
    f = torch.compile(mlp, backend="torchfuser", dynamic=True)
    lengths = [7, 2, 128, 7, 2, 128, 33, 7, 2, 128, 7, 2, 128]  # (Dynamo specialises a size of 1)
    with torch.no_grad():
        for n in lengths * 2:
            x = torch.randn(2, n, 16)
            torch.testing.assert_close(f(x, w1, w2), mlp(x, w1, w2), rtol=1e-4, atol=1e-5)
    plan = torchfuser.last_report().plan
    assert plan.sized and plan.calls == len(lengths) * 2
    if zero_copy():
        assert plan.tape_calls >= 12  # each length's third call on


def test_a_growing_length_hands_each_bounds_kernels_on_to_the_next(monkeypatch):
    """A length that came once (a generate's, one longer each call) gives its Bound's kernel copies to the next
    length's Bound: no kernel copied per call, the results still the eager ones; a length that came again keeps
    its Bound."""
    from torchfuser.runtime import bound as bound_module

    copies = []
    copy_kernel = bound_module.copy_kernel
    monkeypatch.setattr(bound_module, "copy_kernel", lambda kernel: copies.append(1) or copy_kernel(kernel))

    def f(x):
        return torch.softmax(x * 2, dim=-1) + 1

    compiled = torch.compile(f, backend="torchfuser", dynamic=True)
    with torch.no_grad():
        for n in (3, 3, 3, 4):
            compiled(torch.randn(2, n))
        plan = torchfuser.last_report().plan
        steps = [target for _, kind, target, *_ in plan.steps if kind == KERNEL]
        copied = len(copies)
        for n in range(5, 40):
            x = torch.randn(2, n)
            x[0, n // 2] = float("inf") if n % 2 else float("nan")
            torch.testing.assert_close(compiled(x), f(x), equal_nan=True, **TOL)
        assert len(copies) == copied
        assert all(len(step.bound) == 2 for step in steps if step.sized_layouts)  # 3's (it came again) and 39's
        x = torch.randn(2, 3)
        torch.testing.assert_close(compiled(x), f(x), **TOL)
        assert len(copies) == copied


def test_a_new_length_past_the_kept_bounds_evicts_a_bound_no_kept_tape_launches(monkeypatch):
    """Past BOUNDS_KEPT lengths each new one evicts the oldest Bound that no kept tape launches: the tapes stay
    (dropping them made a long-running generate loop replay nothing). Only where every Bound is a tape's does the
    oldest go, with its tape alone."""
    from torchfuser.runtime import executor, kernel_step

    monkeypatch.setattr(kernel_step, "BOUNDS_KEPT", 4)
    monkeypatch.setattr(executor, "resizable", lambda *_: "a tape per length only, in this test")

    def f(x):
        return torch.softmax(x * 2, dim=-1) + 1

    compiled = torch.compile(f, backend="torchfuser", dynamic=True)
    with torch.no_grad():
        for n in (3, 3, 3, 5, 5, 5):  # two lengths with tapes
            x = torch.randn(2, n)
            torch.testing.assert_close(compiled(x), f(x), **TOL)
        plan = torchfuser.last_report().plan
        for n in (6, 7, 8, 9):  # new lengths, walked: each past the fourth evicts an untaped Bound (6's, 7's)
            x = torch.randn(2, n)
            torch.testing.assert_close(compiled(x), f(x), **TOL)
        replayed = plan.tape_calls
        for n in (3, 5):
            x = torch.randn(2, n)
            torch.testing.assert_close(compiled(x), f(x), **TOL)
        kept = plan.tape_calls - replayed
        for n in (8, 8, 9, 9):  # two more tapes: every Bound a tape's
            compiled(torch.randn(2, n))
        compiled(torch.randn(2, 10))  # evicts the oldest, length 3's, and its tape alone
        replayed = plan.tape_calls
        for n in (3, 5, 8, 9):
            x = torch.randn(2, n)
            torch.testing.assert_close(compiled(x), f(x), **TOL)
    if zero_copy():
        assert kept == 2
        assert plan.tape_calls - replayed == 3


def test_lengths_cycling_past_the_kept_tapes_still_replay_the_tapes_kept(monkeypatch):
    """A generate longer than TAPES_KEPT tokens, run again, cycles through more lengths than there are tapes: the
    kept tapes stay and replay (an LRU evicting one for each new recording left none to replay), and a tape that
    has gone STALE_TAPE_CALLS calls unreplayed makes room for a new one."""
    from torchfuser.runtime import executor

    monkeypatch.setattr(executor, "TAPES_KEPT", 3)
    monkeypatch.setattr(executor, "STALE_TAPE_CALLS", 12)
    monkeypatch.setattr(executor, "resizable", lambda *_: "a tape per length only, in this test")

    def f(x):
        return torch.softmax(x * 2, dim=-1) + 1

    compiled = torch.compile(f, backend="torchfuser", dynamic=True)
    cycle = [3, 4, 5, 6, 7]  # five lengths, three tapes
    with torch.no_grad():
        for _ in range(4):
            for n in cycle:
                x = torch.randn(2, n)
                torch.testing.assert_close(compiled(x), f(x), **TOL)
        plan = torchfuser.last_report().plan
        replayed = plan.tape_calls
        for _ in range(2):  # the kept lengths replay every cycle
            for n in cycle:
                compiled(torch.randn(2, n))
        cycled = plan.tape_calls - replayed
        for _ in range(4):  # other lengths only: the kept tapes go stale and make room
            for n in (9, 10):
                x = torch.randn(2, n)
                torch.testing.assert_close(compiled(x), f(x), **TOL)
    if zero_copy():
        assert cycled == 2 * 3
        # length 3's tape, the least recently replayed, went stale at length 10's fourth call and made room
        assert {max(sizes) for sizes in plan._tapes} == {4, 5, 10}


def test_a_plan_with_symbols_chains_the_launches_whose_grids_are_the_same_at_every_length():
    """Two small kernels on static tensors run as one chained launch in every length's tape; the KV-cache-like
    cat and the reduction after it, whose grids follow the length, keep launches of their own."""

    def step(x, y, cache):
        q = torch.sin(x) * 2 + 1
        v = torch.cos(y) * 3 - 1
        k = torch.cat([cache, q], dim=1)
        return (k * v).sum(-1), k

    torch.manual_seed(0)
    x, y = torch.randn(1, 1, 64), torch.randn(1, 1, 64)
    f = torch.compile(step, backend="torchfuser")
    with torch.no_grad():
        for n in [5, 5, 5, 9, 9, 9, 5, 5, 9, 9, 5, 17]:
            cache = torch.randn(1, n, 64)
            torch._dynamo.mark_dynamic(cache, 1)
            for got, expected in zip(f(x, y, cache), step(x, y, cache)):
                torch.testing.assert_close(got, expected, **TOL)
    plan = torchfuser.last_report().plan
    assert plan.sized
    if in_thread(plan):
        assert plan.tape_calls >= 6
        launches, run_as = plan.tape_launches
        assert (launches, run_as) == (4, 3)


class CounterCache(nn.Module):
    """A cache written in place at a position counter (a static KV cache's update), then read by a kernel."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(6, 8))
        self.register_buffer("length", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        y = self.proj(x)
        self.cache.index_copy_(0, torch.arange(1) + self.length, y)
        self.length.add_(1)
        return self.cache.sum(0) * 2


def test_ops_writing_an_input_in_place_replay_between_the_launches():
    model, eager = CounterCache().eval(), CounterCache().eval()
    f = torchfuser.compile(model)
    torch.manual_seed(1)
    xs = [torch.randn(1, 8) for _ in range(5)]
    with torch.no_grad():
        for round in range(3):
            for x in xs:
                torch.testing.assert_close(f(x), eager(x), **TOL)
            for m in (model, eager):  # a new generate: the cache reset in place
                m.cache.zero_()
                m.length.zero_()
        torch.testing.assert_close(model.cache, eager.cache, **TOL)
    plan = torchfuser.last_report().plan
    if zero_copy():
        assert plan.tape_calls >= 8, torchfuser.last_report().summary()

