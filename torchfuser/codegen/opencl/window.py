"""WindowSpec → OpenCL C: a work-item per run of output pixels along a row and vector of channels.

Work-item g takes channel vector g % (C / w) of run (g / (C / w)) % runs of output row oh of image n, so
neighbouring items read neighbouring channels of the same pixels. A sum's tap weights for its channels are
loaded once into registers; per pixel, each tap inside the input adds one vector FMA (a sum) or is compared in
(a max: NaN wins, as in eager), and a tap in the padding is skipped (a row's taps are tested once per item, a
column's once per pixel); the epilogue then runs on the vector and it is stored. Channels-last x makes every
load a contiguous vector of w channels.
"""

from __future__ import annotations

from torchfuser.codegen.opencl.op_c import C_TYPES, vector_type
from torchfuser.codegen.opencl.program_c import PREAMBLE, helpers_for, program_statements, vector_load, vector_store
from torchfuser.ir.kernels.window import WindowSpec


def window_source(spec: WindowSpec) -> str:
    win, idx, w = spec.window, spec.index_type, spec.vector_width
    vec = vector_type(spec.dtype, w)
    groups = win.channels // w
    runs = -(-win.out_w // spec.pixels)
    n_extra = spec.epilogue.n_inputs - 1
    params = [*window_params(spec, "E"), "__global float* restrict Y"]
    lines = [f"const {idx} g = ({idx})get_global_id(0), cg = g % {groups}, r = g / {groups};",
             f"const {idx} run = r % {runs}, oh = (r / {runs}) % {win.out_h}, n = r / ({runs} * {win.out_h});",
             f"if (n >= {win.batch}) return;",
             f"const {idx} c = cg * {w};"]
    lines += tap_weights(spec, "c", "k")
    for i in range(win.kernel_h):
        lines.append(f"const {idx} ih{i} = oh * {win.stride_h} + {i * win.dilation_h - win.pad_h};")
        lines.append(f"const int in_row{i} = ih{i} >= 0 && ih{i} < {win.height};")
        lines.append(f"__global const float* x{i} = X + offX + n * sxn + ih{i} * sxh + c * sxc;")
    pixel = [f"{vec} acc = {reduction_start(spec)};"]
    for j in range(win.kernel_w):
        pixel.append(f"const {idx} iw{j} = ow * {win.stride_w} + {j * win.dilation_w - win.pad_w};")
        pixel.append(f"const int in_col{j} = iw{j} >= 0 && iw{j} < {win.width};")
    for i in range(win.kernel_h):
        for j in range(win.kernel_w):
            x = channels_load(w, f"x{i} + iw{j} * sxw") if w > 1 else f"x{i}[iw{j} * sxw]"
            pixel.append(f"if (in_row{i} && in_col{j}) {tap_update(spec, x, f'k{i * win.kernel_w + j}', 'acc')}")
    pixel.append(f"const {idx} m = (n * {win.out_h} + oh) * {win.out_w} + ow;")
    extras = extra_loads(spec, "E", "m", "c", "e")
    body, (result,) = program_statements(spec.epilogue, ["acc"] + [f"e{e}" for e in range(1, n_extra + 1)], width=w)
    out = f"Y + m * {win.channels} + c"
    store = vector_store(vec, result, out) if w > 1 else f"*({out}) = {result};"
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


def window_params(spec: WindowSpec, buffer: str) -> list[str]:
    """The kernel parameters of the window's operands: x [N, H, W, C] by its strides, a sum's taps, and the
    epilogue's extras as `{buffer}{e}` with their (m, c) strides."""
    idx = spec.index_type
    params = [f"__global const float* restrict X, const {idx} offX, const {idx} sxn, const {idx} sxh, "
              f"const {idx} sxw, const {idx} sxc"]
    if spec.reduction == "sum":
        params.append(f"__global const float* restrict T, const {idx} offT")
    return params + [f"__global const {C_TYPES[spec.epilogue.input_dtypes[e]]}* restrict {buffer}{e}, "
                     f"const {idx} off{buffer}{e}, const {idx} s{buffer}{e}m, const {idx} s{buffer}{e}n"
                     for e in range(1, spec.epilogue.n_inputs)]


def tap_weights(spec: WindowSpec, c: str, name: str) -> list[str]:
    """A sum's tap weights for channels c.. as `{name}{tap}` (none for a max)."""
    if spec.reduction != "sum":
        return []
    vec = vector_type(spec.dtype, spec.vector_width)
    width, channels = spec.vector_width, spec.window.channels
    return [f"const {vec} {name}{t} = {channels_load(width, f'T + offT + {t * channels} + {c}')};"
            for t in range(spec.window.taps)]


def channels_load(width: int, pointer: str) -> str:
    """`width` float channels from the __global `pointer` on (contiguous channels); one float where the width is 1."""
    return vector_load(f"float{width}", pointer) if width > 1 else f"*({pointer})"


def reduction_start(spec: WindowSpec) -> str:
    """The value a window reduction starts from: 0 for a sum, -inf for a max."""
    return f"({vector_type(spec.dtype, spec.vector_width)})({'0.0f' if spec.reduction == 'sum' else '-INFINITY'})"


def tap_update(spec: WindowSpec, value: str, weight: str, acc: str) -> str:
    """The statement adding one tap's `value` into `acc`: times its `weight` (a sum) or compared in (a max)."""
    if spec.reduction == "sum":
        return f"{acc} = fma({value}, {weight}, {acc});"
    vec = vector_type(spec.dtype, spec.vector_width)
    # once NaN, acc keeps it: nothing compares greater and it is not the new value's NaN
    return f"{{ const {vec} v = {value}; {acc} = (v > {acc}) | isnan(v) ? v : {acc}; }}"


def extra_loads(spec: WindowSpec, buffer: str, m: str, c: str, name: str) -> list[str]:
    """Declarations of the epilogue's extras `{name}{e}` at row m, channels c.. (by the spec's layouts), read
    from `{buffer}{e}` at offset `off{buffer}{e}` with strides `s{buffer}{e}m`, `s{buffer}{e}n`."""
    w = spec.vector_width
    vec = vector_type(spec.dtype, w)
    lines = []
    for e, layout in enumerate(spec.extra_layouts, start=1):
        where = f"{buffer}{e} + off{buffer}{e} + {m} * s{buffer}{e}m"
        if layout == "row":
            lines.append(f"const {vec} {name}{e} = {channels_load(w, f'{where} + {c}')};")
        elif layout == "bcast":
            c_type = C_TYPES[spec.epilogue.input_dtypes[e]]
            lines.append(f"const {vec} {name}{e} = ({vec})({c_type})(({where})[0]);")
        else:
            lines.append(f"const {vec} {name}{e} = ({where})[{c} * s{buffer}{e}n];")
    return lines
