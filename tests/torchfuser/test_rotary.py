"""Rotary position embeddings and cat/slice along the last dim, fused into pointwise kernels, vs eager."""

import pytest
import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

import torchfuser
from eager_compare import assert_close


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_written_out(q, k, cos, sin):
    """LLaMA's rotary with [batch, seq, heads, head_dim] activations (unsqueeze_dim=2)."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def rotary_inputs(batch, seq, heads, kv_heads, head_dim):
    q = torch.randn(batch, seq, heads, head_dim).transpose(1, 2)  # heads transposed out, as LLaMA has
    k = torch.randn(batch, kv_heads, seq, head_dim)
    angles = torch.randn(batch, seq, head_dim // 2).repeat(1, 1, 2)
    return q, k, angles.cos(), angles.sin()


@pytest.fixture(params=["rows", "flat"])
def schedule(request, monkeypatch):
    """CPU devices run these kernels a row per work-item; GPUs (and outputs whose last dim is not
    innermost) take the flat schedule, which computes the last-dim position per element."""
    if request.param == "flat":
        from torchfuser.runtime import pointwise_launch

        monkeypatch.setattr(pointwise_launch, "configure_rows", lambda *args, **kwargs: None)
    yield request.param
    indexing = [k for k in torchfuser.last_report().kernels if "@last[" in k.spec or "last_index" in k.spec]
    assert indexing and all(("rows=" in k.spec) == (request.param == "rows") for k in indexing)


def kernels_covering(report, *ops):
    return [k for k in report.kernels if all(any(n.split("_")[0] == op for n in k.nodes) for op in ops)]


@pytest.mark.parametrize("head_dim", [32, 64, 128])
@pytest.mark.parametrize("batch,seq", [(3, 7), (1, 13)])
def test_llama_rotary_is_one_kernel_per_tensor(head_dim, batch, seq, schedule):
    q, k, cos, sin = rotary_inputs(batch, seq, heads=6, kv_heads=2, head_dim=head_dim)
    assert not q.is_contiguous()
    q_out, k_out = torchfuser.compile(apply_rotary_pos_emb)(q, k, cos, sin)
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos, sin)
    assert_close(q_out, q_ref)
    assert_close(k_out, k_ref)
    report = torchfuser.last_report()
    assert report.fallbacks == []
    assert [k.kind for k in report.kernels] == ["pointwise", "pointwise"]  # q's rotary, k's rotary
    q_kernel = kernels_covering(report, "mul", "neg", "cat", "add")
    assert len(q_kernel) == 2 and all(len(k.nodes) == 5 for k in q_kernel)
    assert torchfuser.last_log["kernels"] == 2 and torchfuser.last_log["fallbacks"] == 0


def test_rotary_written_out_with_heads_innermost(schedule):
    q = torch.randn(2, 9, 4, 64)
    k = torch.randn(2, 9, 2, 64)
    angles = torch.randn(2, 9, 64)
    cos, sin = angles.cos(), angles.sin()
    out = torchfuser.compile(rotary_written_out)(q, k, cos, sin)
    for actual, expected in zip(out, rotary_written_out(q, k, cos, sin)):
        assert_close(actual, expected)
    assert torchfuser.last_report().fallbacks == []
    assert torchfuser.last_log["kernels"] == 2


def test_rotary_with_an_empty_batch():
    q, k, cos, sin = rotary_inputs(0, 5, heads=4, kv_heads=2, head_dim=64)
    q_out, k_out = torchfuser.compile(apply_rotary_pos_emb)(q, k, cos, sin)
    assert q_out.shape == (0, 4, 5, 64) and k_out.shape == (0, 2, 5, 64)
    assert torchfuser.last_report().fallbacks == []


def test_rotary_embedding_tables_are_one_kernel(schedule):
    """LlamaRotaryEmbedding: cat((freqs, freqs), -1) then cos and sin, both outputs of one kernel."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, 64, 2).float() / 64))

    def tables(t):
        freqs = t[..., None] * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos() * 0.5, emb.sin() * 0.5

    t = torch.arange(11).float().expand(3, 11) + torch.randn(3, 1)
    for actual, expected in zip(torchfuser.compile(tables)(t), tables(t)):
        assert_close(actual, expected)
    cat_kernels = kernels_covering(torchfuser.last_report(), "cat", "cos", "sin")
    assert len(cat_kernels) == 1


