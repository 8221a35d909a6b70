"""`python -m torchfuser.bench` (or `torchfuser bench`): eager vs torchfuser vs inductor, one process, medians.

Quote the ratio columns: these machines are noisy, ratios measured side by side are not. Fused kernels are
also compared with a copy kernel of the same size (compiled by torchfuser: same device, same runtime)
timed in the same interleaved rounds, from the kernels' profiled times in the CompileReport.
"""

from __future__ import annotations

import argparse
import warnings

import torch

import torchfuser
from torchfuser.runtime.device import get_device
from torchfuser.tools.bench.blocks import BLOCKS, block_row, format_blocks, hf_available
from torchfuser.tools.bench.gemm import fma_ceiling, format_gemm, format_mlp, gemm_rows, mlp_row
from torchfuser.tools.bench.pointwise import SIZES, WORKLOADS, format_rows, run_pointwise


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
