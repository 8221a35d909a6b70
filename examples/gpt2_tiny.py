"""A tiny random GPT-2 from Hugging Face transformers (built locally, nothing downloaded), compiled by
TorchFuser: checks the logits against eager and prints what fusion did.

    python examples/gpt2_tiny.py
"""

import torch
from transformers import GPT2Config, GPT2LMHeadModel

import torchfuser

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=512, n_positions=128)).eval()
input_ids = torch.randint(0, 512, (4, 64))

with torch.no_grad(), torchfuser.collect_reports() as reports:
    expected = model(input_ids=input_ids).logits
    actual = torch.compile(model, backend="torchfuser")(input_ids=input_ids).logits

torch.testing.assert_close(actual, expected, rtol=1e-4, atol=1e-4)
print(f"logits match eager (max abs error {(actual - expected).abs().max().item():.1e})\n")
for report in reports:
    print(report.summary(), "\n")
