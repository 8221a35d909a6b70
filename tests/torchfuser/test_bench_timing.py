"""The interleaved block timer (runtime/timing.py) on fake callables: a fake clock that only the callables
advance makes block sizes, rotation, lead-in calls and medians exact; one test on the real clock."""

import time
import types

import pytest

from torchfuser.runtime import timing
from torchfuser.runtime.timing import calibrate, interleaved_medians, rotated


class FakeClock:
    def __init__(self):
        self.now = 0.0
        self.log = []  # candidate name of every call, in order

    def perf_counter(self):
        return self.now

    def candidate(self, name, cost):
        """A callable that logs its call and advances the clock by cost(call_index, previous_name)."""
        count = [0]

        def fn():
            previous = self.log[-1] if self.log else None
            self.now += cost(count[0], previous) if callable(cost) else cost
            count[0] += 1
            self.log.append(name)
        return fn


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=fake.perf_counter))
    return fake


# costs that are binary fractions keep the fake clock exact
@pytest.mark.parametrize("cost, at_2ms, at_10ms_max_50", [(2**-20, 1000, 50), (2**-12, 9, 41), (2**-11, 5, 21),
                                                          (2**-8, 1, 3), (2**-5, 1, 1)])
def test_block_lasts_block_seconds_with_at_least_one_and_at_most_max_block_calls(clock, cost, at_2ms, at_10ms_max_50):
    assert calibrate(clock.candidate("a", cost)) == at_2ms
    assert calibrate(clock.candidate("b", cost), block_seconds=0.01, max_block=50) == at_10ms_max_50


def test_calibration_ignores_slow_calls(clock):
    # a cold first call and an interrupted one: the fastest call decides, so the block is not shrunk to 1
    fn = clock.candidate("a", lambda i, _: 0.05 if i in (0, 3) else 1e-4)
    assert calibrate(fn) == 20


def test_calibration_stops_early_for_slow_calls(clock):
    fn = clock.candidate("a", 0.1)
    assert calibrate(fn, calls=5) == 1 and len(clock.log) == 5


def test_rotated_moves_the_first_candidate_to_the_end_each_round():
    names = ["a", "b", "c"]
    assert [rotated(names, r) for r in range(4)] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert rotated([], 3) == []


def test_blocks_run_back_to_back_in_rotated_order(clock):
    costs = {"a": 1e-3, "b": 2e-3, "c": 0.25e-3}
    candidates = {name: clock.candidate(name, cost) for name, cost in costs.items()}
    result = interleaved_medians(candidates, repeats=4, warmup=1, lead_seconds=0.0)
    assert result.blocks == {"a": 2, "b": 1, "c": 8}  # >= 2 ms each
    assert result.orders == [rotated(["a", "b", "c"], r) for r in range(4)]
    timed = clock.log[-sum(4 * n for n in result.blocks.values()):]
    expected = [name for order in result.orders for name in order for _ in range(result.blocks[name])]
    assert timed == expected
    assert result == pytest.approx(costs) and set(result.samples) == set(costs)
    assert all(len(samples) == 4 for samples in result.samples.values())


def test_result_is_the_median_over_rounds(clock):
    # round 1's block of "a" is hit by a 50 ms stall: one of five rounds, so the median ignores it
    calls = []

    def cost(i, _):
        calls.append(i)
        return 0.05 if len(calls) == 3 + 5 + 2 + 1 else 1e-3  # after warmup, calibration and round 0

    result = interleaved_medians({"a": clock.candidate("a", cost)}, repeats=5, warmup=3, lead_seconds=0.0)
    assert result.blocks == {"a": 2} and len(result.samples["a"]) == 5
    assert max(result.samples["a"]) > 0.02
    assert result["a"] == pytest.approx(1e-3)


def test_lead_in_calls_absorb_the_switch_from_another_candidate(clock):
    # the first call after another candidate ran costs 10 ms (threads asleep, caches cold), then 0.25 ms
    def switching(name):
        return clock.candidate(name, lambda i, previous: 10e-3 if previous not in (None, name) else 0.25e-3)

    cold = interleaved_medians({"a": switching("a"), "b": switching("b")}, repeats=5, lead_seconds=0.0)
    assert cold.blocks == {"a": 8, "b": 8}
    assert cold["a"] == pytest.approx((10e-3 + 7 * 0.25e-3) / 8)  # the switch lands in every timed block
    clock.log.clear()
    steady = interleaved_medians({"a": switching("a"), "b": switching("b")}, repeats=5, lead_seconds=5e-3)
    assert steady == pytest.approx({"a": 0.25e-3, "b": 0.25e-3})
    # each block: at least one untimed call of the same candidate, then the timed calls
    assert len(clock.log) >= 2 * 3 + 2 * 5 + 5 * 2 * (1 + 8)


def test_min_seconds_adds_rounds(clock):
    result = interleaved_medians({"a": clock.candidate("a", 1e-3)}, repeats=2, min_seconds=0.1, lead_seconds=0.0)
    assert len(result.orders) >= 0.1 / 2e-3 and len(result.samples["a"]) == len(result.orders)


def test_given_blocks_skip_calibration(clock):
    result = interleaved_medians({"a": clock.candidate("a", 1e-3)}, repeats=3, warmup=0, blocks={"a": 5},
                                 lead_seconds=0.0)
    assert result.blocks == {"a": 5} and len(clock.log) == 15


def test_real_clock_medians_are_at_least_the_cost():
    def busy(seconds):
        def fn():
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
        return fn

    result = interleaved_medians({"fast": busy(50e-6), "slow": busy(1e-3)}, repeats=3, warmup=1)
    assert 1 <= result.blocks["slow"] <= 2 and 10 <= result.blocks["fast"] <= 40
    assert result["fast"] >= 50e-6 and result["slow"] >= 1e-3
    assert result["fast"] < result["slow"]


def test_a_block_stops_early_when_calls_slow_down_after_calibration(clock):
    # calibrated at 0.1 ms a call (block of 20), then every call takes 30 ms: blocks stop after 100 ms
    slow = [False]
    fn = clock.candidate("a", lambda i, _: 30e-3 if slow[0] else 0.1e-3)
    result = interleaved_medians({"a": fn}, repeats=3, warmup=0, lead_seconds=0.0, blocks={"a": 20})
    assert result["a"] == pytest.approx(0.1e-3)
    slow[0] = True
    clock.log.clear()
    result = interleaved_medians({"a": fn}, repeats=3, warmup=0, lead_seconds=0.0, blocks={"a": 20})
    assert result["a"] == pytest.approx(30e-3) and len(clock.log) == 3 * 4  # 4 calls pass 100 ms


def test_each_result_stays_alive_until_the_next_call_returns():
    """As `y = f(x)` in a user's loop: a compiled path whose outputs alternate between two blocks pays for it."""
    import weakref

    class Result:
        pass

    last, seen = [None], []

    def fn():
        seen.append(last[0] is not None and last[0]() is not None)
        result = Result()
        last[0] = weakref.ref(result)
        return result

    interleaved_medians({"kept": fn}, repeats=3, warmup=1, blocks={"kept": 4}, lead_seconds=0.0)
    timed = seen[1:]  # the warm-up call has no call before it
    assert timed == [False, True, True, True] * 3  # the first call of each block: the last block's result is gone
