"""`python -m torchfuser.bench`: the spelling the docs use for the benchmark (torchfuser.tools.bench)."""

from torchfuser.tools.bench import main

if __name__ == "__main__":
    raise SystemExit(main())
