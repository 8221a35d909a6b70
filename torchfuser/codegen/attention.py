"""AttentionSpec → OpenCL C: fused attention with an online softmax (running max and sum, fp32).

Each work-item owns one query row (b, h, t) and walks the keys once: scores, softmax and the weighted sum
of values never leave registers, so the [T, S] probability matrix is never written.
- row_vector (CPU devices): the query row, the output accumulator and each key/value row are float16
  vectors along the head dim. Keys go in blocks of 16: 16 partial dot products (vectors), then a
  transpose-and-add tree turns them into one float16 of scores (lane j = key j), so the block costs one
  vector exp and one rescale of the accumulator instead of 16. No local memory (slow on PoCL).
- row_scalar (GPUs): the same walk with scalar loops, one key at a time; neighbouring work-items read the
  same key row together.
The score program (scale, additive masks, fills) runs per key on the raw dot product; causal masking
stops the walk at key t. A row whose scores are all -inf gives NaN ("nan", as eager softmax does) or 0
("zero", as SDPA does).
"""

from __future__ import annotations

from torchfuser.codegen.pointwise_ops import C_TYPES
from torchfuser.codegen.program_c import PREAMBLE, helpers_for, program_statements, vectorisable
from torchfuser.ir.specs import ATTENTION_CPU, AttentionSpec

KEY_BLOCK = 16  # keys per block on the CPU schedule: one float16 of scores

# exp of x <= 0 (scores minus their running max) on float16: x = n ln2 + r, |r| <= ln2 / 2, e^r by its
# Taylor series to degree 7 (remainder < 6e-9, under float rounding), times 2^n built in the exponent
# bits. PoCL's vector exp is ~3x slower. Below -87 the result would be subnormal: 0 (added to a sum >= 1).
EXP_NONPOSITIVE = """
float tf_hsum16(const float16 v) {
  const float8 a = v.lo + v.hi;
  const float4 b = a.lo + a.hi;
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
}
float16 tf_exp_nonpositive16(const float16 x) {
  const float16 n = rint(x * 0x1.715476p+0f);
  const float16 r = fma(n, (float16)(-0x1.62e4p-1f), fma(n, (float16)(-0x1.7f7d1cp-20f), x));
  float16 p = (float16)(1.0f / 5040.0f);
  p = fma(p, r, (float16)(1.0f / 720.0f));
  p = fma(p, r, (float16)(1.0f / 120.0f));
  p = fma(p, r, (float16)(1.0f / 24.0f));
  p = fma(p, r, (float16)(1.0f / 6.0f));
  p = fma(p, r, (float16)(0.5f));
  p = fma(p, r, (float16)(1.0f));
  p = fma(p, r, (float16)(1.0f));
  const float16 scale = as_float16((convert_int16(n) + 127) << 23);
  const float16 y = select(p * scale, (float16)(0.0f), x < -87.0f);
  return select(y, x, isnan(x));
}
"""


def attention_source(spec: AttentionSpec) -> str:
    rows = spec.rows_per_item
    body = _vector_body(spec) if spec.schedule == ATTENTION_CPU else _scalar_body(spec)
    params = ",\n    ".join(_parameters(spec))
    helpers = helpers_for([spec.score], 16 if spec.schedule == ATTENTION_CPU else 1)
    if spec.schedule == ATTENTION_CPU:
        helpers += EXP_NONPOSITIVE
    return f"""{PREAMBLE}{helpers}
__kernel void {spec.kernel_name}(
    {params})
{{
  const {spec.index_type} tiles = (T + {rows - 1}) / {rows}, gid = get_global_id(0);
  if (gid >= B * H * tiles) return;
  {_row_setup(spec)}
{body}
}}
"""


def _parameters(spec: AttentionSpec) -> list[str]:
    idx = spec.index_type
    params = [
        f"__global const float* restrict {name}, const {idx} off{name}, "
        + ", ".join(f"const {idx} s{name}{axis}" for axis in ("b", "h", "r", "d"))
        for name in ("Q", "K", "V")
    ]
    for e in range(1, spec.score.n_inputs):
        c_type = C_TYPES[spec.score.input_dtypes[e]]
        params.append(f"__global const {c_type}* restrict E{e}, const {idx} offE{e}, "
                      + ", ".join(f"const {idx} sE{e}{axis}" for axis in ("b", "h", "t", "s")))
    params.append("__global float* restrict O, " + ", ".join(f"const {idx} sO{axis}" for axis in ("b", "h", "t", "d")))
    if spec.with_lse:
        params.append("__global float* restrict L, " + ", ".join(f"const {idx} sL{axis}" for axis in ("b", "h", "t")))
    params.append(", ".join(f"const {idx} {n}" for n in ("B", "H", "T", "S", "G")))
    return params