def test_cat_of_two_computed_operands_of_unequal_widths(schedule):
    def fn(a, b, c):
        return torch.cat((torch.tanh(a) * 2, torch.sigmoid(b) + c), dim=-1) - 0.25

    a, b, c = torch.randn(5, 3, 3), torch.randn(5, 3, 10), torch.randn(10)
    assert_close(torchfuser.compile(fn)(a, b, c), fn(a, b, c))
    report = torchfuser.last_report()
    assert report.fallbacks == [] and len(report.kernels) == 1
    assert {"tanh", "sigmoid", "cat", "sub"} <= {n.split("_")[0] for n in report.kernels[0].nodes}


def test_cat_of_three_operands_with_an_empty_one_and_promotion(schedule):
    def fn(x, n, y):
        return torch.cat((x.exp(), n * 3, y[..., :0], F.silu(y)), dim=-1)

    x, y = torch.randn(4, 2, 5), torch.randn(4, 2, 6)
    n = torch.randint(-3, 3, (4, 2, 1))
    assert_close(torchfuser.compile(fn)(x, n, y), fn(x, n, y))
    assert torchfuser.last_report().fallbacks == []


def test_cat_along_another_dim_is_one_kernel():
    """(tests/torchfuser/test_cat_any_dim.py covers cats along other dims in depth.)"""
    def fn(x, y):
        return torch.cat((x.exp(), y.exp()), dim=0) * 2

    x, y = torch.randn(3, 8), torch.randn(5, 8)
    assert_close(torchfuser.compile(fn)(x, y), fn(x, y))
    report = torchfuser.last_report()
    assert report.fallbacks == [] and len(report.kernels) == 1


def test_rotate_half_of_a_computed_value_is_one_kernel(schedule):
    """The slices of a value computed in the kernel are read as shifted copies of its computation."""
    def fn(x, sin):
        return rotate_half(F.silu(x) + 1) * sin

    x, sin = torch.randn(3, 5, 16), torch.randn(5, 16)
    assert_close(torchfuser.compile(fn)(x, sin), fn(x, sin))
    report = torchfuser.last_report()
    assert report.fallbacks == [] and len(report.kernels) == 1


def test_strided_and_single_column_slices_of_a_computed_value(schedule):
    def fn(x, y):
        h = torch.exp(x) * 0.5
        return h[..., 1::3] + y, h[..., 2:3] * y

    x, y = torch.randn(4, 7, 12), torch.randn(4, 7, 4)
    for actual, expected in zip(torchfuser.compile(fn)(x, y), fn(x, y)):
        assert_close(actual, expected)
    assert torchfuser.last_report().fallbacks == []


def test_cat_of_strided_and_single_column_slices(schedule):
    def fn(x, y):
        h = torch.exp(x) * 0.5
        return torch.cat((h[..., 1::3], y.sigmoid(), h[..., :1]), dim=-1)

    x, y = torch.randn(4, 7, 12), torch.randn(4, 7, 5)
    assert_close(torchfuser.compile(fn)(x, y), fn(x, y))
    assert len(torchfuser.last_report().kernels) == 1


def test_a_narrow_value_used_outside_keeps_its_own_kernel():
    """neg(x_hi) is also returned: it cannot be internal to the cat's kernel (it has another width)."""
    def fn(x):
        n = -x[..., 4:]
        return torch.cat((n, x[..., :4]), dim=-1) * 2, n

    x = torch.randn(3, 8)
    for actual, expected in zip(torchfuser.compile(fn)(x), fn(x)):
        assert_close(actual, expected)
    assert torchfuser.last_report().fallbacks == [] and len(torchfuser.last_report().kernels) == 2



def test_an_output_whose_last_dim_is_not_innermost_takes_the_flat_schedule():
    def fn(x):
        return x * 2 + torch.cat((x[..., 6:], x[..., :6].exp()), dim=-1)

    x = torch.randn(12, 5).t()
    out = torchfuser.compile(fn)(x)
    assert_close(out, fn(x))
    assert out.stride() == fn(x).stride() == (1, 5)
    (kernel,) = torchfuser.last_report().kernels
    assert "@last[" in kernel.spec and "rows=" not in kernel.spec
