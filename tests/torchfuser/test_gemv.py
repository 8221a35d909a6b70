"""The rows (decode / GEMV) GEMM schedule: M of 1 to 16 rows over the packed panels, against eager.

Every row count of a pass (1..8) and more than one pass (9, 16), ragged and narrow N, odd K and K == 0,
every kind of epilogue input layout (row, bcast, strided) and the activations; the weight transposed as a
Linear's and as it is, A a row slice of a wider buffer; through torchfuser.compile and the GemmKernel node.
"""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
import torchfuser.runtime.gemm_launch as gemm_launch
from torchfuser.ir.kernels import GemmKernel
from torchfuser.ir.program import Const, ProgramBuilder
from torchfuser.runtime.launch import configurations
from eager_compare import assert_close

MS = (1, 2, 7, 8, 9, 16, 27)  # one pass of each size at the ends, 7: an odd one; 9, 16, 27: more passes


def epilogue(build, n_extra: int) -> GemmKernel:
    """A GemmKernel whose epilogue is build(builder, acc, extras...) -> value id (input 0: the accumulator)."""
    builder = ProgramBuilder(["float32"] * (1 + n_extra))
    return GemmKernel(builder.build([build(builder, *range(1 + n_extra))]), group=0)


def op(builder, name, *args):
    return builder.emit(name, args, "float32")


# name -> (kernel, the same in eager on (acc, *extras), extras(m, n) -> tensors)
EPILOGUES = {
    "none": (lambda: epilogue(lambda b, acc: acc, 0), lambda acc: acc, lambda m, n: []),
    "bias": (lambda: epilogue(lambda b, acc, e: op(b, "add", acc, e), 1), lambda acc, e: acc + e,
             lambda m, n: [torch.randn(n)]),
    "bias_gelu_residual": (
        lambda: epilogue(lambda b, acc, e, r: op(b, "add", op(b, "gelu", op(b, "add", acc, e)), r), 2),
        lambda acc, e, r: F.gelu(acc + e) + r, lambda m, n: [torch.randn(n), torch.randn(m, n)]),
    "gelu_tanh_scaled": (
        lambda: epilogue(lambda b, acc: op(b, "mul", op(b, "gelu_tanh", acc), Const(0.5, "float32")), 0),
        lambda acc: F.gelu(acc, approximate="tanh") * 0.5, lambda m, n: []),
    "silu_row_scale": (  # an extra broadcast along n ("bcast"): one value per row
        lambda: epilogue(lambda b, acc, s: op(b, "mul", op(b, "silu", acc), s), 1),
        lambda acc, s: F.silu(acc) * s, lambda m, n: [torch.randn(m, 1)]),
    "relu_strided_residual": (  # a residual read through its strides ("strided": the element-wise epilogue)
        lambda: epilogue(lambda b, acc, r: op(b, "add", op(b, "relu", acc), r), 1),
        lambda acc, r: torch.relu(acc) + r, lambda m, n: [torch.randn(n, m + 1).t()[:m]]),
}


@pytest.mark.parametrize("width", sorted(gemm_launch.ROWS_TILES))
@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_every_epilogue_over_row_counts_and_ragged_shapes(name, width, monkeypatch):
    """One compiled kernel per epilogue serves every M, N and K (all are runtime arguments); with either
    vector width's tiles, whatever this CPU's own."""
    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: width)
    make, eager, extras = EPILOGUES[name]
    kernel = make()
    # odd K, ragged N; N < 32 (one narrow panel); full panels; K shorter than the streams a pass reads K in
    for k, n in [(771, 1001), (40, 17), (5, 64), (3, 33)]:
        w = torch.randn(n, k) / k**0.5
        for m in MS:
            a = torch.randn(m, k + 3)[:, :k]  # a row slice of a wider buffer
            more = extras(m, n)
            for b in (w.t(), w.t().contiguous()):  # a Linear's weight viewed transposed, and a [K, N] matrix
                assert_close(kernel(a, b, *more), eager(a @ b, *more))
    specs = {launch.spec for launch in configurations(kernel)}
    tile = ("rows", *gemm_launch.ROWS_TILES[width], width)
    assert {(s.schedule, s.tile_m, s.tile_n, s.vector_width) for s in specs} == {tile}
    assert len({s.key_text() for s in specs}) == 1  # M, N and K are not part of the kernel


