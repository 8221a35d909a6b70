"""The generate bench's tables: every way's steady and new-prompt tokens/s against eager's, and the static-cache
and long-generate lines (formatting only: the rows themselves take a minute of HF generates, run by `--only generate`)."""

from torchfuser.tools.bench.generate import LONG_TOKENS, format_generate, format_long_generate, format_static_cache


def test_generate_table_compares_steady_and_new_prompt_rates_with_eager():
    row = {"name": "gpt2", "first": {"eager": 0.5, "torchfuser": 5.0}, "graphs": {"eager": (0, 0),
           "torchfuser": (3, 4)}, "same": {"eager": True, "torchfuser": True}, "weight_bytes": 155e6,
           "tokens_per_second": {"eager": 60.0, "torchfuser": 90.0},
           "new_prompt_tokens_per_second": {"eager": 50.0, "torchfuser": 40.0}}
    table = format_generate([row], copy_bandwidth=46e9)
    line = next(line for line in table.splitlines() if "torchfuser" in line)
    assert "90.0" in line and "1.50" in line and "40.0" in line and "0.80" in line and "+1" in line
    assert "-> 297 tokens/s" in table


def test_static_cache_line():
    row = {"name": "llama", "same": True, "tokens_per_second": {"eager": 70.0, "torchfuser": 105.0},
           "replayed": (90, 96)}
    assert format_static_cache([row]) == ("llama 4x512 static cache: eager 70.0 tokens/s, torchfuser 105.0 (1.50x "
                                          "eager), same tokens True, 90 of 96 calls replayed from a tape")


def test_long_generate_line():
    row = {"name": "gpt2", "same": True, "tokens_per_second": {"eager": 60.0, "torchfuser dynamic": 81.0},
           "replayed": (700, 1100)}
    assert format_long_generate([row]) == (f"gpt2 4x512, {LONG_TOKENS} new tokens again and again: eager 60.0 "
                                           "tokens/s, torchfuser dynamic 81.0 (1.35x eager), same tokens True, 700 of "
                                           "1100 calls replayed from a tape")
