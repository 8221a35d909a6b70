"""merge_sibling_gemms: GEMMs sharing an input through different weights become one, numerics as eager."""

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from eager_compare import assert_close
from torchfuser.frontend.lowering import lower_for_inference, module_state
from torchfuser.passes.merge_sibling_gemms import merge_sibling_gemms


class QKVAndSwiGLU(nn.Module):
    """LLaMA's shapes in small: q/k/v without bias (k, v narrower), gate/up, a biased pair."""

    def __init__(self, width=64):
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(width, n, bias=False) for n in (width, width // 2, width // 2))
        self.gate, self.up = nn.Linear(width, 96, bias=False), nn.Linear(width, 96, bias=False)
        self.down = nn.Linear(96, width, bias=False)
        self.left, self.right = nn.Linear(width, 16), nn.Linear(width, 16)

    def forward(self, x):
        h = self.q(x) * 2 + torch.cat([self.k(x), self.v(x)], -1)
        h = self.down(F.silu(self.gate(h)) * self.up(h))
        return h + torch.cat([self.left(x), self.right(x)], -1).sum(-1, keepdim=True)


def aten(model, x):
    """The inference lowering's graph of model (its parameters marked as weights), as the compiler sees it."""
    captured = {}

    def backend(gm, example_inputs):
        captured["gm"] = lower_for_inference(gm, module_state(gm), example_inputs)
        return gm.forward

    torch.compile(model, backend=backend)(x)
    return captured["gm"]


def gemms(gm):
    return [n for n in gm.graph.nodes if n.target in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default)]


def test_siblings_become_one_gemm_each_and_a_second_run_changes_nothing():
    model, x = QKVAndSwiGLU().eval(), torch.randn(2, 5, 64)
    with torch.no_grad():
        gm = aten(model, x)
        assert len(gemms(gm)) == 8
        result = merge_sibling_gemms(gm)
        assert result.modified and result.stats["merged_gemms"] == 2 and result.stats["gemms_merged"] == 5
        # q/k/v and left/right merged; gate and up stay apart (silu(gate) * up joins them: gate's epilogue)
        assert len(gemms(result.gm)) == 5
        again = merge_sibling_gemms(result.gm)
        assert not again.modified and len(gemms(again.gm)) == 5


def test_merged_gemms_compute_as_the_separate_ones_in_every_lane_and_at_decode_sizes():
    torch.manual_seed(0)
    model = QKVAndSwiGLU().eval()
    for shape in ((1, 1, 64), (1, 7, 64), (3, 33, 64)):
        x = torch.randn(shape)
        with torch.no_grad():
            merged = torchfuser.compile(model)
            for _ in range(2):
                out = merged(x)
                assert_close(out, model(x), atol=1e-4)
            kernels = len(torchfuser.last_report().kernels)
            torch._dynamo.reset()
            separate = torchfuser.compile(model, disable=["merge_sibling_gemms"])
            assert_close(separate(x), out, atol=1e-4)
            assert len(torchfuser.last_report().kernels) > kernels
        torch._dynamo.reset()


def test_a_weight_updated_in_place_is_concatenated_again():
    model, x = QKVAndSwiGLU().eval(), torch.randn(1, 1, 64)
    with torch.no_grad():
        f = torchfuser.compile(model)
        assert_close(f(x), model(x), atol=1e-4)
        model.k.weight.mul_(-3)  # a new version of one part
        assert_close(f(x), model(x), atol=1e-4)
        assert not torchfuser.last_report().fallbacks  # the concatenation is a weight transform, not an op


def test_a_kept_concatenation_costs_no_host_read_and_a_new_version_is_made_after_one(monkeypatch):
    """While the weights are unchanged the plan takes the kept concatenation without waiting for launches or
    letting the workers go (the split GEMM after it would wake them again); a new version is made after both."""
    from torchfuser.runtime.call import Call

    model, x = QKVAndSwiGLU().eval(), torch.randn(1, 1, 64)
    host_reads = []
    original = Call.before_host_read
    monkeypatch.setattr(Call, "before_host_read", lambda call, tensors: (host_reads.append(len(tensors)),
                                                                          original(call, tensors))[1])
    with torch.no_grad():
        f = torchfuser.compile(model)
        for _ in range(3):
            assert_close(f(x), model(x), atol=1e-4)
        host_reads.clear()
        assert_close(f(x), model(x), atol=1e-4)
        assert host_reads == []
        model.q.weight.add_(0.5)
        assert_close(f(x), model(x), atol=1e-4)
        assert host_reads  # the remade concatenation read the weights on the host


def test_gemms_of_activations_or_training_graphs_are_left_alone():
    def two_products(x, a, b):  # a and b are inputs, not weights: nothing to make once
        return x @ a, x @ b

    x, a, b = torch.randn(4, 8), torch.randn(8, 5), torch.randn(8, 6)
    for actual, expected in zip(torchfuser.compile(two_products)(x, a, b), two_products(x, a, b)):
        assert_close(actual, expected)
    assert torchfuser.last_log["merged_gemms"] == 0
    model = QKVAndSwiGLU().train()
    x = torch.randn(1, 3, 64, requires_grad=True)
    torchfuser.compile(model)(x).sum().backward()  # aot_autograd's graphs: no weight marks, nothing merged
    assert torchfuser.last_log["merged_gemms"] == 0 and x.grad is not None
