"""Fused attention (fuse_attention) end to end against eager: SDPA and the written-out pattern, over shapes,
masks, causal, grouped-query attention, strided q/k/v, fully masked rows, training and the GPU schedule."""

import math
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from eager_compare import assert_close

INF = float("inf")
MIN = torch.finfo(torch.float32).min

# (B, H, T, S, D): single query / single key, odd lengths, the head dims models use and ones that are not
# a multiple of the vector width
SHAPES = [(1, 1, 1, 1, 32), (2, 3, 1, 7, 64), (2, 2, 9, 1, 80), (1, 2, 17, 33, 128), (2, 2, 37, 19, 40),
          (1, 3, 20, 20, 72)]


def compiled(fn, *args, disable=()):
    """Compile fn and run it with build warnings as errors (a PyTorch fallback would hide bugs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return torchfuser.compile(fn, disable=disable)(*args)


def attention_kernels():
    return [k for k in torchfuser.last_report().kernels if k.kind == "attention"]


def sdpa(q, k, v, mask=None, causal=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


def make_mask(kind, b, h, t, s):
    if kind == "none":
        return None
    if kind == "padding":  # [B, 1, 1, S] additive, -inf on the padded keys of the last batch
        mask = torch.zeros(b, 1, 1, s)
        mask[-1, ..., s // 2 + 1:] = -INF
        return mask
    if kind == "bool":  # [T, S] boolean: True keeps
        keep = torch.rand(t, s) > 0.3
        keep[:, 0] = True
        return keep
    return torch.randn(b, h, t, s)  # "full": a float bias per score


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("mask_kind", ["none", "padding", "bool", "full", "causal"])
def test_sdpa_matches_eager(shape, mask_kind):
    b, h, t, s, d = shape
    q, k, v = torch.randn(b, h, t, d), torch.randn(b, h, s, d), torch.randn(b, h, s, d)
    if mask_kind == "causal":
        fn = lambda q, k, v: sdpa(q, k, v, causal=True)  # noqa: E731
        args = (q, k, v)
    else:
        fn, args = sdpa, (q, k, v, make_mask(mask_kind, b, h, t, s))
        if args[-1] is None:
            args = args[:-1]
    actual = compiled(fn, *args)
    expected = fn(*args)
    assert_close(actual, expected)
    assert actual.stride() == expected.stride()
    (kernel,) = attention_kernels()
    assert "_scaled_dot_product_flash_attention_for_cpu" in kernel.nodes
    assert "schedule=query_lanes" in kernel.spec


def test_fully_masked_rows_as_in_eager():
    """SDPA gives 0 for a row with every key masked; the written-out softmax gives NaN."""
    q, k, v = torch.randn(2, 2, 5, 32), torch.randn(2, 2, 6, 32), torch.randn(2, 2, 6, 32)
    mask = torch.zeros(2, 1, 5, 6)
    mask[0, 0, 2] = -INF
    mask[1, 0, :, ::2] = -INF
    expected = sdpa(q, k, v, mask)
    assert (expected[0, :, 2] == 0).all()
    assert_close(compiled(sdpa, q, k, v, mask), expected)

    def explicit(q, k, v, mask):
        return torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + mask, dim=-1) @ v

    expected = explicit(q, k, v, mask)
    assert expected[0, :, 2].isnan().all()
    assert_close(compiled(explicit, q, k, v, mask), expected)
    assert len(attention_kernels()) == 1


@pytest.mark.parametrize("causal", [False, True])
def test_nan_and_inf_inputs_give_nan_where_eager_does(causal):
    """The kernel's max and exp skip IEEE fmax's NaN rule: a NaN or inf score still poisons its row."""
    q, k, v = torch.randn(1, 2, 40, 64), torch.randn(1, 2, 40, 64), torch.randn(1, 2, 40, 64)
    q[0, 0, 5, 3], k[0, 1, 7, 0], k[0, 0, 30] = math.nan, INF, math.nan
    expected = sdpa(q, k, v, causal=causal)
    actual = compiled(lambda q, k, v: sdpa(q, k, v, causal=causal), q, k, v)
    assert torch.equal(actual.isnan(), expected.isnan()) and expected.isnan().any()
    assert_close(actual.nan_to_num(), expected.nan_to_num())


@pytest.mark.parametrize("heads, kv_heads", [(4, 2), (6, 1), (8, 8)])
def test_grouped_query_attention(heads, kv_heads):
    q, k, v = torch.randn(2, heads, 11, 64), torch.randn(2, kv_heads, 13, 64), torch.randn(2, kv_heads, 13, 64)
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
    assert_close(compiled(fn, q, k, v), fn(q, k, v))
    assert len(attention_kernels()) == 1


def llama_attention(q, k, v, mask):
    """LLaMA's eager attention: repeat_kv, then matmul, scale, additive mask, fp32 softmax, matmul."""
    b, kv_heads, s, d = k.shape
    n_rep = q.shape[1] // kv_heads
    k = k[:, :, None].expand(b, kv_heads, n_rep, s, d).reshape(b, kv_heads * n_rep, s, d)
    v = v[:, :, None].expand(b, kv_heads, n_rep, s, d).reshape(b, kv_heads * n_rep, s, d)
    w = torch.matmul(q, k.transpose(2, 3)) * d**-0.5 + mask
    w = torch.softmax(w, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(F.dropout(w, p=0.1, training=False), v)


def test_llama_repeat_kv_becomes_grouped_indexing():
    q, k, v = torch.randn(2, 8, 10, 32), torch.randn(2, 2, 10, 32), torch.randn(2, 2, 10, 32)
    mask = torch.full((10, 10), MIN).triu(1)[None, None].expand(2, 1, 10, 10)
    assert_close(compiled(llama_attention, q, k, v, mask), llama_attention(q, k, v, mask))
    (kernel,) = attention_kernels()
    assert {"unsqueeze", "clone", "bmm", "_softmax", "bmm_1"} <= set(kernel.nodes)
    assert [k.kind for k in torchfuser.last_report().kernels] == ["attention"]


def test_strided_q_k_v_from_a_fused_projection():
    """q, k, v as [B, T, H, D] views of one [B, T, 3, H, D] tensor: read through their strides, no copy."""
    qkv = torch.randn(2, 15, 3, 4, 64)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    expected = sdpa(q, k, v)
    actual = compiled(sdpa, q, k, v)
    assert_close(actual, expected)
    assert actual.stride() == expected.stride()  # SDPA's output follows q's layout
    assert torchfuser.last_report().fallbacks == []
    assert [k.kind for k in torchfuser.last_report().kernels] == ["attention"]


def test_head_dim_not_contiguous():
    """A head dim with stride 9: the written-out pattern reads it as it is (aot's clones are skipped).
    (SDPA itself takes its math path for such inputs, decomposed before the passes.)"""

    def explicit(q, k, v):
        return torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1) @ v

    q, k, v = (torch.randn(2, 3, 32, 9).transpose(-1, -2) for _ in range(3))
    assert_close(compiled(explicit, q, k, v), explicit(q, k, v))
    assert "layouts=strided,strided,strided,contig" in attention_kernels()[0].spec


