"""Row reductions (fuse_reductions) end to end against eager: every op, odd row lengths, masks, specials."""

import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from eager_compare import assert_close
from torchfuser.passes import PIPELINE

INF = float("inf")


def rmsnorm(x, w):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


REDUCTIONS = {
    "softmax": lambda x, w, b: torch.softmax(x, -1),
    "log_softmax": lambda x, w, b: F.log_softmax(x, dim=-1),
    "layer_norm": layer_norm,
    "layer_norm_plain": lambda x, w, b: F.layer_norm(x, (x.shape[-1],)),
    "rmsnorm": lambda x, w, b: rmsnorm(x, w),
    "sum": lambda x, w, b: x.sum(-1),
    "sum_keepdim": lambda x, w, b: x.sum(dim=-1, keepdim=True),
    "mean": lambda x, w, b: x.mean(-1),
    "mean_keepdim": lambda x, w, b: x.mean(-1, keepdim=True),
    "amax": lambda x, w, b: x.amax(-1),
    "amax_keepdim": lambda x, w, b: torch.amax(x, dim=2, keepdim=True),
}
# combines added later (min, prod, the index pass): a short and a long row with a vector tail suffice
MORE_REDUCTIONS = {
    "amin": lambda x, w, b: x.amin(-1),
    "prod": lambda x, w, b: (x * 0.1 + 1).prod(-1),
    "argmax": lambda x, w, b: x.argmax(-1),
    "argmin_keepdim": lambda x, w, b: x.argmin(-1, keepdim=True),
}


