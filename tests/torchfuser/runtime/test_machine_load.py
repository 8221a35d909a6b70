"""The share of the CPUs other processes took: from /proc/stat's ticks less this process's own."""

import torchfuser.runtime.machine_load as machine_load


def test_others_share_is_the_busy_ticks_not_our_own(monkeypatch):
    samples = iter([(1000, 5000, 300.0), (1600, 6000, 500.0)])  # (busy, total, own) ticks
    monkeypatch.setattr(machine_load, "_sample", lambda: next(samples))
    assert machine_load.OtherLoad().share() == (600 - 200) / 1000


def test_our_own_ticks_beyond_the_machines_count_as_no_other_load(monkeypatch):
    samples = iter([(1000, 5000, 300.0), (1100, 6000, 450.0)])  # rounding between the two clocks
    monkeypatch.setattr(machine_load, "_sample", lambda: next(samples))
    assert machine_load.OtherLoad().share() == 0.0


def test_no_proc_stat_means_unknown(monkeypatch):
    monkeypatch.setattr(machine_load, "_sample", lambda: None)
    assert machine_load.OtherLoad().share() is None


def test_a_real_sample_is_a_share_or_unknown():
    load = machine_load.OtherLoad()
    sum(i * i for i in range(200_000))  # some ticks of our own
    share = load.share()
    assert share is None or 0.0 <= share <= 1.0
