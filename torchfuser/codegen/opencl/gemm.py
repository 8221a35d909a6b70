"""GemmSpec → OpenCL C: register-blocked GEMMs with the epilogue program applied before the store.

Every schedule gives each work-item a tile_m × tile_n block of C accumulated in registers over K. Tail rows
clamp their loads to a valid row (tiled: load zeros) and skip their stores.
- strided: A and B read through their strides (a transposed weight costs no copy); any device.
- packed (CPU): B pre-packed into [N/tile_n][K][tile_n] panels so each k step is tile_n/w contiguous vector
  loads (w = spec.vector_width floats: 16 on AVX-512, 8 on AVX2), A read in its natural layout and
  broadcast; no local memory (7x slower on PoCL). K is blocked so a slice of the panel stays in L1 while a
  stack of row tiles passes over it (the BLIS loop order). The epilogue runs on vectors when the program
  allows it, else element by element. A may instead be a convolution's patches or a window kernel's result
  made in registers (gemm_a.py).
- rows (CPU, decode): the packed panels streamed along K by a work-item each, in passes of up to tile_m
  rows with M a runtime argument, a pass of one or two rows reading K as several runs side by side
  (rows_gemm_source): one-token GEMMs run at the speed of reading B.
- tiled (GPU): a work-group per block of C; A and B tiles staged through local memory, zero-filled past
  the edges, each work-item's register tile read from there (tiled_gemm_source).
"""

from __future__ import annotations

from torchfuser.codegen.opencl.op_c import C_TYPES, VECTOR_WIDTHS
from torchfuser.codegen.opencl.program_c import (PREAMBLE, helpers_for, program_statements, vector_load, vector_store,
                                                  vectorisable)
from torchfuser.codegen.opencl.gemm_a import inside, padded_tap, patch_row, produce_chunk, producer_row
from torchfuser.codegen.opencl.window import window_params
from torchfuser.ir.kernels import GemmSpec


def gemm_source(spec: GemmSpec) -> str:
    sources = {"packed": packed_gemm_source, "tiled": tiled_gemm_source, "rows": rows_gemm_source}
    return sources.get(spec.schedule, strided_gemm_source)(spec)


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


def c_index(spec: GemmSpec, m: str, n: str) -> str:
    """Where C[m, n] is stored: row-major, or channels-first per image (GemmSpec.out_images)."""
    if not spec.out_images:
        return f"{m} * N + {n}"
    images = spec.out_images
    return f"({m}) / {images} * (N * {images}) + ({n}) * {images} + ({m}) % {images}"


def _panel_kernel_basics(spec: GemmSpec) -> tuple[int, bool, list[str]]:
    """What the schedules over packed panels share: vectors per panel row, whether the epilogue runs on
    vectors, and the kernel's parameters."""
    idx = spec.index_type
    vector_epilogue = vectorisable(spec.epilogue) and "strided" not in spec.extra_layouts
    producer = spec.producer
    a_params = ([] if producer is not None else  # A's own parameters; a producer's come last
                [f"__global const float* restrict A, const {idx} offA, const {idx} sam, const {idx} sak, "
                 f"const {idx} sab"])
    params = [*a_params, f"__global const float* restrict Bp, const {idx} sbb", *_extra_params(spec),
              "__global float* restrict C", f"const {idx} M, const {idx} N, const {idx} K"]
    if spec.window is not None and spec.window.padded:  # C zeros: a row's run of channels in the padding
        params.append("__global const float* restrict Z")
    if producer is not None:
        params += window_params(producer, "P")
    return spec.tile_n // spec.vector_width, vector_epilogue, params


def _a_read(spec: GemmSpec) -> tuple[str, str]:
    """(row, element): the K loop reads row i's A value at step k as {row}{i}[{element}]."""
    window = spec.window
    if spec.producer is not None:  # the private chunk the producer made
        return "at", "c"
    if window is None:
        return "a", "k * sak"
    if window.padded:  # per tap: a run of channels (channels-first: p{i} steps along them)
        return "p", "0" if window.channels_first else "c"
    return "a", f"tap + c * {window.height * window.width}" if window.channels_first else "tap + c"


