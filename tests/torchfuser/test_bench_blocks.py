"""The transformer-block benchmark on tiny configs: the rows it returns and the table it prints (no timing
assertions: these machines are shared and noisy)."""

import pytest
import torch

pytest.importorskip("transformers")

from torchfuser.bench import main
from torchfuser.tools.bench.blocks import BLOCKS, block_row, format_blocks

TINY = {"width": 64, "heads": 2, "kv_heads": 1, "intermediate": 128, "batch": 2, "seq": 8}


@pytest.fixture(autouse=True)
def fresh_dynamo():
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_block_row(name):
    row = block_row(name, repeats=2, inductor=False, **TINY)
    assert row["name"] == name and row["shape"]["width"] == 64
    assert set(row["medians"]) == {"eager", "torchfuser"}
    assert all(seconds > 0 for seconds in row["medians"].values())
    assert 0 < row["launches"] < row["eager_compute_ops"] <= row["eager_ops"]  # fusion shows in the counts
    assert row["max_error"] <= 1e-4 and row["graphs"] >= 1
    assert row["flops"] > 0 and row["param_bytes"] == 4 * sum(p.numel() for p in BLOCKS[name](**TINY).parameters())
    assert row["kernel_seconds"] > 0 and 0 <= row["extern_gemms"] <= row["launches"]
    assert 0 < len(row["top"]) <= 5
    assert [k["per_call"] for k in row["top"]] == sorted((k["per_call"] for k in row["top"]), reverse=True)
    assert all(k["per_call"] > 0 and k["kind"] in {"gemm", "pointwise", "reduction", "attention"} for k in row["top"])
    assert any(k["kind"] == "gemm" for k in row["top"])
    assert all(isinstance(op, str) and n > 0 for op, n in row["fallbacks"].items())
    table = format_blocks([row], ceiling=1e11)
    assert table.splitlines()[2].startswith(name) and "top kernels" in table
    share = 100 * row["flops"] / 1e11 / row["medians"]["torchfuser"]
    assert f"{share:>13.0f}%" in table.splitlines()[2] and "% FLOP bound" in table.splitlines()[0]


def test_cli_lists_the_block_sections(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "gpt2 (HF GPT2Block)" in help_text and "llama (HF LlamaDecoderLayer)" in help_text
