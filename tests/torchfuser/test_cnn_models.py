"""The bench's CNNs end to end against eager: batch norms folded, pooling, activations and every convolution in
kernels, a patch embedding's (stride = kernel) too: nothing of theirs runs in PyTorch."""

from collections import Counter

import pytest
import torch

import torchfuser
from eager_compare import assert_close
from torchfuser.tools.bench.cnn import CNNS

SMALL = {"resnet18": (2, 3, 32, 32), "mbv2_block": (2, 16, 12, 10), "conv1d": (2, 80, 37), "patch_embed": (1, 3, 64, 48)}


@pytest.mark.parametrize("name", list(CNNS))
def test_cnn_matches_eager_with_nothing_in_pytorch(name):
    torch.manual_seed(0)
    make, _ = CNNS[name]
    model = make().eval() if name != "mbv2_block" else type(make())(16).eval()
    x = torch.randn(SMALL[name])
    torch._dynamo.reset()
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        out = torchfuser.compile(model)(x)
        assert_close(out, model(x), rtol=1e-4, atol=1e-4)
    in_pytorch = Counter(f.op for r in reports for f in r.fallbacks)
    assert not in_pytorch, in_pytorch
    dense = [m for m in model.modules() if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d)) and m.groups == 1]
    assert sum({p.name: p.stats for p in r.passes}["conv_as_gemm"].get("convolutions", 0)
               for r in reports) == len(dense)
    depthwise = sum(isinstance(m, torch.nn.Conv2d) and m.groups > 1 for m in model.modules())
    assert sum({p.name: p.stats for p in r.passes}["depthwise_conv_as_windows"].get("convolutions", 0)
               for r in reports) == depthwise
    norms = sum(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())
    assert sum({p.name: p.stats for p in r.passes}["fold_batch_norm"]["folded"] for r in reports) == norms
