"""AttentionSpec → OpenCL C: fused attention with an online softmax (running max and sum, fp32).

The [T, S] score matrix is never written: each work-item walks the keys once, with its scores, softmax
and weighted sum of values in registers.
- query_lanes (CPU devices): a work-item owns `query_vectors` vectors of `lanes` consecutive query rows of
  one (batch, head); lane l of every vector is query row l. Its q rows are loaded once and transposed in
  registers (qt[i]: element i of each row), so a block of keys costs, per head-dim element i, one load of
  qt[i] and one broadcast k[j][i] per key, each feeding an FMA per query vector: 16 scores per FMA, no
  horizontal sums. The softmax runs lane-wise (one vector exp per key for 16 rows) and p·v is again a
  broadcast of v[j][i] into FMAs on the accumulators acc[i] (private arrays, L1-resident). At the end
  the accumulators are transposed back to rows and stored through the output strides. No local memory
  (slow on PoCL). Code size is compile time (PoCL compiles the kernel at its first launch, and once more
  for the binary the kernel cache stores): transposes, row tails and partial key blocks are loops, and only
  the hot loops' bodies are unrolled.
- row_scalar (GPUs): one query row per work-item, scalar loops, one key at a time; neighbouring
  work-items read the same key row together.
The score program (scale, additive masks, fills) runs on the raw dot products; causal masking ends the walk
at the tile's last row and masks lanes per key. A row whose scores are all -inf gives NaN ("nan", as eager
softmax does) or 0 ("zero", as SDPA does).
"""

from __future__ import annotations

from torchfuser.codegen.opencl.op_c import C_TYPES, VECTOR_SAFE
from torchfuser.codegen.opencl.program_c import PREAMBLE, helpers_for, program_statements, vector_load, vector_store
from torchfuser.codegen.opencl.reduction import mask_vector_statements
from torchfuser.ir.program import Const
from torchfuser.ir.kernels.attention import ATTENTION_CPU
from torchfuser.ir.kernels import AttentionSpec

KEY_BLOCK = 8  # keys per block (query_lanes): 8 keys x 2 query vectors = 16 score accumulators
PV_UNROLL = 4  # head-dim elements per step of p·v: 4 x 2 independent accumulator chains

# exp of x <= 0 (scores minus their running max): x = n ln2 + r, |r| <= ln2 / 2, e^r by its Taylor series to
# degree 7 (remainder < 6e-9, under float rounding), times 2^n built in the exponent bits. n is rounded by
# adding 1.5 * 2^23 (PoCL's vector rint is a long select chain). Below -87 the result would be subnormal: 0.
EXP_NONPOSITIVE = """
/* x86's max instruction: fmax's NaN rule costs a compare and a blend (a NaN score still makes its row NaN:
   through the max, or through its own exp) */
#define tf_max(a, b) select((b), (a), (a) > (b))
VEC tf_exp_nonpositive(const VEC x) {
  const VEC n = fma(x, (VEC)(0x1.715476p+0f), (VEC)(0x1.8p+23f)) - (VEC)(0x1.8p+23f);
  const VEC r = fma(n, (VEC)(-0x1.62e4p-1f), fma(n, (VEC)(-0x1.7f7d1cp-20f), x));
  VEC p = (VEC)(1.0f / 5040.0f);
  p = fma(p, r, (VEC)(1.0f / 720.0f));
  p = fma(p, r, (VEC)(1.0f / 120.0f));
  p = fma(p, r, (VEC)(1.0f / 24.0f));
  p = fma(p, r, (VEC)(1.0f / 6.0f));
  p = fma(p, r, (VEC)(0.5f));
  p = fma(p, r, (VEC)(1.0f));
  p = fma(p, r, (VEC)(1.0f));
  const VEC scale = as_VEC((convert_INTVEC(n) + 127) << 23);
  return select(p * scale, (VEC)(0.0f), x < -87.0f);  /* a NaN x made p NaN: it stays NaN */
}
"""

