"""HF generate() through torch.compile(model.forward, backend="torchfuser"): the same greedy tokens as eager
for four model families (tiny random configs, built locally), with the default dynamic KV cache (the cache
length is a symbolic size: one plan serves every step) and with the static cache."""

import pytest
import torch
from transformers import (
    GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
    Qwen2ForCausalLM,
)

import torchfuser
from torchfuser.runtime.call import Runtime
from torchfuser.runtime.device import get_device
from torchfuser.runtime.memory import ZeroCopyBinder

SMALL = dict(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
             intermediate_size=160, vocab_size=128, max_position_embeddings=128)
FAMILIES = {
    "gpt2": lambda: GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=128, n_positions=128)),
    "llama": lambda: LlamaForCausalLM(LlamaConfig(**SMALL)),
    "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**SMALL)),
    "mistral": lambda: MistralForCausalLM(MistralConfig(**SMALL, sliding_window=None)),
}
NEW_TOKENS = 12


def generate(model, ids, **kwargs):
    return model.generate(ids, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                          pad_token_id=0, **kwargs)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_generate_matches_eager_with_one_plan_per_phase(family):
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    prompts = [torch.randint(1, 128, (1, n)) for n in (9, 14, 5)]
    with torch.no_grad():
        expected = [generate(model, ids) for ids in prompts]
        model.forward = torch.compile(model.forward, backend="torchfuser")
        with torchfuser.collect_reports() as reports:
            for ids, tokens in zip(prompts, expected):
                assert torch.equal(generate(model, ids), tokens)
                if ids is prompts[0]:
                    first = len(reports)
    # prefill and the first decode step compile static, the second step's new cache length makes it
    # dynamic; the second prompt's length makes prefill dynamic; nothing after that
    assert first <= 3 and len(reports) <= 4, [r.title for r in reports]
    assert all(not r.fallbacks or {f.op for f in r.fallbacks} <= {"aten.cat.default"} for r in reports)
    decode = [r.to_dict()["dynamic"] for r in reports if r.to_dict()["dynamic"]]
    assert sum(run["calls"] for d in decode for run in d["runs"]) >= 3 * (NEW_TOKENS - 2)


def test_generate_compiled_with_dynamic_true_compiles_two_graphs_for_every_prompt():
    torch.manual_seed(0)
    model = FAMILIES["gpt2"]().eval()
    prompts = [torch.randint(1, 128, (1, n)) for n in (9, 14, 5)]
    with torch.no_grad():
        expected = [generate(model, ids) for ids in prompts]
        model.forward = torch.compile(model.forward, backend="torchfuser", dynamic=True)
        with torchfuser.collect_reports() as reports:
            for ids, tokens in zip(prompts, expected):
                assert torch.equal(generate(model, ids), tokens)
                assert len(reports) == 2, [r.title for r in reports]  # prefill and decode, symbolic from the start
    assert all(r.to_dict()["dynamic"] for r in reports)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_generate_with_the_static_cache(family):
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    ids = torch.randint(1, 128, (1, 7))
    with torch.no_grad():
        expected = generate(model, ids, cache_implementation="static")
        model.forward = torch.compile(model.forward, backend="torchfuser")
        with torchfuser.collect_reports() as reports:
            for _ in range(2):
                assert torch.equal(generate(model, ids, cache_implementation="static"), expected)
    # the cache's update is written into the cache (not copied whole, twice), and the decode steps replay a tape
    decode = [r for r in reports if r.plan is not None and r.plan.calls > 2]
    assert decode and all(_passes(r)["index_put_in_place"].get("written_in_place") for r in decode)
    if isinstance(Runtime.for_device(get_device()).binder, ZeroCopyBinder):
        assert sum(r.plan.tape_calls for r in decode) > NEW_TOKENS, [r.summary() for r in decode]


def _passes(report) -> dict:
    return {p["name"]: p["stats"] for p in report.to_dict()["passes"]}