def compiled(fn, *args):
    """Compile fn, run it on args with build warnings as errors (a PyTorch fallback would hide bugs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        return torchfuser.compile(fn)(*args)


def reduction_kernels():
    return [k for k in torchfuser.last_report().kernels if k.kind == "reduction"]


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize(("name", "n"), [(name, n) for name in sorted(REDUCTIONS) for n in (1, 7, 768, 4097)]
                         + [(name, n) for name in sorted(MORE_REDUCTIONS) for n in (7, 4097)])
def test_each_reduction_matches_eager(name, n, width, vector_width):
    vector_width(width)  # AVX2's vectors and AVX-512's, whatever this CPU's
    fn = {**REDUCTIONS, **MORE_REDUCTIONS}[name]
    x, w, b = torch.randn(2, 3, n), torch.randn(n), torch.randn(n)
    # a sum of n terms in another order differs by about sqrt(n) roundings of its partial sums (a 4097-term
    # sum near zero was once 1.5e-5 off); dropping or doubling a term would still be off by about 1
    atol = 1e-5 * max(1.0, n**0.5) if name.startswith("sum") else 1e-5
    assert_close(compiled(fn, x, w, b), fn(x, w, b), atol=atol)
    (kernel,) = reduction_kernels()
    assert torchfuser.last_report().fallbacks == []
    assert "schedule=row_per_item" in kernel.spec


def test_softmax_with_scale_and_mask_is_one_kernel_with_the_prologue():
    def attention_probs(scores, mask):
        return torch.softmax(scores * 0.125 + mask, dim=-1)

    scores = torch.randn(2, 4, 16, 16)
    mask = torch.zeros(2, 1, 1, 16)
    mask[0, ..., 11:] = -INF  # padding: a broadcast additive mask
    assert_close(compiled(attention_probs, scores, mask), attention_probs(scores, mask))
    (kernel,) = torchfuser.last_report().kernels
    assert kernel.kind == "reduction" and {"mul", "add", "_softmax"} <= set(kernel.nodes)


def test_causal_masked_fill_then_softmax():
    def causal(scores):
        t = scores.shape[-1]
        keep = torch.tril(torch.ones(t, t, dtype=torch.bool))
        return torch.softmax(scores.masked_fill(~keep, -INF), dim=-1)

    scores = torch.randn(3, 9, 9)
    assert_close(compiled(causal, scores), causal(scores))
    assert any("_softmax" in k.nodes for k in reduction_kernels())


def test_gpt2_eager_attention_mask_chain_joins_the_softmax():
    def probs(q, k, attn_mask):  # as GPT-2's eager attention writes it
        w = torch.matmul(q, k.transpose(-1, -2)) / (q.size(-1) ** 0.5)
        t = q.size(-2)
        causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
        mask_value = torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype)
        return torch.softmax(torch.where(causal, w, mask_value) + attn_mask, dim=-1)

    q, k = torch.randn(2, 4, 16, 32), torch.randn(2, 4, 16, 32)
    attn_mask = torch.zeros(2, 1, 1, 16)
    attn_mask[1, ..., 12:] = torch.finfo(torch.float32).min
    assert_close(compiled(probs, q, k, attn_mask), probs(q, k, attn_mask))
    (kernel,) = reduction_kernels()
    assert {"where", "add", "_softmax"} <= set(kernel.nodes)
    # the scale follows the batched matmul's reshape into the GEMM's epilogue
    assert "div" in next(k for k in torchfuser.last_report().kernels if k.kind == "gemm").nodes


@pytest.mark.parametrize("log", [False, True])
def test_fully_masked_rows_are_nan_as_in_eager(log):
    def fn(x, mask):
        y = x + mask
        return F.log_softmax(y, -1) if log else torch.softmax(y, -1)

    x, mask = torch.randn(4, 37), torch.zeros(4, 37)
    mask[1] = -INF  # a whole row masked: eager gives NaN everywhere in it
    mask[2, ::2] = -INF
    expected = fn(x, mask)
    assert expected[1].isnan().all()
    assert_close(compiled(fn, x, mask), expected)


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "layer_norm", "rmsnorm", "sum", "mean", "amax"])
def test_inf_and_nan_inputs_as_in_eager(name):
    fn = REDUCTIONS[name]
    x = torch.randn(6, 40)
    x[0, 3] = INF
    x[1, 5] = -INF
    x[2, 7] = float("nan")
    x[3, :] = -INF
    x[4, 1], x[4, 2] = INF, -INF
    w, b = torch.randn(40), torch.randn(40)
    assert_close(compiled(fn, x, w, b), fn(x, w, b))


@pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0)])
def test_zero_size(shape):
    x = torch.randn(shape)
    for fn in (lambda x: torch.softmax(x, -1), lambda x: x.sum(-1), lambda x: x.mean(-1, keepdim=True)):
        torch._dynamo.reset()
        assert_close(torchfuser.compile(fn)(x), fn(x))


def test_rows_of_zero_length_stay_in_pytorch_with_a_reason():
    fn = lambda x: x.sum(-1) * 2  # noqa: E731
    x = torch.randn(3, 0)
    assert_close(torchfuser.compile(fn)(x), fn(x))
    fallbacks = {f.op: f.reason for f in torchfuser.last_report().fallbacks}
    assert "zero" in fallbacks["aten.sum.dim_IntList"]


@pytest.mark.parametrize("layout", ["transposed", "sliced_rows", "strided_row", "expanded"])
def test_non_contiguous_inputs(layout):
    base = torch.randn(24, 40)
    x = {
        "transposed": base.t(),  # the row is strided
        "sliced_rows": base[::3, 5:],  # rows with a gap between them
        "strided_row": base[:, ::2],  # every other element
        "expanded": base[:1].expand(7, 40),  # one row read seven times
    }[layout]
    w, b = torch.randn(x.shape[-1]), torch.randn(x.shape[-1])

    def fn(x, w, b):
        return torch.softmax(x, -1) + layer_norm(x, w, b) + x.amax(-1, keepdim=True)

    assert_close(compiled(fn, x, w, b), fn(x, w, b))
    assert len(reduction_kernels()) >= 2


def test_layer_norm_with_mean_and_rstd_used():
    def fn(x, w, b):
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], w, b, 1e-5)
        return out * 2, mean + 1, rstd

    x, w, b = torch.randn(5, 3, 33) * 3 + 1, torch.randn(33), torch.randn(33)
    for actual, expected in zip(compiled(fn, x, w, b), fn(x, w, b)):
        assert_close(actual, expected)
    (kernel,) = reduction_kernels()
    assert "native_layer_norm" in kernel.nodes and torchfuser.last_report().fallbacks == []


def test_layer_norm_training_step_matches_eager_gradients():
    model = nn.Sequential(nn.LayerNorm(48), nn.GELU())
    x = torch.randn(4, 6, 48, requires_grad=True)
    expected = model(x)
    expected.sum().backward()
    grads = (x.grad.clone(), model[0].weight.grad.clone())
    x.grad, model[0].weight.grad = None, None
    actual = torchfuser.compile(model)(x)
    actual.sum().backward()
    assert_close(actual, expected)
    assert_close(x.grad, grads[0], rtol=1e-4, atol=1e-4)
    assert_close(model[0].weight.grad, grads[1], rtol=1e-4, atol=1e-4)


def test_residual_prologue_and_affine_activation_epilogue():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(64)

        def forward(self, x, residual):
            return F.gelu(self.norm(x + residual)) * 0.5 + residual

    model = Block().eval()
    x, r = torch.randn(2, 7, 64), torch.randn(2, 7, 64)
    with torch.no_grad():
        assert_close(compiled(model, x, r), model(x, r))
    (kernel,) = torchfuser.last_report().kernels
    assert kernel.kind == "reduction"
    assert {"add", "native_layer_norm", "gelu", "mul"} <= set(kernel.nodes)
    stats = {p.name: p.stats for p in torchfuser.last_report().passes}["fuse_reductions"]
    assert stats["reductions"] == 1 and stats["prologue_ops"] == 1 and stats["epilogue_ops"] >= 3


def test_llama_rmsnorm_is_one_kernel():
    class RMSNorm(nn.Module):  # as LLaMA writes it
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(torch.randn(dim))
            self.eps = eps

        def forward(self, x):
            variance = x.pow(2).mean(-1, keepdim=True)
            return self.weight * (x * torch.rsqrt(variance + self.eps))

    model = RMSNorm(96).eval()
    x = torch.randn(3, 5, 96)
    with torch.no_grad():
        assert_close(compiled(model, x), model(x))
    (kernel,) = torchfuser.last_report().kernels
    assert kernel.kind == "reduction" and {"pow_1", "mean", "rsqrt"} <= set(kernel.nodes)


@pytest.mark.parametrize("weighted", [True, False])
def test_torch_rms_norm_is_one_kernel(weighted):
    """nn.RMSNorm / F.rms_norm: with a weight, its decomposition adds eps in place (add_ on an intermediate),
    which the lowering makes out-of-place rather than leave to PyTorch."""
    model = nn.RMSNorm(40, eps=1e-5, elementwise_affine=weighted).eval()
    if weighted:
        nn.init.normal_(model.weight)
    x = torch.randn(2, 7, 40)
    with torch.no_grad():
        assert_close(compiled(model, x), model(x))
    assert torchfuser.last_report().fallbacks == []
    (kernel,) = torchfuser.last_report().kernels
    assert kernel.kind == "reduction"


def test_statistic_used_elsewhere_is_an_extra_output():
    def fn(x):
        m = x.amax(-1, keepdim=True)
        return torch.exp(x - m), m * 3

    x = torch.randn(10, 50)
    for actual, expected in zip(compiled(fn, x), fn(x)):
        assert_close(actual, expected)
    assert len(reduction_kernels()) == 1


def test_operand_that_depends_on_the_result_is_not_loaded():
    def fn(x):
        s = torch.softmax(x, -1)
        t = s.flip(-1)  # not elementwise: stays outside, and depends on s
        return s * t  # so this multiply cannot join the softmax kernel

    x = torch.randn(4, 12)
    assert_close(compiled(fn, x), fn(x))


def test_disabled_pass_gives_the_reason():
    fn = lambda x: torch.softmax(x, -1)  # noqa: E731
    x = torch.randn(3, 8)
    assert_close(torchfuser.compile(fn, disable=["fuse_reductions"])(x), fn(x))
    reasons = {f.op: f.reason for f in torchfuser.last_report().fallbacks}
    assert reasons["aten._softmax.default"] == "fuse_reductions is disabled"


def test_softmax_over_another_dim_is_left_alone_and_a_sum_there_is_moved_last():
    fn = lambda x: torch.softmax(x, 0) + x.sum(0, keepdim=True)  # noqa: E731
    x = torch.randn(5, 6)
    assert_close(torchfuser.compile(fn)(x), fn(x))
    (kernel,) = reduction_kernels()  # the sum, over the last dim of a permuted view (reduce_over_last_dim)
    assert not any(n.startswith("_softmax") for n in kernel.nodes)
    assert "aten._softmax.default" in {f.op for f in torchfuser.last_report().fallbacks}


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "rmsnorm", "amax", "amin", "prod", "argmax"])
def test_work_group_per_row_schedule_for_gpus(monkeypatch, name):
    """The GPU schedule (local-memory tree) forced on PoCL: builds and matches eager."""
    from torchfuser.runtime.device import Device

    monkeypatch.setattr(Device, "type_name", property(lambda self: "GPU"))
    fn = {**REDUCTIONS, **MORE_REDUCTIONS}[name]
    x, w, b = torch.randn(3, 4, 300), torch.randn(300), torch.randn(300)
    x[0, 0] = -INF
    assert_close(compiled(fn, x, w, b), fn(x, w, b))
    (kernel,) = reduction_kernels()
    assert "schedule=group_per_row" in kernel.spec and "barrier" in kernel.source


@pytest.mark.parametrize("local_size", [1, 48, 256, 512])
def test_group_per_row_kernel_is_correct_for_any_work_group_size(local_size):
    """The runtime may launch the GPU kernel with a work-group size of its choosing: rows are strided over
    the groups and items beyond the local-memory tree's width fold in first."""
    import numpy as np
    import pyopencl as cl

    from torchfuser.codegen import kernel_source
    from torchfuser.ir.reduction import RowReductionBuilder, layer_norm_template
    from torchfuser.runtime.device import get_device
    from torchfuser.ir.kernels import ReductionKernel
    from torchfuser.runtime.launch import configure

    device = get_device()
    builder = RowReductionBuilder(["float32", "float32", "float32"])
    values = layer_norm_template(builder, lambda b: 0, 1e-5, weight=1, bias=2)
    final = builder.final()
    reduction = builder.build(final, [values.element(final)], [values.rows[1], values.rows[2]])
    x, w, b = torch.randn(5, 300), torch.randn(300), torch.randn(300)
    kernel = ReductionKernel(reduction, (5, 300), [(5, 1), (5, 1)], group=0)
    launch = configure(kernel, [x, w, b], "GPU")
    program = cl.Program(device.context, kernel_source(launch.spec)).build()
    cl_kernel = cl.Kernel(program, launch.spec.kernel_name)
    flags = cl.mem_flags
    inputs = [cl.Buffer(device.context, flags.READ_ONLY | flags.COPY_HOST_PTR, hostbuf=t.numpy()) for t in (x, w, b)]
    outs = [np.empty(shape, np.float32) for shape, _, _ in launch.outputs]
    out_buffers = [cl.Buffer(device.context, flags.WRITE_ONLY, o.nbytes) for o in outs]
    cl_kernel.set_args(*launch.arguments(inputs, [0, 0, 0], out_buffers))
    cl.enqueue_nd_range_kernel(device.queue, cl_kernel, (3 * local_size,), (local_size,))  # fewer groups than rows
    for host, buffer in zip(outs, out_buffers):
        cl.enqueue_copy(device.queue, host, buffer)
    for actual, expected in zip(outs, kernel.reference(x, w, b)):
        assert_close(torch.from_numpy(actual), expected)


