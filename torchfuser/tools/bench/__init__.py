"""`python -m torchfuser.bench`: torchfuser vs eager, inductor and inductor+freezing, in steady state, with bounds.

Also `torchfuser bench`. One process, steady-state medians, each row judged against a physical bound measured
in the same run.

Timing: interleaved blocks of back-to-back calls (runtime/timing.py), i.e. what a user calling the model in a
loop sees. Quote the ratio columns: these machines are noisy, ratios measured side by side are not. Bounds:
the FMA ceiling (GEMM-bound rows: % of the FLOP bound) and the copy bandwidth (weight-streaming rows: decode,
GEMV), both measured here (bounds.py). Pointwise kernels are compared with a copy kernel of the same size
timed in the same interleaved rounds.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import torch

import torchfuser
from torchfuser.runtime.device import get_device
from torchfuser.tools.bench.blocks import BLOCKS, block_row, format_blocks, hf_available
from torchfuser.tools.bench.bounds import copy_bandwidth, fma_ceiling, format_ceilings
from torchfuser.tools.bench.cnn import CNNS, cnn_row
from torchfuser.tools.bench.peers import TIMES_NOTE
from torchfuser.tools.bench.gemm import format_gemm, format_mlp, gemm_rows, mlp_row
from torchfuser.tools.bench.generate import (
    dynamic_cost_row, format_dynamic_cost, format_generate, format_long_generate, format_static_cache, generate_row,
    long_generate_row, static_cache_row,
)
from torchfuser.tools.bench.latency import DECODE_BLOCKS, decode_row, format_latency, gemv_row, small_row
from torchfuser.tools.bench.pointwise import SIZES, WORKLOADS, format_rows, run_pointwise

SECTIONS = {
    "pointwise": "fused elementwise chains at --sizes",
    "gemm": "Linear GEMMs, GFLOP/s and share of the FMA ceiling",
    "mlp": "MLP block at 8x128x768",
    "gpt2": "HF GPT2Block",
    "llama": "HF LlamaDecoderLayer",
    "small": "MLP 64->128->64 on [4, 64]",
    "decode": "one token [1, 1, 768] through GPT2Block and LlamaDecoderLayer",
    "gemv": "768x3072 GEMV, weight GB/s vs copy bandwidth",
    "generate": "HF generate() of GPT-2 and LLaMA 4x512, dynamic KV cache: tokens/s, first call, graphs",
    "cnn": "ResNet-18 4x3x112x112, a MobileNetV2 block, a conv1d stack, ViT's patch embedding",
}
FLOP_BOUND = {"gemm", "mlp", "gpt2", "llama", "cnn"}
BANDWIDTH_BOUND = {"small", "decode", "gemv", "generate"}


def _load_line(when: str) -> str:
    """The 1-minute load average against the CPUs: other processes' work slows every candidate, and PyTorch's
    OpenMP barriers worst of all (a 30 us eager MLP took 1-24 ms while another process held a CPU)."""
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    text = f"load average {when}: {load:.2f} on {cpus} CPUs"
    return text + ("  << other processes were busy: expect noisy rows" if load > 0.5 * cpus else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torchfuser.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1M,16M", help=f"comma-separated, among {','.join(SIZES)}")
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds per measurement")
    parser.add_argument("--no-inductor", action="store_true",
                        help="skip torch.compile's default backend (both inductor peers)")
    parser.add_argument("--only", default=",".join(SECTIONS),
                        help="sections to run (default: all): " + "; ".join(f"{k} ({v})" for k, v in SECTIONS.items())
                        + "; gpt2 and llama at 8x128")
    args = parser.parse_args(argv)
    sections = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; valid: {', '.join(SECTIONS)}")
    sizes = [SIZES[s.strip()] for s in args.sizes.split(",")]
    inductor = not args.no_inductor
    torch.set_grad_enabled(False)
    warnings.filterwarnings("ignore", category=UserWarning)
    started = time.perf_counter()

    device = get_device()
    print(f"torchfuser {torchfuser.__version__} on {device.name if device else 'no OpenCL device'}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(_load_line("at the start"))
    print("steady state: medians over rounds of interleaved blocks of back-to-back calls (order rotated each round)")
    print(TIMES_NOTE + "\n")
    hf_wanted = [s for s in sections if s in ("gpt2", "llama", "decode", "generate")]
    if hf_wanted and not hf_available():
        print(f"{', '.join(hf_wanted)}: skipped, they need Hugging Face transformers (pip install 'torchfuser[hf]')\n")
        sections = [s for s in sections if s not in hf_wanted]

    spent = {}

    def timed(section, fn):
        t0 = time.perf_counter()
        result = fn()
        spent[section] = spent.get(section, 0.0) + time.perf_counter() - t0
        return result

    fma = timed("ceilings", fma_ceiling) if FLOP_BOUND & set(sections) else None
    copy = timed("ceilings", copy_bandwidth) if BANDWIDTH_BOUND & set(sections) else None
    if fma or copy:
        print("ceilings, measured now:\n" + format_ceilings(copy, fma) + "\n", flush=True)

    if "pointwise" in sections:
        rows = []
        for n in sizes:
            for name, fn in WORKLOADS.items():
                rows.append(timed("pointwise", lambda: run_pointwise(name, fn, n, args.repeats, inductor)))
                torch._dynamo.reset()
        print(format_rows(rows))
        print("'% of copy': the fused kernel's bytes/s over a same-size OpenCL copy kernel's, both profiled in the "
              "same interleaved rounds\n", flush=True)
    if "gemm" in sections:
        print(format_gemm(timed("gemm", lambda: gemm_rows(args.repeats, inductor=inductor)), fma) + "\n", flush=True)
    if "mlp" in sections:
        print(format_mlp(timed("mlp", lambda: mlp_row(args.repeats, inductor)), fma) + "\n", flush=True)
    blocks = [timed(name, lambda: block_row(name, args.repeats, inductor)) for name in BLOCKS if name in sections]
    if blocks:
        print(format_blocks(blocks, fma) + "\n", flush=True)
    if "cnn" in sections:
        rows = [timed("cnn", lambda: cnn_row(name, args.repeats, inductor)) for name in CNNS]
        print(format_blocks(rows, fma) + "\n", flush=True)
    latency = []
    if "small" in sections:
        latency.append(timed("small", lambda: small_row(args.repeats, inductor)))
    if "decode" in sections:
        latency += [timed("decode", lambda: decode_row(name, args.repeats, inductor)) for name in DECODE_BLOCKS]
    if "gemv" in sections:
        latency.append(timed("gemv", lambda: gemv_row(args.repeats, inductor)))
    if latency:
        print(format_latency(latency, copy["ceiling"] if copy else None) + "\n")
    if "generate" in sections:
        rows = [timed("generate", lambda: generate_row(name, max(3, args.repeats // 3), inductor))
                for name in ("gpt2", "llama")]
        print(format_generate(rows, copy["ceiling"] if copy else None), flush=True)
        cost = [timed("generate", lambda: dynamic_cost_row(name, args.repeats)) for name in ("gpt2", "llama")]
        print(format_dynamic_cost(cost), flush=True)
        static = [timed("generate", lambda: static_cache_row(name, max(3, args.repeats // 3)))
                  for name in ("gpt2", "llama")]
        print(format_static_cache(static), flush=True)
        long = [timed("generate", lambda: long_generate_row("gpt2", max(3, args.repeats // 3)))]
        print(format_long_generate(long) + "\n", flush=True)
    if fma or copy:  # the same probes again: how far the machine drifted while the rows ran
        again = timed("ceilings", lambda: format_ceilings(copy_bandwidth() if copy else None,
                                                          fma_ceiling() if fma else None))
        print("ceilings again at the end (drift check, not used above):\n" + again + "\n")
    print(_load_line("at the end"))
    print(f"bench took {time.perf_counter() - started:.0f} s ("
          + ", ".join(f"{k} {v:.0f}" for k, v in spent.items()) + ")")
    return 0
