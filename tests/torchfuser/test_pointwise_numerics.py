"""fuse_pointwise end to end: every lowered op alone and in chains, against eager on the same inputs."""

import math

import pytest
import torch
import torch.nn.functional as F

import torchfuser
from eager_compare import assert_close

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "relu": torch.relu, "sigmoid": torch.sigmoid, "silu": F.silu,
    "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "tanh": torch.tanh,
    "exp": torch.exp, "log": lambda x: torch.log(x.abs() + 0.1), "sqrt": lambda x: torch.sqrt(x.abs()),
    "rsqrt": lambda x: torch.rsqrt(x.abs() + 0.5), "pow2": lambda x: x**2, "pow3": lambda x: x**3,
    "pow_half": lambda x: x.abs() ** 0.5, "pow_2_5": lambda x: x.abs() ** 2.5, "reciprocal": lambda x: 1 / (x + 4),
    "erf": torch.erf, "clamp": lambda x: x.clamp(-0.5, 0.7), "clamp_min": lambda x: x.clamp(min=0.1),
    "leaky_relu": F.leaky_relu, "log1p": lambda x: torch.log1p(x.abs()), "expm1": torch.expm1,
    "sin": torch.sin, "cos": torch.cos, "floor": lambda x: torch.floor(x * 3), "round": lambda x: torch.round(x * 3),
    "scalar_ops": lambda x: (x * 0.1 + 3) / 7 - 2.5,
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": lambda a, b: a / (b.abs() + 0.5),
    "maximum": torch.maximum, "minimum": torch.minimum, "add_alpha": lambda a, b: torch.add(a, b, alpha=0.5),
    "rsub": lambda a, b: 1.5 - a * b, "where": lambda a, b: torch.where(a > b, a, b * 2),
    "eq": lambda a, b: (a.round() == b.round()).float(), "lt": lambda a, b: (a < b).to(torch.float32),
    "ge_scalar": lambda a, b: (a >= 0.25) & (b < 0.5), "ne": lambda a, b: a.round() != b.round(),
    "logical": lambda a, b: torch.logical_or(a > 0, torch.logical_not(b > 0)),
}


def compiled(fn):
    return torchfuser.compile(fn)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_op_alone_matches_eager(name):
    fn = UNARY[name]
    x = torch.randn(257, 33) * 2
    assert_close(compiled(fn)(x), fn(x))
    assert torchfuser.last_log["pointwise_groups"] == 1
    assert torchfuser.last_report().fallbacks == []


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_op_alone_matches_eager(name):
    fn = BINARY[name]
    a, b = torch.randn(2, 1031)
    assert_close(compiled(fn)(a, b), fn(a, b))
    assert torchfuser.last_log["pointwise_groups"] == 1


def test_long_chain_is_one_kernel():
    def chain(x, y, z):
        h = F.silu(x) * y + z
        h = torch.tanh(h) * 0.5 + torch.sigmoid(h - 1)
        return torch.clamp(h, -0.9, 0.9) ** 2 + torch.exp(-h.abs())

    x, y, z = torch.randn(3, 64, 129)
    assert_close(compiled(chain)(x, y, z), chain(x, y, z))
    report = torchfuser.last_report()
    assert [k.kind for k in report.kernels] == ["pointwise"]
    assert len(report.kernels[0].nodes) >= 10


def test_broadcasting_inputs():
    def fn(x, row, col, s):
        return (x * row + col) * s

    x = torch.randn(31, 17)
    row, col, s = torch.randn(17), torch.randn(31, 1), torch.tensor(2.5)
    assert_close(compiled(fn)(x, row, col, s), fn(x, row, col, s))


def test_transposed_and_sliced_inputs():
    def fn(a, b):
        return torch.relu(a) * b + 1

    base = torch.randn(64, 96)
    a = base.t()  # (96, 64), transposed
    b = torch.randn(96, 200)[:, ::3][:, :64]  # sliced with a step
    assert not a.is_contiguous() and not b.is_contiguous()
    out = compiled(fn)(a, b)
    assert_close(out, fn(a, b))


