"""fuse_gemm_epilogue end to end: Linear / mm / addmm with bias and activations, against eager."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
import torchfuser.runtime.gemm_launch as gemm_launch
from torchfuser.runtime.launch import configurations
from eager_compare import assert_close

ACTIVATIONS = {
    "none": lambda x: x, "relu": torch.relu, "silu": F.silu, "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "tanh": torch.tanh, "sigmoid": torch.sigmoid,
}


class LinearAct(nn.Module):
    def __init__(self, k, n, act, bias=True):
        super().__init__()
        self.fc = nn.Linear(k, n, bias=bias)
        self.act = ACTIVATIONS[act]

    def forward(self, x):
        return self.act(self.fc(x))


def run(model, x):
    with torch.no_grad():
        expected = model(x)
        actual = torchfuser.compile(model)(x)
    return actual, expected


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_linear_with_each_activation_is_one_gemm_kernel(act):
    model = LinearAct(48, 40, act).eval()
    actual, expected = run(model, torch.randn(2, 5, 48))
    assert_close(actual, expected)
    report = torchfuser.last_report()
    assert [k.kind for k in report.kernels] == ["gemm"]
    assert report.fallbacks == []
    assert torchfuser.last_log["gemm_epilogue"] == 1


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (7, 7, 7), (1, 127, 769), (127, 769, 7), (769, 33, 127), (8, 768, 64)])
def test_odd_shapes(m, k, n):
    model = LinearAct(k, n, "gelu").eval()
    actual, expected = run(model, torch.randn(m, k))
    assert_close(actual, expected, rtol=1e-4, atol=1e-4)


def test_linear_without_bias_then_bias_add():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 32, bias=False)
            self.b = nn.Parameter(torch.randn(32))

        def forward(self, x):
            return torch.relu(self.fc(x) + self.b)

    actual, expected = run(Model().eval(), torch.randn(3, 10, 64))
    assert_close(actual, expected)
    report = torchfuser.last_report()
    assert [k.kind for k in report.kernels] == ["gemm"]
    assert "add" in report.kernels[0].spec and "relu" in report.kernels[0].spec


def test_addmm_with_alpha_and_beta():
    def fn(bias, x, w):
        return torch.tanh(torch.addmm(bias, x, w, beta=0.5, alpha=2.0))

    bias, x, w = torch.randn(1, 24), torch.randn(17, 40), torch.randn(40, 24)
    assert_close(torchfuser.compile(fn)(bias, x, w), fn(bias, x, w))
    assert torchfuser.last_report().kernels[0].kind == "gemm"


def test_transposed_and_sliced_operands():
    def fn(x, w):
        return torch.sigmoid(x.t() @ w[:, ::2])

    x, w = torch.randn(50, 30), torch.randn(50, 80)
    assert_close(torchfuser.compile(fn)(x, w), fn(x, w))
    assert torchfuser.last_report().kernels[0].kind == "gemm"


def test_a_diamond_after_the_gemm_joins_the_epilogue():
    def fn(x, w):
        h = x @ w
        return torch.relu(h) + h * 0.5  # h is read three times, all inside the region

    x, w = torch.randn(9, 16), torch.randn(16, 12)
    assert_close(torchfuser.compile(fn)(x, w), fn(x, w))
    report = torchfuser.last_report()
    assert [k.kind for k in report.kernels] == ["gemm"]
    assert {p.name: p.stats for p in report.passes}["fuse_gemm_epilogue"]["epilogue_ops"] == 3


def test_a_gemm_result_needed_outside_is_not_absorbed():
    def fn(x, w):
        h = x @ w
        return torch.relu(h), h  # h itself is an output: the epilogue may not replace it

    x, w = torch.randn(9, 16), torch.randn(16, 12)
    for actual, expected in zip(torchfuser.compile(fn)(x, w), fn(x, w)):
        assert_close(actual, expected)
    stats = {p.name: p.stats for p in torchfuser.last_report().passes}
    assert stats["fuse_gemm_epilogue"]["epilogue_ops"] == 0


def test_gpt2_gelu_new_is_absorbed():
    import math

    def gelu_new(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))

    fc = nn.Linear(32, 128)

    def fn(x):
        return gelu_new(fc(x))

    x = torch.randn(2, 7, 32)
    with torch.no_grad():
        assert_close(torchfuser.compile(fn)(x), fn(x))
    assert [k.kind for k in torchfuser.last_report().kernels] == ["gemm"]


def test_mlp_block_matches_eager_and_fuses_everything():
    model = nn.Sequential(nn.LayerNorm(96), nn.Linear(96, 384), nn.GELU(), nn.Linear(384, 96)).eval()
    x = torch.randn(4, 16, 96)
    actual, expected = run(model, x)
    assert_close(actual, expected, atol=1e-4)
    kinds = sorted(k.kind for k in torchfuser.last_report().kernels)
    assert kinds.count("gemm") == 2


def test_disabling_the_gemm_pass_leaves_addmm_to_pytorch():
    model = LinearAct(32, 16, "relu").eval()
    x = torch.randn(4, 32)
    with torch.no_grad():
        out = torchfuser.compile(model, disable=["fuse_gemm_epilogue"])(x)
    assert_close(out, model(x))
    report = torchfuser.last_report()
    assert "aten.addmm.default" in [f.op for f in report.fallbacks]
    assert all(k.kind == "pointwise" for k in report.kernels)  # relu alone still fuses


def test_manual_linear_act_op():
    x, w, b = torch.randn(3, 7, 20), torch.randn(12, 20), torch.randn(12)
    out = torch.ops.torchfuser.linear_act(x, w, b, "silu")
    assert_close(out, F.silu(F.linear(x, w, b)))
    out = torch.ops.torchfuser.linear_act(x, w.t().contiguous(), None, "none", trans_b=False)
    assert_close(out, F.linear(x, w))
    with pytest.raises(ValueError, match="act must be one of"):
        torch.ops.torchfuser.linear_act(x, w, b, "swish")
    with pytest.raises(ValueError, match="features"):
        torch.ops.torchfuser.linear_act(x, w.t(), b, "relu")


def test_cpu_devices_use_the_packed_schedule():
    model = LinearAct(40, 70, "silu").eval()
    actual, expected = run(model, torch.randn(gemm_launch.ROWS_MAX_M + 13, 40))  # decode sizes run "rows"
    assert_close(actual, expected)
    (kernel,) = torchfuser.last_report().kernels
    assert "schedule=packed" in kernel.spec and f"float{gemm_launch.panel_vector_width()}_u *)(bk" in kernel.source


def test_in_place_weight_updates_are_seen(monkeypatch):
    model = LinearAct(24, 48, "relu").eval()
    x = torch.randn(5, 24)
    fast = torchfuser.compile(model)
    with torch.no_grad():
        assert_close(fast(x), model(x))
        model.fc.weight.mul_(-2.0)  # bumps the version: the packed copy must be rebuilt
        assert_close(fast(x), model(x))


def test_a_weight_given_new_storage_is_packed_again():
    """`p.data = new` swaps the parameter's storage but keeps its version: the packed copy is found by both."""
    model = LinearAct(24, 48, "relu").eval()
    x = torch.randn(5, 24)
    fast = torchfuser.compile(model)
    with torch.no_grad():
        assert_close(fast(x), model(x))
        model.fc.weight.data = torch.randn(48, 24)
        assert_close(fast(x), model(x))