# Rows read or written element by element (strided rows, the head dim's tail): rolled loops, as they run
# only at a work-item's start and end, and unrolled they were half the code of such kernels.
ROW_HELPERS = """
VEC tf_load_row(const __global float* p, const IDX stride, const int n) {
  float t[W];
  #pragma unroll 1
  for (int e = 0; e < W; ++e) t[e] = e < n ? p[e * stride] : 0.0f;
  return vloadW(0, t);
}
void tf_store_row(const VEC v, __global float* p, const IDX stride, const int n) {
  float t[W];
  vstoreW(v, 0, t);
  #pragma unroll 1
  for (int e = 0; e < min(n, W); ++e) p[e * stride] = t[e];
}
"""
COMPARISONS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
BOOL_OPS = {"logical_and": "&", "logical_or": "|", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}


def attention_source(spec: AttentionSpec) -> str:
    cpu = spec.schedule == ATTENTION_CPU
    params = ",\n    ".join(_parameters(spec))
    helpers = helpers_for([spec.score], spec.lanes if cpu else 1)
    if cpu:
        vec = f"float{spec.lanes}"
        helpers += EXP_NONPOSITIVE.replace("INTVEC", f"int{spec.lanes}").replace("VEC", vec)
        helpers += "".join(_transpose_helper(c_type, width) for c_type, width in _transposed_types(spec))
        helpers += ROW_HELPERS.replace("VEC", vec).replace("IDX", spec.index_type).replace("W", str(spec.lanes))
    body = _lanes_kernel(spec) if cpu else _scalar_kernel(spec)
    return f"""{PREAMBLE}{helpers}
__kernel void {spec.kernel_name}(
    {params})
{{
{body}
}}
"""


def _transposed_types(spec: AttentionSpec) -> list[tuple[str, int]]:
    """(element type, width) of the tiles the kernel transposes: q and output rows, "rows" mask tiles."""
    types = [("float", spec.lanes)]
    for e, layout in enumerate(spec.mask_layouts, start=1):
        tile = (C_TYPES[spec.score.input_dtypes[e]], min(spec.lanes, KEY_BLOCK))
        if layout == "rows" and _vector_program(spec) and tile not in types:
            types.append(tile)
    return types


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


def _empty_row_value(spec: AttentionSpec) -> str:
    return "0.0f" if spec.masked_rows == "zero" else "NAN"


# ---------------------------------------------------------------- CPU: query rows as vector lanes


def _transpose_helper(c_type: str, width: int) -> str:
    """C function transposing a width x width tile in place (a[i]: row i in, column i out): log2(width) rounds
    of even/odd interleaves, each one two-source shuffle per vector. The rounds stay a real loop (unrolled,
    the kernel's shuffle networks took a third of PoCL's compile time); callers index their tile with
    constants only, so it stays in registers (through memory it cost the kernel ~10 % at T=128)."""
    vec, half = f"{c_type}{width}", width // 2
    shuffles = [f"t{k} = ({vec})(a[{2 * k}].even, a[{2 * k + 1}].even), "
                f"t{k + half} = ({vec})(a[{2 * k}].odd, a[{2 * k + 1}].odd)" for k in range(half)]
    nl = "\n    "
    return f"""
void tf_transpose_{vec}({vec}* a) {{
  #pragma unroll 1
  for (int round = 0; round < {width.bit_length() - 1}; ++round) {{
    const {vec} {("," + nl + "  ").join(shuffles)};
    {" ".join(f"a[{k}] = t{k};" for k in range(width))}
  }}
}}
"""


