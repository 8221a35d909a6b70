"""The GEMM and MLP benchmark sections on small shapes: the rows they return and the tables they print (no timing
assertions: these machines are shared and noisy)."""

import pytest
import torch

from torchfuser.tools.bench.peers import SLOWER
from torchfuser.tools.bench.gemm import count_flops, flop_bound_share, format_gemm, format_mlp, gemm_rows, linear_module


@pytest.fixture(autouse=True)
def fresh_dynamo():
    yield
    torch._dynamo.reset()


def test_gemm_rows_give_steady_speeds_for_eager_and_torchfuser():
    (row,) = gemm_rows(repeats=2, shapes={"33x40x48": (33, 40, 48)}, inductor=False)
    assert set(row["speeds"]) == {"eager", "torchfuser"} and all(v > 0 for v in row["speeds"].values())
    assert row["flops"] == 2 * 33 * 40 * 48 and row["variant"].startswith("packed")
    assert row["speeds"]["torchfuser"] == pytest.approx(row["flops"] / row["medians"]["torchfuser"])
    lines = format_gemm([row], ceiling=1e11).splitlines()
    assert lines[3].startswith("33x40x48") and row["variant"] in lines[3]
    assert " nan " in lines[3]  # inductor columns when inductor is skipped
    assert lines[-1].startswith("'% of FMA'")


def _medians(eager, inductor, frozen, fused):
    return {"eager": eager, "inductor": inductor, "inductor+freezing": frozen, "torchfuser": fused}


def test_gemm_table_flags_rows_slower_than_the_best_peer():
    flops = 2e9
    rows = [{"name": name, "flops": flops, "variant": "packed 8x32", "medians": m,
             "speeds": {k: flops / v for k, v in m.items()}}
            for name, m in (("fast", _medians(0.02, 0.02, 0.015, 0.01)), ("slow", _medians(0.02, 0.02, 0.01, 0.015)))]
    lines = format_gemm(rows, ceiling=400e9).splitlines()
    fast, slow = lines[3], lines[4]
    assert SLOWER not in fast and fast.split()[1:9] == ["100", "100", "133", "200", "2.00", "1.50", "-", "50%"]
    assert slow.rstrip().endswith(f"{SLOWER} inductor+freezing") and slow.split()[5:7] == ["1.33", "0.67"]


def test_linear_module_holds_the_weight_and_flops_are_counted():
    w = torch.randn(48, 40)
    module = linear_module(w)
    x = torch.randn(33, 40)
    with torch.no_grad():
        torch.testing.assert_close(module(x), torch.nn.functional.linear(x, w))
    assert count_flops(module, x) == 2 * 33 * 40 * 48
    assert flop_bound_share(2e9, 0.02, 200e9) == pytest.approx(0.5) and flop_bound_share(2e9, 0.02, None) is None


def test_mlp_table_shows_the_flop_bound_share():
    row = {"medians": _medians(0.05, 0.04, 0.045, 0.03), "kernels": 4, "fallbacks": [], "flops": 9.66e9}
    lines = format_mlp(row, ceiling=400e9).splitlines()
    assert lines[0].split()[-3:] == ["%", "FLOP", "bound"] and lines[2].startswith("8x128x768")
    assert lines[2].rstrip().endswith(f"{100 * 9.66e9 / 400e9 / 0.03:.0f}%") and SLOWER not in lines[2]
    assert "9.66 GFLOP" in lines[3] and "in PyTorch: none" in lines[3]


def test_gemm_table_warns_when_a_row_beats_the_fma_ceiling():
    m = _medians(0.02, 0.02, 0.015, 0.01)
    row = {"name": "x", "flops": 2e9, "variant": "v", "medians": m, "speeds": {k: 2e9 / v for k, v in m.items()}}
    assert "WARNING" not in format_gemm([row], ceiling=400e9)
    assert format_gemm([row], ceiling=150e9).splitlines()[-1].startswith("WARNING: torchfuser ran above the FMA")