def packed_gemm_source(spec: GemmSpec) -> str:
    """Each work-item owns row_blocks tiles of tile_m x tile_n, stacked along M, over one B panel. K runs in
    blocks of k_block: the block's slice of the panel (k_block x tile_n floats) stays in L1 while every tile
    of the stack passes over it, partial sums going through C between blocks (they are float32, as C is).
    The last panel of a ragged N has no room for partial sums in C, so it takes K in one block."""
    idx, tm, tn, w = spec.index_type, spec.tile_m, spec.tile_n, spec.vector_width
    vectors, vector_epilogue, params = _panel_kernel_basics(spec)
    acc = [[f"c{i}_{v}" for v in range(vectors)] for i in range(tm)]
    window, producer = spec.window, spec.producer
    if producer is not None:
        rows = "\n      ".join(producer_row(spec, i) for i in range(tm))
    elif window is None:
        rows = "\n      ".join(f"__global const float* a{i} = A + offA + min(m0 + {i}, M - 1) * sam;"
                                for i in range(tm))
    else:
        rows = "\n      ".join(patch_row(spec, i) for i in range(tm))
    # a tile's accumulators start at 0 in the first K block, else from the partial sums C holds
    start = "\n      ".join(
        f"float{w} {acc[i][v]} = k0 == 0 ? (float{w})0.0f : "
        f"{vector_load(f'float{w}', f'C + min(m0 + {i}, M - 1) * N + n0 + {w * v}')};"
        for i in range(tm) for v in range(vectors))
    load_b = " ".join(f"const float{w} b{v} = {vector_load(f'float{w}', f'bk + {w * v}')};" for v in range(vectors))
    row, element = _a_read(spec)
    fmas = "\n        ".join(
        f"{{ const float{w} a = (float{w})({row}{i}[{element}]); "
        + " ".join(f"{acc[i][v]} = fma(a, b{v}, {acc[i][v]});" for v in range(vectors)) + " }"
        for i in range(tm))
    if producer is not None:  # K = channels: a chunk of the producer's result per row, then its channels
        def chunk_loop(checked: bool) -> str:
            return (f"for ({idx} k = k0; k < kend; k += {producer.vector_width}) {{\n        "
                    + "\n        ".join(produce_chunk(spec, checked)) +
                    f"\n        for (int c = 0; c < {producer.vector_width}; ++c, bk += {tn}) {{\n        "
                    f"{load_b}\n        {fmas}\n        }}\n      }}")
        k_loops = chunk_loop(False)
        if producer.window.padded:  # tiles whose windows all lie inside x (most) test no tap
            k_loops = (f"if ({inside(spec)}) {{\n      {k_loops}\n      }} else {{\n      {chunk_loop(True)}\n"
                       "      }")
    elif window is None:
        k_loop = f"for ({idx} k = k0; k < kend; ++k, bk += {tn}) {{"
    elif window.padded:  # K = (kh, kw, c): per tap, each row's run of C channels, or zeros in the padding
        taps = "\n        ".join(padded_tap(spec, i) for i in range(tm))
        steps = "".join(f", p{i} += s{i}" for i in range(tm)) if window.channels_first else ""
        k_loop = (f"for ({idx} k = k0; k < kend;) {{\n"
                  f"        const {idx} t = k / {window.channels}, c0 = k - t * {window.channels};\n"
                  f"        const {idx} kh = t / {window.kernel_w}, kw = t - kh * {window.kernel_w};\n"
                  f"        {taps}\n"
                  f"        const {idx} cend = min(({idx}){window.channels}, c0 + (kend - k));\n"
                  f"        for ({idx} c = c0; c < cend; ++c, ++k, bk += {tn}{steps}) {{")
    elif window.dilation_w == 1 and not window.channels_first:  # K = (kh, kw, c): a row of taps, KW * C floats
        run = window.kernel_w * window.channels
        k_loop = (f"for ({idx} k = k0; k < kend;) {{\n"
                  f"        const {idx} kh = k / {run}, c0 = k - kh * {run};\n"
                  f"        const {idx} tap = kh * {window.dilation_h * window.width * window.channels};\n"
                  f"        const {idx} cend = min(({idx}){run}, c0 + (kend - k));\n"
                  f"        for ({idx} c = c0; c < cend; ++c, ++k, bk += {tn}) {{")
    else:  # K = (kh, kw, c): a run of C channels per tap, each tap a constant offset from the patch's corner
        k_loop = (f"for ({idx} k = k0; k < kend;) {{\n"
                  f"        const {idx} t = k / {window.channels}, c0 = k - t * {window.channels};\n"
                  f"        const {idx} kh = t / {window.kernel_w}, kw = t - kh * {window.kernel_w};\n"
                  f"        const {idx} tap = (kh * {window.dilation_h * window.width} + kw * {window.dilation_w})"
                  f"{'' if window.channels_first else f' * {window.channels}'};\n"
                  f"        const {idx} cend = min(({idx}){window.channels}, c0 + (kend - k));\n"
                  f"        for ({idx} c = c0; c < cend; ++c, ++k, bk += {tn}) {{")
    if producer is None:
        k_loops = f"{k_loop}\n        {load_b}\n        {fmas}\n      }}{'}' if window is not None else ''}"
    partial = "\n      ".join(
        f"if (m0 + {i} < M) {{ " + " ".join(vector_store(f"float{w}", acc[i][v], f"C + (m0 + {i}) * N + n0 + {w * v}")
                                          for v in range(vectors)) + " }"
        for i in range(tm))
    finish = "\n      ".join(_finish_row(spec, i, acc[i], vector_epilogue) for i in range(tm))
    # a channels-first result stores a vector of the tile's pixels per column, where OpenCL has that width
    by_columns = spec.out_images and vector_epilogue and tm in VECTOR_WIDTHS
    if by_columns:
        finish = f"{_finish_columns(spec, acc)} else {{\n      {finish}\n      }}"
    whole_k = f"max(K, ({idx})1)"  # at least 1, so K == 0 still runs the loop once (the epilogue of 0)
    k_step = f"n0 + {tn} <= N ? {spec.k_block} : {whole_k}" if spec.k_block else whole_k
    columns = (tm,) if by_columns else ()  # the column finish's helpers on its vectors of pixels
    helpers = (helpers_for([spec.epilogue], w if vector_epilogue else 1, *columns) if producer is None else
               helpers_for([spec.epilogue, producer.epilogue], w if vector_epilogue else 1, producer.vector_width,
                           *columns))
    return f"""{PREAMBLE}{helpers}
__kernel void {spec.kernel_name}(
    {(","+chr(10)+"    ").join(params)})
{{
  const {idx} nb = get_global_id(0);
  const {idx} n0 = nb * {tn};
  const {idx} stack0 = ({idx})get_global_id(1) * {tm * spec.row_blocks};
  if (stack0 >= M) return;
  {_batch_prologue(spec, "Bp") if producer is None else "// a plain mm: one batch"}
  __global const float* panel = Bp + nb * K * {tn};
  const {idx} kc = {k_step};
  for ({idx} k0 = 0; k0 == 0 || k0 < K; k0 += kc) {{
    const {idx} kend = min(K, k0 + kc);
    for (int s = 0; s < {spec.row_blocks}; ++s) {{
      const {idx} m0 = stack0 + s * {tm};
      if (m0 >= M) break;
      {rows}
      {start}
      __global const float* bk = panel + k0 * {tn};
      {k_loops}
      if (kend < K) {{
      {partial}
      }} else {{
      {finish}
      }}
    }}
  }}
}}
"""


