"""`python -m torchfuser.bench`: eager vs torchfuser vs inductor, one process, interleaved, medians.

Quote the ratio columns: these machines are noisy, ratios measured side by side are not. Fused kernels are
also compared with a copy kernel of the same size (compiled by torchfuser: same device, same runtime)
timed in the same interleaved rounds, from the kernels' profiled times in the CompileReport.
"""

from __future__ import annotations

import argparse
import warnings

import torch
import torch.nn.functional as F

import torchfuser
from torchfuser.bench_blocks import BLOCKS, block_row, format_blocks, hf_available
from torchfuser.bench_gemm import (
    TIMES_HEAD, fma_ceiling, format_gemm, format_mlp, gemm_rows, mlp_row, times_columns,
)
from torchfuser.timing import interleaved_medians

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
    """One workload against eager and inductor, with a copy kernel of the same size interleaved in the same
    rounds, so kernel bandwidth and copy bandwidth meet the same machine conditions."""
    inputs = [torch.randn(n) for _ in range(fn.__code__.co_argcount)]
    fused, fused_copy = torchfuser.compile(fn), torchfuser.compile(copy)
    fused(*inputs)
    report = torchfuser.last_report()
    fused_copy(inputs[0])
    copy_report = torchfuser.last_report()
    candidates = {"eager": lambda: fn(*inputs), "torchfuser": lambda: fused(*inputs),
                  "copy": lambda: fused_copy(inputs[0])}
    if inductor:
        compiled = torch.compile(fn)
        compiled(*inputs)
        candidates["inductor"] = lambda: compiled(*inputs)
    torch.testing.assert_close(fused(*inputs), fn(*inputs), rtol=1e-4, atol=1e-5)
    for r in (report, copy_report):
        r.plan.stats.clear()  # steady state only: the first calls fault in fresh pages
    medians = interleaved_medians(candidates, repeats=repeats)
    return {"name": name, "n": n, "medians": medians,
            "bandwidth": kernel_bandwidth(report, inputs, fused(*inputs)),
            "copy_bandwidth": kernel_bandwidth(copy_report, inputs[:1], inputs[0])}


def format_rows(rows: list[dict]) -> str:
    head = f"{'workload':<14}{'size':>6}{TIMES_HEAD}{'kernel GB/s':>13}{'% of copy':>11}"
    lines = [head, "-" * len(head)]
    for r in rows:
        size = next(k for k, v in SIZES.items() if v == r["n"]) if r["n"] in SIZES.values() else str(r["n"])
        bw, copy = r["bandwidth"], r["copy_bandwidth"]
        lines.append(
            f"{r['name']:<14}{size:>6}{times_columns(r['medians'])}{(bw or 0) / 1e9:>13.1f}"
            f"{(100 * bw / copy if bw and copy else float('nan')):>10.0f}%"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchfuser.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,16M", help=f"comma-separated, among {','.join(SIZES)}")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds per measurement")
    parser.add_argument("--no-inductor", action="store_true", help="skip torch.compile's default backend")
    parser.add_argument("--only", default="pointwise,gemm,mlp,gpt2,llama",
                        help="sections to run: pointwise, gemm, mlp, gpt2 (HF GPT2Block), llama (HF LlamaDecoderLayer)")
    args = parser.parse_args(argv)
    sections = {s.strip() for s in args.only.split(",")}
    sizes = [SIZES[s.strip()] for s in args.sizes.split(",")]
    torch.set_grad_enabled(False)
    warnings.filterwarnings("ignore", category=UserWarning)

    rows = []
    for n in sizes if "pointwise" in sections else ():
        for name, fn in WORKLOADS.items():
            rows.append(run_pointwise(name, fn, n, args.repeats, not args.no_inductor))
            torch._dynamo.reset()
    from torchfuser.runtime.device import get_device

    device = get_device()
    print(f"torchfuser {torchfuser.__version__} on {device.name if device else 'no OpenCL device'}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("medians of interleaved runs; 'x eager' = eager time / torchfuser time (higher is better)\n")
    if rows:
        print(format_rows(rows))
        print("'% of copy': the fused kernel's bytes/s over a same-size OpenCL copy kernel's, both profiled in the "
              "same interleaved rounds\n")
    if "gemm" in sections:
        print(format_gemm(gemm_rows(args.repeats), fma_ceiling()) + "\n")
    if "mlp" in sections:
        print(format_mlp(mlp_row(args.repeats, not args.no_inductor)))
    blocks = [name for name in BLOCKS if name in sections]
    if blocks and not hf_available():
        print(f"\n{', '.join(blocks)}: skipped, they need Hugging Face transformers (pip install 'torchfuser[hf]')")
    elif blocks:
        print("\n" + format_blocks([block_row(name, args.repeats, not args.no_inductor) for name in blocks]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