def test_activation_times_activation_packs_every_call():
    fn = lambda a, b: F.gelu(a @ b)  # noqa: E731
    compiled = torchfuser.compile(fn)
    for _ in range(2):
        a, b = torch.randn(33, 17), torch.randn(17, 65)
        assert_close(compiled(a, b), fn(a, b))


@pytest.fixture
def gpu(monkeypatch):
    """PoCL runs the GPU schedules: the device says it is a GPU."""
    from torchfuser.runtime.device import Device

    monkeypatch.setattr(Device, "type_name", property(lambda self: "GPU"))


def small_device(monkeypatch, max_group=16, local_bytes=1 << 20):
    """Device limits no tiled variant fits (groups of at most 16 items by default)."""
    limits = gemm_launch.DeviceLimits(max_group, (max_group,) * 3, local_bytes)
    monkeypatch.setattr(gemm_launch, "device_limits", lambda device: limits)


# PoCL compiles a tiled kernel's work-groups slowly (seconds with an unrolled GELU): the tests share kernels
def test_tiled_schedule_for_devices_without_shared_caches(gpu):
    model = LinearAct(37, 29, "relu").eval()
    actual, expected = run(model, torch.randn(3, 11, 37))
    assert_close(actual, expected)
    (kernel,) = torchfuser.last_report().kernels
    assert "schedule=tiled" in kernel.spec and "block=32x32" in kernel.spec  # narrow N: 32x32 blocks
    assert "__local float" in kernel.source and "barrier(CLK_LOCAL_MEM_FENCE)" in kernel.source
    assert kernel.tuning["winner"] == "tiled 4x4 m32 n32 k16"


