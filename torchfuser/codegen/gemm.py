"""GemmSpec → OpenCL C: a register-blocked GEMM with the epilogue program applied before the store.

Each work-item owns a tile_m × tile_n block of C and accumulates it in registers over K; A and B are read
through their strides (so a transposed weight costs no copy). Tail rows/columns clamp their loads to a
valid index and skip their stores. The epilogue reads its extra inputs at (m, n) through their strides.
"""

from __future__ import annotations

from torchfuser.codegen.pointwise_ops import C_TYPES
from torchfuser.codegen.program_c import PREAMBLE, helpers_for, program_statements
from torchfuser.ir.specs import GemmSpec


def gemm_source(spec: GemmSpec) -> str:
    idx, tm, tn = spec.index_type, spec.tile_m, spec.tile_n
    epilogue = spec.epilogue
    params = [
        f"__global const float* restrict A, const {idx} offA, const {idx} sam, const {idx} sak",
        f"__global const float* restrict B, const {idx} offB, const {idx} sbk, const {idx} sbn",
    ]
    extra_loads = []
    for e in range(1, epilogue.n_inputs):
        c_type = C_TYPES[epilogue.input_dtypes[e]]
        params.append(f"__global const {c_type}* restrict E{e}, const {idx} offE{e}, const {idx} sE{e}m, const {idx} sE{e}n")
        extra_loads.append(f"const {c_type} e{e} = E{e}[offE{e} + m * sE{e}m + n * sE{e}n];")
    params += ["__global float* restrict C", f"const {idx} M, const {idx} N, const {idx} K"]
    body, (result,) = program_statements(epilogue, ["acc[i][j]"] + [f"e{e}" for e in range(1, epilogue.n_inputs)])
    store = "\n        ".join(extra_loads + body + [f"C[m * N + n] = {result};"])
    return f"""{PREAMBLE}{helpers_for([epilogue])}
__kernel void {spec.kernel_name}(
    {(","+chr(10)+"    ").join(params)})
{{
  const {idx} n0 = ({idx})get_global_id(0) * {tn};
  const {idx} m0 = ({idx})get_global_id(1) * {tm};
  if (m0 >= M || n0 >= N) return;
  {idx} arow[{tm}], bcol[{tn}];
  #pragma unroll
  for (int i = 0; i < {tm}; ++i) arow[i] = offA + (m0 + i < M ? m0 + i : M - 1) * sam;
  #pragma unroll
  for (int j = 0; j < {tn}; ++j) bcol[j] = offB + (n0 + j < N ? n0 + j : N - 1) * sbn;
  float acc[{tm}][{tn}];
  #pragma unroll
  for (int i = 0; i < {tm}; ++i)
    #pragma unroll
    for (int j = 0; j < {tn}; ++j) acc[i][j] = 0.0f;
  for ({idx} k = 0; k < K; ++k) {{
    float a[{tm}], b[{tn}];
    #pragma unroll
    for (int i = 0; i < {tm}; ++i) a[i] = A[arow[i] + k * sak];
    #pragma unroll
    for (int j = 0; j < {tn}; ++j) b[j] = B[bcol[j] + k * sbk];
    #pragma unroll
    for (int i = 0; i < {tm}; ++i)
      #pragma unroll
      for (int j = 0; j < {tn}; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
  }}
  #pragma unroll
  for (int i = 0; i < {tm}; ++i) {{
    #pragma unroll
    for (int j = 0; j < {tn}; ++j) {{
      const {idx} m = m0 + i, n = n0 + j;
      if (m < M && n < N) {{
        {store}
      }}
    }}
  }}
}}
"""
