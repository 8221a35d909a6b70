"""The `torchfuser` command (also `python -m torchfuser`): demo, bench, check-gpu-gemm."""

from __future__ import annotations

import argparse
import sys

from torchfuser.tools import check_gpu_gemm, demo
from torchfuser.tools.bench import main as bench

TOOLS = {"bench": bench, "check-gpu-gemm": check_gpu_gemm.main}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="torchfuser")
    commands = parser.add_subparsers(dest="command", required=True)
    demo_parser = commands.add_parser("demo", help="compile a transformer block and a pointwise chain, write a report")
    demo_parser.add_argument("--output", default="reports/demo.html", help="where to write the HTML report")
    commands.add_parser("bench", help="eager vs inductor vs torchfuser (--help for its options)", add_help=False)
    commands.add_parser("check-gpu-gemm", help="the GPU GEMM variants on a real OpenCL GPU", add_help=False)
    if argv[:1] and argv[0] in TOOLS:
        return TOOLS[argv[0]](argv[1:])
    args = parser.parse_args(argv)
    return demo.run(args.output)


if __name__ == "__main__":
    raise SystemExit(main())
