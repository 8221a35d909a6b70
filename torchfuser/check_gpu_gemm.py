"""`python -m torchfuser.check_gpu_gemm`: the spelling the docs use for torchfuser.tools.check_gpu_gemm."""

from torchfuser.tools.check_gpu_gemm import main

if __name__ == "__main__":
    raise SystemExit(main())