@pytest.mark.parametrize("shape, dims, row", [
    ((2, 4, 3, 2, 5), (0, 2, 1, 3, 4), 10),   # inner [2, 5] contiguous in both: rows of 10
    ((3, 5, 1, 4, 3), (1, 0, 2, 3, 4), 12),   # a size-1 dim before the run: rows of 12
    ((2, 3, 7, 4, 3), (0, 2, 1, 3, 4), 12),   # odd outer sizes
    ((4, 3, 6, 2), (0, 2, 1, 3), None),       # inner 2 alone: too short for rows, the flat schedule
])
def test_copies_with_contiguous_inner_runs_take_rows_of_the_whole_run(shape, dims, row):
    """A permuted copy whose innermost dims lie contiguous in every operand runs rows over all of them (one
    index decomposition per run, not per last dim); an operand broadcast along the run and inf/nan too."""
    def fn(x, y):
        return x.permute(dims).contiguous() * y + 1

    x = torch.randn(shape)
    x.view(-1)[::7] = float("nan")
    x.view(-1)[3::11] = float("inf")
    y = torch.randn([shape[dims[0]]] + [1] * (len(shape) - 1))  # one value per outermost index
    out = compiled(fn)(x, y)
    assert_close(out, fn(x, y))
    assert out.stride() == fn(x, y).stride()
    (kernel,) = torchfuser.last_report().kernels
    assert (f"rows={row} " in kernel.spec) if row else ("rows=" not in kernel.spec), kernel.spec


@pytest.mark.parametrize("shape", [(2, 3, 13, 7), (1, 5, 4, 4), (3, 2, 1, 17)])
def test_short_transposed_rows_run_in_blocks_of_rows(shape):
    """An NCHW tensor copied channels-last has rows of C elements, each read C strides apart: a work-item computes
    a block of 16 such rows (pixels), whose remainders odd sizes leave; an operand along the row (per channel) and
    one across rows (per image), inf and nan too."""
    def fn(x, scale, bias):
        return x.permute(0, 2, 3, 1).contiguous() * scale + bias

    x = torch.randn(shape)
    x.view(-1)[::5] = float("nan")
    x.view(-1)[2::9] = float("-inf")
    scale = torch.randn(shape[1])
    bias = torch.randn(shape[0], 1, 1, 1)
    out = compiled(fn)(x, scale, bias)
    assert_close(out, fn(x, scale, bias))
    assert out.stride() == fn(x, scale, bias).stride()
    (kernel,) = torchfuser.last_report().kernels
    assert f"rows={shape[1]} " in kernel.spec and "block=16" in kernel.spec, kernel.spec


@pytest.mark.parametrize("rows, cols, blocked", [(600, 37, True), (1030, 70, True), (300, 513, False)])
def test_long_rows_of_a_far_transposing_read_run_in_blocks(rows, cols, blocked):
    """A transpose whose read steps 2 KiB or more along the output's row (`rows` >= 512 floats apart) puts every
    element on a line of its own: such rows take blocks of 16 too, however long (600 and 1030 rows: remainders),
    nearer steps keep one row a work-item; an operand along the row and one across rows, inf and nan too."""
    def fn(x, scale, bias):
        return x.t().contiguous() * scale + bias

    x = torch.randn(cols, rows)  # out = x.t(): [rows, cols], its row i reads x[:, i], `rows` floats apart
    x.view(-1)[::5] = float("nan")
    x.view(-1)[2::9] = float("-inf")
    scale, bias = torch.randn(cols), torch.randn(rows, 1)
    out = compiled(fn)(x, scale, bias)
    assert_close(out, fn(x, scale, bias))
    assert out.stride() == fn(x, scale, bias).stride()
    (kernel,) = torchfuser.last_report().kernels
    assert f"rows={cols} " in kernel.spec and ("block=16" in kernel.spec) == blocked, kernel.spec


