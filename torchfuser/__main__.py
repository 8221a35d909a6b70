"""`python -m torchfuser demo [--output FILE]` and `python -m torchfuser bench ...`."""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m torchfuser")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="compile a transformer block and a pointwise chain, write a report")
    demo.add_argument("--output", default="reports/demo.html", help="where to write the HTML report")
    commands.add_parser("bench", help="same as python -m torchfuser.bench", add_help=False)
    if argv[:1] == ["bench"]:
        from torchfuser.bench import main as bench

        return bench(argv[1:])
    args = parser.parse_args(argv)
    from torchfuser.demo import run

    return run(args.output)


if __name__ == "__main__":
    raise SystemExit(main())
