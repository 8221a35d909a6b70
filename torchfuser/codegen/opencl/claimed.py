"""A kernel whose work is claimed one slice at a time by whoever runs it: the calling thread and the workers.

A split launch on a CPU device (runtime/lanes.py) runs part of a grid in the calling thread and the rest on
PoCL's worker threads. With a fixed cut, a worker that starts late (its core busy with another thread, such as
PyTorch's OpenMP threads spinning after an op) holds the whole launch up. The claimed form of a kernel lets
both sides take slices of the grid from one shared counter until none is left, so a late worker only finds less
to do; and it counts the slices done, so the calling thread sees the launch end without asking the driver.

The kernel's body becomes a function of its global ids; `{name}__claimed` loops: claim the next index along
the claimed dim (an atomic increment of the cell's first int), run the body over every id of the other dims at
that index, then count it done (the cell's second int, after a fence: the results are visible first). Launched
with one work-item per thread. Only kernels whose work-items are independent qualify: work-groups of one, no
built-in but get_global_id with a literal dim, no barrier.

Before (a kernel of the grid):            After:
    __kernel void k(A, B) {                   inline void k__body(A, B, size_t tf_g0, ...) { ... tf_g0 ... }
      ... get_global_id(0) ...                __kernel void k__claimed(A, B, claims, cell, dim, n0, n1, n2) {
    }                                           for (;;) { claim i; if (i >= n_dim) break; run k__body; done++ }
                                              }
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

CLAIMED_SUFFIX = "__claimed"
CELL_INTS = 16  # one 64-byte cache line per cell: [next slice to claim, slices done, unused...]
_GLOBAL_ID = re.compile(r"get_global_id\((\d)\)")
_WORK_ITEM_BUILTINS = ("get_local_id", "get_group_id", "get_local_size", "get_num_groups", "get_global_size",
                       "get_global_offset", "get_work_dim")


def is_claimed(kernel_name: str) -> bool:
    """The kernel (a BuiltKernel's name) is a claimed form."""
    return kernel_name.endswith(CLAIMED_SUFFIX)


@dataclass(frozen=True)
class BodyForm:
    """A kernel's source split around its body made a function of its global ids: `prelude` (what comes before the
    kernel: helpers), `function` (`inline void {name}__body(params..., tf_g0, tf_g1, tf_g2) {...}`), `after` (what
    follows the kernel), and its parameters as declared and by name."""

    prelude: str
    function: str
    after: str
    parameters: tuple[str, ...]
    names: tuple[str, ...]


@functools.lru_cache(maxsize=256)  # a tape's chain is made from the same few kernels at every new length
def body_form(source: str, name: str) -> BodyForm | None:
    """Kernel `name` of `source` with its body as a function of its global ids, or None where its work-items are
    not independent of one another or of the grid's shape (a built-in other than get_global_id(literal dim), a
    barrier)."""
    head = f"__kernel void {name}("
    start = source.find(head)
    if start < 0 or source.count("__kernel ") != 1:
        return None
    params_end = _matching(source, start + len(head) - 1)
    body_start = source.find("{", params_end)
    body_end = _matching(source, body_start)
    body = source[body_start:body_end + 1]
    if any(f"{builtin}(" in body for builtin in _WORK_ITEM_BUILTINS) or "barrier(" in body:
        return None
    params = source[start + len(head):params_end]
    parameters = _split_parameters(params)
    names = [_parameter_name(p) for p in parameters]
    if None in names:
        return None
    body = _GLOBAL_ID.sub(lambda m: f"tf_g{m.group(1)}", body)
    ids = "const size_t tf_g0, const size_t tf_g1, const size_t tf_g2"
    function = f"inline void {name}__body({params}, {ids}" + source[params_end:body_start] + body
    return BodyForm(source[:start], function, source[body_end + 1:], tuple(parameters), tuple(names))


def claimed_source(source: str, name: str) -> str | None:
    """The claimed form of kernel `name` in `source` (see the module docstring), or None where its work-items are
    not independent of one another or of the grid's shape."""
    form = body_form(source, name)
    if form is None:
        return None
    params, forwarded = ", ".join(form.parameters), ", ".join(form.names)
    wrapper = f"""
__kernel void {name}{CLAIMED_SUFFIX}({params},
    volatile __global int* tf_claims, const int tf_cell, const int tf_dim, const long tf_n0, const long tf_n1,
    const long tf_n2)
{{  // tf_ names only: the kernel's parameters are in scope here too
  volatile __global int* tf_counts = tf_claims + {CELL_INTS} * tf_cell;
  const long tf_n[3] = {{tf_n0, tf_n1, tf_n2}};
  const int tf_p = tf_dim == 0 ? 1 : 0, tf_q = tf_dim == 2 ? 1 : 2;  // the other two dims
  for (;;) {{
    const long tf_i = atomic_inc(tf_counts);
    if (tf_i >= tf_n[tf_dim]) break;
    for (long tf_a = 0; tf_a < tf_n[tf_p]; ++tf_a) {{
      for (long tf_b = 0; tf_b < tf_n[tf_q]; ++tf_b) {{
        size_t tf_g[3];
        tf_g[tf_dim] = (size_t)tf_i; tf_g[tf_p] = (size_t)tf_a; tf_g[tf_q] = (size_t)tf_b;
        {name}__body({forwarded}, tf_g[0], tf_g[1], tf_g[2]);
      }}
    }}
    mem_fence(CLK_GLOBAL_MEM_FENCE);  // this slice's results before its count
    atomic_inc(tf_counts + 1);
  }}
}}
"""
    return form.prelude + form.function + form.after + wrapper


def _matching(text: str, open_at: int) -> int:
    """Index of the bracket closing the one at open_at."""
    pairs = {"(": ")", "{": "}"}
    opening, closing, depth = text[open_at], pairs[text[open_at]], 0
    for i in range(open_at, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced brackets in generated source")


def _split_parameters(params: str) -> list[str]:
    return [p.strip() for p in params.split(",") if p.strip()]


def _parameter_name(param: str) -> str | None:
    match = re.search(r"([A-Za-z_]\w*)\s*$", param)
    return match.group(1) if match else None