@pytest.mark.parametrize("limit", ["work-group", "local memory"])
def test_strided_schedule_when_the_tiled_one_does_not_fit(limit, gpu, monkeypatch):
    small_device(monkeypatch, *((16,) if limit == "work-group" else (1024, 4096)))
    model = LinearAct(37, 29, "relu").eval()
    actual, expected = run(model, torch.randn(3, 11, 37))
    assert_close(actual, expected)
    (kernel,) = torchfuser.last_report().kernels
    assert "schedule=strided" in kernel.spec and kernel.tuning["winner"] == "strided 4x8"
    assert "tiled 4x4 m32 n32 k16 does not fit" in kernel.tuning["source"]
    assert limit in kernel.tuning["source"]  # the reason: "a 8x8 work-group exceeds ..." or "... local memory ..."


def test_tiled_schedule_over_odd_shapes_weight_layouts_and_batches(gpu, monkeypatch):
    """Every M, N and K in {1, 7, 127, 769}: tails in every dim; B transposed (a Linear weight) and as it
    is; A row- and column-major; bmm. Bias + GELU + residual through the default tiled variant."""
    from torchfuser.ir.program import ProgramBuilder
    from torchfuser.ir.kernels import GemmKernel

    monkeypatch.setattr(gemm_launch, "TILED_NARROW", gemm_launch.TILED_WIDE)  # one kernel to build, not two
    builder = ProgramBuilder(["float32"] * 3)
    value = builder.emit("gelu", (builder.emit("add", (0, 1), "float32"),), "float32")
    kernel = GemmKernel(builder.build([builder.emit("add", (value, 2), "float32")]), group=0)
    for m, k, n in [(1, 127, 769), (7, 769, 1), (127, 1, 7), (769, 7, 127)]:
        bias, residual = torch.randn(n), torch.randn(m, n)
        for a in (torch.randn(m, k), torch.randn(k, m).t()):
            for b in (torch.randn(n, k).t(), torch.randn(k, n)):
                assert_close(kernel(a, b, bias, residual), F.gelu(a @ b + bias) + residual, rtol=1e-4, atol=1e-4)
    a, b, residual = torch.randn(3, 33, 40), torch.randn(3, 65, 40).transpose(1, 2), torch.randn(3, 33, 65)
    bias = torch.randn(65)
    assert_close(kernel(a, b, bias, residual), F.gelu(a @ b + bias) + residual, rtol=1e-4, atol=1e-4)
    assert {(launch.spec.schedule, launch.spec.block_m) for launch in configurations(kernel)} == {("tiled", 64)}


def test_residual_add_and_scale_join_the_epilogue():
    class Residual(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 64)

        def forward(self, x):
            return x + 0.5 * F.gelu(self.fc(x))

    actual, expected = run(Residual().eval(), torch.randn(2, 9, 64))
    assert_close(actual, expected)
    report = torchfuser.last_report()
    assert [k.kind for k in report.kernels] == ["gemm"] and report.fallbacks == []
    stats = {p.name: p.stats for p in report.passes}["fuse_gemm_epilogue"]
    assert stats["epilogue_ops"] == 3  # gelu, mul, add


def test_residuals_with_any_strides_and_ones_that_cannot_be_rows():
    def transposed(x, w, r):
        return x @ w + r.t()  # 2-D: read through its strides in the epilogue

    x, w, r = torch.randn(12, 20), torch.randn(20, 16), torch.randn(16, 12)
    assert_close(torchfuser.compile(transposed)(x, w, r), transposed(x, w, r))
    assert [k.kind for k in torchfuser.last_report().kernels] == ["gemm"]

    torch._dynamo.reset()
    linear = nn.Linear(20, 16)

    def batch_swapped(x, r):
        return linear(x) + r.transpose(0, 1)  # [2, 6, 16] that no [12, 16] view can express

    x, r = torch.randn(2, 6, 20), torch.randn(6, 2, 16)
    with torch.no_grad():
        assert_close(torchfuser.compile(batch_swapped)(x, r), batch_swapped(x, r))
    assert sorted(k.kind for k in torchfuser.last_report().kernels) == ["gemm", "pointwise"]


