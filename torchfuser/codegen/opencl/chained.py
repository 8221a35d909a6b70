"""Consecutive launches in the calling thread as one: a kernel that runs each launch's grid in turn.

An in-thread launch (runtime/lanes.py) of a small kernel costs more in the driver (a command, an event, its
scheduling) than the kernel runs. Where a steady call (runtime/steady_tape.py) makes several in a row, a chained
kernel takes all their arguments and runs each kernel's body (claimed.body_form: a function of its global ids)
over its grid, one launch after the other, in one work-item: what one launch wrote, the next reads, as it would
after the launch ended. Each part's grid is fixed in the source; the parts' parameters are renamed (`c{i}_`) and
lose `restrict`, since two parts' buffers may be the same. Only kernels whose preludes (helpers) are the same text
chain, so no helper is defined twice.

Before (two launches):                     After (one, global size 1):
    __kernel void a(X, Y) {...}                inline void a__body(X, Y, tf_g0, tf_g1, tf_g2) {...}
    __kernel void b(Y, Z) {...}                inline void b__body(Y, Z, tf_g0, tf_g1, tf_g2) {...}
                                               __kernel void tf_chain_h(c0_X, c0_Y, c1_Y, c1_Z) {
                                                 for g in a's grid: a__body(c0_X, c0_Y, g); for g in b's grid: ...
                                               }
"""

from __future__ import annotations

import hashlib
import re

from torchfuser.codegen.opencl.claimed import body_form

_RESTRICT = re.compile(r"\brestrict\b\s*")
_LAST_NAME = re.compile(r"([A-Za-z_]\w*)\s*$")


def chained_source(parts: list[tuple[str, str, tuple]]) -> tuple[str, str] | None:
    """(kernel name, source) of the chain of `parts` — (source, kernel name, global size) per launch, in order — or
    None where a part's body is not a function of its global ids alone, or the parts' preludes differ."""
    forms = [body_form(source, name) for source, name, _ in parts]
    if any(f is None for f in forms) or len({f.prelude + f.after for f in forms}) != 1:
        return None
    functions = list(dict.fromkeys(f.function for f in forms))  # a kernel launched twice: its body once
    parameters, loops = [], []
    for i, ((_, name, size), form) in enumerate(zip(parts, forms)):
        renamed = [_LAST_NAME.sub(lambda m, i=i: f"c{i}_{m.group(1)}", _RESTRICT.sub("", p)) for p in form.parameters]
        parameters += renamed
        n0, n1, n2 = (*size, 1, 1)[:3]
        forwarded = ", ".join(f"c{i}_{n}" for n in form.names)
        loops.append(f"  for (size_t tf_g2 = 0; tf_g2 < {n2}; ++tf_g2)\n"
                     f"    for (size_t tf_g1 = 0; tf_g1 < {n1}; ++tf_g1)\n"
                     f"      for (size_t tf_g0 = 0; tf_g0 < {n0}; ++tf_g0)\n"
                     f"        {name}__body({forwarded}, tf_g0, tf_g1, tf_g2);")
    body = "\n".join(loops)
    signature = ",\n    ".join(parameters)
    digest = hashlib.sha256(("\n".join(functions) + signature + body).encode()).hexdigest()[:10]
    name = f"tf_chain_{digest}"
    kernel = f"\n__kernel void {name}(\n    {signature})\n{{\n{body}\n}}\n"
    return name, forms[0].prelude + "\n".join(functions) + forms[0].after + kernel
