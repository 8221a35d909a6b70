"""`python -m torchfuser.tools.opinfo_reductions`: PyTorch's own OpInfo samples of the reduction and
normalisation ops (float32, CPU), each compiled by torchfuser and compared with eager.

Per op it prints the samples run, the samples whose result differs from eager ("wrong": always a bug), the
samples that ran wholly in kernels (at least one kernel, nothing left in PyTorch), and the first reason an
op of a sample stayed in PyTorch. An op "gets a kernel" when some sample ran wholly in kernels; "every" counts
the ops whose samples all did.
Needs `expecttest` (PyTorch's test helpers import it; in the dev extra).
"""

from __future__ import annotations

import argparse
import sys
import warnings

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

import torchfuser

# PyTorch's ReductionOpInfo ops (hash_tensor aside: not a numeric reduction) and the normalisation family
OPS = (
    "all", "any", "amax", "amin", "argmax", "argmin", "count_nonzero", "linalg.vector_norm", "mean", "nanmean",
    "nansum", "prod", "std", "std.unbiased", "sum", "var", "var.unbiased", "masked.amax", "masked.amin",
    "masked.argmax", "masked.argmin", "masked.logsumexp", "masked.mean", "masked.norm", "masked.prod",
    "masked.std", "masked.sum", "masked.var", "max.reduction_no_dim", "max.reduction_with_dim",
    "min.reduction_no_dim", "min.reduction_with_dim", "aminmax", "std_mean", "var_mean", "logsumexp", "softmax",
    "log_softmax", "nn.functional.softmin", "masked.softmax", "masked.log_softmax", "nn.functional.layer_norm",
    "nn.functional.rms_norm", "nn.functional.group_norm", "nn.functional.batch_norm",
    "nn.functional.instance_norm", "nn.functional.normalize", "norm", "linalg.norm",
)


def _op_infos() -> dict:
    from torch.testing._internal.common_methods_invocations import op_db

    return {o.name + (f".{o.variant_test_name}" if o.variant_test_name else ""): o for o in op_db}


def _same(actual, expected) -> bool:
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor) or actual.shape != expected.shape or actual.dtype != expected.dtype:
            return False
        if not expected.dtype.is_floating_point:
            return torch.equal(actual, expected)
        return torch.allclose(actual, expected, rtol=1e-4, atol=1e-5, equal_nan=True)
    if isinstance(expected, (list, tuple)):
        return isinstance(actual, (list, tuple)) and len(actual) == len(expected) and all(
            _same(a, e) for a, e in zip(actual, expected))
    return actual == expected


def check_op(info, max_samples: int) -> dict:
    """{samples, wrong, kernel, fallbacks, error} for one OpInfo's float32 CPU samples."""
    result = {"samples": 0, "wrong": 0, "in_kernels": 0, "why": None, "error": None}
    for sample in list(info.sample_inputs("cpu", torch.float32))[:max_samples]:
        leaves, spec = tree_flatten(((sample.input, *sample.args), sample.kwargs))
        where = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

        def call(*tensors, _leaves=leaves, _spec=spec, _where=where):  # the sample's tensors as graph inputs
            filled = list(_leaves)
            for i, t in zip(_where, tensors):
                filled[i] = t
            args, kwargs = tree_unflatten(filled, _spec)
            return info.op(*args, **kwargs)

        tensors = [leaves[i] for i in where]
        expected = call(*tensors)
        torch._dynamo.reset()
        try:
            with torchfuser.collect_reports() as reports, warnings.catch_warnings():
                warnings.simplefilter("ignore")
                actual = torchfuser.compile(call)(*tensors)
        except Exception as error:  # noqa: BLE001 - a tool that reports every failure and goes on
            result["error"] = result["error"] or f"{type(error).__name__}: {str(error).splitlines()[0][:120]}"
            continue
        result["samples"] += 1
        result["wrong"] += not _same(actual, expected)
        fallbacks = [f for r in reports for f in r.fallbacks]
        if fallbacks:
            result["why"] = result["why"] or f"{fallbacks[0].op}: {fallbacks[0].reason[:100]}"
        elif any(r.kernels for r in reports):
            result["in_kernels"] += 1
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8, help="samples per op at most")
    parser.add_argument("--only", default="", help="comma-separated op names (default: all of OPS)")
    args = parser.parse_args(argv)
    try:
        infos = _op_infos()
    except ImportError as error:
        print(f"PyTorch's OpInfo database needs a test helper: {error} (pip install expecttest)", file=sys.stderr)
        return 2
    names = [n for n in (args.only.split(",") if args.only else OPS) if n]
    missing = [n for n in names if n not in infos]
    some = every = wrong_ops = 0
    print(f"{'op':<32}{'samples':>8}{'wrong':>7}{'in kernels':>11}  first op left in PyTorch, and why / error")
    for name in names:
        if name in missing:
            print(f"{name:<32}{'-':>8}{'':>7}{'':>9}  not in this torch's OpInfo database")
            continue
        r = check_op(infos[name], args.samples)
        some += r["in_kernels"] > 0
        every += r["samples"] > 0 and r["in_kernels"] == r["samples"] and r["error"] is None
        wrong_ops += r["wrong"] > 0
        detail = "; ".join(x for x in (r["why"], r["error"]) if x)
        print(f"{name:<32}{r['samples']:>8}{r['wrong']:>7}{r['in_kernels']:>11}  {detail}")
    print(f"\n{len(names) - len(missing)} ops: {some} get a kernel (some sample wholly in kernels), {every} in "
          f"every sample; {wrong_ops} with a wrong sample")
    return 1 if wrong_ops else 0


if __name__ == "__main__":
    sys.exit(main())