@pytest.mark.parametrize("schedule", ["packed", "strided", "tiled"])
def test_batched_matmul_with_an_epilogue(schedule, monkeypatch):
    if schedule != "packed":
        from torchfuser.runtime.device import Device

        monkeypatch.setattr(Device, "type_name", property(lambda self: "GPU"))
    if schedule == "strided":
        small_device(monkeypatch)

    def fn(q, k, bias):
        return torch.softmax(torch.tanh(q @ k.transpose(-2, -1) * 0.125 + bias), dim=-1)

    q, k = torch.randn(2, 3, 17, 8), torch.randn(2, 3, 19, 8)
    bias = torch.randn(19)
    assert_close(torchfuser.compile(fn)(q, k, bias), fn(q, k, bias))
    gemms = [kernel for kernel in torchfuser.last_report().kernels if kernel.kind == "gemm"]
    assert len(gemms) == 1 and f"schedule={schedule}" in gemms[0].spec


def test_a_weight_shared_by_every_batch_is_packed_once():
    w = torch.randn(12, 40)
    packed = gemm_launch.pack_panels(w.expand(5, 12, 40), 32)
    assert packed.shape == (1, 2, 12, 32)
    assert torch.equal(packed[0], gemm_launch.pack_panels(w, 32))


@pytest.mark.parametrize("schedule", ["packed", "tiled"])
def test_batched_matmul_then_a_reshape_takes_its_chain_and_a_residual(schedule, monkeypatch):
    """A bmm whose result is reshaped (a 1x1 convolution per image, viewed as [N, H, W, C]) takes the
    elementwise chain after the reshape, a residual of the reshaped shape included, into its epilogue."""
    if schedule == "tiled":
        from torchfuser.runtime.device import Device

        monkeypatch.setattr(Device, "type_name", property(lambda self: "GPU"))

    def fn(x, w, bias, r):
        y = torch.bmm(x.view(3, 7, 20).transpose(1, 2), w.expand(3, 7, 11)).view(3, 4, 5, 11)
        return torch.relu(y + bias) + r

    x, w, bias, r = torch.randn(3, 7, 4, 5), torch.randn(7, 11), torch.randn(11), torch.randn(3, 4, 5, 11)
    assert_close(torchfuser.compile(fn)(x, w, bias, r), fn(x, w, bias, r))
    kernels = torchfuser.last_report().kernels
    assert [k.kind for k in kernels] == ["gemm"] and f"schedule={schedule}" in kernels[0].spec


def test_batched_matmul_extern_variant(monkeypatch):
    import torchfuser.runtime.autotune as autotune
    import torchfuser.runtime.gemm_launch as gemm_launch

    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "1")
    monkeypatch.setattr(gemm_launch, "PACKED_VARIANTS", {width: () for width in gemm_launch.PACKED_VARIANTS})
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 0)
    fn = lambda a, b: torch.relu(torch.bmm(a, b)) * 2  # noqa: E731
    a, b = torch.randn(4, 9, 12), torch.randn(4, 12, 10)
    assert_close(torchfuser.compile(fn)(a, b), fn(a, b))
    assert torchfuser.last_report().kernels[0].tuning["winner"] == "extern"