class Gpt2Attention(nn.Module):
    """GPT-2's eager attention (fused qkv projection, causal where with finfo.min, padding mask, dropout)."""

    def __init__(self, width=64, heads=4):
        super().__init__()
        self.heads = heads
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.attn_dropout = nn.Dropout(0.1)

    def forward(self, x, attention_mask):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / torch.full([], v.size(-1) ** 0.5)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        w = torch.where(causal, w, torch.full([], MIN)) + attention_mask
        w = self.attn_dropout(torch.softmax(w, dim=-1))
        a = torch.matmul(w, v).transpose(1, 2).reshape(b, t, d)
        return self.c_proj(a)


class BertSelfAttention(nn.Module):
    def __init__(self, width=96, heads=3):
        super().__init__()
        self.heads, self.size = heads, width // heads
        self.query, self.key, self.value = nn.Linear(width, width), nn.Linear(width, width), nn.Linear(width, width)

    def split(self, x):
        return x.view(*x.shape[:2], self.heads, self.size).permute(0, 2, 1, 3)

    def forward(self, x, attention_mask):
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.size) + attention_mask
        context = torch.matmul(nn.functional.softmax(scores, dim=-1), v)
        return context.permute(0, 2, 1, 3).contiguous().view(*x.shape)


@pytest.mark.parametrize("module, width, t", [(Gpt2Attention, 64, 13), (BertSelfAttention, 96, 1),
                                              (BertSelfAttention, 96, 21)])