@pytest.mark.parametrize("kh, kw", [(19, 12), (16, 8)])
def test_many_short_rows_read_along_the_row_run_in_blocks_of_rows(kh, kw):
    """A patch embedding's patches (NCHW cut into kh x kw tiles, each copied in (C, KH, KW) order) are short rows
    that every operand reads along the row: a work-item computes a block of 16 of them, row after row, the last
    block of each run of kh rows cut short where kh is not a multiple of 16; an operand along the row and one per
    outermost index, inf and nan too."""
    def fn(x, scale, bias):
        n, c, h, w = x.shape
        tiles = x.view(n, c, h // kh, kh, w // kw, kw).permute(0, 2, 4, 1, 3, 5)
        return tiles.contiguous() * scale + bias

    x = torch.randn(2, 3, 5 * kh, 10 * kw)  # 2 * 5 * 10 * 3 * kh rows: enough to block
    x.view(-1)[::5] = float("nan")
    x.view(-1)[2::9] = float("-inf")
    scale, bias = torch.randn(kw), torch.randn(2, 1, 1, 1, 1, 1)
    out = compiled(fn)(x, scale, bias)
    assert_close(out, fn(x, scale, bias))
    (kernel,) = torchfuser.last_report().kernels
    assert f"rows={kw} " in kernel.spec and "block=16" in kernel.spec, kernel.spec


def test_transposed_inputs_keep_eager_strides():
    def fn(a):
        return torch.exp(a) + 1

    a = torch.randn(40, 70).t()
    out = compiled(fn)(a)
    expected = fn(a)
    assert_close(out, expected)
    assert out.stride() == expected.stride()


@pytest.mark.parametrize("shape", [(1,), (7,), (0,), (0, 5), (3, 0, 2), (1, 1, 1), (1000003,), ()])
def test_odd_and_zero_sizes(shape):
    def fn(x, y):
        return torch.sigmoid(x) * y - 2

    x, y = torch.randn(shape), torch.randn(shape)
    out = compiled(fn)(x, y)
    assert out.shape == torch.Size(shape)
    assert_close(out, fn(x, y))


def test_inf_and_nan_propagate_as_in_eager():
    def fn(x, y):
        return (torch.maximum(x, y), torch.minimum(x, y), torch.relu(x), x.clamp(-1, 1), torch.exp(x) * 0,
                F.silu(x), torch.sigmoid(x), F.gelu(x), torch.tanh(x), F.gelu(x, approximate="tanh"), x / y)

    # tanh's approximation: exact below 4e-4, saturating to +-1 from 9 (gelu_tanh at -inf is nan, as eager's)
    values = torch.tensor([0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 3.0, 1e-38, -88.0, 89.0, 3e-4, 8.9,
                           -9.0, 7.9])
    x, y = values.repeat(len(values)), values.repeat_interleave(len(values))
    for actual, expected in zip(compiled(fn)(x, y), fn(x, y)):
        assert_close(actual, expected)


def test_constants_that_differ_in_the_last_bit_give_two_kernels():
    c1 = 0.1
    c2 = math.nextafter(0.1, 1.0)
    x = torch.full((1000,), 3.0, dtype=torch.float64)
    out1 = compiled(lambda t: t * c1 + c1)(x)
    key1 = torchfuser.last_report().kernels[0].cache_key
    torch._dynamo.reset()
    out2 = compiled(lambda t: t * c2 + c2)(x)
    key2 = torchfuser.last_report().kernels[0].cache_key
    assert key1 != key2
    assert torch.equal(out1, x * c1 + c1) and torch.equal(out2, x * c2 + c2)
    assert not torch.equal(out1, out2)
    assert "0x1.999999999999ap-4" in torchfuser.last_report().kernels[0].source.replace(
        "0x1.999999999999bp-4", "0x1.999999999999ap-4"
    )


def test_infinite_and_nan_constants_are_spelled_exactly():
    fn = lambda x: torch.where(x > 0, x * math.inf, x + math.nan)  # noqa: E731
    x = torch.randn(100)
    assert_close(compiled(fn)(x), fn(x))
    source = torchfuser.last_report().kernels[0].source
    assert "INFINITY" in source and "NAN" in source


@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.int64])
def test_other_dtypes(dtype):
    def fn(a, b):
        return torch.maximum(a * 3 - b, b) + (a > b).to(dtype)

    a = (torch.randn(513) * 100).to(dtype)
    b = (torch.randn(513) * 100).to(dtype)
    out = compiled(fn)(a, b)
    assert out.dtype == dtype
    assert_close(out, fn(a, b))


def test_casts_between_dtypes():
    def fn(x, i):
        return (x.to(torch.int32) + i).to(torch.float32) * 0.5 + (x > 0).to(torch.float64).sum()

    x = torch.randn(300) * 10
    i = torch.randint(-5, 5, (300,), dtype=torch.int32)
    assert_close(compiled(fn)(x, i), fn(x, i))


