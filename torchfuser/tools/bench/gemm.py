"""GEMM and MLP workloads for `python -m torchfuser.bench`: GFLOP/s beside torch.mm and the FMA ceiling
measured in the same run, and an MLP block against eager and inductor."""

from __future__ import annotations

import numpy as np
import pyopencl as cl
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchfuser
from torchfuser.runtime.device import get_device
from torchfuser.runtime.timing import interleaved_medians

# (M, K, N): C[M, N] = A[M, K] @ W[N, K]^T, as a Linear computes it
GEMM_SHAPES = {"1024^3": (1024, 1024, 1024), "512x768x3072": (512, 768, 3072),
               "1024x3072x768": (1024, 3072, 768), "decode M=8": (8, 768, 3072)}

_FMA_PROBE = """
__kernel void fma_probe(__global float* out, const int n) {
  float16 a = (float16)(get_global_id(0) * 1e-9f), b = (float16)(0.999f);
  float16 c0 = a, c1 = a + 1, c2 = a + 2, c3 = a + 3, c4 = a + 4, c5 = a + 5, c6 = a + 6, c7 = a + 7;
  for (int i = 0; i < n; ++i) {
    c0 = fma(c0, b, a); c1 = fma(c1, b, a); c2 = fma(c2, b, a); c3 = fma(c3, b, a);
    c4 = fma(c4, b, a); c5 = fma(c5, b, a); c6 = fma(c6, b, a); c7 = fma(c7, b, a);
  }
  vstore16(c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7, get_global_id(0), out);
}
"""


def fma_ceiling() -> float | None:
    """FLOP/s of independent float16 FMA chains on the torchfuser device (best of 5, profiled)."""
    device = get_device()
    if device is None:
        return None
    kernel = cl.Kernel(cl.Program(device.context, _FMA_PROBE).build(), "fma_probe")
    items, loops = 16 * device.cl_device.max_compute_units * 8, 20000
    out = cl.Buffer(device.context, cl.mem_flags.WRITE_ONLY, 64 * items)
    kernel.set_args(out, np.int32(loops))
    best = min(_profiled(device, kernel, (items,)) for _ in range(5))
    return items * loops * 8 * 16 * 2 / best


def _profiled(device, kernel, size) -> float:
    event = cl.enqueue_nd_range_kernel(device.queue, kernel, size, None)
    event.wait()
    return (event.profile.end - event.profile.start) * 1e-9


def gemm_rows(repeats: int, shapes=None) -> list[dict]:
    rows = []
    for name, (m, k, n) in (shapes or GEMM_SHAPES).items():
        x, w = torch.randn(m, k), torch.randn(n, k)
        linear = lambda a: F.linear(a, w)  # noqa: E731  (w is a constant of the compiled graph)
        fused = torchfuser.compile(linear)
        torch.testing.assert_close(fused(x), linear(x), rtol=1e-3, atol=1e-3)
        tuning = torchfuser.last_report().kernels[0].tuning or {}
        candidates = {"torch.mm": lambda: linear(x), "torchfuser": lambda: fused(x)}
        after_idle = interleaved_medians(candidates, repeats=repeats)
        warm = interleaved_medians(candidates, repeats=repeats, warm_calls=2)
        flops = 2 * m * n * k
        rows.append({"name": name, "torch": flops / after_idle["torch.mm"], "torchfuser": flops / after_idle["torchfuser"],
                     "torch warm": flops / warm["torch.mm"], "torchfuser warm": flops / warm["torchfuser"],
                     "variant": tuning.get("winner", "?")})
        torch._dynamo.reset()
    return rows


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
    torch.testing.assert_close(fused(x), block(x), rtol=1e-4, atol=1e-4)
    report = torchfuser.last_report()
    medians = against_eager_and_inductor(block, x, fused, repeats, inductor)
    return {"medians": medians, "kernels": len(report.kernels), "fallbacks": [f.op for f in report.fallbacks]}


def against_eager_and_inductor(module, x, fused, repeats: int, inductor: bool) -> dict:
    """Interleaved medians of eager, torchfuser and (when asked) inductor calling module on x; resets Dynamo."""
    candidates = {"eager": lambda: module(x), "torchfuser": lambda: fused(x)}
    if inductor:
        compiled = torch.compile(module)
        compiled(x)
        candidates["inductor"] = lambda: compiled(x)
    medians = interleaved_medians(candidates, repeats=repeats)
    torch._dynamo.reset()
    return medians


TIMES_HEAD = f"{'eager ms':>10}{'inductor ms':>13}{'torchfuser ms':>15}{'x eager':>9}{'x inductor':>12}"


def times_columns(medians: dict) -> str:
    """The TIMES_HEAD columns: medians in ms and torchfuser's ratios (nan where inductor was skipped)."""
    nan = float("nan")
    eager, fused, inductor = medians["eager"], medians["torchfuser"], medians.get("inductor")
    return (f"{eager * 1e3:>10.3f}{(inductor or nan) * 1e3:>13.3f}{fused * 1e3:>15.3f}"
            f"{eager / fused:>9.2f}{(inductor / fused if inductor else nan):>12.2f}")


def format_gemm(rows, ceiling) -> str:
    head = (f"{'GEMM (M x K x N)':<16}{'':>5}{'torch.mm GFLOP/s':>18}{'torchfuser GFLOP/s':>20}{'x torch':>9}"
            f"{'% of FMA':>10}  variant")
    lines = [head, "-" * len(head)]
    for r in rows:
        for when, suffix in (("idle", ""), ("warm", " warm")):
            fused = r["torchfuser" + suffix]
            share = f"{100 * fused / ceiling:>9.0f}%" if ceiling else f"{'-':>10}"
            lines.append(f"{r['name'] if not suffix else '':<16}{when:>5}{r['torch' + suffix] / 1e9:>18.0f}"
                         f"{fused / 1e9:>20.0f}{fused / r['torch' + suffix]:>9.2f}{share}  {r['variant'] if not suffix else ''}")
    lines.append("idle: each timed call starts on cores idle for 50 ms, as a single call does; warm: two untimed "
                 "calls run right before it (steady back-to-back speed). Same method for both columns.")
    if ceiling:
        lines.append(f"FMA ceiling (OpenCL float16 FMA chains, same run): {ceiling / 1e9:.0f} GFLOP/s")
    return "\n".join(lines)


def format_mlp(row) -> str:
    m = row["medians"]
    parts = [f"eager {m['eager'] * 1e3:.2f} ms", f"torchfuser {m['torchfuser'] * 1e3:.2f} ms"]
    ratio = f"{m['eager'] / m['torchfuser']:.2f}x eager"
    if "inductor" in m:
        parts.append(f"inductor {m['inductor'] * 1e3:.2f} ms")
        ratio += f", {m['inductor'] / m['torchfuser']:.2f}x inductor"
    fallbacks = ", ".join(sorted(set(row["fallbacks"]))) or "none"
    return (f"MLP block 8x128x768 (LayerNorm, 768->3072, GELU, 3072->768, residual): {', '.join(parts)} -> {ratio}"
            f"\n  {row['kernels']} kernels; in PyTorch: {fallbacks}")