def _lanes_kernel(spec: AttentionSpec) -> str:
    idx, w, nvec, d = spec.index_type, spec.lanes, spec.query_vectors, spec.head_dim
    vec, rows, padded = f"float{w}", spec.lanes * spec.query_vectors, -(-spec.head_dim // spec.lanes) * spec.lanes
    lane_ids = ", ".join(str(i) for i in range(w))
    lines = [
        f"const {idx} tiles = (T + {rows - 1}) / {rows}, gid = get_global_id(0);",
        "if (gid >= B * H * tiles) return;",
        f"const {idx} tile = gid % tiles, bh = gid / tiles, h = bh % H, b = bh / H, hk = h / G;",
        f"const {idx} t0 = tile * {rows}, t_last = min(t0 + {rows - 1}, T - 1);",
        f"const {idx} qbase = offQ + b * sQb + h * sQh, obase = b * sOb + h * sOh;",
        f"const {idx} kbase = offK + b * sKb + hk * sKh, vbase = offV + b * sVb + hk * sVh;",
        f"const int{w} lane = (int{w})({lane_ids});",
        f"{vec} qt[{nvec}][{padded}], acc[{nvec}][{padded}];",
    ]
    lines += [f"const int{w} tq{x} = (int{w})((int)t0 + {x * w}) + lane;" for x in range(nvec)]
    lines += [f"const {idx} ebase{e} = offE{e} + b * sE{e}b + h * sE{e}h;" for e in range(1, spec.score.n_inputs)]
    for e, layout in enumerate(spec.mask_layouts, start=1):
        if layout != "bcast":  # each lane's row of the mask (rows past T read row T - 1)
            lines += [f"const {idx} erow{e}_{x}_{r} = min(t0 + {x * w + r}, T - 1) * sE{e}t;"
                      for x in range(nvec) for r in range(w)]
    lines += _load_q(spec)
    lines += [f"{vec} m{x} = ({vec})(-INFINITY), l{x} = ({vec})(0.0f);" for x in range(nvec)]
    lines.append(f"const {idx} s_end = {'min(S, t_last + 1)' if spec.causal else 'S'};")
    lines.append(f"for ({idx} s0 = 0; s0 < s_end; s0 += {KEY_BLOCK}) {{")
    if spec.causal and nvec > 1:  # vectors whose rows all precede the block are skipped
        for first in range(nvec - 1, 0, -1):
            lines.append(f"  {'if' if first == nvec - 1 else '} else if'} (s0 >= t0 + {first * w}) {{")
            lines += ["    " + line for line in _key_block(spec, range(first, nvec))]
        lines.append("  } else {")
        lines += ["    " + line for line in _key_block(spec, range(nvec))]
        lines.append("  }")
    else:
        lines += ["  " + line for line in _key_block(spec, range(nvec))]
    lines.append("}")
    lines += _store_rows(spec)
    return "\n".join("  " + line for line in lines)


def _load_q(spec: AttentionSpec) -> list[str]:
    """qt[x][i] = element i of the vector's rows (rows past T repeat row T - 1), zeros past the head dim;
    acc = 0."""
    w, d = spec.lanes, spec.head_dim
    row = f"qbase + min(t0 + x * {w} + ROW, T - 1) * sQr"
    fast = [f"r[{i}] = {vector_load(f'float{w}', 'Q + ' + row.replace('ROW', str(i)) + ' + c')};" for i in range(w)]
    slow = [f"for (int i = 0; i < {w}; ++i) r[i] = tf_load_row(Q + {row.replace('ROW', 'i')} + c * sQd, sQd, {d} - c);"]
    after = [f"qt[x][c + {i}] = r[{i}]; acc[x][c + {i}] = (float{w})(0.0f);" for i in range(w)]
    tiles = _row_tiles(spec, spec.layouts[0], [(fast, after), (slow, after)], load=True)
    return [f"for (int x = 0; x < {spec.query_vectors}; ++x) {{", *tiles, "}"]


def _row_tiles(spec: AttentionSpec, layout: str, moves: list, load: bool) -> list[str]:
    """The loops over the head dim in chunks c of `lanes` elements, each moving the rows of query vector x
    through a tile r (transposed between the moves): moves[0] (rows, other) for whole contiguous chunks
    (constant indices only: r stays in registers), moves[1] for the rest (strided rows, the head dim's
    tail), whose row loops stay rolled (unrolled, they were half the compile time of such kernels)."""
    w, d = spec.lanes, spec.head_dim
    padded, end = -(-d // w) * w, d - d % w if layout == "contig" else 0
    lines = []
    for start, stop, (rows, other) in zip((0, end), (end, padded), moves):
        if start < stop:
            first, then = (rows, other) if load else (other, rows)
            body = [*first, f"tf_transpose_float{w}(r);", *then]
            lines += [f"  for (int c = {start}; c < {stop}; c += {w}) {{", f"    float{w} r[{w}];"]
            lines += ["    " + line for line in body] + ["  }"]
    return lines


def _key_block(spec: AttentionSpec, live: range) -> list[str]:
    """One block of KEY_BLOCK keys for the query vectors `live`: scores, score program, masking, online
    softmax, p·v."""
    idx, w, d, kb = spec.index_type, spec.lanes, spec.head_dim, KEY_BLOCK
    vec = f"float{w}"
    kd = "" if spec.layouts[1] == "contig" else " * sKd"
    lines = [f"const int n_keys = (int)min(({idx}){kb}, s_end - s0);",
             "__global const float* restrict krows = K + kbase + s0 * sKr;",
             "__global const float* restrict vrows = V + vbase + s0 * sVr;"]
    # a partial last block reads its last key again in place of the missing ones (masked below)
    lines += [f"__global const float* restrict k{j} = krows + "
              f"(n_keys == {kb} ? {_row_offset(spec.kv_row_strides[0], 'sKr', j)} : min({j}, n_keys - 1) * sKr);"
              for j in range(1, kb)]
    lines += [f"{vec} sc{x}_{j} = ({vec})(0.0f);" for j in range(kb) for x in live]
    lines.append(f"for (long i = 0; i < {d}; ++i) {{")  # 64-bit: row + i is one addressing mode
    lines += [f"  const {vec} qv{x} = qt[{x}][i];" for x in live]
    for j in range(kb):
        fmas = " ".join(f"sc{x}_{j} = fma(qv{x}, kj, sc{x}_{j});" for x in live)
        lines.append(f"  {{ const {vec} kj = ({vec})({f'k{j}' if j else 'krows'}[i{kd}]); {fmas} }}")
    lines.append("}")
    lines += _score_program(spec, live)
    for x in live:
        lines += _online_softmax(spec, x)
    lines += _weighted_values(spec, live)
    return lines


def _row_offset(constant: int, name: str, j: int) -> str:
    """Key row j's offset from the block's first row: a literal when the row stride is a constant."""
    return str(j * constant) if constant else f"{j} * {name}"


def _score_program(spec: AttentionSpec, live: range) -> list[str]:
    """Replace each raw score by the score program's value, then mask causal keys and the tail."""
    w, kb = spec.lanes, KEY_BLOCK
    vec = f"float{w}"
    lines = []
    identity = spec.score.n_inputs == 1 and not spec.score.instrs
    if not identity:
        lines.append(f"const {spec.index_type} " + ", ".join(f"key{j} = min(s0 + {j}, S - 1)" for j in range(kb)) + ";")
        vector = _vector_program(spec)
        if vector:
            for e, layout in enumerate(spec.mask_layouts, start=1):
                lines += _mask_rows(spec, e, live) if layout == "rows" else []
        for j in range(kb):
            for x in live:
                lines += ["{"] + ["  " + line for line in (
                    vector(x, j) if vector else _lane_program(spec, x, j))] + ["}"]
    if spec.causal:  # key s is seen by row t when s <= t: only blocks reaching past a vector's first row
        for x in live:
            lines.append(f"if (s0 + {kb - 1} > t0 + {x * w}) {{")
            lines += [f"  sc{x}_{j} = select(sc{x}_{j}, ({vec})(-INFINITY), (int{w})((int)s0 + {j}) > tq{x});"
                      for j in range(kb)]
            lines.append("}")
    for j in range(kb):
        tail = " ".join(f"sc{x}_{j} = ({vec})(-INFINITY);" for x in live)
        lines.append(f"if ({j} >= n_keys) {{ {tail} }}")
    return lines


def _mask_vector(spec: AttentionSpec, e: int, x: int, j: int) -> str:
    """Mask operand e at key j of the block for the rows of vector x (lanes), in its C element type."""
    layout = spec.mask_layouts[e - 1]
    if layout == "bcast":
        return f"({C_TYPES[spec.score.input_dtypes[e]]}{spec.lanes})(E{e}[ebase{e} + key{j} * sE{e}s])"
    return f"mr{e}_{x}_{j}" if layout == "rows" else _gather(spec, e, x, j)


def _gather(spec: AttentionSpec, e: int, x: int, j: int) -> str:
    lanes = ", ".join(f"E{e}[ebase{e} + key{j} * sE{e}s + erow{e}_{x}_{r}]" for r in range(spec.lanes))
    return f"({C_TYPES[spec.score.input_dtypes[e]]}{spec.lanes})({lanes})"


def _mask_rows(spec: AttentionSpec, e: int, live: range) -> list[str]:
    """mr{e}_{x}_{j}: a "rows" mask (stride 1 along the keys) for the whole block: each lane's KEY_BLOCK keys
    as one vector, m x m tiles (m = min(lanes, KEY_BLOCK)) transposed in registers. A partial last block
    first copies its keys (clamped) to private memory, in a loop."""
    w, kb, idx = spec.lanes, KEY_BLOCK, spec.index_type
    c_type, m = C_TYPES[spec.score.input_dtypes[e]], min(spec.lanes, KEY_BLOCK)
    lines = [f"{c_type}{w} {', '.join(f'mr{e}_{x}_{j}' for x in live for j in range(kb))};",
             f"{c_type} mpart{e}[{w * kb}];"]
    for x in live:
        lines += [f"if (n_keys < {kb}) {{",
                  f"  for (int r = 0; r < {w}; ++r) {{",
                  f"    const {idx} row = ebase{e} + min(t0 + {x * w} + r, T - 1) * sE{e}t;",
                  f"    for (int j = 0; j < {kb}; ++j) mpart{e}[r * {kb} + j] = E{e}[row + min(s0 + j, S - 1)];",
                  "  }",
                  "}"]
        rows = [f"mrow{e}_{x}_{r}" for r in range(w)]
        lines += [f"const {c_type}{kb} {rows[r]} = n_keys == {kb} ? "
                  f"vload{kb}(0, E{e} + ebase{e} + erow{e}_{x}_{r} + s0) : vload{kb}({r}, mpart{e});" for r in range(w)]
        columns = [[] for _ in range(kb)]  # per key: its m-lane pieces, one per group of m rows
        for g in range(kb // m):
            for rg in range(w // m):
                tile = f"mt{e}_{x}_{g}_{rg}"
                pieces = ", ".join(rows[rg * m + r] + (f".{('lo', 'hi')[g]}" if kb > m else "") for r in range(m))
                lines += [f"{c_type}{m} {tile}[{m}] = {{{pieces}}};", f"tf_transpose_{c_type}{m}({tile});"]
                for i in range(m):
                    columns[g * m + i].append(f"{tile}[{i}]")
        for j in range(kb):
            value = columns[j][0] if len(columns[j]) == 1 else f"({c_type}{w})({', '.join(columns[j])})"
            lines.append(f"mr{e}_{x}_{j} = {value};")
    return lines


def _vector_program(spec: AttentionSpec):
    """A function (x, j) → C lines running the score program on whole vectors, or None when some op or
    type has no vector form here. Bools are int vectors (-1 true, 0 false), as OpenCL comparisons give."""
    w = spec.lanes
    types = {"float32": f"float{w}", "bool": f"int{w}"}
    program = spec.score
    if any(dt not in types for dt in program.input_dtypes) or any(ins.dtype not in types for ins in program.instrs):
        return None
    for ins in program.instrs:
        bool_op = ins.op in BOOL_OPS or ins.op == "logical_not"
        ok = ins.op in COMPARISONS or ins.op in ("where", "cast") or (bool_op and ins.dtype == "bool") \
            or (ins.op in VECTOR_SAFE and ins.dtype == "float32")
        if not ok or any(isinstance(a, Const) and a.dtype not in types for a in ins.args):
            return None

    def emit(x, j):
        lines, names = [], [f"sc{x}_{j}"]
        for e in range(1, program.n_inputs):
            load = _mask_vector(spec, e, x, j)
            if program.input_dtypes[e] == "bool":
                load = f"convert_int{w}({load} != (uchar{w})(0))"
            lines.append(f"const {types[program.input_dtypes[e]]} in{e} = {load};")
            names.append(f"in{e}")
        body, (result,) = mask_vector_statements(program, names, "vs", w)
        return lines + body + [f"sc{x}_{j} = {result};"]

    return emit


def _lane_program(spec: AttentionSpec, x: int, j: int) -> list[str]:
    """The score program lane by lane, for programs with no vector form here (other mask types)."""
    w, idx = spec.lanes, spec.index_type
    inputs, lines = ["raw[l]"], [f"float raw[{w}]; vstore{w}(sc{x}_{j}, 0, raw);", f"for (int l = 0; l < {w}; ++l) {{",
                                 f"  const {idx} row = min(t0 + {x * w} + l, T - 1);"]
    for e in range(1, spec.score.n_inputs):
        c_type = C_TYPES[spec.score.input_dtypes[e]]
        lines.append(f"  const {c_type} mask{e} = E{e}[ebase{e} + row * sE{e}t + key{j} * sE{e}s];")
        inputs.append(f"mask{e}")
    body, (result,) = program_statements(spec.score, inputs, prefix="ls")
    lines += ["  " + line for line in body] + [f"  raw[l] = {result};", "}", f"sc{x}_{j} = vload{w}(0, raw);"]
    return lines


def _online_softmax(spec: AttentionSpec, x: int) -> list[str]:
    """New running max per lane; rescale factor for the old sum and accumulators; p = exp(score - max).
    A lane whose keys are all masked so far keeps max -inf and subtracts 0 instead (p = 0, no NaN)."""
    vec, kb = f"float{spec.lanes}", KEY_BLOCK
    block_max = _tree([f"sc{x}_{j}" for j in range(kb)], lambda a, b: f"tf_max({a}, {b})")
    return [
        f"const {vec} m_new{x} = tf_max(m{x}, {block_max});",
        f"const {vec} m_use{x} = select(m_new{x}, ({vec})(0.0f), m_new{x} == ({vec})(-INFINITY));",
        f"const {vec} corr{x} = tf_exp_nonpositive(m{x} - m_use{x});",
        f"m{x} = m_new{x};",
        *[f"const {vec} p{x}_{j} = tf_exp_nonpositive(sc{x}_{j} - m_use{x});" for j in range(kb)],
        f"l{x} = fma(l{x}, corr{x}, {_tree([f'p{x}_{j}' for j in range(kb)], lambda a, b: f'({a} + {b})')});",
    ]


def _tree(values: list[str], combine) -> str:
    """A balanced reduction: log2 of the dependency chain a left fold would have."""
    while len(values) > 1:
        values = [combine(*values[i:i + 2]) if i + 1 < len(values) else values[i] for i in range(0, len(values), 2)]
    return values[0]


def _weighted_values(spec: AttentionSpec, live: range) -> list[str]:
    """acc[i] = acc[i] * corr + sum_j p_j * v[j][i]. A full block: PV_UNROLL head-dim elements at a time
    (independent FMA chains), each v element broadcast once for every query vector. The head dim's rest and
    a partial last block (which must not read v rows past the keys) take a plain loop, one key at a time."""
    w, d, kb = spec.lanes, spec.head_dim, KEY_BLOCK
    vec, vd = f"float{w}", "" if spec.layouts[2] == "contig" else " * sVd"
    main = d - d % PV_UNROLL
    lines = [f"const {vec} " + ", ".join(f"p{x}[{kb}] = {{{', '.join(f'p{x}_{j}' for j in range(kb))}}}"
                                         for x in live) + ";"]
    if main:
        lines += [f"if (n_keys == {kb}) {{", f"  for (long i = 0; i < {main}; i += {PV_UNROLL}) {{"]
        lines += [f"    {vec} o{x}_{u} = acc[{x}][i + {u}] * corr{x};" for x in live for u in range(PV_UNROLL)]
        for j in range(kb):
            row = _row_offset(spec.kv_row_strides[1], "sVr", j)
            for u in range(PV_UNROLL):
                fmas = " ".join(f"o{x}_{u} = fma(p{x}_{j}, vj, o{x}_{u});" for x in live)
                lines.append(f"    {{ const {vec} vj = ({vec})(vrows[{row} + (i + {u}){vd}]); {fmas} }}")
        lines += [f"    acc[{x}][i + {u}] = o{x}_{u};" for x in live for u in range(PV_UNROLL)]
        lines += ["  }", "}"]
    lines.append(f"for (long i = {f'n_keys == {kb} ? {main} : 0' if main else '0'}; i < {d}; ++i) {{")
    lines += [f"  {vec} o{x} = acc[{x}][i] * corr{x};" for x in live]
    lines += ["  for (int j = 0; j < n_keys; ++j) {", f"    const {vec} vj = ({vec})(vrows[j * sVr + i{vd}]);"]
    lines += [f"    o{x} = fma(p{x}[j], vj, o{x});" for x in live]
    lines.append("  }")
    lines += [f"  acc[{x}][i] = o{x};" for x in live]
    return lines + ["}"]


def _store_rows(spec: AttentionSpec) -> list[str]:
    """Normalise (empty rows per masked_rows), transpose back to rows, store rows < T; the logsumexp."""
    w, d, idx, nvec = spec.lanes, spec.head_dim, spec.index_type, spec.query_vectors
    vec = f"float{w}"
    at = f"O + obase + (t0 + x * {w} + ROW) * sOt"
    fast = [f"if (t0 + x * {w} + {i} < T) " + vector_store(vec, f"r[{i}]", at.replace("ROW", str(i)) + " + c")
            for i in range(w)]
    slow = [f"for (int i = 0; i < {w} && t0 + x * {w} + i < T; ++i) "
            f"tf_store_row(r[i], {at.replace('ROW', 'i')} + c * sOd, sOd, {d} - c);"]
    before = [f"r[{i}] = acc[x][c + {i}] * inv;" for i in range(w)]
    lines = [
        f"const {vec} " + ", ".join(f"{n}s[{nvec}] = {{{', '.join(f'{n}{x}' for x in range(nvec))}}}"
                                    for n in "ml") + ";",
        f"for (int x = 0; x < {nvec}; ++x) {{",
        f"  const {vec} inv = select(1.0f / ls[x], ({vec})({_empty_row_value(spec)}), ls[x] == 0.0f);",
        *_row_tiles(spec, spec.layouts[3], [(fast, before), (slow, before)], load=False),
    ]
    if spec.with_lse:
        lse = "ms[x] + log(ls[x])"
        if spec.masked_rows == "zero":  # SDPA reports 0 for a row with every key masked
            lse = f"select({lse}, ({vec})(0.0f), ls[x] == 0.0f)"
        lines += [f"  float lse[{w}]; vstore{w}({lse}, 0, lse);",
                  f"  for (int l = 0; l < {w}; ++l) {{ const {idx} t = t0 + x * {w} + l;",
                  "    if (t < T) L[b * sLb + h * sLh + t * sLt] = lse[l]; }"]
    return ["{"] + ["  " + line for line in lines] + ["  }", "}"]


# ---------------------------------------------------------------- GPU: scalar, one key at a time


def _scalar_kernel(spec: AttentionSpec) -> str:
    idx, d = spec.index_type, spec.head_dim
    score_inputs, mask_loads = ["dot"], []
    for e in range(1, spec.score.n_inputs):
        c_type = C_TYPES[spec.score.input_dtypes[e]]
        at = f"offE{e} + b * sE{e}b + h * sE{e}h + t * sE{e}t + s * sE{e}s"
        mask_loads.append(f"const {c_type} mask{e} = E{e}[{at}];")
        score_inputs.append(f"mask{e}")
    body, (score,) = program_statements(spec.score, score_inputs, prefix="sc")
    nl = "\n    "
    lse = ""
    if spec.with_lse:
        value = "m0 + log(l0)"
        if spec.masked_rows == "zero":  # SDPA reports 0 for a row with every key masked
            value = f"(l0 == 0.0f ? 0.0f : {value})"
        lse = f"\n  L[b * sLb + h * sLh + t * sLt] = {value};"
    return f"""  const {idx} gid = get_global_id(0);
  if (gid >= B * H * T) return;
  const {idx} t = gid % T, bh = gid / T, h = bh % H, b = bh / H, hk = h / G;
  const {idx} qbase = offQ + b * sQb + h * sQh + t * sQr, obase = b * sOb + h * sOh + t * sOt;
  const {idx} kbase = offK + b * sKb + hk * sKh, vbase = offV + b * sVb + hk * sVh;
  const {idx} s_end = {'min(S, t + 1)' if spec.causal else 'S'};
  float q[{d}], acc[{d}];
  for (int i = 0; i < {d}; ++i) {{ q[i] = Q[qbase + i * sQd]; acc[i] = 0.0f; }}
  float m0 = -INFINITY, l0 = 0.0f;
  for ({idx} s = 0; s < s_end; ++s) {{
    const {idx} kr = kbase + s * sKr, vr = vbase + s * sVr;
    float dot = 0.0f;
    for (int i = 0; i < {d}; ++i) dot = fma(q[i], K[kr + i * sKd], dot);
    {nl.join(mask_loads + body)}
    const float score = {score};
    const float m_new = fmax(m0, score);
    if (m_new == -INFINITY) continue;
    const float corr = exp(m0 - m_new), p = exp(score - m_new);
    l0 = l0 * corr + p;
    for (int i = 0; i < {d}; ++i) acc[i] = fma(p, V[vr + i * sVd], acc[i] * corr);
    m0 = m_new;
  }}
  const float inv_l = l0 == 0.0f ? {_empty_row_value(spec)} : 1.0f / l0;
  for (int i = 0; i < {d}; ++i) O[obase + i * sOd] = acc[i] * inv_l;{lse}"""
