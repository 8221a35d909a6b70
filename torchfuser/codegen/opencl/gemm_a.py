"""How the packed GEMM schedule finds its rows of A when A is not a matrix in memory (codegen/opencl/gemm.py).

- A convolution's patches (GemmSpec.window): row m is output pixel m of a channels-last input; its K = (kh, kw, c)
  elements are read from the input around the pixel's window corner, or from a zeros buffer in the padding.
- A window kernel's result (GemmSpec.producer: a depthwise convolution or a pooling): row m is that kernel's
  output pixel m, made a chunk of producer.vector_width channels at a time in registers (the window's reduction
  and its epilogue) and kept in a private array the K steps of the chunk broadcast from.
"""

from __future__ import annotations

from torchfuser.codegen.opencl.op_c import vector_type
from torchfuser.codegen.opencl.program_c import program_statements
from torchfuser.codegen.opencl.window import extra_loads, reduction_start, tap_update, tap_weights, channels_load
from torchfuser.ir.kernels import GemmSpec


def _corner(idx: str, win, i: int) -> str:
    """Row m0 + i's output pixel of window `win` (clamped to the last row): its image, output and input
    coordinates (ih, iw: the window's corner, negative in the padding)."""
    per_image = win.out_h * win.out_w
    return (f"const {idx} pm{i} = min(m0 + {i}, M - 1), img{i} = pm{i} / {per_image}, "
            f"oh{i} = (pm{i} - img{i} * {per_image}) / {win.out_w}, ow{i} = pm{i} - img{i} * {per_image} - oh{i} * "
            f"{win.out_w}, ih{i} = oh{i} * {win.stride_h} - {win.pad_h}, iw{i} = ow{i} * {win.stride_w} - "
            f"{win.pad_w};")


def _pixel(win, img: str, h: str, w: str) -> str:
    """The offset of channel 0 of pixel (h, w) of image img in the convolution's input."""
    if win.channels_first:
        return f"{img} * {win.channels * win.height * win.width} + {h} * {win.width} + {w}"
    return f"(({img} * {win.height} + {h}) * {win.width} + {w}) * {win.channels}"


def patch_row(spec: GemmSpec, i: int) -> str:
    """The corner of row m0 + i's patch in a convolution's input (ir/window.Window), and without padding its
    address."""
    idx, win = spec.index_type, spec.window
    corner = _corner(idx, win, i)
    if win.padded:
        return corner
    return f"{corner} __global const float* a{i} = A + offA + {_pixel(win, f'img{i}', f'ih{i}', f'iw{i}')};"


def producer_row(spec: GemmSpec, i: int) -> str:
    """Row m0 + i of A as the producer's output pixel: its image, the corner of its window in x (the pointer may
    lie before x where the window starts in the padding: only taps inside are read), whether each kernel row and
    column of the window lies inside x, and the private chunk of A the K loop fills."""
    idx, producer = spec.index_type, spec.producer
    win = producer.window
    lines = [_corner(idx, win, i),
             f"__global const float* x{i} = X + offX + img{i} * sxn + ih{i} * sxh + iw{i} * sxw;",
             f"float at{i}[{producer.vector_width}];"]
    if win.padded:
        lines += [f"const int in{i}_r{kh} = ih{i} + {kh * win.dilation_h} >= 0 && ih{i} + {kh * win.dilation_h} < "
                  f"{win.height};" for kh in range(win.kernel_h)]
        lines += [f"const int in{i}_c{kw} = iw{i} + {kw * win.dilation_w} >= 0 && iw{i} + {kw * win.dilation_w} < "
                  f"{win.width};" for kw in range(win.kernel_w)]
    return " ".join(lines)


def inside(spec: GemmSpec) -> str:
    """Whether every row of the tile has its whole window inside x (no tap in the padding)."""
    win = spec.producer.window
    reach_h, reach_w = (win.kernel_h - 1) * win.dilation_h, (win.kernel_w - 1) * win.dilation_w
    return " && ".join(f"ih{i} >= 0 && ih{i} + {reach_h} < {win.height} && iw{i} >= 0 && iw{i} + {reach_w} < "
                       f"{win.width}" for i in range(spec.tile_m))


def produce_chunk(spec: GemmSpec, checked: bool) -> list[str]:
    """Statements filling each row's chunk of A (`at{i}`: channels k.. of its output pixel) from the producer:
    the taps' weights once, then per row the window's reduction (checked: each tap tested against the padding),
    the producer's epilogue and a private store."""
    producer, tm = spec.producer, spec.tile_m
    win, cw = producer.window, producer.vector_width
    vec = vector_type(producer.dtype, cw)
    lines = tap_weights(producer, "k", "t")
    for i in range(tm):
        lines.append(f"{vec} s{i} = {reduction_start(producer)};")
        for kh in range(win.kernel_h):
            for kw in range(win.kernel_w):
                x = channels_load(cw, f"x{i} + {kh * win.dilation_h} * sxh + {kw * win.dilation_w} * sxw + k * sxc")
                update = tap_update(producer, x, f"t{kh * win.kernel_w + kw}", f"s{i}")
                lines.append(f"if (in{i}_r{kh} && in{i}_c{kw}) {update}" if checked else update)
        lines += extra_loads(producer, "P", f"pm{i}", "k", f"q{i}_")
        body, (result,) = program_statements(
            producer.epilogue, [f"s{i}"] + [f"q{i}_{e}" for e in range(1, producer.epilogue.n_inputs)],
            prefix=f"u{i}_", width=cw)
        lines += body + [f"vstore{cw}({result}, 0, at{i});" if cw > 1 else f"at{i}[0] = {result};"]
    return lines


def padded_tap(spec: GemmSpec, i: int) -> str:
    """Row i's run of C channels at tap (kh, kw) of a padded window: in the input, or Z's zeros in the padding.
    Channels-first, p{i} points at channel c0 and steps s{i} floats a channel (0 in the padding: Z[0] again)."""
    idx, win = spec.index_type, spec.window
    inside = f"th{i} >= 0 && th{i} < {win.height} && tw{i} >= 0 && tw{i} < {win.width}"
    tap = (f"const {idx} th{i} = ih{i} + kh * {win.dilation_h}, tw{i} = iw{i} + kw * {win.dilation_w}; "
           f"const int in{i} = {inside}; ")
    pixel = f"A + offA + {_pixel(win, f'img{i}', f'th{i}', f'tw{i}')}"
    if win.channels_first:
        plane = win.height * win.width
        return (f"{tap}__global const float* p{i} = in{i} ? {pixel} + c0 * {plane} : Z; "
                f"const {idx} s{i} = in{i} ? {plane} : 0;")
    return f"{tap}__global const float* p{i} = in{i} ? {pixel} : Z;"
