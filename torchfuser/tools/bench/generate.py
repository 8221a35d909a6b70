"""Generation rows for `python -m torchfuser.bench --only generate`: Hugging Face `generate()` as a new user
runs it (greedy, batch 1, the default dynamic KV cache, `model.forward = torch.compile(model.forward, ...)`).

Per model (GPT-2 and LLaMA, 4 layers x 512, random weights, default vocabularies) and per way (eager, inductor,
torchfuser, and torchfuser with dynamic=True, which makes the sequence lengths symbolic from the first compile):
the first generate's time (compiles included), the graphs compiled by then and after a second prompt of another
length, steady tokens/s (interleaved rounds of whole generates, order rotated), tokens/s of generates whose
prompts are new lengths (every cache length unseen: a user's generate, with no replayed tape), and whether
the tokens equal eager's. Then the cost of dynamic shapes: one decode step at a fixed cache length through a
plan compiled for that shape (dynamic=False) and through the symbolic plan (dynamic=True), timed side by side.
And generate() with the static cache, eager and torchfuser; and GPT-2 generating LONG_TOKENS tokens again and
again (more lengths than a plan keeps tapes for), eager and torchfuser with dynamic=True.
"""

from __future__ import annotations

import copy
import statistics
import time

import torch

import torchfuser
from torchfuser.runtime.timing import interleaved_medians

NEW_TOKENS = 32
PROMPTS = (12, 19)  # the first generate's prompt length, then another
# then generates whose cache lengths none before had (tokens/s without a replayed tape of any of their lengths: the
# prompts NEW_TOKENS + 8 apart); the median of five, as one can take a first build (a prefill's wider attention tile)
# or a gen-2 GC pause
NEW_PROMPTS = (60, 100, 140, 180, 220)
# a generate past executor.TAPES_KEPT lengths: run again, it cycles through more lengths than a plan keeps tapes for
LONG_TOKENS = 160
WAYS = ("eager", "inductor", "torchfuser", "torchfuser dynamic")  # the last: compiled with dynamic=True


def _model(name: str):
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if name == "gpt2":
        return GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=512, n_head=8)).eval()
    config = LlamaConfig(num_hidden_layers=4, hidden_size=512, intermediate_size=1376, num_attention_heads=8,
                         num_key_value_heads=8)
    return LlamaForCausalLM(config).eval()


def _generate(model, ids, tokens: int = NEW_TOKENS, **options):
    return model.generate(ids, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0,
                          **options)


def _medians(generates: dict, repeats: int) -> dict:
    """Seconds per whole generate, each way's: interleaved rounds of one generate each, order rotated."""
    return interleaved_medians(generates, repeats=repeats, warmup=1, blocks={way: 1 for way in generates},
                               lead_seconds=0)


class _CountingBackend:
    """A Dynamo backend that counts the graphs it is handed, then compiles them with `backend`."""

    def __init__(self, backend: str):
        self.compile = torch._dynamo.lookup_backend(backend)
        self.graphs = 0

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return self.compile(gm, example_inputs)


def generate_row(name: str, repeats: int, inductor: bool) -> dict:
    base = _model(name)
    vocab = base.config.vocab_size
    prompts = [torch.randint(1, vocab, (1, n)) for n in PROMPTS]
    expected = _generate(base, prompts[0])
    ways = [w for w in WAYS if inductor or w != "inductor"]
    models, first, graphs, same = {}, {}, {}, {}
    for way in ways:
        torch._dynamo.reset()
        model = copy.deepcopy(base) if way != "eager" else base
        counter = None
        if way != "eager":
            counter = _CountingBackend(way.split()[0])
            model.forward = torch.compile(model.forward, backend=counter, dynamic=way.endswith("dynamic") or None)
        started = time.perf_counter()
        tokens = _generate(model, prompts[0])
        first[way] = time.perf_counter() - started
        after_first = counter.graphs if counter else 0
        _generate(model, prompts[1])
        graphs[way] = (after_first, counter.graphs if counter else 0)
        same[way] = torch.equal(tokens, expected)
        models[way] = model
    medians = _medians({way: (lambda m=models[way]: _generate(m, prompts[0])) for way in ways}, repeats)
    new_prompts = {way: [] for way in ways}  # a user's generate: a prompt length (so cache lengths) not seen yet
    for n in NEW_PROMPTS:
        ids = torch.randint(1, vocab, (1, n))
        for way in ways:
            started = time.perf_counter()
            _generate(models[way], ids)
            new_prompts[way].append(NEW_TOKENS / (time.perf_counter() - started))
    torch._dynamo.reset()
    weight_bytes = sum(p.numel() * p.element_size() for p in base.parameters())
    return {"name": name, "first": first, "graphs": graphs, "same": same, "weight_bytes": weight_bytes,
            "tokens_per_second": {way: NEW_TOKENS / medians[way] for way in ways},
            "new_prompt_tokens_per_second": {way: statistics.median(r) for way, r in new_prompts.items()}}


def static_cache_row(name: str, repeats: int) -> dict:
    """generate() with Hugging Face's static cache (`cache_implementation="static"`, what its docs pair with
    torch.compile), eager vs torchfuser: tokens/s, the same tokens, and how many decode calls replayed a tape."""
    return _against_eager_row(name, repeats, "torchfuser", NEW_TOKENS, cache_implementation="static")


def long_generate_row(name: str, repeats: int) -> dict:
    """generate() of LONG_TOKENS new tokens from one prompt, again and again (a job generating many sequences from
    prompts of one length), eager vs torchfuser with dynamic=True: tokens/s, the same tokens, and how many decode
    calls replayed a tape, where there are more lengths than a plan keeps tapes for."""
    return _against_eager_row(name, repeats, "torchfuser dynamic", LONG_TOKENS)


