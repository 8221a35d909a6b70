"""`python -m torchfuser demo`: compile a transformer block and a pointwise chain, check them against
eager, print what fusion did (passes, kernels, fallbacks), the speedups and cache stats, and write an
HTML report."""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from torchfuser.report import render_html
from torchfuser.runtime.timing import interleaved_medians


class TransformerBlock(nn.Module):
    """A pre-norm GPT-style block written the way eager code writes it."""

    def __init__(self, width: int = 256, heads: int = 4, hidden: int = 1024):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc1, self.fc2 = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attention = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.heads))
        y = (attention.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def pointwise_chain(x, y, z):
    h = F.silu(x) * y + z
    return torch.tanh(h) * 0.5 + torch.sigmoid(h - 1.0)


def _check(name, compiled, eager, inputs, rtol=1e-4, atol=1e-5):
    with torch.no_grad():
        expected, actual = eager(*inputs), compiled(*inputs)
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol)
    error = (actual - expected).abs().max().item()
    print(f"  {name}: matches eager (max abs error {error:.2e})")


def run(output: str = "reports/demo.html", repeats: int = 10) -> int:
    torch.manual_seed(0)
    torch.set_grad_enabled(False)
    block = TransformerBlock().eval()
    x = torch.randn(8, 128, 256)
    chain_inputs = [torch.randn(1 << 22) for _ in range(3)]
    print(f"torchfuser {torchfuser.__version__}: compiling a transformer block (8x128x256) and a pointwise chain")
    with torchfuser.collect_reports() as reports:
        fast_block = torchfuser.compile(block)
        fast_chain = torchfuser.compile(pointwise_chain)
        _check("transformer block", fast_block, block, [x], atol=1e-4)
        _check("pointwise chain", fast_chain, pointwise_chain, chain_inputs)
    device = reports[0].device
    print(f"  device: {device['name'] if device else 'none (everything ran in PyTorch)'}\n")
    for report, eager, compiled, inputs in ((reports[0], block, fast_block, [x]),
                                            (reports[1], pointwise_chain, fast_chain, chain_inputs)):
        medians = interleaved_medians({"eager": lambda: eager(*inputs), "compiled": lambda: compiled(*inputs)},
                                      repeats=repeats)
        report.record_timing(medians["eager"], medians["compiled"])
        print(f"  {report.title}: eager {medians['eager'] * 1e3:.2f} ms, torchfuser {medians['compiled'] * 1e3:.2f} ms"
              f" -> {report.timings['speedup']:.2f}x")
        print(report.summary().split("\n", 1)[1] + "\n")
    stats = torchfuser.cache_stats()
    print(f"  kernel cache: {stats['hits']} hits, {stats['misses']} misses, {stats['disk_hits']} from disk, "
          f"{stats['entries']} kernels in memory ({stats['dir']})")
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html([r.to_dict() for r in reports], title="TorchFuser demo"), encoding="utf-8")
    print(f"  HTML report: {path.resolve()}")
    return 0