def test_a_kernel_result_as_the_packed_operand_is_complete_before_packing():
    def fn(a, b):
        k = torch.exp(b) * 0.5  # a kernel writes B ...
        return torch.relu(a @ k)  # ... which the packed GEMM packs on the host

    a, b = torch.randn(16, 2048), torch.randn(2048, 2048)  # a big B: the exp kernel is still running
    compiled = torchfuser.compile(fn)
    for _ in range(3):
        assert_close(compiled(a, b), fn(a, b), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("width,variant,batched",
                         [(w, v, False) for w, variants in gemm_launch.PACKED_VARIANTS.items() for v in variants]
                         + [(w, variants[0], True) for w, variants in gemm_launch.PACKED_VARIANTS.items()])
def test_every_packed_variant_over_k_blocks_ragged_tiles_and_a_residual(width, variant, batched, monkeypatch,
                                                                        tmp_path):
    """K spans several K blocks, M and N end in partial tiles, N has full panels too: partial sums pass
    through C between blocks except on the ragged last panel. Every variant of each vector width's search
    space, whatever this CPU's own width."""
    import torchfuser.runtime.autotune as autotune

    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: width)
    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "1")
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))  # a tuning database of its own
    monkeypatch.setattr(autotune, "candidate_variants",
                        lambda device, *_, **__: [gemm_launch.GemmVariant("packed", *variant)])
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 0)

    def fn(a, w, bias, residual):
        return residual + F.gelu(a @ w.transpose(-2, -1) + bias) * 0.5

    m, k, n = 37, 600, 2 * 32 + 64 + 13  # several K blocks; full 32- and 64-wide panels and a ragged one
    batch = (3,) if batched else ()
    a, w = torch.randn(*batch, m, k), torch.randn(*batch, n, k) / k**0.5
    bias, residual = torch.randn(n), torch.randn(*batch, m, n)
    a[..., 5, 7] = float("inf")  # a non-finite input spreads down its row only, as in eager
    with torch.no_grad():
        assert_close(torchfuser.compile(fn)(a, w, bias, residual), fn(a, w, bias, residual), rtol=1e-4, atol=1e-4)
    (gemm,) = [kernel for kernel in torchfuser.last_report().kernels if kernel.kind == "gemm"]
    tm, tn, kb, rb = variant
    assert f"tile={tm}x{tn}" in gemm.spec and f"k_block={kb} row_blocks={rb}" in gemm.spec
    assert ("vector=8" in gemm.spec) == (width == 8)


@pytest.mark.parametrize("variant", gemm_launch.TILED_VARIANTS)
def test_every_tiled_variant_over_ragged_blocks_transposed_weights_and_a_residual(variant, gpu, monkeypatch, tmp_path):
    """M and N have full blocks of every size (32 to 128) and a ragged one, K several ragged local tiles;
    the weight is read transposed; bias + ReLU + scale + residual run in registers. Every GPU variant."""
    import torchfuser.runtime.autotune as autotune

    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "1")
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))  # a tuning database of its own
    monkeypatch.setattr(autotune, "candidate_variants", lambda device, *_, **__: [gemm_launch.tiled_variant(*variant)])
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 0)

    def fn(a, w, bias, residual):
        return residual + F.relu(a @ w.t() + bias) * 0.5

    m, k, n = 128 + 5, 37, 128 + 13
    a, w, bias, residual = torch.randn(m, k), torch.randn(n, k) / k**0.5, torch.randn(n), torch.randn(m, n)
    a[5, 7] = float("inf")  # a non-finite input spreads down its row only, as in eager
    with torch.no_grad():
        assert_close(torchfuser.compile(fn)(a, w, bias, residual), fn(a, w, bias, residual), rtol=1e-4, atol=1e-4)
    (gemm,) = [kernel for kernel in torchfuser.last_report().kernels if kernel.kind == "gemm"]
    tm, tn, bm, bn, bk = variant
    assert f"tile={tm}x{tn} schedule=tiled" in gemm.spec and f"k_block={bk}" in gemm.spec
    assert f"block={bm}x{bn}" in gemm.spec and gemm.tuning["winner"] == gemm_launch.tiled_variant(*variant).name


@pytest.mark.parametrize("variant", [(8, 32, 0, 1), (8, 32, 256, 8)])
def test_an_empty_k_gives_the_epilogue_of_zero(variant, monkeypatch, tmp_path):
    import torchfuser.runtime.autotune as autotune

    monkeypatch.setenv("TORCHFUSER_AUTOTUNE", "1")
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "candidate_variants",
                        lambda device, *_, **__: [gemm_launch.GemmVariant("packed", *variant)])
    monkeypatch.setattr(autotune, "SEARCH_MIN_FLOPS", 0)
    fn = lambda a, w, b: torch.sigmoid(a @ w + b)  # noqa: E731
    a, w, b = torch.randn(gemm_launch.ROWS_MAX_M + 9, 0), torch.randn(0, 40), torch.randn(40)  # M: not "rows"
    assert_close(torchfuser.compile(fn)(a, w, b), fn(a, w, b))
