"""WindowSpec → OpenCL C: a work-item per run of output pixels along a row and vector of channels.

Work-item g takes channel vector g % (C / w) of run (g / (C / w)) % runs of output row oh of image n, so
neighbouring items read neighbouring channels of the same pixels. A sum's tap weights for its channels are
loaded once into registers; per pixel, each tap inside the input adds one vector FMA (a sum) or is compared in
(a max: NaN wins, as in eager), and a tap in the padding is skipped (a row's taps are tested once per item, a
column's once per pixel); the epilogue then runs on the vector and it is stored. Channels-last x makes every
load a contiguous vector of w channels.
"""

from __future__ import annotations

from torchfuser.codegen.opencl.op_c import C_TYPES
from torchfuser.codegen.opencl.program_c import PREAMBLE, helpers_for, program_statements
from torchfuser.ir.kernels.window import WindowSpec


def window_source(spec: WindowSpec) -> str:
    win, idx, w = spec.window, spec.index_type, spec.vector_width
    vec = "float" if w == 1 else f"float{w}"
    groups = win.channels // w
    runs = -(-win.out_w // spec.pixels)
    n_extra = spec.epilogue.n_inputs - 1
    weighted = spec.reduction == "sum"
    params = [f"__global const float* restrict X, const {idx} offX, const {idx} sxn, const {idx} sxh, "
              f"const {idx} sxw, const {idx} sxc"] + ([f"__global const float* restrict T, const {idx} offT"]
                                                    if weighted else [])
    params += [f"__global const {C_TYPES[spec.epilogue.input_dtypes[e]]}* restrict E{e}, const {idx} offE{e}, "
               f"const {idx} sE{e}m, const {idx} sE{e}n" for e in range(1, n_extra + 1)]
    params.append("__global float* restrict Y")

    def load(pointer: str) -> str:  # w channels from c on; a scalar walks the channel stride
        return f"vload{w}(0, {pointer})" if w > 1 else f"*({pointer})"

    lines = [f"const {idx} g = ({idx})get_global_id(0), cg = g % {groups}, r = g / {groups};",
             f"const {idx} run = r % {runs}, oh = (r / {runs}) % {win.out_h}, n = r / ({runs} * {win.out_h});",
             f"if (n >= {win.batch}) return;",
             f"const {idx} c = cg * {w};"]
    if weighted:
        lines += [f"const {vec} k{t} = {load(f'T + offT + {t * win.channels} + c')};" for t in range(win.taps)]
    for i in range(win.kernel_h):
        lines.append(f"const {idx} ih{i} = oh * {win.stride_h} + {i * win.dilation_h - win.pad_h};")
        lines.append(f"const int in_row{i} = ih{i} >= 0 && ih{i} < {win.height};")
        lines.append(f"__global const float* x{i} = X + offX + n * sxn + ih{i} * sxh + c * sxc;")
    pixel = [f"{vec} acc = ({vec})({'0.0f' if weighted else '-INFINITY'});"]
    for j in range(win.kernel_w):
        pixel.append(f"const {idx} iw{j} = ow * {win.stride_w} + {j * win.dilation_w - win.pad_w};")
        pixel.append(f"const int in_col{j} = iw{j} >= 0 && iw{j} < {win.width};")
    for i in range(win.kernel_h):
        for j in range(win.kernel_w):
            x = load(f"x{i} + iw{j} * sxw") if w > 1 else f"x{i}[iw{j} * sxw]"
            if weighted:
                pixel.append(f"if (in_row{i} && in_col{j}) acc = fma({x}, k{i * win.kernel_w + j}, acc);")
            else:  # once NaN, acc keeps it: nothing compares greater and it is not the new value's NaN
                pixel.append(f"if (in_row{i} && in_col{j}) {{ const {vec} v = {x}; "
                             "acc = (v > acc) | isnan(v) ? v : acc; }")
    pixel.append(f"const {idx} m = (n * {win.out_h} + oh) * {win.out_w} + ow;")
    extras = []
    for e, layout in enumerate(spec.extra_layouts, start=1):
        where = f"E{e} + offE{e} + m * sE{e}m"
        if layout == "row":
            extras.append(f"const {vec} e{e} = {load(where + ' + c')};")
        elif layout == "bcast":
            extras.append(f"const {vec} e{e} = ({vec})({C_TYPES[spec.epilogue.input_dtypes[e]]})(({where})[0]);")
        else:
            extras.append(f"const {vec} e{e} = ({where})[c * sE{e}n];")
    body, (result,) = program_statements(spec.epilogue, ["acc"] + [f"e{e}" for e in range(1, n_extra + 1)], width=w)
    out = f"Y + m * {win.channels} + c"
    store = f"vstore{w}({result}, 0, {out});" if w > 1 else f"*({out}) = {result};"
    pixel += extras + body + [store]
    inner = "\n    ".join(pixel)
    lines.append(f"for ({idx} ow = run * {spec.pixels}; ow < min(({idx}){win.out_w}, run * {spec.pixels} + "
                 f"{spec.pixels}); ++ow) {{\n    {inner}\n  }}")
    body_text, params_text = "\n  ".join(lines), ",\n    ".join(params)
    return f"""{PREAMBLE}{helpers_for([spec.epilogue], w)}
__kernel void {spec.kernel_name}(
    {params_text})
{{
  {body_text}
}}
"""