def test_narrow_outputs_take_16_wide_panels():
    kernel = EPILOGUES["bias"][0]()
    for m in (1, 9):
        a, b, bias = torch.randn(m, 33), torch.randn(33, 13), torch.randn(13)
        assert_close(kernel(a, b, bias), a @ b + bias)
    assert {(launch.spec.schedule, launch.spec.tile_n) for launch in configurations(kernel)} == {("rows", 16)}


def test_an_empty_k_gives_the_epilogue_of_zero():
    fn = lambda a, w, b: torch.sigmoid(a @ w + b)  # noqa: E731
    for m in (1, 9):
        a, w, b = torch.randn(m, 0), torch.randn(0, 40), torch.randn(40)
        assert_close(torchfuser.compile(fn)(a, w, b), fn(a, w, b))
        assert "schedule=rows" in torchfuser.last_report().kernels[0].spec


def test_non_finite_inputs_spread_down_their_row_only():
    kernel = EPILOGUES["bias"][0]()
    a, b, bias = torch.randn(9, 70), torch.randn(70, 45), torch.randn(45)
    a[3, 7], a[8, 1] = float("inf"), float("nan")
    assert_close(kernel(a, b, bias), a @ b + bias)


ACTIVATIONS = {"none": lambda x: x, "relu": torch.relu, "silu": F.silu, "gelu": F.gelu,
               "gelu_tanh": lambda x: F.gelu(x, approximate="tanh")}


class LinearAct(nn.Module):
    def __init__(self, k, n, act):
        super().__init__()
        self.fc = nn.Linear(k, n)
        self.act = ACTIVATIONS[act]

    def forward(self, x):
        return self.act(self.fc(x))


@pytest.mark.parametrize("act", sorted(ACTIVATIONS))
def test_compiled_linear_at_decode_sizes(act):
    model = LinearAct(771, 1001, act).eval()
    compiled = torchfuser.compile(model)
    with torch.no_grad():
        for m in MS:
            x = torch.randn(m, 780)[:, :771]  # not contiguous: rows 780 apart
            assert_close(compiled(x), model(x))
            (kernel,) = torchfuser.last_report().kernels
            assert kernel.kind == "gemm" and "schedule=rows" in kernel.spec, (m, kernel.spec)
            assert kernel.tuning["winner"] == gemm_launch.rows_variant(1001).name


def test_one_token_through_a_residual_mlp_block():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.up, self.down = nn.Linear(96, 384), nn.Linear(384, 96)

        def forward(self, x):
            return x + 0.5 * self.down(F.gelu(self.up(x), approximate="tanh"))

    model = Block().eval()
    x = torch.randn(1, 1, 96)
    with torch.no_grad():
        assert_close(torchfuser.compile(model)(x), model(x))
    report = torchfuser.last_report()
    gemms = [kernel for kernel in report.kernels if kernel.kind == "gemm"]
    assert len(gemms) == 2 and all("schedule=rows" in kernel.spec for kernel in gemms)
    assert report.fallbacks == []
    assert any("packed into" in t for t in gemms[0].transforms)


def test_more_rows_and_batched_matmuls_keep_the_packed_schedule():
    model = LinearAct(64, 96, "relu").eval()
    with torch.no_grad():
        x = torch.randn(gemm_launch.ROWS_MAX_M + 1, 64)
        assert_close(torchfuser.compile(model)(x), model(x))
    assert "schedule=packed" in torchfuser.last_report().kernels[0].spec
    torch._dynamo.reset()
    fn = lambda a, b: torch.relu(torch.bmm(a, b))  # noqa: E731
    a, b = torch.randn(3, 1, 40), torch.randn(3, 40, 50)
    assert_close(torchfuser.compile(fn)(a, b), fn(a, b))
    assert "schedule=packed" in torchfuser.last_report().kernels[0].spec
    with pytest.raises(ValueError, match="plain"):
        gemm_launch.launch_for(EPILOGUES["none"][0](), gemm_launch.rows_variant(50), [a, b])