def _finish_columns(spec: GemmSpec, acc: list[list[str]]) -> str:
    """Channels-first stores of a whole tile whose rows are consecutive pixels of one image: the tile spilled, then
    per column a vector of tile_m pixels through the epilogue and one contiguous store (an `if` the row-wise
    finish is the `else` of)."""
    idx, tm, tn, w, images = spec.index_type, spec.tile_m, spec.tile_n, spec.vector_width, spec.out_images
    spill = " ".join(f"vstore{w}({acc[i][v]}, {v}, tile[{i}]);" for i in range(tm) for v in range(tn // w))
    column = ", ".join(f"tile[{i}][j]" for i in range(tm))
    loads = [f"const float{tm} e{e} = sE{e}m == 0 ? (float{tm})(E{e}[offE{e} + n * sE{e}n]) : (float{tm})("
             + ", ".join(f"E{e}[offE{e} + (m0 + {i}) * sE{e}m + n * sE{e}n]" for i in range(tm)) + ");"
             for e in range(1, spec.epilogue.n_inputs)]  # one per column (a bias), or one per pixel
    body, (result,) = program_statements(spec.epilogue, ["col"] + [f"e{e}" for e in range(1, spec.epilogue.n_inputs)],
                                         prefix="o", width=tm)
    lines = [f"const float{tm} col = (float{tm})({column});", *loads, *body,
             f"vstore{tm}({result}, 0, C + {c_index(spec, 'm0', 'n')});"]
    inner = "\n          ".join(lines)
    return (f"if (m0 + {tm} <= M && n0 + {tn} <= N && m0 % {images} + {tm} <= {images}) {{\n"
            f"        float tile[{tm}][{tn}]; {spill}\n"
            f"        for (int j = 0; j < {tn}; ++j) {{\n          const {idx} n = n0 + j;\n          {inner}\n"
            "        }\n      }")


def _finish_row(spec: GemmSpec, i: int, acc: list[str], vector_epilogue: bool) -> str:
    """Epilogue and store of tile row i: a vector at a time on full panels, element by element on the tail."""
    spill = " ".join(f"vstore{spec.vector_width}({value}, {v}, tile);" for v, value in enumerate(acc))
    store = _store_panel_row(spec, acc, f"w{i}_", vector_epilogue, f"float tile[{spec.tile_n}]; {spill} ", "tile")
    return f"if (m0 + {i} < M) {{ const {spec.index_type} m = m0 + {i}; {store} }}"


def _store_panel_row(spec: GemmSpec, acc: list[str], prefix: str, vector_epilogue: bool, tail_setup: str,
                     tail_row: str) -> str:
    """Epilogue and store of row m, columns n0.. of one panel: from the vector accumulators `acc` on a full
    panel (vector epilogues), else element by element from the floats `tail_row[j]` (after `tail_setup`)."""
    tn, w = spec.tile_n, spec.vector_width
    full_tile = []
    for v, value in enumerate(acc):
        loads = []
        for e, layout in enumerate(spec.extra_layouts, start=1):
            c_type = C_TYPES[spec.epilogue.input_dtypes[e]]
            where = f"offE{e} + m * sE{e}m"
            loads.append(f"const float{w} e{e}_{v} = " + (
                f"{vector_load(f'float{w}', f'E{e} + {where} + n0 + {w * v}')};" if layout == "row"
                else f"(float{w})(({c_type})E{e}[{where}]);"))
        body, (result,) = program_statements(
            spec.epilogue, [value] + [f"e{e}_{v}" for e in range(1, spec.epilogue.n_inputs)],
            prefix=f"{prefix}{v}_", width=w,
        )
        full_tile += loads + body + [vector_store(f"float{w}", result, f"C + m * N + n0 + {w * v}")]
    # a statement per line: the explorer maps source lines to the graph nodes they compute
    indent = "\n          "
    tail = indent.join(_scalar_epilogue(spec, f"{tail_row}[j]") + [f"C[{c_index(spec, 'm', 'n')}] = r;"])
    vector_branch = (f"if (n0 + {tn} <= N) {{{indent}{indent.join(full_tile)}\n        }} else "
                     if vector_epilogue and not spec.out_images else "")
    return (f"{vector_branch}{{ {tail_setup}for (int j = 0; j < {tn} && n0 + j < N; ++j) "
            f"{{ const {spec.index_type} n = n0 + j;{indent}{tail}\n        }} }}")


# Streams of K read side by side per pass, by row count: one stream of a panel is what a core's prefetchers
# follow, and a weight that comes from DRAM (an LM head) streams faster as several (see the GEMV bench row).
ROWS_K_STREAMS = {1: 4, 2: 2}


def _stream_suffixes(streams: int) -> list[str]:
    """Accumulator and load name suffixes, one per stream ("" for the first: the row's own accumulators)."""
    return [""] + [f"_s{j}" for j in range(1, streams)]


def rows_gemm_source(spec: GemmSpec) -> str:
    """Decode GEMMs (M of 1 to ~16, a plain mm): B packed into [N/tile_n][K][tile_n] panels, a work-item per
    panel (no local memory, groups of one). The item streams its panel along K once per pass of up to tile_m
    rows, tile_n / w vector loads per k and one broadcast FMA per row and vector, so at M = 1 the kernel
    runs at the speed of reading the weights. M is a runtime argument and each row count 1..tile_m has its
    own loop (no FMAs on padding rows); M > tile_m takes further passes, over a panel then in L2. A pass
    leaves its sums in a private tile that one epilogue loop, shared by every row count, finishes. Passes of
    few rows read K as ROWS_K_STREAMS runs side by side, each into its own sums, added before the spill."""
    idx, tm, tn, w = spec.index_type, spec.tile_m, spec.tile_n, spec.vector_width
    vectors, vector_epilogue, params = _panel_kernel_basics(spec)

    def rows_pass(r: int) -> str:
        streams = ROWS_K_STREAMS.get(r, 1)
        acc = [[f"c{i}_{v}" for v in range(vectors)] for i in range(r)]
        rows = " ".join(f"__global const float* a{i} = A + offA + (m0 + {i}) * sam;" for i in range(r))
        start = " ".join(f"float{w} {acc[i][v]}{q} = 0.0f;" for q in _stream_suffixes(streams)
                         for i in range(r) for v in range(vectors))

        def step(q: str, b: str, k: str) -> str:
            loads = " ".join(f"const float{w} b{v}{q} = {vector_load(f'float{w}', f'{b} + {w * v}')};"
                             for v in range(vectors))
            fmas = "\n          ".join(
                f"{{ const float{w} a = (float{w})(a{i}[{k} * sak]); "
                + " ".join(f"{acc[i][v]}{q} = fma(a, b{v}{q}, {acc[i][v]}{q});" for v in range(vectors)) + " }"
                for i in range(r))
            return f"{loads}\n          {fmas}"

        spill = " ".join(f"vstore{w}({acc[i][v]}, {v}, tile[{i}]);" for i in range(r) for v in range(vectors))
        if streams == 1:
            loop = f"""__global const float* bk = panel;
        for ({idx} k = 0; k < K; ++k, bk += {tn}) {{
          {step("", "bk", "k")}
        }}"""
        else:  # K in `streams` runs of kq steps read side by side (then the rest of K), their sums added at the end
            suffixes = _stream_suffixes(streams)
            runs = "\n          ".join(step(q, f"bk + {j} * kq * {tn}" if j else "bk", f"(k + {j} * kq)" if j else "k")
                                      for j, q in enumerate(suffixes))
            total = " ".join(f"{acc[i][v]} += " + " + ".join(f"{acc[i][v]}{q}" for q in suffixes[1:]) + ";"
                             for i in range(r) for v in range(vectors))
            loop = f"""const {idx} kq = K / {streams};
        __global const float* bk = panel;
        for ({idx} k = 0; k < kq; ++k, bk += {tn}) {{
          {runs}
        }}
        bk = panel + {streams} * kq * {tn};
        for ({idx} k = {streams} * kq; k < K; ++k, bk += {tn}) {{
          {step("", "bk", "k")}
        }}
        {total}"""
        return f"""{"default" if r == tm else f"case {r}"}: {{
        {rows}
        {start}
        {loop}
        {spill}
      }} break;"""

    acc = [f"acc{v}" for v in range(vectors)]
    load_acc = " ".join(f"const float{w} {acc[v]} = vload{w}({v}, tile[i]);" for v in range(vectors))
    store = _store_panel_row(spec, acc, "w", vector_epilogue, "", "tile[i]")
    passes = "\n      ".join(rows_pass(r) for r in range(1, tm + 1))
    return f"""{PREAMBLE}{helpers_for([spec.epilogue], w if vector_epilogue else 1)}
__kernel void {spec.kernel_name}(
    {(","+chr(10)+"    ").join(params)})
{{
  const {idx} nb = get_global_id(0);
  const {idx} n0 = nb * {tn};
  __global const float* panel = Bp + nb * K * {tn};
  float tile[{tm}][{tn}];  // a pass's sums, for the epilogue loop that every row count shares
  for ({idx} m0 = 0; m0 < M; m0 += {tm}) {{
    const int rows = (int)min(M - m0, ({idx}){tm});
    switch (rows) {{  // a loop per row count (K == 0: no step, the epilogue of 0)
      {passes}
    }}
    for (int i = 0; i < rows; ++i) {{
      const {idx} m = m0 + i;
      {load_acc}
      {store}
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
    store = "\n        ".join(_scalar_epilogue(spec, "acc[i][j]") + [f"C[{c_index(spec, 'm', 'n')}] = r;"])
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


def tiled_local_floats(block_m: int, block_n: int, k_block: int) -> int:
    """Local memory of a tiled kernel, in floats: the A and B tiles, each row padded by one."""
    return k_block * (block_m + 1) + k_block * (block_n + 1)


def tiled_gemm_source(spec: GemmSpec) -> str:
    """The GPU schedule. A work-group of (block_n / tile_n) x (block_m / tile_m) items computes a
    block_m x block_n block of C. Per k_block-deep step the group loads a block_m x k_block tile of A and a
    k_block x block_n tile of B into local memory (through their strides, zero past M, N and K), waits at a
    barrier, and each item accumulates its tile_m x tile_n outputs from there. An item's rows and columns
    are strided by the group's height and width, so neighbouring items read neighbouring local words (no
    bank conflicts) and store neighbouring columns of C (coalesced). The epilogue runs in registers."""
    idx, tm, tn, bk = spec.index_type, spec.tile_m, spec.tile_n, spec.k_block
    bm, bn = spec.block_m, spec.block_n
    gx, gy = bn // tn, bm // tm  # the work-group's width (along N) and height (along M)
    items = gx * gy
    params = [
        f"__global const float* restrict A, const {idx} offA, const {idx} sam, const {idx} sak, const {idx} sab",
        f"__global const float* restrict B, const {idx} offB, const {idx} sbk, const {idx} sbn, const {idx} sbb",
        *_extra_params(spec), "__global float* restrict C", f"const {idx} M, const {idx} N, const {idx} K",
    ]
    store = "\n          ".join(_scalar_epilogue(spec, "acc[i][j]") + [f"C[{c_index(spec, 'm', 'n')}] = r;"])

    def tile_load(rows: int, cols: int, fast_cols: str, local: str, value: str) -> str:
        """Items spread over a rows x cols tile, consecutive items along the operand's contiguous dim."""
        passes, ragged = -(-rows * cols // items), (rows * cols) % items
        guard = f"if (l < {rows * cols}) " if ragged else ""
        return (f"#pragma unroll\n    for (int p = 0; p < {passes}; ++p) {{\n"
                f"      const int l = lid + p * {items};\n"
                f"      const int r = {fast_cols} ? l / {cols} : l % {rows};\n"
                f"      const int c = {fast_cols} ? l % {cols} : l / {rows};\n"
                f"      {guard}{local} = {value};\n    }}")

    # A tile: r along M, c along K, stored k-major; B tile: r along K, c along N. +1 pads break bank strides.
    load_a = tile_load(bm, bk, "a_k_fast", "As[c][r]",
                       "m0 + r < M && k0 + c < K ? A[offA + (m0 + r) * sam + (k0 + c) * sak] : 0.0f")
    load_b = tile_load(bk, bn, "b_n_fast", "Bs[r][c]",
                       "k0 + r < K && n0 + c < N ? B[offB + (k0 + r) * sbk + (n0 + c) * sbn] : 0.0f")
    return f"""{PREAMBLE}{helpers_for([spec.epilogue])}
__kernel __attribute__((reqd_work_group_size({gx}, {gy}, 1)))
void {spec.kernel_name}(
    {(","+chr(10)+"    ").join(params)})
{{
  __local float As[{bk}][{bm + 1}];
  __local float Bs[{bk}][{bn + 1}];
  const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * {gx} + tx;
  const {idx} n0 = ({idx})get_group_id(0) * {bn};
  const {idx} m0 = ({idx})get_group_id(1) * {bm};
  {_batch_prologue(spec, "B")}
  // no early return: every item of the group must reach the barriers
  const int a_k_fast = sak <= sam, b_n_fast = sbn <= sbk;
  float acc[{tm}][{tn}];
  #pragma unroll
  for (int i = 0; i < {tm}; ++i)
    #pragma unroll
    for (int j = 0; j < {tn}; ++j) acc[i][j] = 0.0f;
  for ({idx} k0 = 0; k0 < K; k0 += {bk}) {{
    {load_a}
    {load_b}
    barrier(CLK_LOCAL_MEM_FENCE);
    #pragma unroll
    for (int kk = 0; kk < {bk}; ++kk) {{
      float a[{tm}], b[{tn}];
      #pragma unroll
      for (int i = 0; i < {tm}; ++i) a[i] = As[kk][ty + i * {gy}];
      #pragma unroll
      for (int j = 0; j < {tn}; ++j) b[j] = Bs[kk][tx + j * {gx}];
      #pragma unroll
      for (int i = 0; i < {tm}; ++i)
        #pragma unroll
        for (int j = 0; j < {tn}; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }}
    barrier(CLK_LOCAL_MEM_FENCE);  // the next step overwrites the tiles
  }}
  #pragma unroll
  for (int i = 0; i < {tm}; ++i) {{
    #pragma unroll
    for (int j = 0; j < {tn}; ++j) {{
      const {idx} m = m0 + ty + i * {gy}, n = n0 + tx + j * {gx};
      if (m < M && n < N) {{
          {store}
      }}
    }}
  }}
}}
"""