def _row_setup(spec: AttentionSpec) -> str:
    """This work-item's (b, h) and rows t0.. (a tail tile recomputes row T-1 and skips its stores); the
    bases of q, k, v, masks and output; where each row's keys end and where the walk ends (the last row's)."""
    idx, rows = spec.index_type, spec.rows_per_item
    lines = [
        f"const {idx} tile = gid % tiles, bh = gid / tiles, h = bh % H, b = bh / H, hk = h / G;",
        f"const {idx} kbase = offK + b * sKb + hk * sKh;",
        f"const {idx} vbase = offV + b * sVb + hk * sVh;",
    ]
    for r in range(rows):
        lines += [
            f"const {idx} t{r} = min(tile * {rows} + {r}, T - 1);",
            f"const int live{r} = tile * {rows} + {r} < T;",
            f"const {idx} qbase{r} = offQ + b * sQb + h * sQh + t{r} * sQr;",
            f"const {idx} obase{r} = b * sOb + h * sOh + t{r} * sOt;",
            f"const {idx} s_end{r} = {f'min(S, t{r} + 1)' if spec.causal else 'S'};",
        ]
        lines += [f"const {idx} ebase{e}_{r} = offE{e} + b * sE{e}b + h * sE{e}h + t{r} * sE{e}t;"
                  for e in range(1, spec.score.n_inputs)]
    lines.append(f"const {idx} s_end = s_end{rows - 1};")
    return "\n  ".join(lines)


def _score_statements(spec: AttentionSpec, raw: str, key: str, row: int) -> tuple[list[str], str]:
    """C statements applying the score program to the raw dot product `raw` of key index `key`."""
    inputs = [raw]
    loads = []
    for e in range(1, spec.score.n_inputs):
        c_type = C_TYPES[spec.score.input_dtypes[e]]
        loads.append(f"const {c_type} mask{e} = E{e}[ebase{e}_{row} + ({key}) * sE{e}s];")
        inputs.append(f"mask{e}")
    body, (result,) = program_statements(spec.score, inputs, prefix="sc")
    return loads + body, result


def _finish_row(spec: AttentionSpec, row: int, store_lines: list[str]) -> list[str]:
    """After the walk: empty rows (l == 0) per masked_rows, then the stores and the logsumexp."""
    empty = "0.0f" if spec.masked_rows == "zero" else "NAN"
    lines = [f"const float inv_l{row} = l{row} == 0.0f ? {empty} : 1.0f / l{row};"]
    lines += store_lines
    if spec.with_lse:
        lse = f"m{row} + log(l{row})"
        if spec.masked_rows == "zero":  # SDPA reports 0 for a row with every key masked
            lse = f"(l{row} == 0.0f ? 0.0f : {lse})"
        lines.append(f"L[b * sLb + h * sLh + t{row} * sLt] = {lse};")
    return [f"if (live{row}) {{"] + ["  " + line for line in lines] + ["}"]


# ---------------------------------------------------------------- CPU: float16 vectors, 16-key blocks


def _chunk_load(name: str, base: str, chunk: int, head_dim: int, contiguous: bool) -> str:
    """float16 holding elements [16 * chunk, 16 * chunk + 16) of a head-dim row; zeros past head_dim."""
    first = 16 * chunk
    if contiguous and first + 16 <= head_dim:
        return f"vload16(0, {name} + {base} + {first})"
    lanes = [
        (f"{name}[{base} + {first + i}]" if contiguous else f"{name}[{base} + {first + i} * s{name}d]")
        if first + i < head_dim else "0.0f"
        for i in range(16)
    ]
    return f"(float16)({', '.join(lanes)})"