def test_variant_names_defaults_and_candidates(monkeypatch):
    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: 16)  # AVX-512's tables
    rows = gemm_launch.GemmVariant("rows", 8, 32)
    assert rows.name == "rows 8x32" and gemm_launch.GemmVariant.parse(rows.name) == rows
    assert gemm_launch.default_variant("CPU", 3072, 1) == rows
    assert gemm_launch.default_variant("CPU", 3072, gemm_launch.ROWS_MAX_M) == rows
    assert gemm_launch.default_variant("CPU", 3072, gemm_launch.ROWS_MAX_M + 1).schedule == "packed"
    assert gemm_launch.default_variant("CPU", 3072).schedule == "packed"  # a bmm
    assert gemm_launch.default_variant("CPU", 10, 1).name == "rows 8x16"
    assert gemm_launch.default_variant("GPU", 3072, 1).schedule == "tiled"

    class Cpu:
        type_name, zero_copy = "CPU", True

    names = lambda m: [v.name for v in gemm_launch.candidate_variants(Cpu(), m)]  # noqa: E731
    assert "rows 8x32" in names(1) and "rows 8x32" in names(gemm_launch.ROWS_MAX_M)
    assert "rows 8x32" not in names(gemm_launch.ROWS_MAX_M + 1) and "rows 8x32" not in names(None)
    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: 8)  # AVX2's: 8-float vectors, 16-wide panels
    assert gemm_launch.default_variant("CPU", 3072, 1).name == "rows 4x16"
    assert gemm_launch.default_variant("CPU", 3072).name == "packed 4x16 k256 r16"
    assert "rows 4x16" in names(1) and "packed 4x24 k512 r8" in names(None)


def test_the_vector_width_follows_the_device_and_enters_the_key():
    from torchfuser.ir.kernels import GemmSpec

    native = torchfuser.runtime.device.get_device().cl_device.native_vector_width_float
    assert gemm_launch.panel_vector_width() == (16 if native >= 16 else 8)
    program = EPILOGUES["none"][0]().epilogue
    wide, narrow = (GemmSpec("float32", program, "int", 4, 16, "packed", (), vector_width=w) for w in (16, 8))
    assert "vector=" not in wide.key_text() and "vector=8" in narrow.key_text()  # old keys stay valid
    with pytest.raises(ValueError, match="multiple of vector_width"):
        GemmSpec("float32", program, "int", 4, 12, "packed", (), vector_width=8)


def test_rows_spec_validation_and_key_text():
    from torchfuser.ir.kernels import GemmSpec

    program = EPILOGUES["bias"][0]().epilogue
    spec = GemmSpec("float32", program, "int", 8, 32, "rows", ("row",))
    assert "schedule=rows extras=row k_block=0 row_blocks=1" in spec.key_text()
    for bad in [dict(tile_n=24), dict(extra_layouts=()), dict(k_block=256), dict(row_blocks=2), dict(tile_m=17)]:
        with pytest.raises(ValueError, match="rows GEMM"):
            GemmSpec(**{**dict(dtype="float32", epilogue=program, tile_m=8, tile_n=32, schedule="rows",
                               extra_layouts=("row",)), **bad})


def test_the_search_times_the_rows_variant_for_decode_sizes(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCHFUSER_CACHE_DIR", str(tmp_path))  # a tuning database of its own
    monkeypatch.setattr(gemm_launch, "panel_vector_width", lambda: 16)  # AVX-512's tables
    monkeypatch.setattr(gemm_launch, "PACKED_VARIANTS", {16: ((8, 32, 256, 8),)})
    model = LinearAct(48, 80, "gelu").eval()
    x = torch.randn(4, 48)
    with torch.no_grad():
        assert_close(torchfuser.compile(model, autotune="max")(x), model(x))
    record = torchfuser.last_report().kernels[0].tuning
    assert record["source"] == "tuned" and {"rows 8x32", "packed 8x32 k256 r8"} <= set(record["candidates"])


def test_the_report_names_the_schedule_at_one_token():
    model = LinearAct(256, 512, "gelu_tanh").eval()
    with torch.no_grad():
        x = torch.randn(1, 256)
        assert_close(torchfuser.compile(model)(x), model(x))
    (kernel,) = torchfuser.last_report().kernels
    assert "schedule=rows" in kernel.spec and "switch (rows)" in kernel.source
    assert kernel.tuning["winner"] == gemm_launch.rows_variant(512).name
