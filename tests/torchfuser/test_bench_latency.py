"""The latency rows (small MLP, one-token decode, GEMV) on tiny shapes, the ceilings they are judged against,
the inductor+freezing peer, and the CLI's sections (no timing assertions: these machines are shared and noisy)."""

import pytest
import torch

import torchfuser.tools.bench.peers as peers
from torchfuser.bench import main
from torchfuser.runtime.timing import Timings
from torchfuser.tools.bench.blocks import hf_available
from torchfuser.tools.bench.bounds import copy_bandwidth, fma_ceiling, format_ceilings
from torchfuser.tools.bench.peers import (SLOWER, best_peer, best_spread, peer_candidates, slower_flag,
                                           times_columns)
from torchfuser.tools.bench.latency import GEMV_TARGET, decode_row, format_latency, gemv_row, small_row

TINY = {"width": 64, "heads": 2, "kv_heads": 1, "intermediate": 128}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    yield
    torch._dynamo.reset()


def _check_row(row, params):
    assert set(row["medians"]) == {"eager", "torchfuser"} and all(v > 0 for v in row["medians"].values())
    assert row["param_bytes"] == 4 * params and row["launches"] >= 1 and row["kernel_seconds"] > 0


def test_small_and_gemv_rows_on_tiny_shapes():
    small = small_row(repeats=2, inductor=False, width=16, hidden=32, batch=2)
    _check_row(small, 16 * 32 + 32 + 32 * 16 + 16)
    gemv = gemv_row(repeats=2, inductor=False, k=32, n=64)
    _check_row(gemv, 32 * 64)
    assert gemv["flops"] == 2 * 32 * 64
    lines = format_latency([small, gemv], copy_bandwidth=10e9).splitlines()
    assert lines[2].startswith("MLP 16->32->16 [2,16]") and lines[3].startswith("gemv 32x64 [1,32]")
    bound = 4 * 32 * 64 / 10e9
    assert f"{bound * 1e6:>9.1f}" in lines[3] and f"{100 * bound / gemv['medians']['torchfuser']:>8.0f}%" in lines[3]
    assert "10.0 GB/s" in "\n".join(lines)


@pytest.mark.skipif(not hf_available(), reason="needs transformers")
@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_decode_row_is_one_token(name):
    row = decode_row(name, repeats=2, inductor=False, **TINY)
    assert row["shape"]["batch"] == row["shape"]["seq"] == 1 and row["label"] == f"{name} decode [1,1,64]"
    assert row["param_bytes"] > 4 * 3 * 64 * 64 and row["launches"] >= 1
    assert format_latency([row], None).splitlines()[2].startswith(row["label"])


def _row(label, name, medians, param_bytes=4e6):
    return {"label": label, "name": name, "medians": medians, "launches": 3, "kernel_seconds": 50e-6,
            "param_bytes": param_bytes}


def test_latency_table_flags_slower_rows_and_a_gemv_below_target():
    fast = {"eager": 300e-6, "inductor": 250e-6, "inductor+freezing": 200e-6, "torchfuser": 150e-6}
    slow = {"eager": 30e-6, "inductor": 60e-6, "inductor+freezing": 55e-6, "torchfuser": 180e-6}
    rows = [_row("fast", "decode", fast), _row("slow", "small", slow), _row("gemv ok", "gemv", fast, 4.9e6),
            _row("gemv slow", "gemv", fast, 4.7e6)]
    lines = format_latency(rows, copy_bandwidth=40e9).splitlines()  # 4 MB at 40 GB/s: bound 100 us
    assert lines[2].split()[1:8] == ["300.0", "250.0", "200.0", "150.0", "2.00", "1.33", "-"] and SLOWER not in lines[2]
    assert lines[2].split()[10:14] == ["4.00", "100.0", "26.7", "67%"]
    assert lines[2].split()[-3:] == ["nan", "nan", "nan"]  # not timed alone here
    assert lines[3].rstrip().endswith(f"{SLOWER} eager") and lines[3].split()[5:7] == ["0.17", "0.17"]
    # the GEMV target (80 % of the copy bandwidth) is judged on gemv rows only: 4.9 MB in 150 us is 82 %, 4.7 MB 78 %
    assert "target" not in lines[2] and "target" not in lines[4] and lines[4].split()[14] == "82%"
    assert lines[5].split()[14] == "78%" and lines[5].endswith(f"<< below the {GEMV_TARGET:.0%} target")


