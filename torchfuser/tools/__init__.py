"""Tools around the compiler: the benchmark (bench/), the demo, and the GPU GEMM check."""
