"""fuse_pointwise with cat and slice along the last dim: node counts, a no-op second run, the modified
flag, the program's remapped reads, and numerics (kernel and reference path) against eager."""

import torch

from eager_compare import aten_graph, call_nodes as ops
from torchfuser.ir.program import LastDimRead, parse_program
from torchfuser.passes.fuse_pointwise import fuse_pointwise
from torchfuser.ir.kernels import PointwiseKernel

aten = torch.ops.aten


def rotary(q, cos, sin):
    half = q.shape[-1] // 2
    return q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin


def rotary_inputs():
    q = torch.randn(2, 5, 3, 16).transpose(1, 2)
    cos, sin = torch.randn(2, 2, 1, 5, 16)
    return q, cos, sin


def kernels(gm):
    return [n for n in ops(gm) if isinstance(n.target, PointwiseKernel)]


def test_rotary_becomes_one_kernel_reading_the_halves_through_remaps():
    inputs = rotary_inputs()
    gm = aten_graph(rotary, *inputs)
    assert sum(n.target is aten.cat.default for n in ops(gm)) == 1
    result = fuse_pointwise(gm)
    assert result.modified and result.stats["pointwise_groups"] == 1 and result.stats["fused_ops"] == 5
    (kernel,) = kernels(result.gm)
    assert not any(n.target is aten.cat.default for n in ops(result.gm))
    assert {n.target for n in ops(result.gm)} - {kernel.target} == {aten.slice.Tensor}  # views of q stay
    program = kernel.target.program
    assert {r for r in program.input_reads if r} == {LastDimRead(-8, 1, 8), LastDimRead(0, 1, 8)}
    assert "last_index" in program.text()
    torch.testing.assert_close(result.gm(*inputs), rotary(*inputs))
    again = fuse_pointwise(result.gm)
    assert not again.modified and len(kernels(again.gm)) == 1


def test_the_reference_path_means_the_same():
    """The interpreter (fallback and standalone path) gathers remapped inputs as the kernel reads them."""
    inputs = rotary_inputs()
    gm = fuse_pointwise(aten_graph(rotary, *inputs)).gm
    (node,) = kernels(gm)
    q, cos, sin = inputs
    env = {"q_1": q, "cos_1": cos, "sin_1": sin}
    args = [env[a.name] if a.op == "placeholder" else _view(a, env) for a in node.args]
    torch.testing.assert_close(node.target.reference(*args), rotary(*inputs))


def _view(node, env):
    source = env[node.args[0].name]
    return node.target(source, *node.args[1:])


def test_program_text_round_trips_with_remapped_reads():
    gm = fuse_pointwise(aten_graph(rotary, *rotary_inputs())).gm
    program = kernels(gm)[0].target.program
    assert parse_program(program.text()) == program
    assert "@last[-8+1*j;n=8]" in program.text()


def test_slices_of_a_computed_value_join_its_kernel():
    def fn(x):
        h = torch.exp(x)
        return h[..., ::2] * h[..., 1::2]

    x = torch.randn(3, 10)
    gm = aten_graph(fn, x)
    result = fuse_pointwise(gm)
    assert len(ops(result.gm)) == 1 and len(kernels(result.gm)) == 1
    reads = set(kernels(result.gm)[0].target.program.input_reads)
    assert reads == {LastDimRead(0, 2, 10), LastDimRead(1, 2, 10)}
    torch.testing.assert_close(result.gm(x), fn(x))


def test_cat_along_dim_0_is_one_kernel_indexing_that_dim():
    def fn(x, y):
        return torch.cat((x.exp(), y.exp()), dim=0)

    x, y = torch.randn(5, 3, 4), torch.randn(2, 3, 4)
    result = fuse_pointwise(aten_graph(fn, x, y))
    (kernel,) = kernels(result.gm)
    assert len(ops(result.gm)) == 1 and kernel.target.frame == [1, 2, 0]  # dim 0 moved last
    assert {r for r in kernel.target.program.input_reads if r} == {LastDimRead(0, 1, 5), LastDimRead(-5, 1, 2)}
    torch.testing.assert_close(result.gm(x, y), fn(x, y))
    assert not fuse_pointwise(result.gm).modified


def test_cats_along_two_dims_are_two_kernels():
    """A kernel indexes one dim: a cat along dim 1 of a cat along dim 2 is not merged into it."""
    def fn(x, y):
        return torch.cat((torch.cat((x, y), dim=2).sin(), x.new_zeros(2, 1, 7)), dim=1)

    x, y = torch.randn(2, 3, 4), torch.randn(2, 3, 3)
    result = fuse_pointwise(aten_graph(fn, x, y))
    assert len(kernels(result.gm)) == 2 and not any(n.target is aten.cat.default for n in ops(result.gm))
    torch.testing.assert_close(result.gm(x, y), fn(x, y))
