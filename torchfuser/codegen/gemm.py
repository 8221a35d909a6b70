"""GemmSpec → OpenCL C: register-blocked GEMMs with the epilogue program applied before the store.

Both schedules give each work-item a tile_m × tile_n block of C accumulated in registers over K. Tail rows
clamp their loads to a valid row and skip their stores.
- strided: A and B read through their strides (a transposed weight costs no copy); any device.
- packed (CPU): B pre-packed into [N/tile_n][K][tile_n] panels so each k step is tile_n/16 contiguous
  float16 loads, A read in its natural layout and broadcast; no local memory (7x slower on PoCL). The
  epilogue runs on float16 vectors when the program allows it, else element by element.
"""

from __future__ import annotations

from torchfuser.codegen.pointwise_ops import C_TYPES
from torchfuser.codegen.program_c import PREAMBLE, helpers_for, program_statements, vectorisable
from torchfuser.ir.specs import GemmSpec


def gemm_source(spec: GemmSpec) -> str:
    return packed_gemm_source(spec) if spec.schedule == "packed" else strided_gemm_source(spec)


def _extra_params(spec: GemmSpec) -> list[str]:
    idx = spec.index_type
    return [
        f"__global const {C_TYPES[spec.epilogue.input_dtypes[e]]}* restrict E{e}, const {idx} offE{e}, "
        f"const {idx} sE{e}m, const {idx} sE{e}n, const {idx} sE{e}b"
        for e in range(1, spec.epilogue.n_inputs)
    ]


def _batch_prologue(spec: GemmSpec, b_name: str) -> str:
    """Move every pointer to this work-item's batch (get_global_id(2); a plain mm has one batch)."""
    idx = spec.index_type
    moves = [f"const {idx} bi = get_global_id(2);", "A += bi * sab;", f"{b_name} += bi * sbb;", "C += bi * M * N;"]
    moves += [f"E{e} += bi * sE{e}b;" for e in range(1, spec.epilogue.n_inputs)]
    return " ".join(moves)


def _scalar_epilogue(spec: GemmSpec, acc: str) -> list[str]:
    """Statements computing the epilogue at (m, n) from the scalar accumulator `acc`; result in `r`."""
    loads = [
        f"const {C_TYPES[spec.epilogue.input_dtypes[e]]} e{e} = E{e}[offE{e} + m * sE{e}m + n * sE{e}n];"
        for e in range(1, spec.epilogue.n_inputs)
    ]
    body, (result,) = program_statements(spec.epilogue, [acc] + [f"e{e}" for e in range(1, spec.epilogue.n_inputs)])
    return loads + body + [f"const float r = {result};"]


def packed_gemm_source(spec: GemmSpec) -> str:
    idx, tm, tn = spec.index_type, spec.tile_m, spec.tile_n
    vectors = tn // 16
    vector_epilogue = vectorisable(spec.epilogue) and "strided" not in spec.extra_layouts
    params = [f"__global const float* restrict A, const {idx} offA, const {idx} sam, const {idx} sak, const {idx} sab",
              f"__global const float* restrict Bp, const {idx} sbb", *_extra_params(spec),
              "__global float* restrict C", f"const {idx} M, const {idx} N, const {idx} K"]
    declare = "\n  ".join(f"float16 acc{v}[{tm}];" for v in range(vectors))
    zero = " ".join(f"acc{v}[i] = (float16)0.0f;" for v in range(vectors))
    load_b = " ".join(f"const float16 b{v} = vload16({v}, bk);" for v in range(vectors))
    fmas = " ".join(f"acc{v}[i] = fma(a, b{v}, acc{v}[i]);" for v in range(vectors))
    full_tile = []
    for v in range(vectors):
        loads = []
        for e, layout in enumerate(spec.extra_layouts, start=1):
            c_type = C_TYPES[spec.epilogue.input_dtypes[e]]
            where = f"offE{e} + m * sE{e}m"
            loads.append(f"const float16 e{e}_{v} = " + (
                f"vload16(0, E{e} + {where} + n0 + {16 * v});" if layout == "row" else f"(float16)(({c_type})E{e}[{where}]);"
            ))
        body, (result,) = program_statements(
            spec.epilogue, [f"acc{v}[i]"] + [f"e{e}_{v}" for e in range(1, spec.epilogue.n_inputs)],
            prefix=f"w{v}_", width=16,
        )
        full_tile += loads + body + [f"vstore16({result}, 0, C + m * N + n0 + {16 * v});"]
    spill = " ".join(f"vstore16(acc{v}[i], {v}, tile);" for v in range(vectors))
    tail = "\n          ".join(_scalar_epilogue(spec, "tile[j]") + ["C[m * N + n] = r;"])
    full = "\n          ".join(full_tile)
    vector_branch = f"""if (n0 + {tn} <= N) {{
          {full}
        }} else """ if vector_epilogue else ""
    return f"""{PREAMBLE}{helpers_for([spec.epilogue], 16 if vector_epilogue else 1)}
__kernel void {spec.kernel_name}(
    {(","+chr(10)+"    ").join(params)})
{{
  const {idx} nb = get_global_id(0);
  const {idx} n0 = nb * {tn};
  const {idx} m0 = ({idx})get_global_id(1) * {tm};
  if (m0 >= M) return;
  {_batch_prologue(spec, "Bp")}
  {declare}
  {idx} arow[{tm}];
  #pragma unroll
  for (int i = 0; i < {tm}; ++i) {{ {zero} arow[i] = offA + (m0 + i < M ? m0 + i : M - 1) * sam; }}
  __global const float* panel = Bp + nb * K * {tn};
  for ({idx} k = 0; k < K; ++k) {{
    __global const float* bk = panel + k * {tn};
    {load_b}
    #pragma unroll
    for (int i = 0; i < {tm}; ++i) {{
      const float16 a = (float16)(A[arow[i] + k * sak]);
      {fmas}
    }}
  }}
  #pragma unroll
  for (int i = 0; i < {tm}; ++i) {{
    const {idx} m = m0 + i;
    if (m < M) {{
      {vector_branch}{{
        float tile[{tn}];
        {spill}
        for (int j = 0; j < {tn} && n0 + j < N; ++j) {{
          const {idx} n = n0 + j;
          {tail}
        }}
      }}
    }}
  }}
}}
"""


def strided_gemm_source(spec: GemmSpec) -> str:
    idx, tm, tn = spec.index_type, spec.tile_m, spec.tile_n
    epilogue = spec.epilogue
    params = [
        f"__global const float* restrict A, const {idx} offA, const {idx} sam, const {idx} sak, const {idx} sab",
        f"__global const float* restrict B, const {idx} offB, const {idx} sbk, const {idx} sbn, const {idx} sbb",
    ]
    params += _extra_params(spec)
    params += ["__global float* restrict C", f"const {idx} M, const {idx} N, const {idx} K"]
    store = "\n        ".join(_scalar_epilogue(spec, "acc[i][j]") + ["C[m * N + n] = r;"])
    return f"""{PREAMBLE}{helpers_for([epilogue])}
__kernel void {spec.kernel_name}(
    {(","+chr(10)+"    ").join(params)})
{{
  const {idx} n0 = ({idx})get_global_id(0) * {tn};
  const {idx} m0 = ({idx})get_global_id(1) * {tm};
  if (m0 >= M || n0 >= N) return;
  {_batch_prologue(spec, "B")}
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