def _against_eager_row(name: str, repeats: int, way: str, tokens: int, **options) -> dict:
    """generate() of `tokens` from a PROMPTS[0] prompt, eager and torchfuser (`way`: with dynamic=True when it says
    so) in interleaved rounds, with these generate options; the row _against_eager formats."""
    base = _model(name)
    ids = torch.randint(1, base.config.vocab_size, (1, PROMPTS[0]))
    model = copy.deepcopy(base)
    model.forward = torch.compile(model.forward, backend="torchfuser", dynamic=way.endswith("dynamic") or None)
    ways = {"eager": base, way: model}
    with torchfuser.collect_reports() as reports:
        made = {w: _generate(m, ids, tokens, **options) for w, m in ways.items()}
        medians = _medians({w: (lambda m=m: _generate(m, ids, tokens, **options)) for w, m in ways.items()}, repeats)
    plans = [r.plan for r in reports if r.plan is not None]
    torch._dynamo.reset()
    return {"name": name, "same": torch.equal(made["eager"], made[way]),
            "tokens_per_second": {w: tokens / medians[w] for w in ways},
            "replayed": (sum(p.tape_calls for p in plans), sum(p.calls for p in plans))}


def format_static_cache(rows: list[dict]) -> str:
    return "\n".join(_against_eager(f"{row['name']} 4x512 static cache", row, "torchfuser") for row in rows)


def format_long_generate(rows: list[dict]) -> str:
    return "\n".join(_against_eager(f"{row['name']} 4x512, {LONG_TOKENS} new tokens again and again", row,
                                    "torchfuser dynamic") for row in rows)


def _against_eager(title: str, row: dict, way: str) -> str:
    """One line: eager's and `way`'s tokens/s, whether their tokens agree, and the calls replayed from a tape."""
    rates, (replayed, calls) = row["tokens_per_second"], row["replayed"]
    return (f"{title}: eager {rates['eager']:.1f} tokens/s, {way} {rates[way]:.1f} "
            f"({rates[way] / rates['eager']:.2f}x eager), same tokens {row['same']}, {replayed} of {calls} calls "
            "replayed from a tape")


def dynamic_cost_row(name: str, repeats: int, cache_length: int = 64) -> dict:
    """One decode step with a cache of `cache_length` through torchfuser compiled static and dynamic (the cache is
    cut back to that length before each call: a step appends one position)."""
    base = _model(name)
    ids = torch.randint(1, base.config.vocab_size, (1, cache_length))
    step = torch.randint(1, base.config.vocab_size, (1, 1))
    cache = base(ids, use_cache=True).past_key_values
    expected = base(step, past_key_values=copy.deepcopy(cache)).logits
    calls = {}
    for way in ("static", "dynamic"):
        compiled = torch.compile(copy.deepcopy(base).forward, backend="torchfuser", dynamic=way == "dynamic")
        kv = copy.deepcopy(cache)
        call = calls[way] = lambda c=compiled, kv=kv: c(step, past_key_values=_cropped(kv, cache_length))
        torch.testing.assert_close(call().logits, expected, rtol=1e-3, atol=1e-3)
    medians = interleaved_medians(calls, repeats=repeats)
    torch._dynamo.reset()
    return {"name": name, "cache_length": cache_length, "medians": medians}


def _cropped(cache, length: int):
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)
    return cache


def format_generate(rows: list[dict], copy_bandwidth: float | None) -> str:
    """copy_bandwidth: the copy ceiling in bytes/s (read + write counted, as the latency rows use it); a decode step
    reads every weight once, so copy_bandwidth / weight bytes bounds tokens/s (prefill and the host's work per
    token come on top)."""
    lines = [f"{'generate (32 new tokens)':<26}{'way':<20}{'first s':>9}{'graphs':>8}{'+2nd prompt':>12}"
             f"{'tokens/s':>10}{'x eager':>9}{'new prompt':>12}{'x eager':>9}  same tokens"]
    for row in rows:
        eager, new_eager = row["tokens_per_second"]["eager"], row["new_prompt_tokens_per_second"]["eager"]
        for way, rate in row["tokens_per_second"].items():
            graphs, new_rate = row["graphs"][way], row["new_prompt_tokens_per_second"][way]
            lines.append(f"{row['name'] + ' 4x512':<26}{way:<20}{row['first'][way]:>9.2f}{graphs[0]:>8}"
                         f"{graphs[1] - graphs[0]:>+12}{rate:>10.1f}{rate / eager:>9.2f}{new_rate:>12.1f}"
                         f"{new_rate / new_eager:>9.2f}  {row['same'][way]}")
        if copy_bandwidth:
            lines.append(f"{'':<26}bound: {row['weight_bytes'] / 1e6:.0f} MB of weights read per token at the copy "
                         f"ceiling {copy_bandwidth / 1e9:.1f} GB/s -> {copy_bandwidth / row['weight_bytes']:.0f} tokens/s")
    return "\n".join(lines)


def format_dynamic_cost(rows: list[dict]) -> str:
    lines = []
    for row in rows:
        static, dynamic = row["medians"]["static"], row["medians"]["dynamic"]
        lines.append(f"{row['name']} decode step at cache {row['cache_length']}: static plan {static * 1e3:.3f} ms, "
                     f"symbolic plan {dynamic * 1e3:.3f} ms ({dynamic / static - 1:+.0%})")
    return "\n".join(lines)
