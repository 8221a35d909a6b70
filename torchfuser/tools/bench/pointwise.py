"""Pointwise workloads for the bench: fused elementwise chains against eager, inductor and inductor+freezing
(no parameters here: it compiles what inductor compiles), with the kernels' bandwidth beside a same-size copy
kernel's, profiled in the same interleaved rounds."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import torchfuser
from torchfuser.tools.bench.peers import against_peers, slower_flag, times_columns, times_head

SIZES = {"1M": 1 << 20, "4M": 1 << 22, "16M": 1 << 24}


def silu_mul_add(x, y, z):
    return F.silu(x) * y + z


def gelu_affine(x, w, b):
    return F.gelu(x * w + b)


def copy(x):
    return x.clone()


WORKLOADS = {"silu(x)*y+z": silu_mul_add, "gelu(x*w+b)": gelu_affine}


def kernel_bandwidth(report, inputs, output) -> float | None:
    """Bytes moved per call / summed profiled kernel time per call (from the report)."""
    seconds = sum(k["mean_seconds"] or 0.0 for k in report.to_dict()["kernels"])
    moved = sum(t.numel() * t.element_size() for t in inputs) + output.numel() * output.element_size()
    return moved / seconds if seconds else None


def run_pointwise(name: str, fn, n: int, repeats: int, inductor: bool) -> dict:
    """One workload against the peers (eager, inductor, inductor+freezing), with a copy kernel of the same size interleaved in the same
    rounds, so kernel bandwidth and copy bandwidth meet the same machine conditions."""
    inputs = [torch.randn(n) for _ in range(fn.__code__.co_argcount)]
    fused, fused_copy = torchfuser.compile(fn), torchfuser.compile(copy)
    fused(*inputs)
    report = torchfuser.last_report()
    fused_copy(inputs[0])
    copy_report = torchfuser.last_report()
    torch.testing.assert_close(fused(*inputs), fn(*inputs), rtol=1e-4, atol=1e-5)
    for r in (report, copy_report):
        r.plan.stats.clear()  # steady state only: the first calls fault in fresh pages
    medians = against_peers(fn, tuple(inputs), fused, repeats, inductor, extra={"copy": lambda: fused_copy(inputs[0])})
    return {"name": name, "n": n, "medians": medians,
            "bandwidth": kernel_bandwidth(report, inputs, inputs[0]),  # the output: one more tensor of that size
            "copy_bandwidth": kernel_bandwidth(copy_report, inputs[:1], inputs[0])}


def format_rows(rows: list[dict]) -> str:
    head = f"{'workload':<14}{'size':>6}{times_head()}{'kernel GB/s':>13}{'% of copy':>11}"
    lines = [head, "-" * len(head)]
    for r in rows:
        size = next(k for k, v in SIZES.items() if v == r["n"]) if r["n"] in SIZES.values() else str(r["n"])
        bw, copy = r["bandwidth"], r["copy_bandwidth"]
        lines.append(
            f"{r['name']:<14}{size:>6}{times_columns(r['medians'])}{(bw or 0) / 1e9:>13.1f}"
            f"{(100 * bw / copy if bw and copy else float('nan')):>10.0f}%{slower_flag(r['medians'])}"
        )
    return "\n".join(lines)