def test_multiple_outputs_from_one_group():
    def fn(x):
        h = torch.sigmoid(x) * 2
        return h + 1, h * h, torch.exp(h)

    x = torch.randn(1000)
    for actual, expected in zip(compiled(fn)(x), fn(x)):
        assert_close(actual, expected)
    assert torchfuser.last_log["pointwise_groups"] == 1


def test_outputs_are_fresh_tensors_every_call():
    fn = compiled(lambda x: x * 2 + 1)
    x = torch.randn(4096)
    first = fn(x)
    second = fn(x)
    assert first.data_ptr() != second.data_ptr()
    first.zero_()
    assert_close(second, x * 2 + 1)


def test_sizes_beyond_32_bits_choose_64_bit_indices():
    from torchfuser.ir.kernels import PointwiseKernel
    from torchfuser.ir.program import ProgramBuilder
    from torchfuser.runtime.launch import configure

    builder = ProgramBuilder(["float32"])
    program = builder.build([builder.emit("exp", (0,), "float32")])
    shape = (3, 2**30)
    kernel = PointwiseKernel(program, shape, (2**30, 1), group=0)
    huge = torch.empty(shape, device="meta")
    assert configure(kernel, [huge]).spec.index_type == "long"
    small = PointwiseKernel(program, (5, 7), (7, 1), group=1)
    assert configure(small, [torch.empty(5, 7, device="meta")]).spec.index_type == "int"


def test_64_bit_index_kernels_compute_correctly(monkeypatch):
    import torchfuser.ir.layout as layout

    monkeypatch.setattr(layout, "INT32_MAX", 1000)  # makes a 5,000-element launch take the 64-bit path
    fn = lambda x, y: torch.sigmoid(x) * y.t()  # noqa: E731
    x, y = torch.randn(50, 100), torch.randn(100, 50)
    assert_close(compiled(fn)(x, y), fn(x, y))
    source = torchfuser.last_report().kernels[0].source
    assert "const long n" in source


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n", [15, 16, 17, 4099])
def test_vector_path_and_its_scalar_tail(dtype, n):
    def fn(x, y):
        return torch.maximum(F.gelu(x) * torch.erf(y), F.silu(y)).clamp(max=0.75) + torch.exp(-x.abs())

    x, y = torch.randn(2, n, dtype=dtype)
    x[0], y[-1] = math.nan, math.inf
    assert_close(compiled(fn)(x, y), fn(x, y))
    (kernel,) = torchfuser.last_report().kernels
    width = 16 if dtype == torch.float32 else 8
    vtype = "float" if dtype == torch.float32 else "double"
    assert f"__global {vtype}{width}_u *)(in" in kernel.source and "vector=" + str(width) in kernel.spec


@pytest.mark.parametrize("n", [1, 15, 33, 4099])
def test_the_partial_last_vector_with_a_0d_input(n):
    """The last vector, cut short by n, reads a 0-d input once and the contiguous ones lane by lane (n = 1: every
    input is a single value); lanes past the end are not stored."""
    def fn(x, scale):
        return torch.exp(-x.abs()) * scale + x

    x, scale = torch.randn(n), torch.tensor(1.5)
    x[-1] = math.inf
    assert_close(compiled(fn)(x, scale), fn(x, scale))
    (kernel,) = torchfuser.last_report().kernels
    assert "vector=16" in kernel.spec and "if (base + 15 < n) out0[base + 15]" in kernel.source


@pytest.mark.parametrize("cols", [16, 48, 37])
def test_row_and_column_broadcasts(cols):
    def fn(x, bias, scale):
        return F.gelu(x + bias) * scale

    x, bias, scale = torch.randn(23, cols), torch.randn(cols), torch.randn(23, 1)
    assert_close(compiled(fn)(x, bias, scale), fn(x, bias, scale))
    (kernel,) = torchfuser.last_report().kernels
    assert "layouts=contig,row,col" in kernel.spec
    assert ("vector=16" in kernel.spec) == (cols % 16 == 0)