def test_best_peer_and_flag():
    m = {"eager": 3.0, "inductor": 2.0, "inductor+freezing": 2.5, "torchfuser": 2.2}
    assert best_peer(m) == ("inductor", 2.0) and slower_flag(m) == f"  {SLOWER} inductor"
    assert slower_flag({**m, "torchfuser": 2.0}) == ""
    assert best_peer({"eager": 1.0, "torchfuser": 2.0}) == ("eager", 1.0)  # inductor skipped
    assert times_columns({"eager": 1e-3, "torchfuser": 5e-4}).split() == ["1.000", "nan", "nan", "0.500", "2.00", "2.00",
                                                                          "-"]  # no rounds known: no spread


def test_rounds_column_is_the_quartiles_of_each_rounds_ratio_to_the_best_peer():
    """Each round's best-peer block over torchfuser's block of the same round, not a ratio of medians."""
    medians = Timings({"eager": 3.0, "inductor": 2.0, "torchfuser": 2.0})
    medians.samples = {"eager": [3.0] * 5, "inductor": [1.6, 2.0, 2.0, 2.4, 2.2],
                       "torchfuser": [2.0, 2.0, 1.6, 2.0, 2.2]}  # ratios 0.8, 1.0, 1.25, 1.2, 1.0
    assert best_spread(medians) == pytest.approx((1.0, 1.2))
    assert times_columns(medians).split()[-1] == "1.00-1.20"
    medians.samples["torchfuser"] = medians.samples["torchfuser"][:4]  # rounds that do not pair up: no spread
    assert best_spread(medians) is None


def test_freezing_peer_is_compiled_with_freezing_and_apart_from_plain_inductor(monkeypatch):
    import torch._inductor.freezing as freezing

    frozen = []
    original = freezing.freeze
    monkeypatch.setattr(freezing, "freeze", lambda *a, **k: frozen.append(1) or original(*a, **k))
    module = torch.nn.Linear(8, 4).eval()
    x = torch.randn(2, 8)
    with torch.no_grad():
        candidates = peer_candidates(module, (x,))
        assert list(candidates) == list(peers.PEERS)
        assert len(frozen) == 1  # plain inductor did not freeze; the freezing peer did not reuse its cache
        assert torch._inductor.config.freezing is False  # the flag was set only while that peer compiled
        for fn in candidates.values():
            torch.testing.assert_close(fn(), module(x))


def test_ceilings():
    fma = fma_ceiling(rounds=1, flop_per_launch=2e8)
    copy = copy_bandwidth(nbytes=1 << 20, repeats=2)
    assert fma > 1e9
    assert {"torch copy_", "torch clone", "opencl copy", "ceiling", "bytes"} <= set(copy)
    assert copy["ceiling"] == max(copy[k] for k in ("torch copy_", "torch clone", "opencl copy"))
    text = format_ceilings(copy, fma)
    assert text.splitlines()[0].startswith("copy bandwidth (1 MiB") and "-> ceiling" in text
    assert text.splitlines()[1].startswith(f"FMA ceiling: {fma / 1e9:.0f} GFLOP/s")


def test_cli_sections(capsys):
    with pytest.raises(SystemExit):
        main(["--only", "small,nope"])
    assert "unknown section(s) nope" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert all(f"{s} (" in help_text for s in ("pointwise", "gemm", "mlp", "small", "decode", "gemv"))


def test_latency_rows_show_eager_and_torchfuser_timed_alone():
    fast = {"eager": 300e-6, "inductor": 250e-6, "inductor+freezing": 200e-6, "torchfuser": 150e-6}
    row = {**_row("decode", "decode", fast), "alone": {"eager": 250e-6, "torchfuser": 100e-6}}
    line = format_latency([row], copy_bandwidth=40e9).splitlines()[2]
    assert line.split()[-3:] == ["250.0", "100.0", "2.50"]
