"""GEMM and MLP workloads for `python -m torchfuser.bench`: GFLOP/s of torchfuser beside eager (torch.mm),
inductor and inductor+freezing, and their share of the FMA ceiling measured in the same run; an MLP block
against the same peers with its share of the FLOP bound."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import torchfuser
from torchfuser.tools.bench.bounds import fma_ceiling  # noqa: F401  (the GEMM section's ceiling; kept importable here)
from torchfuser.tools.bench.peers import PEERS, against_peers, rounds_cell, slower_flag, times_columns, times_head

# (M, K, N): C[M, N] = A[M, K] @ W[N, K]^T, as a Linear computes it
GEMM_SHAPES = {"1024^3": (1024, 1024, 1024), "512x768x3072": (512, 768, 3072),
               "1024x3072x768": (1024, 3072, 768), "decode M=8": (8, 768, 3072)}


def linear_module(w: torch.Tensor) -> nn.Module:
    """nn.Linear without bias holding w: eager runs F.linear (torch.mm), and freezing has a parameter to fold."""
    module = nn.Linear(w.shape[1], w.shape[0], bias=False).eval()
    with torch.no_grad():
        module.weight.copy_(w)
    return module


def gemm_rows(repeats: int, shapes=None, inductor: bool = True) -> list[dict]:
    """Per shape: the same Linear (no bias) as eager, inductor, inductor+freezing and torchfuser, checked, then
    timed interleaved back to back (steady state); speeds in FLOP/s."""
    rows = []
    for name, (m, k, n) in (shapes or GEMM_SHAPES).items():
        x, w = torch.randn(m, k), torch.randn(n, k)
        module = linear_module(w)
        fused = torchfuser.compile(module)
        with torch.no_grad():
            torch.testing.assert_close(fused(x), F.linear(x, w), rtol=1e-3, atol=1e-3)
        tuning = torchfuser.last_report().kernels[0].tuning or {}
        medians = against_peers(module, (x,), fused, repeats, inductor)
        flops = 2 * m * n * k
        rows.append({"name": name, "flops": flops, "medians": medians,
                     "speeds": {peer: flops / seconds for peer, seconds in medians.items()},
                     "variant": tuning.get("winner", "?")})
    return rows


def count_flops(fn, *args) -> int:
    """FLOPs of one eager call as torch.utils.flop_counter counts them: matmuls (mm, addmm, bmm, convolutions);
    not elementwise ops, and not CPU SDPA (no formula for it), so a bound built on it is a little low."""
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        fn(*args)
    return counter.get_total_flops()


def flop_bound_share(flops: int, seconds: float, ceiling: float | None) -> float | None:
    """Share of the FLOP bound: (flops / ceiling) / seconds, the fraction of the FMA ceiling achieved."""
    return flops / ceiling / seconds if ceiling and flops and seconds else None


class MLPBlock(nn.Module):
    """LayerNorm -> Linear 768->3072 -> GELU -> Linear 3072->768 -> residual."""

    def __init__(self, width=768, hidden=3072):
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(width), nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def mlp_row(repeats: int, inductor: bool) -> dict:
    block = MLPBlock().eval()
    x = torch.randn(8, 128, 768)
    fused = torchfuser.compile(block)
    with torch.no_grad():
        torch.testing.assert_close(fused(x), block(x), rtol=1e-4, atol=1e-4)
    report = torchfuser.last_report()
    medians = against_peers(block, (x,), fused, repeats, inductor)
    return {"medians": medians, "kernels": len(report.kernels), "fallbacks": [f.op for f in report.fallbacks],
            "flops": count_flops(block, x)}


def format_gemm(rows, ceiling) -> str:
    head = (f"{'GEMM (M x K x N)':<16}{'eager':>8}{'inductor':>10}{'ind+frz':>9}{'torchfuser':>12}{'x eager':>9}"
            f"{'x best':>8}{'rounds':>11}{'% of FMA':>10}  variant")
    lines = ["GFLOP/s, steady state (back-to-back calls); eager = F.linear (torch.mm)", head, "-" * len(head)]
    nan = float("nan")
    for r in rows:
        speeds, fused = r["speeds"], r["speeds"]["torchfuser"]
        share = f"{100 * fused / ceiling:>9.0f}%" if ceiling else f"{'-':>10}"
        best = max(speeds[p] for p in PEERS if p in speeds)
        lines.append(f"{r['name']:<16}{speeds['eager'] / 1e9:>8.0f}{speeds.get('inductor', nan) / 1e9:>10.0f}"
                     f"{speeds.get('inductor+freezing', nan) / 1e9:>9.0f}{fused / 1e9:>12.0f}"
                     f"{fused / speeds['eager']:>9.2f}{fused / best:>8.2f}{rounds_cell(r['medians'])}{share}"
                     f"  {r['variant']}{slower_flag(r['medians'])}")
    if ceiling:
        lines.append(f"'% of FMA': torchfuser's GFLOP/s over the FMA ceiling measured in this run ({ceiling / 1e9:.0f} "
                     "GFLOP/s)")
        above = sorted({p for r in rows for p, v in r["speeds"].items() if v > ceiling})
        if above:
            lines.append(f"WARNING: {', '.join(above)} ran above the FMA ceiling: the probe is not an upper bound "
                         "(machine noise while it ran?)")
    return "\n".join(lines)


def format_mlp(row, ceiling=None) -> str:
    m = row["medians"]
    head = f"{'MLP block':<12}{times_head()}{'% FLOP bound':>14}"
    share = flop_bound_share(row["flops"], m["torchfuser"], ceiling)
    lines = [head, "-" * len(head),
             f"{'8x128x768':<12}{times_columns(m)}{(100 * share if share else float('nan')):>13.0f}%{slower_flag(m)}"]
    fallbacks = ", ".join(sorted(set(row["fallbacks"]))) or "none"
    lines.append(f"  LayerNorm, 768->3072, GELU, 3072->768, residual; {row['flops'] / 1e9:.2f} GFLOP; "
                 f"{row['kernels']} kernels; in PyTorch: {fallbacks}")
    return "\n".join(lines)