def test_full_and_scalar_tensor_become_literals_of_their_readers():
    """HF builds attention masks from torch.full and masked_fill (a scalar_tensor in core ATen): the kernels
    read those values as literals, and nothing is left running in PyTorch."""
    def fn(x, mask):
        filled = x.masked_fill(mask, torch.finfo(x.dtype).min)  # scalar_tensor + where
        base = torch.full((1, 7), -math.inf)  # broadcast against x, then replaced where x > 0
        ints = torch.full((3, 7), 2, dtype=torch.int64) * (x > 0)  # an integer constant, promoted
        padded = torch.cat((x, torch.zeros(3, 2)), 1)  # a constant piece of a cat
        return filled * 0.5, torch.where(x > 0, x, base), ints + 1, padded, torch.full((3, 7), 1.5).clone()

    x, mask = torch.randn(3, 7), torch.rand(3, 7) > 0.5
    x[0, 0] = math.nan
    for actual, expected in zip(compiled(fn)(x, mask), fn(x, mask)):
        assert actual.dtype == expected.dtype
        assert_close(actual, expected)
    report = torchfuser.last_report()
    assert report.fallbacks == []
    assert all(k.kind == "pointwise" for k in report.kernels)
    assert "-INFINITY" in "".join(k.source for k in report.kernels)


def test_zeros_like_ones_like_and_fill_are_literals_too():
    def fn(x):  # all three arrive as full_like (fill_ on an empty_like), of x's dtype or another
        return torch.zeros_like(x) + torch.ones_like(x, dtype=torch.int64) * x + torch.empty_like(x).fill_(-2.5)

    x = torch.randn(4, 5).t()  # non-contiguous: full_like keeps x's strides, the kernel its own
    actual = compiled(fn)(x)
    assert_close(actual, fn(x))
    assert actual.stride() == fn(x).stride()
    assert torchfuser.last_report().fallbacks == []


def test_a_constant_read_only_by_pytorch_stays_a_host_op():
    fn = lambda x: torch.cumsum(torch.full((5,), 0.25), 0) + x  # noqa: E731  (cumsum has no kernel)
    x = torch.randn(5)
    assert_close(compiled(fn)(x), fn(x))
    reasons = {f.op: f.reason for f in torchfuser.last_report().fallbacks}
    assert set(reasons) == {"aten.full.default", "aten.cumsum.default"}
    assert "constant made on the host" in reasons["aten.full.default"]


def _division_operands(dtype):
    """Dividends and divisors of both signs, exact multiples, zeros, infinities and NaN (floats)."""
    a = torch.tensor([7.0, -7.0, 7.0, -7.0, 6.0, -6.0, 0.0, -0.0, 5.5, -5.5, 1e30, 3.0, math.inf, math.nan, 2.0, -2.0])
    b = torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 3.0, -3.0, 0.1, 0.1, 7.0, math.inf, 2.0, 1.0, 0.0, 0.0])
    a = torch.cat((a, torch.randn(509) * 100))
    b = torch.cat((b, torch.randn(509) * 10))
    return a.to(dtype), b.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", ["floor", "trunc", "remainder", "floor_divide", "scalar"])
def test_rounded_division_and_remainder_match_eager_bit_for_bit(op, dtype):
    fns = {
        "floor": lambda a, b: torch.div(a, b, rounding_mode="floor") + 1,
        "trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc") + 1,
        "remainder": lambda a, b: torch.remainder(a, b) * 1,
        "floor_divide": lambda a, b: (a // b) * 1,
        "scalar": lambda a, b: torch.remainder(a, -1.5) + torch.div(b, 0.3, rounding_mode="floor"),
    }
    a, b = _division_operands(dtype)
    actual, expected = compiled(fns[op])(a, b), fns[op](a, b)
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)
    numbers = ~expected.isnan()  # (a NaN's sign is not a result)
    assert torch.equal(torch.signbit(actual[numbers]), torch.signbit(expected[numbers]))  # -0.0 as eager
    assert torchfuser.last_report().fallbacks == []


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_division_by_constants_runs_in_a_kernel(dtype):
    def fn(x):
        return x // 4 + torch.div(x, -3, rounding_mode="trunc") + x % 5 + torch.remainder(x, -7)

    x = torch.arange(-50, 51, dtype=dtype)
    actual = compiled(fn)(x)
    assert actual.dtype == dtype and torch.equal(actual, fn(x))
    assert torchfuser.last_report().fallbacks == []


