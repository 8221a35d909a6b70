"""aten.embedding as a gathered read of a pointwise kernel, against eager: exact rows, strided tables and
indices, zero-size lookups, and IndexError (as eager) for indices outside the table."""

import pytest
import torch
import torch.nn.functional as F

import torchfuser
from eager_compare import aten_graph, call_nodes
from torchfuser.ir.program import GatherRead, parse_program
from torchfuser.passes.fuse_pointwise import fuse_pointwise


def compiled_exactly(fn, *inputs):
    actual, expected = torchfuser.compile(fn)(*inputs), fn(*inputs)
    assert actual.shape == expected.shape and actual.stride() == expected.stride() and torch.equal(actual, expected)
    report = torchfuser.last_report()
    assert report.fallbacks == [], [(f.op, f.reason) for f in report.fallbacks]
    return report


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
@pytest.mark.parametrize("shape", [(3, 7), (13,), (2, 0), ()])
def test_rows_are_gathered_exactly(dtype, shape):
    weight = torch.randn(37, 19)
    ids = torch.randint(0, 37, shape, dtype=dtype)
    compiled_exactly(lambda w, i: F.embedding(i, w), weight, ids)


def test_strided_table_and_indices_and_a_fused_consumer():
    def fn(w, ids, x):
        return F.embedding(ids, w) * 2 + x

    weight = torch.randn(11, 40).t()  # [40, 11], rows strided by 1
    ids = torch.randint(0, 40, (5, 6)).t()
    x = torch.randn(11)
    report = compiled_exactly(fn, weight, ids, x)
    assert len(report.kernels) == 1 and "@gather[" in report.kernels[0].spec


@pytest.mark.parametrize("bad", [40, 1000, -1])
def test_an_index_out_of_range_raises_index_error_as_eager(bad):
    weight, ids = torch.randn(40, 8), torch.randint(0, 40, (3, 5))
    ids[2, 1] = bad
    with pytest.raises(IndexError, match="index out of range in self"):
        F.embedding(ids, weight)
    compiled = torchfuser.compile(lambda w, i: F.embedding(i, w) + 1)
    with pytest.raises(IndexError, match="index out of range in self"):
        compiled(weight, ids)
    ids[2, 1] = 39  # the same compiled function still works afterwards
    assert torch.equal(compiled(weight, ids), F.embedding(ids, weight) + 1)


def test_indices_computed_by_a_kernel_are_checked_after_it_ran():
    def fn(w, ids):
        return F.embedding(ids * 2 + 1, w)

    weight, ids = torch.randn(10, 4), torch.tensor([[0, 4], [3, 2]])
    compiled = torchfuser.compile(fn)
    assert torch.equal(compiled(weight, ids), fn(weight, ids))
    with pytest.raises(IndexError):
        compiled(weight, ids + 1)  # 2 * 5 + 1 = 11 > 9


def test_arange_positions_are_proven_in_range_and_not_checked():
    def fn(w, x):
        return F.embedding(torch.arange(x.shape[1]).unsqueeze(0) + 2, w) + x

    weight, x = torch.randn(16, 8), torch.randn(1, 13, 8)
    report = compiled_exactly(fn, weight, x)
    assert any("@gather[v0;n=16;in_range]" in k.spec for k in report.kernels)
    with pytest.raises(IndexError):  # 15 positions + 2 > 16 rows: not proven, checked, and eager raises too
        torchfuser.compile(fn)(weight, torch.randn(1, 15, 8))


def test_positions_from_aranges_to_a_dynamic_length_are_checked():
    """arange(L) with L symbolic (dynamic=True) runs in PyTorch, named; the embedding of its positions is a kernel
    whose indices are checked (not proven in range) and raise past the table as eager's embedding does."""

    class Positions(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(40, 8)  # a parameter: its rows stay static under dynamic=True

        def forward(self, x):
            positions = torch.arange(x.shape[1]) + torch.arange(2, 2 + 3 * x.shape[1], 3) // 3
            return self.table(positions.unsqueeze(0)) + x

    torch._dynamo.reset()
    torch.manual_seed(0)
    model = Positions().eval()
    compiled = torch.compile(model, backend="torchfuser", dynamic=True)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for n in (7, 19, 7, 3, 19, 7):
            x = torch.randn(1, n, 8)
            torch.testing.assert_close(compiled(x), model(x))
        with pytest.raises(IndexError):  # the last position, 2 * 21 - 2 = 40, is past the 40 rows
            model(torch.randn(1, 21, 8))
        with pytest.raises(IndexError):
            compiled(torch.randn(1, 21, 8))
    assert {f.op for f in reports[-1].fallbacks} == {"aten.arange.start_step"}
    assert all("not Python ints" in f.reason for f in reports[-1].fallbacks)


def test_a_table_with_a_dynamic_row_count_is_named_and_runs_in_pytorch():
    def fn(w, ids):
        return F.embedding(ids, w) * 2

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="torchfuser", dynamic=True)
    with torch.no_grad(), torchfuser.collect_reports() as reports:
        for rows in (9, 13):
            weight, ids = torch.randn(rows, 4), torch.randint(0, rows, (2, 5))
            assert torch.equal(compiled(weight, ids), fn(weight, ids))
    (fallback,) = reports[-1].fallbacks
    assert fallback.op == "aten.embedding.default" and "row count is dynamic" in fallback.reason
    assert not any("error" in r.stats for r in reports[-1].passes)  # no pass failed on it


def test_program_text_and_the_reference_path():
    def fn(w, ids):
        return F.embedding(ids, w).sigmoid()

    weight, ids = torch.randn(9, 5), torch.randint(0, 9, (4, 3))
    gm = fuse_pointwise(aten_graph(fn, weight, ids)).gm
    (node,) = call_nodes(gm)
    program = node.target.program
    assert GatherRead(0, 9) in program.input_reads and parse_program(program.text()) == program
    args = {"w_1": weight, "ids_1": ids}
    torch.testing.assert_close(node.target.reference(*[args[a.name] for a in node.args]), fn(weight, ids))
    ids[0, 0] = 9
    with pytest.raises(IndexError):
        node.target.reference(*[{"w_1": weight, "ids_1": ids}[a.name] for a in node.args])


def test_an_unsupported_table_says_why():
    weight, ids = torch.randn(6, 4, dtype=torch.float16), torch.randint(0, 6, (3,))
    out = torchfuser.compile(lambda w, i: F.embedding(i, w))(weight, ids)
    assert torch.equal(out, F.embedding(ids, weight))
    (fallback,) = torchfuser.last_report().fallbacks
    assert fallback.op == "aten.embedding.default" and "float16" in fallback.reason
