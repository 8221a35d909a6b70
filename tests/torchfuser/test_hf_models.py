"""Hugging Face GPT-2, LLaMA and BERT (tiny random configs, built locally, no download) through
torch.compile(model, backend="torchfuser"), against eager logits."""

import pytest
import torch
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from eager_compare import assert_close
import torchfuser


def gpt2():
    return GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=128, n_positions=64))


def llama():
    config = LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=64,
                         intermediate_size=160, vocab_size=128, max_position_embeddings=64)
    return LlamaForCausalLM(config)


def bert():
    config = BertConfig(num_hidden_layers=2, num_attention_heads=4, hidden_size=64, intermediate_size=128,
                        vocab_size=128, max_position_embeddings=64)
    return BertModel(config)


@pytest.mark.parametrize("build", [gpt2, llama, bert], ids=lambda b: b.__name__)
def test_model_matches_eager(build):
    torch.manual_seed(0)
    model = build().eval()
    inputs = {"input_ids": torch.randint(0, 128, (2, 13))}
    if build is bert:
        inputs["attention_mask"] = torch.ones(2, 13, dtype=torch.long)
        inputs["attention_mask"][1, 9:] = 0  # padding: a real additive mask
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        expected = model(**inputs)
        actual = torch.compile(model, backend="torchfuser")(**inputs)
    key = "last_hidden_state" if build is bert else "logits"
    assert_close(actual[key], expected[key], atol=1e-4)
    kinds = {k.kind for r in reports for k in r.kernels}
    assert {"gemm", "pointwise"} <= kinds
    assert all(p.stats.get("error") is None for r in reports for p in r.passes)  # no pass fell over
    # KV-cache cats, the cache's lift_fresh_copy, embeddings and position aranges all run as kernels; BERT's
    # mask building (gather, index) is what still runs in PyTorch, each with its reason; its constants (full,
    # scalar_tensor) are literals of the kernels that read them
    fallbacks = {f.op for r in reports for f in r.fallbacks}
    assert fallbacks == (STILL_IN_PYTORCH if build is bert else set())
    assert all("no OpenCL kernel for this op yet" not in f.reason for r in reports for f in r.fallbacks)


STILL_IN_PYTORCH = {"aten.gather.default", "aten.index.Tensor"}