def test_explicit_pattern_in_a_module(module, width, t):
    model = module().eval()
    x = torch.randn(2, t, width)
    mask = torch.zeros(2, 1, 1, t)
    mask[1, ..., t // 2 + 1:] = MIN
    with torch.no_grad():
        assert_close(compiled(model, x, mask), model(x, mask))
    (kernel,) = attention_kernels()
    assert {"bmm", "_softmax", "bmm_1"} <= set(kernel.nodes)
    others = [k for k in torchfuser.last_report().kernels if k.kind != "attention"]
    assert not any("_softmax" in k.nodes for k in others)
    # the projections keep their GEMMs (BERT's q/k/v, which share their input, as one: merge_sibling_gemms)
    assert sum(k.kind == "gemm" for k in others) >= (1 if module is BertSelfAttention else 2)
    # the heads transpose before the out-projection is the attention kernel's output layout, not a copy
    # (at t = 1 the transposed output is contiguous already: the graph has no copy to absorb)
    assert ("clone" in {n.rstrip("_0123456789") for n in kernel.nodes}) == (t > 1)
    # GPT-2's causal mask (tril of ones, as aranges and a compare) is the only pointwise work left
    assert {k.kind for k in others if k.kind != "gemm"} == ({"pointwise"} if module is Gpt2Attention else set())
    assert not any(n.startswith(("clone", "permute")) for k in others if k.kind == "pointwise" for n in k.nodes)


def test_attention_probabilities_used_elsewhere_stay_unfused():
    def with_probs(q, k, v):
        p = torch.softmax(q @ k.transpose(-1, -2) * 0.125, dim=-1)
        return p @ v, p

    q, k, v = (torch.randn(1, 2, 8, 64) for _ in range(3))
    for actual, expected in zip(compiled(with_probs, q, k, v), with_probs(q, k, v)):
        assert_close(actual, expected)
    assert attention_kernels() == []


def test_training_returns_logsumexp_and_gradients_match():
    q, k, v = (torch.randn(2, 3, 10, 32, requires_grad=True) for _ in range(3))
    mask = torch.randn(2, 1, 10, 10)

    def loss(q, k, v):
        return (sdpa(q, k, v, mask) ** 2).sum()

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with torchfuser.collect_reports() as reports:
            fused = torchfuser.compile(loss)(q, k, v)
            grads = torch.autograd.grad(fused, (q, k, v))
    expected = loss(q, k, v)
    assert_close(fused, expected)
    for actual, reference in zip(grads, torch.autograd.grad(expected, (q, k, v))):
        assert_close(actual, reference, rtol=1e-4, atol=1e-4)
    (kernel,) = [k for r in reports for k in r.kernels if k.kind == "attention"]
    assert "lse=1" in kernel.spec


def test_gpu_schedule_forced_on_pocl(monkeypatch):
    from torchfuser.runtime.device import Device

    monkeypatch.setattr(Device, "type_name", property(lambda self: "GPU"))
    q, k, v = torch.randn(2, 4, 19, 40), torch.randn(2, 2, 23, 40), torch.randn(2, 2, 23, 40)
    mask = torch.zeros(2, 1, 19, 23)
    mask[0, 0, 3] = -INF
    fn = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, enable_gqa=True)  # noqa: E731
    assert_close(compiled(fn, q, k, v, mask), fn(q, k, v, mask))
    assert "schedule=row_scalar" in attention_kernels()[0].spec
    assert_close(compiled(llama_attention, q, k, v, mask), llama_attention(q, k, v, mask))
    merged = lambda q, k, v, m: llama_attention(q, k, v, m).transpose(1, 2).reshape(2, 19, -1)  # noqa: E731
    assert_close(compiled(merged, q, k, v, mask), merged(q, k, v, mask))  # the kernel writes [B, T, H, D]
    assert "clone" in attention_kernels()[0].nodes


def test_disabled_pass_leaves_sdpa_to_pytorch_with_the_reason():
    q, k, v = (torch.randn(1, 2, 4, 32) for _ in range(3))
    assert_close(compiled(sdpa, q, k, v, disable=["fuse_attention"]), sdpa(q, k, v))
    reasons = {f.op: f.reason for f in torchfuser.last_report().fallbacks}
    assert reasons == {"aten._scaled_dot_product_flash_attention_for_cpu.default": "fuse_attention is disabled"}