def _lane_sum_dots(spec: AttentionSpec, chunks: int, k_contig: bool) -> list[str]:
    """Key by key: its row of k loaded once, one dot product per query row, summed across the lanes."""
    idx, d, rows = spec.index_type, spec.head_dim, spec.rows_per_item
    dots = []
    for j in range(KEY_BLOCK):
        dots.append(f"const {idx} kr{j} = kbase + min(s0 + {j}, s_end - 1) * sKr;")
        dots += [f"const float16 k{j}_{c} = {_chunk_load('K', f'kr{j}', c, d, k_contig)};" for c in range(chunks)]
        for r in range(rows):
            expr = f"q{r}_0 * k{j}_0"
            for c in range(1, chunks):
                expr = f"fma(q{r}_{c}, k{j}_{c}, {expr})"
            dots.append(f"const float dot{r}_{j} = tf_hsum16({expr});")
    return dots


def _vector_body(spec: AttentionSpec) -> str:
    idx, d, rows = spec.index_type, spec.head_dim, spec.rows_per_item
    chunks = -(-d // 16)
    q_contig, k_contig, v_contig, o_contig = (layout == "contig" for layout in spec.layouts)
    panel = spec.layouts[1] == "keys"
    setup = []
    for r in range(rows):
        if not panel:
            setup += [f"const float16 q{r}_{c} = {_chunk_load('Q', f'qbase{r}', c, d, q_contig)};" for c in range(chunks)]
        setup += [f"float16 acc{r}_{c} = (float16)(0.0f);" for c in range(chunks)]
        setup.append(f"float m{r} = -INFINITY, l{r} = 0.0f;")
    if panel:  # row i of kᵀ holds element i of consecutive keys: 16 scores per vector FMA, no lane sums
        dots = [f"float16 panel_dot{r} = (float16)(0.0f);" for r in range(rows)]
        fmas = " ".join(f"panel_dot{r} = fma((float16)(Q[qbase{r} + i * sQd]), kt, panel_dot{r});" for r in range(rows))
        gather = ", ".join(f"K[kbase + i * sKd + min(s0 + {j}, S - 1)]" for j in range(KEY_BLOCK))
        dots.append(f"if (s0 + {KEY_BLOCK} <= S) {{")
        dots.append(f"  for (int i = 0; i < {d}; ++i) {{ const float16 kt = vload16(0, K + kbase + i * sKd + s0); {fmas} }}")
        dots.append("} else {  /* the last, partial block: clamp instead of reading past the keys */")
        dots.append(f"  for (int i = 0; i < {d}; ++i) {{ const float16 kt = (float16)({gather}); {fmas} }}")
        dots.append("}")
    else:
        dots = _lane_sum_dots(spec, chunks, k_contig)
    per_row = []
    for r in range(rows):
        score_lines, score = _score_statements(spec, "raw[j]", "s0 + j", r)
        nl = "\n          "
        rescale = " ".join(f"acc{r}_{c} *= corr;" for c in range(chunks))
        per_row.append(f"""{{  /* row {r}: scores of this block, then the online softmax update */
      const int n_keys = (int)clamp(s_end{r} - s0, ({idx})0, ({idx}){KEY_BLOCK});
      const float16 scores = {_block_scores(panel, r)};
      float16 block;
      {_vector_score(spec, r)}{{  /* a partial block (or a score program with other types): key by key */
        float raw[{KEY_BLOCK}], sc[{KEY_BLOCK}];
        vstore16(scores, 0, raw);
        for (int j = 0; j < {KEY_BLOCK}; ++j) {{
          if (j < n_keys) {{
          {nl.join(score_lines)}
          sc[j] = {score};
          }} else {{
            sc[j] = -INFINITY;
          }}
        }}
        block = vload16(0, sc);
      }}
      const float8 bmax8 = fmax(block.lo, block.hi);
      const float4 bmax4 = fmax(bmax8.lo, bmax8.hi);
      const float2 bmax2 = fmax(bmax4.lo, bmax4.hi);
      const float m_new = fmax(m{r}, fmax(bmax2.x, bmax2.y));
      float16 pv = (float16)(0.0f);
      if (m_new != -INFINITY) {{  /* else every key so far is masked: nothing to add yet */
        const float corr = exp(m{r} - m_new);
        pv = tf_exp_nonpositive16(block - (float16)(m_new));
        l{r} = l{r} * corr + tf_hsum16(pv);
        {rescale}
        m{r} = m_new;
      }}
      vstore16(pv, 0, p{r});
    }}""")
    accumulate = [f"const float16 v{c} = {_chunk_load('V', 'vr', c, d, v_contig)};" for c in range(chunks)]
    for r in range(rows):
        accumulate.append(f"const float16 p{r}j = (float16)(p{r}[j]);")
        accumulate += [f"acc{r}_{c} = fma(p{r}j, v{c}, acc{r}_{c});" for c in range(chunks)]
    finish = []
    for r in range(rows):
        stores = []
        for c in range(chunks):
            first, value = 16 * c, f"acc{r}_{c} * inv_l{r}"
            if o_contig and first + 16 <= d:
                stores.append(f"vstore16({value}, 0, O + obase{r} + {first});")
            else:
                stores.append(f"{{ float out_tile[16]; vstore16({value}, 0, out_tile); for (int i = 0; i < "
                              f"{min(16, d - first)}; ++i) O[obase{r} + ({first} + i) * sOd] = out_tile[i]; }}")
        finish += _finish_row(spec, r, stores)
    nl2, nl3 = "\n  ", "\n    "
    return f"""  {nl2.join(setup)}
  for ({idx} s0 = 0; s0 < s_end; s0 += {KEY_BLOCK}) {{
    {nl3.join(dots)}
    float {', '.join(f'p{r}[{KEY_BLOCK}]' for r in range(rows))};
    {nl3.join(per_row)}
    const int n_max = (int)min(({idx}){KEY_BLOCK}, s_end - s0);
    for (int j = 0; j < n_max; ++j) {{
      const {idx} vr = vbase + (s0 + j) * sVr;
      {(nl3 + '  ').join(accumulate)}
    }}
  }}
  {nl2.join(finish)}"""


def _block_scores(panel: bool, row: int) -> str:
    return f"panel_dot{row}" if panel else "(float16)(" + ", ".join(f"dot{row}_{j}" for j in range(KEY_BLOCK)) + ")"


def _vector_score(spec: AttentionSpec, row: int) -> str:
    """`if (full block) { block = score program on float16 } else ` when the program allows vectors."""
    if not vectorisable(spec.score):
        return ""
    inputs, loads = ["scores"], []
    for e, layout in enumerate(spec.mask_layouts, start=1):
        base = f"ebase{e}_{row}"
        if layout == "contig":
            value = f"vload16(0, E{e} + {base} + s0)"
        elif layout == "bcast":
            value = f"(float16)(E{e}[{base}])"
        else:
            value = "(float16)(" + ", ".join(f"E{e}[{base} + (s0 + {j}) * sE{e}s]" for j in range(KEY_BLOCK)) + ")"
        loads.append(f"const float16 mv{e} = {value};")
        inputs.append(f"mv{e}")
    body, (result,) = program_statements(spec.score, inputs, prefix="vs", width=16)
    lines = "\n        ".join(loads + body)
    return f"""if (n_keys == {KEY_BLOCK}) {{
        {lines}
        block = {result};
      }} else """


# ---------------------------------------------------------------- GPU: scalar, one key at a time


def _scalar_body(spec: AttentionSpec) -> str:
    idx, d = spec.index_type, spec.head_dim
    score_lines, score = _score_statements(spec, "dot", "s", 0)
    nl3 = "\n    "
    store = f"for (int i = 0; i < {d}; ++i) O[obase0 + i * sOd] = acc[i] * inv_l0;"
    finish = "\n  ".join(_finish_row(spec, 0, [store]))
    return f"""  float q[{d}], acc[{d}];
  for (int i = 0; i < {d}; ++i) {{ q[i] = Q[qbase0 + i * sQd]; acc[i] = 0.0f; }}
  float m0 = -INFINITY, l0 = 0.0f;
  for ({idx} s = 0; s < s_end; ++s) {{
    const {idx} kr = kbase + s * sKr, vr = vbase + s * sVr;
    float dot = 0.0f;
    for (int i = 0; i < {d}; ++i) dot = fma(q[i], K[kr + i * sKd], dot);
    {nl3.join(score_lines)}
    const float score = {score};
    const float m_new = fmax(m0, score);
    if (m_new == -INFINITY) continue;
    const float corr = exp(m0 - m_new), p = exp(score - m_new);
    l0 = l0 * corr + p;
    for (int i = 0; i < {d}; ++i) acc[i] = fma(p, V[vr + i * sVd], acc[i] * corr);
    m0 = m_new;
  }}
  {finish}"""
