"""A plan with symbols replays its tape at symbol values it has no tape of (runtime/resized_tape.py): the unsized
launches as recorded, each sized one through its step at the call's sizes; always the eager results."""

import pytest
import torch
import torch.nn as nn

import torchfuser
from torchfuser.runtime.resized_tape import ResizedTape

from tests.torchfuser.runtime.test_steady_tape import TOL, zero_copy


class DecodeStep(nn.Module):
    """One token against a growing cache: unsized GEMMs and norms around a sized cat and attention."""

    def __init__(self, width=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x, past_k, past_v):
        b, t, w = x.shape
        q, k, v = self.qkv(self.norm(x)).split(w, dim=-1)
        q, k, v = (y.view(b, t, self.heads, w // self.heads).transpose(1, 2) for y in (q, k, v))
        k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return x + self.out(torch.relu(y.transpose(1, 2).reshape(b, t, w))), k, v


def cache(length, heads=4, width=32):
    return torch.randn(1, heads, length, width // heads), torch.randn(1, heads, length, width // heads)


def test_new_lengths_replay_the_resized_tape_with_eager_results():
    torch.manual_seed(0)
    model = DecodeStep().eval()
    compiled = torch.compile(model, backend="torchfuser", dynamic=True)
    with torch.no_grad():
        for n in (5, 6, 7):  # the second call records the tapes
            compiled(torch.randn(1, 1, 32), *cache(n))
        plan = torchfuser.last_report().plan
        replayed = plan.resized_calls
        for n in (8, 9, 31, 2, 100, 1000, 7):  # never seen (7: seen, its tape or the resized one)
            x, (k, v) = torch.randn(1, 1, 32), cache(n)
            k[0, 1, n // 2] = float("inf") if n % 2 else float("nan")
            got, expected = compiled(x, k, v), model(x, k, v)
            for a, b in zip(got, expected):
                torch.testing.assert_close(a, b, equal_nan=True, **TOL)
    assert plan.sized
    if zero_copy():
        assert type(plan.resized) is ResizedTape, plan.resized
        assert plan.resized_calls - replayed >= 6


def test_a_non_contiguous_cache_and_a_profiled_call_replay_as_walked():
    """Inputs at other storage offsets than recorded walk; profiled replays keep each kernel's own time."""
    torch.manual_seed(0)
    model = DecodeStep().eval()
    compiled = torch.compile(model, backend="torchfuser", dynamic=True)
    with torch.no_grad():
        for n in (5, 6, 7):
            compiled(torch.randn(1, 1, 32), *cache(n))
        plan = torchfuser.last_report().plan
        plan.profile_next(3)
        for n in (11, 12, 13):
            x, (k, v) = torch.randn(1, 1, 32), cache(n)
            for a, b in zip(compiled(x, k, v), model(x, k, v)):
                torch.testing.assert_close(a, b, **TOL)
        big_k, big_v = cache(40)
        k, v = big_k[:, :, 3:20], big_v[:, :, 3:20]  # another storage offset: the plan walks
        x = torch.randn(1, 1, 32)
        for a, b in zip(compiled(x, k, v), model(x, k, v)):
            torch.testing.assert_close(a, b, **TOL)
    stats = plan.stats
    assert all(s.profiled <= s.launches for s in stats.values())
    assert any(s.profiled for s in stats.values())


def test_a_weight_written_in_place_is_read_again():
    torch.manual_seed(0)
    model = DecodeStep().eval()
    compiled = torch.compile(model, backend="torchfuser", dynamic=True)
    with torch.no_grad():
        for n in (5, 6, 7, 8):
            compiled(torch.randn(1, 1, 32), *cache(n))
        model.qkv.weight.mul_(-0.5)
        for n in (21, 22):
            x, (k, v) = torch.randn(1, 1, 32), cache(n)
            for a, b in zip(compiled(x, k, v), model(x, k, v)):
                torch.testing.assert_close(a, b, **TOL)


def test_a_sized_launch_reading_a_view_of_a_sized_input_has_no_resized_tape():
    """The view's layout would be the recorded call's: the plan says why and walks, with eager's results."""

    def f(x, cache):
        window = cache[:, 1:]  # a view of the sized input, made by the plan each call
        return torch.cat([window, x], dim=1) * 2, torch.relu(x)

    compiled = torch.compile(f, backend="torchfuser", dynamic=True)
    with torch.no_grad():
        for n in (4, 5, 6, 9, 17):
            x, c = torch.randn(2, 1, 8), torch.randn(2, n, 8)
            for a, b in zip(compiled(x, c), f(x, c)):
                torch.testing.assert_close(a, b, **TOL)
    plan = torchfuser.last_report().plan
    if zero_copy():
        assert isinstance(plan.resized, str) and plan.resized_calls == 0


@pytest.mark.parametrize("dynamic", [True, None])
def test_generate_with_new_prompt_lengths_gives_eager_tokens(dynamic):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=101, n_positions=256)
    model = transformers.GPT2LMHeadModel(config).eval()
    compiled = transformers.GPT2LMHeadModel(config).eval()
    compiled.load_state_dict(model.state_dict())
    compiled.forward = torch.compile(compiled.forward, backend="torchfuser", dynamic=dynamic)
    with torchfuser.collect_reports() as reports:
        for n in (7, 12, 30, 3, 45):  # each a new prompt length after the first
            ids = torch.randint(1, 101, (1, n))
            options = dict(max_new_tokens=12, min_new_tokens=12, do_sample=False, pad_token_id=0)
            assert torch.equal(compiled.generate(ids, **options), model.generate(ids, **options))
    if zero_copy():
        assert sum(r.plan.resized_calls for r in reports if r.plan is not None) > 20


def test_a_length_that_comes_again_records_a_tape_of_its_own():
    """New lengths replay the resized tape; one that comes again walks once to record its own tape (a per-length
    tape runs its sized launches with no Python), which its later calls replay."""
    torch.manual_seed(0)
    model = DecodeStep().eval()
    compiled = torch.compile(model, backend="torchfuser", dynamic=True)
    with torch.no_grad():
        for n in (5, 6, 7, 8, 9):
            compiled(torch.randn(1, 1, 32), *cache(n))
        plan = torchfuser.last_report().plan
        resized, replayed = plan.resized_calls, plan.tape_calls
        for _ in range(3):
            x, (k, v) = torch.randn(1, 1, 32), cache(8)
            for a, b in zip(compiled(x, k, v), model(x, k, v)):
                torch.testing.assert_close(a, b, **TOL)
    if zero_copy():
        assert plan.resized_calls == resized and plan.tape_calls - replayed == 2  # a walk that records, 2 replays
        assert any(8 in sizes for sizes in plan._tapes)