@pytest.mark.parametrize("divisor", ["tensor", 0])
def test_integer_division_that_eager_may_refuse_stays_in_pytorch(divisor):
    x = torch.arange(-5, 6)
    d = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]) if divisor == "tensor" else 0
    fn = lambda x, d: x % d + 1  # noqa: E731
    if divisor == 0:
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fn(x, d)
        with pytest.raises(Exception, match="ZeroDivisionError"):
            compiled(fn)(x, d)
        return
    assert torch.equal(compiled(fn)(x, d), fn(x, d))
    (fallback,) = torchfuser.last_report().fallbacks
    assert "eager raises for a zero divisor" in fallback.reason


@pytest.mark.parametrize("x_shape,y_shape", [((64, 1, 128), (1, 32, 128)), ((5, 1), (5, 7)), ((1,), (3, 0)),
                                             ((3, 1, 1), (3, 4, 5))])
def test_a_cheap_producer_that_broadcasts_into_its_consumer_joins_its_kernel(x_shape, y_shape):
    """silu(x) is recomputed for every element of the product it broadcasts to: one kernel, not two."""
    def fn(x, y):
        return F.silu(x * 2) * y + 1

    x, y = torch.randn(x_shape), torch.randn(y_shape)
    x.view(-1)[:1] = float("nan")
    y = y.transpose(-1, -2).contiguous().transpose(-1, -2)  # a non-contiguous consumer input
    assert_close(compiled(fn)(x, y), fn(x, y))
    assert len(torchfuser.last_report().kernels) == (1 if y.numel() else 0)


def test_a_broadcast_producer_also_used_at_its_own_shape_or_too_long_stays_its_own_kernel():
    def used_twice(x, y):
        s = torch.sigmoid(x)
        return s * y, s - 1

    def expensive(x, y):
        for _ in range(5):
            x = torch.tanh(x) * 1.5 + 0.25  # ten ops: cheaper to write out once than to recompute 32 times
        return x * y

    x, y = torch.randn(16, 1, 8), torch.randn(16, 32, 8)
    for fn in (used_twice, expensive):
        assert_close(compiled(fn)(x, y), fn(x, y))
        assert len(torchfuser.last_report().kernels) == 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_isnan_in_a_kernel(dtype):
    def fn(x):
        return torch.isnan(x), torch.where(torch.isnan(x), 0, x) * 2

    x = (torch.randn(5, 37) * 10).to(dtype)
    if dtype.is_floating_point:
        x[1, 2], x[2, 5], x[3, 7] = math.nan, math.inf, -math.inf
    (mask, cleaned), (expected_mask, expected) = compiled(fn)(x), fn(x)
    assert torch.equal(mask, expected_mask)
    assert_close(cleaned, expected)
    assert torchfuser.last_report().fallbacks == []


ROW_PROGRAMS = {
    # a transpose (gathered loads, rows of 83: five vectors and a tail) with GELU
    "transpose then gelu": (lambda x: F.gelu(x.transpose(1, 2).contiguous() * 2), (2, 83, 37)),
    # a cat along the last dim (two segments, each with vectors and a tail) then exp and tanh
    "cat then exp": (lambda x: torch.tanh(torch.exp(torch.cat([x, x[..., :13] * 0.5], -1))), (7, 3, 41)),
    "gated by sigmoid (GLU)": (lambda x: x[..., :33] * torch.sigmoid(x[..., 33:]), (5, 4, 66)),
}


@pytest.mark.parametrize("name", list(ROW_PROGRAMS))
def test_costly_programs_on_the_row_schedule_run_on_vectors_as_eager(name):
    """PoCL leaves a row loop that calls erf, exp or tanh scalar: those run on explicit vectors of 16 positions,
    loading what is not contiguous lane by lane, the rest of a segment element by element."""
    fn, shape = ROW_PROGRAMS[name]
    x = torch.randn(shape) * 3
    x.view(-1)[3], x.view(-1)[40], x.view(-1)[-1] = math.nan, math.inf, -math.inf
    out = compiled(fn)(x)
    assert_close(out, fn(x))
    sources = [k.source for k in torchfuser.last_report().kernels if k.kind == "pointwise"]
    assert any("jlast += 16" in s for s in sources), "no row loop on vectors"
