"""`python -m torchfuser.bench_attention`: the fused attention kernel against eager SDPA and inductor.

Steady-state medians of interleaved blocks in one process (quote the ratio columns: these machines are noisy,
side-by-side ratios are not), plus the kernel's own profiled time from the CompileReport, plus eager and
torchfuser each timed alone. Interleaving has a catch here: torch's OpenMP threads spin for a while after each
eager or inductor call and take the cores from the OpenCL kernel that runs next (GPT-2 shape, non-causal:
2.9 ms alone, 6.4 ms right after an eager call); the timer's untimed lead-in calls before each block absorb
most of it (runtime/timing.py), the "alone" columns show what is left, and OMP_WAIT_POLICY=PASSIVE removes it.
No inductor+freezing column here: SDPA has no parameters to freeze.

"first call s" is the compiled function's first call: tracing, passes, kernel builds and the first launch
(PoCL compiles the work-group function there, not in clBuildProgram). For cold numbers run with
POCL_KERNEL_CACHE=0 PYOPENCL_NO_CACHE=1 TORCHFUSER_CACHE_DIR=$(mktemp -d).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

import torchfuser
from torchfuser.runtime.timing import interleaved_medians

# name: (batch, heads, kv heads, query/key length, head dim, causal)
SHAPES = {
    "gpt2 causal": (8, 12, 12, 128, 64, True),
    "gpt2": (8, 12, 12, 128, 64, False),
    "llama gqa causal": (1, 32, 8, 512, 128, True),
}


def sdpa_fn(causal: bool, gqa: bool):
    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa)

    return attention


def run_shape(name: str, shape: tuple, repeats: int, inductor: bool) -> dict:
    b, h, hkv, t, d, causal = shape
    torch.manual_seed(0)
    q, k, v = torch.randn(b, h, t, d), torch.randn(b, hkv, t, d), torch.randn(b, hkv, t, d)
    fn = sdpa_fn(causal, hkv != h)
    fused = torchfuser.compile(fn)
    started = time.perf_counter()
    out = fused(q, k, v)
    first_call = time.perf_counter() - started
    torch.testing.assert_close(out, fn(q, k, v), rtol=1e-4, atol=1e-5)
    report = torchfuser.last_report()
    report.plan.stats.clear()
    candidates = {"eager": lambda: fn(q, k, v), "torchfuser": lambda: fused(q, k, v)}
    if inductor:
        compiled = torch.compile(fn)
        compiled(q, k, v)
        candidates["inductor"] = lambda: compiled(q, k, v)
    medians = interleaved_medians(candidates, repeats=repeats)
    kernel = [x for x in report.to_dict()["kernels"] if x["kind"] == "attention"]
    alone = {n: interleaved_medians({n: candidates[n]}, repeats=repeats)[n] for n in ("eager", "torchfuser")}
    return {"name": name, "medians": medians, "kernel_seconds": kernel[0]["mean_seconds"] if kernel else None,
            "alone": alone, "first_call": first_call, "flops": 4 * b * h * t * t * d * (0.5 if causal else 1.0)}


def format_rows(rows: list[dict]) -> str:
    head = (f"{'shape':<18}{'eager ms':>10}{'inductor ms':>13}{'torchfuser ms':>15}{'kernel ms':>11}"
            f"{'x eager':>9}{'x inductor':>12}{'GFLOP/s':>9}{'alone: eager':>14}{'torchfuser':>12}{'x eager':>9}"
            f"{'first call s':>14}")
    lines = [head, "-" * len(head)]
    for r in rows:
        m, alone = r["medians"], r["alone"]
        ind, fused, kernel = m.get("inductor"), m["torchfuser"], r["kernel_seconds"]
        lines.append(f"{r['name']:<18}{m['eager'] * 1e3:>10.3f}{(ind or 0) * 1e3:>13.3f}{fused * 1e3:>15.3f}"
                     f"{(kernel or 0) * 1e3:>11.3f}{m['eager'] / fused:>9.2f}"
                     f"{(ind / fused if ind else float('nan')):>12.2f}{r['flops'] / fused / 1e9:>9.0f}"
                     f"{alone['eager'] * 1e3:>14.3f}{alone['torchfuser'] * 1e3:>12.3f}"
                     f"{alone['eager'] / alone['torchfuser']:>9.2f}{r['first_call']:>14.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-inductor", action="store_true")
    parser.add_argument("--only", help="comma-separated shape names")
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    names = args.only.split(",") if args.only else list(SHAPES)
    rows = [run_shape(name, SHAPES[name], args.repeats, not args.no_inductor) for name in names]
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