def test_transformer_block_norms_and_attention_softmax():
    class Block(nn.Module):  # GPT-2 shaped: pre-norm, causal attention written out, GELU MLP
        def __init__(self, d=64, heads=4):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, -1)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            w = (q @ k.transpose(-1, -2)) / (d // self.heads) ** 0.5
            w = w.masked_fill(~torch.tril(torch.ones(t, t, dtype=torch.bool)), -INF)
            a = (torch.softmax(w, -1) @ v).transpose(1, 2).reshape(b, t, d)
            x = x + self.proj(a)
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    model, x = Block().eval(), torch.randn(2, 16, 64)
    # about the norms and a softmax kernel: without fuse_attention (it would take the softmax between the
    # bmms) and without GEMM kernels (their first call on a bmm of a pending activation can read it early)
    disable = [name for name in ("fuse_attention", "fuse_gemm_epilogue") if name in PIPELINE]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert_close(torchfuser.compile(model, disable=disable)(x), model(x), rtol=1e-4, atol=1e-4)
    covered = [k.nodes for k in reduction_kernels()]
    assert len(covered) == 3 and any({"where", "_softmax"} <= set(nodes) for nodes in covered)


@pytest.mark.parametrize("width", [8, 16])
@pytest.mark.parametrize("n", [7, 33, 100])
def test_masks_comparisons_and_logic_take_the_vector_path(n, width, vector_width):
    vector_width(width)
    def fn(x, keep, y):
        # bool load, comparison, logical ops, bool -> float cast, where: all in the prologue
        allowed = torch.logical_and(keep, x > -1.5) | (y > 2)
        scores = torch.where(allowed, x * 0.5, -INF) + allowed.float()
        return torch.softmax(scores, -1), torch.where(y > 0, x, y).sum(-1)

    x, y = torch.randn(3, 5, n), torch.randn(3, 5, n)
    keep = torch.rand(3, 1, n) > 0.3
    keep[0, 0] = False  # a fully masked row unless y > 2 somewhere
    for actual, expected in zip(compiled(fn, x, keep, y), fn(x, keep, y)):
        assert_close(actual, expected)
    kernels = reduction_kernels()
    assert len(kernels) == 2 and all(f"{width}_u *)(in" in k.source and "select(" in k.source for k in kernels)


def test_layer_norm_and_softmax_written_out_are_one_kernel_each():
    def manual_layer_norm(x, w, b):  # as older BERT code writes it
        u = x.mean(-1, keepdim=True)
        s = (x - u).pow(2).mean(-1, keepdim=True)
        return w * ((x - u) / torch.sqrt(s + 1e-12)) + b

    def manual_softmax(x):
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    x, w, b = torch.randn(4, 7, 33) * 2 + 3, torch.randn(33), torch.randn(33)
    assert_close(compiled(manual_layer_norm, x, w, b), manual_layer_norm(x, w, b))
    (kernel,) = torchfuser.last_report().kernels
    assert kernel.kind == "reduction" and {"mean", "mean_1", "sqrt", "div"} <= set(kernel.nodes)
    assert kernel.spec.count("\nstage ") == 2  # two passes over the row, then the final one

    torch._dynamo.reset()
    x = torch.randn(5, 100)
    x[0] = -INF
    assert_close(compiled(manual_softmax, x), manual_softmax(x))
    (kernel,) = torchfuser.last_report().kernels
    assert kernel.kind == "reduction" and {"amax", "exp", "sum_1", "div"} <= set(kernel.nodes)


def test_row_level_ops_on_layer_norm_statistics():
    def fn(x):
        out, mean, rstd = torch.ops.aten.native_layer_norm(x, [x.shape[-1]], None, None, 1e-5)
        return out, mean * rstd, 1 / rstd  # row-level ops on both statistics join the kernel

    x = torch.randn(6, 50) + 2
    for actual, expected in zip(compiled(fn, x), fn(x)):
        assert_close(actual, expected)
    (kernel,) = torchfuser.last_report().kernels
    assert kernel.kind == "reduction" and {"native_layer_norm", "mul", "reciprocal"} <= set(kernel.nodes)


@pytest.mark.parametrize("n", [1, 2, 7, 768])
def test_variance_and_std(n):
    def fn(x):
        normalised = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-5)
        spread = torch.softmax(x, -1).var(-1, keepdim=True, correction=2)  # var of a kernel's own value
        return normalised, x.std(-1), spread * 3

    x = torch.randn(3, 4, n) * 2 + 5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # eager: degrees of freedom <= 0 for the shortest rows
        expected = fn(x)
        actual = compiled(fn, x)
    for a, e in zip(actual, expected):
        assert_close(a, e)
    report = torchfuser.last_report()
    assert report.fallbacks == []
    assert any({"_softmax", "var_1", "mul"} <= set(k.nodes) for k in reduction_kernels())
