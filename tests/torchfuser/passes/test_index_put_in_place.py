"""index_put_in_place: a static KV cache's update written into the cache itself, with the same outputs and the same
cache contents as eager, and left as it was where another node reads the cache's old values."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from torchfuser.runtime.device import get_device

pytestmark = pytest.mark.skipif(get_device() is None, reason="needs an OpenCL device")


class StaticCacheAttention(nn.Module):
    """One head group's attention over a fixed-size cache written at a position counter, as Hugging Face's
    StaticCache does (index_copy_ into buffers, the counter advanced in place)."""

    def __init__(self, length: int = 12, read_old: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(16, 48)
        self.register_buffer("k_cache", torch.zeros(1, 2, length, 8))
        self.register_buffer("v_cache", torch.zeros(1, 2, length, 8))
        self.register_buffer("length", torch.zeros((), dtype=torch.long))
        self.read_old = read_old

    def forward(self, x):
        q, k, v = self.qkv(x).view(1, x.shape[1], 3, 2, 8).permute(2, 0, 3, 1, 4)
        old = self.k_cache.sum() if self.read_old else 0.0  # reads the cache before the write
        positions = torch.arange(x.shape[1]) + self.length
        self.k_cache.index_copy_(2, positions, k)
        self.v_cache.index_copy_(2, positions, v)
        self.length.add_(x.shape[1])
        return F.scaled_dot_product_attention(q, self.k_cache, self.v_cache) + old


def written_in_place() -> int:
    stats = [p["stats"] for p in torchfuser.last_report().to_dict()["passes"] if p["name"] == "index_put_in_place"]
    return stats[0].get("written_in_place", 0)


@pytest.mark.parametrize("read_old", [False, True])
def test_cache_writes_match_eager_in_place_or_not(read_old):
    compiled_model, eager = StaticCacheAttention(read_old=read_old).eval(), StaticCacheAttention(read_old=read_old).eval()
    f = torchfuser.compile(compiled_model)
    torch.manual_seed(1)
    steps = [torch.randn(1, 3, 16)] + [torch.randn(1, 1, 16) for _ in range(8)]  # a prompt of 3, then 8 steps
    with torch.no_grad():
        for x in steps:
            torch.testing.assert_close(f(x), eager(x), rtol=1e-4, atol=1e-5)
    for name in ("k_cache", "v_cache", "length"):
        torch.testing.assert_close(getattr(compiled_model, name), getattr(eager, name), rtol=1e-4, atol=1e-5)
    # the 1-token graph's: where the old keys are read first, their update stays a copy (the values' is in place)
    assert written_in_place() == (1 if read_old else 2)


def test_a_full_cache_raises_as_eager_does():
    compiled_model, eager = StaticCacheAttention(length=4).eval(), StaticCacheAttention(length=4).eval()
    f = torchfuser.compile(compiled_model)
    x = torch.randn(1, 1, 16)
    with torch.no_grad():
        for _ in range(4):
            torch.testing.assert_close(f(x), eager(x), rtol=1e-4, atol=1e-5)
        with pytest.raises(IndexError):
            eager(x)
        with pytest.raises((IndexError, RuntimeError)):
            f(x)