@pytest.mark.parametrize("tile", [(4, 1), (8, 1), (8, 3), (16, 2)], ids=lambda t: f"{t[0]}x{t[1]}")
def test_query_tiles_with_tails(tile, monkeypatch):
    """The CPU schedule's query tiles (lanes x vectors): T not a multiple of the tile (rows past T are
    recomputed from row T - 1 and not stored), a head dim with a tail, masks, causal, logsumexp."""
    from torchfuser.runtime import attention_launch, launch

    monkeypatch.setattr(attention_launch, "cpu_tile", lambda t: tile)
    monkeypatch.setattr(launch, "_by_structure", {})  # launches configured with another tile are shared by structure
    q, k, v = torch.randn(2, 3, 13, 44), torch.randn(2, 3, 21, 44), torch.randn(2, 3, 21, 44)
    mask = torch.randn(2, 1, 13, 21)
    mask[1, 0, 4] = -INF
    fn = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # noqa: E731
    assert_close(compiled(fn, q, k, v, mask), fn(q, k, v, mask))
    assert f"lanes={tile[0]}x{tile[1]}" in attention_kernels()[0].spec
    causal = lambda q, k, v: sdpa(q, k, v, causal=True)  # noqa: E731
    assert_close(compiled(causal, q, k, v), causal(q, k, v))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    with torchfuser.collect_reports() as reports:
        fused = torchfuser.compile(lambda q, k, v: sdpa(q, k, v, mask, causal=False).sum())(q, k, v)
        grads = torch.autograd.grad(fused, (q, k))
    expected = sdpa(q, k, v, mask).sum()
    for actual, reference in zip(grads, torch.autograd.grad(expected, (q, k))):
        assert_close(actual, reference, rtol=1e-4, atol=1e-4)
    assert any("lse=1" in k.spec and f"lanes={tile[0]}" in k.spec for r in reports for k in r.kernels)


@pytest.mark.parametrize("keys", [37, 16, 5])
def test_k_strided_along_head_dim_with_masks_gqa_and_partial_blocks(keys):
    """k contiguous along the keys (kᵀ materialised) is read element by element; full 8-key blocks and a
    partial last one (its rows clamped to the last key, its v rows never read); through LLaMA's repeat_kv.
    The mask: rows contiguous along the keys (vector loads transposed in registers), then a gathered one."""
    q, v = torch.randn(2, 4, 11, 64), torch.randn(2, 2, keys, 64)
    k = torch.randn(2, 2, 64, keys).transpose(-1, -2)
    mask = torch.randn(2, 1, 11, keys)
    mask[0, 0, 5] = -INF  # a fully masked row: NaN, as eager's softmax gives
    assert_close(compiled(llama_attention, q, k, v, mask), llama_attention(q, k, v, mask))
    (kernel,) = attention_kernels()
    assert "layouts=contig,strided,contig,contig" in kernel.spec and "masks=rows" in kernel.spec
    mask = mask.transpose(-1, -2).contiguous().transpose(-1, -2)  # the same values, stride 1 along the queries
    assert_close(compiled(llama_attention, q, k, v, mask), llama_attention(q, k, v, mask))
    assert "masks=strided" in attention_kernels()[0].spec


def test_score_program_without_a_vector_form_runs_lane_by_lane():
    """An int64 bias (cast in the score program) has no vector form: the program runs per query lane."""

    def explicit(q, k, v, bias):
        return torch.softmax(q @ k.transpose(-1, -2) * 0.125 + bias, dim=-1) @ v

    q, k, v = torch.randn(2, 2, 19, 33), torch.randn(2, 2, 12, 33), torch.randn(2, 2, 12, 33)
    bias = torch.randint(-3, 3, (19, 12))
    assert_close(compiled(explicit, q, k, v, bias), explicit(q, k, v, bias))
    assert "int64" in attention_kernels()[0].spec


@pytest.mark.parametrize("causal", [False, True])
def test_heads_transpose_is_written_by_the_kernel(causal):
    """.transpose(1, 2).contiguous() / .reshape(B, T, C) right after attention: the kernel writes [B, T, H, D]
    itself; no copy kernel follows (SDPA on contiguous q, k, v and the written-out pattern)."""

    def with_sdpa(q, k, v):
        return sdpa(q, k, v, causal=causal).transpose(1, 2).contiguous().view(2, 37, -1)

    def explicit(q, k, v):
        w = q @ k.transpose(-1, -2) / 8.0
        if causal:
            w = w.masked_fill(torch.ones(37, 37, dtype=torch.bool).triu(1), -INF)
        return (torch.softmax(w, dim=-1) @ v).transpose(1, 2).reshape(2, 37, -1)

    q, k, v = (torch.randn(2, 3, 37, 64) for _ in range(3))
    for fn in (with_sdpa, explicit):
        actual = compiled(fn, q, k, v)
        assert_close(actual, fn(q, k, v))
        assert actual.is_contiguous()
        report = torchfuser.last_report()
        (kernel,) = [k for k in report.kernels if k.kind == "attention"]
        assert {"permute", "clone"} <= {n.rstrip("_0123456789") for n in kernel.nodes}
        assert not any("clone" in n for k in report.kernels if k.kind != "attention" for n in k.nodes)
