"""A kind of kernel is one registry entry: a new one runs through the driver, codegen and executor untouched,
and the passes' own words say why a node stayed in PyTorch."""

from dataclasses import dataclass

import numpy as np
import torch
import torch.fx as fx

import torchfuser
from eager_compare import assert_close
from torchfuser.ir.kernels import KINDS, FusedKernel, KernelKind, KernelSpec, register_kind
from torchfuser.passes import PassResult, register_pass, unregister_pass
from torchfuser.passes.base import erase_nodes, insert_fused_node, next_group_id
from torchfuser.runtime.launch import Launch


@dataclass(frozen=True)
class NegateSpec(KernelSpec):
    kind = "negate"

    def key_text(self) -> str:
        return "negate float32"


class NegateKernel(FusedKernel):
    kind = "negate"

    def reference(self, x):
        return -x


def negate_source(spec: NegateSpec) -> str:
    return (f"__kernel void {spec.kernel_name}(__global const float* x, const int off, __global float* y, "
            "const int n) { const int i = get_global_id(0); if (i < n) y[i] = -x[off + i]; }")


class NegateLaunch(Launch):
    def arguments(self, in_buffers, in_offsets, out_buffers):
        return [in_buffers[0], np.int32(in_offsets[0]), out_buffers[0], np.int32(self.scalars[0])]


def configure_negate(node, inputs, device_type):
    (x,) = inputs
    n = x.numel()
    return NegateLaunch(NegateSpec(), (max(n, 1),), [(tuple(x.shape), x.stride(), x.dtype)], [n], empty=n == 0)


def fuse_negate(gm: fx.GraphModule) -> PassResult:
    negations = [n for n in gm.graph.nodes if n.target is torch.ops.aten.neg.default
                 and n.meta["val"].dtype == torch.float32 and n.meta["val"].is_contiguous()
                 and n.args[0].meta["val"].is_contiguous()]
    group = next_group_id(gm)
    for i, node in enumerate(negations):
        fused = insert_fused_node(gm, NegateKernel(group + i), node.args, [node], node.meta["val"])
        node.replace_all_uses_with(fused)
    if negations:
        erase_nodes(gm, negations)
    return PassResult(gm, bool(negations), {"negations": len(negations)})


def test_a_new_kind_needs_its_own_files_and_one_registration():
    register_kind(KernelKind("negate", NegateKernel, NegateSpec, negate_source, configure_negate))
    register_pass("fuse_negate", fuse_negate, after="fuse_attention")
    try:
        fn = lambda x: torch.relu(-x)  # noqa: E731
        x = torch.randn(5, 7)
        compiled = torchfuser.compile(fn, disable=["fuse_pointwise"])
        assert_close(compiled(x), fn(x))
        assert_close(compiled(x), fn(x))  # the steady path: the bound launch replayed
        report = torchfuser.last_report()
        assert [k.kind for k in report.kernels] == ["negate"] and "-x[off + i]" in report.kernels[0].source
        assert torchfuser.last_log["negations"] == 1 and [f.op for f in report.fallbacks] == ["aten.relu.default"]
    finally:
        unregister_pass("fuse_negate")
        KINDS.pop("negate")


def test_fallback_reasons_come_from_the_passes_that_decided():
    def fn(x, i, j):
        return torch.softmax(x, 0) + 1, i @ j

    x, i, j = torch.randn(6, 5), torch.randint(0, 9, (3, 4)), torch.randint(0, 9, (4, 2))
    torchfuser.compile(fn)(x, i, j)
    reasons = {f.op: f.reason for f in torchfuser.last_report().fallbacks}
    assert reasons["aten._softmax.default"] == "softmax over a dim other than the last (or half_to_float)"
    assert reasons["aten.mm.default"] == "the GEMM kernel takes float32 operands only"
    torchfuser.compile(fn, disable=["fuse_reductions"])(x, i, j)
    reasons = {f.op: f.reason for f in torchfuser.last_report().fallbacks}
    assert reasons["aten._softmax.default"] == "fuse_reductions is disabled"
