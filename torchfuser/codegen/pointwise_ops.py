"""The pointwise op table: for every SSA op, its arity, its OpenCL C text and its PyTorch meaning.

C templates use {a}, {b}, {c} for operands and {T} for the C type of the result. A template may differ for
floating and integer results ("f" / "i" keys). The torch column is the reference semantics: the program
interpreter (fallback path and tests) uses it, so a kernel and its fallback mean the same thing.

NaN rules follow PyTorch, not C: maximum/minimum/clamp/relu propagate NaN, so they are not fmax/fmin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

C_TYPES = {"bool": "uchar", "int32": "int", "int64": "long", "float32": "float", "float64": "double"}
TORCH_DTYPES = {
    "bool": torch.bool,
    "int32": torch.int32,
    "int64": torch.int64,
    "float32": torch.float32,
    "float64": torch.float64,
}
DTYPE_NAMES = {v: k for k, v in TORCH_DTYPES.items()}


@dataclass(frozen=True)
class OpDef:
    arity: int
    c: dict  # "f" / "i" -> template
    torch_fn: Callable
    float_only: bool = False  # the op is only defined for floating results


def _op(arity, c, torch_fn, float_only=False):
    templates = c if isinstance(c, dict) else {"f": c, "i": c}
    return OpDef(arity, templates, torch_fn, float_only)


def _pow(x, e):
    return torch.pow(x, e)


OPS: dict[str, OpDef] = {
    "add": _op(2, "({a} + {b})", torch.add),
    "sub": _op(2, "({a} - {b})", torch.sub),
    "mul": _op(2, "({a} * {b})", torch.mul),
    "div": _op(2, "({a} / {b})", torch.div, float_only=True),
    "neg": _op(1, "(-{a})", torch.neg),
    "abs": _op(1, {"f": "fabs({a})", "i": "(({a}) < 0 ? -({a}) : ({a}))"}, torch.abs),
    "relu": _op(1, "(({a}) < ({T})0 ? ({T})0 : ({a}))", torch.relu),
    "sigmoid": _op(1, "(({T})1 / (({T})1 + exp(-({a}))))", torch.sigmoid, True),
    "silu": _op(1, "(({a}) / (({T})1 + exp(-({a}))))", F.silu, True),
    "gelu": _op(1, "tf_gelu_erf_{T}({a})", F.gelu, True),
    "gelu_tanh": _op(1, "tf_gelu_tanh_{T}({a})", lambda x: F.gelu(x, approximate="tanh"), True),
    "tanh": _op(1, "tanh({a})", torch.tanh, True),
    "exp": _op(1, "exp({a})", torch.exp, True),
    "log": _op(1, "log({a})", torch.log, True),
    "log1p": _op(1, "log1p({a})", torch.log1p, True),
    "expm1": _op(1, "expm1({a})", torch.expm1, True),
    "sqrt": _op(1, "sqrt({a})", torch.sqrt, True),
    "rsqrt": _op(1, "rsqrt({a})", torch.rsqrt, True),
    "reciprocal": _op(1, "(({T})1 / ({a}))", torch.reciprocal, True),
    "erf": _op(1, "tf_erf_{T}({a})", torch.erf, True),
    "sin": _op(1, "sin({a})", torch.sin, True),
    "cos": _op(1, "cos({a})", torch.cos, True),
    "floor": _op(1, "floor({a})", torch.floor, True),
    "ceil": _op(1, "ceil({a})", torch.ceil, True),
    "round": _op(1, "rint({a})", torch.round, True),
    "pow": _op(2, "pow({a}, {b})", _pow, True),
    # integer forms assume a divisor that is neither 0 nor -1 (the lowering only passes such constants)
    "floor_divide": _op(2, {"f": "tf_floordiv_{T}({a}, {b})",
                            "i": "(({a}) / ({b}) - ((({a}) % ({b}) != 0) & ((({a}) < 0) != (({b}) < 0))))"},
                        lambda a, b: torch.div(a, b, rounding_mode="floor")),
    "trunc_divide": _op(2, {"f": "trunc(({a}) / ({b}))", "i": "(({a}) / ({b}))"},
                        lambda a, b: torch.div(a, b, rounding_mode="trunc")),
    "remainder": _op(2, {"f": "tf_remainder_{T}({a}, {b})",
                         "i": "(({a}) % ({b}) + ((({a}) % ({b}) != 0) & (((({a}) % ({b})) < 0) != (({b}) < 0))) * ({b}))"},
                     torch.remainder),
    "maximum": _op(
        2, {"f": "tf_maximum_{T}({a}, {b})", "i": "max({a}, {b})"}, torch.maximum
    ),
    "minimum": _op(
        2, {"f": "tf_minimum_{T}({a}, {b})", "i": "min({a}, {b})"}, torch.minimum
    ),
    "where": _op(3, "(({a}) ? ({b}) : ({c}))", torch.where),
    "eq": _op(2, "({a} == {b})", torch.eq),
    "ne": _op(2, "({a} != {b})", torch.ne),
    "lt": _op(2, "({a} < {b})", torch.lt),
    "le": _op(2, "({a} <= {b})", torch.le),
    "gt": _op(2, "({a} > {b})", torch.gt),
    "ge": _op(2, "({a} >= {b})", torch.ge),
    "logical_not": _op(1, "(!({a}))", torch.logical_not),
    "logical_and": _op(2, "(({a}) && ({b}))", torch.logical_and),
    "logical_or": _op(2, "(({a}) || ({b}))", torch.logical_or),
    "bitwise_and": _op(2, {"f": "", "i": "({a} & {b})"}, torch.bitwise_and),
    "bitwise_or": _op(2, {"f": "", "i": "({a} | {b})"}, torch.bitwise_or),
    "bitwise_xor": _op(2, {"f": "", "i": "({a} ^ {b})"}, torch.bitwise_xor),
    "cast": _op(1, "(({T})({a}))", None),  # interpreted by dtype, see program_interpreter
    # the output's coordinate along its last dim (pointwise kernels define jlast); interpreted by shape
    "last_index": _op(0, "(({T})jlast)", None),
}

_DIVISION_HELPERS = """
// floor division and Python's remainder as eager computes them (fmod first, then a sign fix; floor of a
// quotient that is an integer up to rounding, nudged back up when rounding put it just below); ?: and the
// mask operators work on vectors as on scalars
inline TYPE tf_remainder_TYPE(TYPE a, TYPE b) {
  TYPE mod = fmod(a, b);
  return ((mod != (TYPE)0) & ((b < (TYPE)0) ^ (mod < (TYPE)0))) ? mod + b : mod;
}
inline TYPE tf_floordiv_TYPE(TYPE a, TYPE b) {
  TYPE mod = fmod(a, b);
  TYPE div = (a - mod) / b;
  div = ((mod != (TYPE)0) & ((b < (TYPE)0) ^ (mod < (TYPE)0))) ? div - (TYPE)1 : div;
  TYPE below = floor(div);
  below = (div - below > (TYPE)0.5) ? below + (TYPE)1 : below;
  below = (div == (TYPE)0) ? copysign((TYPE)0, a / b) : below;
  return (b == (TYPE)0) ? a / b : below;
}
"""

# Helpers referenced by the templates, emitted once per kernel for each C type it uses (TYPE is the scalar
# or vector type, e.g. float or float16). erf: the rational approximation used by Eigen/XLA (accurate to
# float32); PoCL's built-in erf is very slow.
_HELPER_TEMPLATES = {
    "float": """
inline TYPE tf_maximum_TYPE(TYPE a, TYPE b) { return (isnan(a) || isnan(b)) ? (a + b) : fmax(a, b); }
inline TYPE tf_minimum_TYPE(TYPE a, TYPE b) { return (isnan(a) || isnan(b)) ? (a + b) : fmin(a, b); }
inline TYPE tf_erf_TYPE(TYPE x) {
  TYPE xc = clamp(x, (TYPE)-4.0f, (TYPE)4.0f);
  TYPE x2 = xc * xc;
  TYPE p = (TYPE)-2.72614225801306e-10f;
  p = mad(x2, p, (TYPE)2.77068142495902e-08f); p = mad(x2, p, (TYPE)-2.10102402082508e-06f);
  p = mad(x2, p, (TYPE)-5.69250639462346e-05f); p = mad(x2, p, (TYPE)-7.34990630326855e-04f);
  p = mad(x2, p, (TYPE)-2.95459980854025e-03f); p = mad(x2, p, (TYPE)-1.60960333262415e-02f);
  TYPE q = (TYPE)-1.45660718464996e-05f;
  q = mad(x2, q, (TYPE)-2.13374055278905e-04f); q = mad(x2, q, (TYPE)-1.68282697438203e-03f);
  q = mad(x2, q, (TYPE)-7.37332916720468e-03f); q = mad(x2, q, (TYPE)-1.42647390514189e-02f);
  return isnan(x) ? x : xc * p / q;
}
// eager's vectorised float gelu gives NaN at +-inf (its scalar path gives inf); tensors take the vector path
inline TYPE tf_gelu_erf_TYPE(TYPE x) {
  return isinf(x) ? (TYPE)NAN : (TYPE)0.5f * x * ((TYPE)1.0f + tf_erf_TYPE(x * (TYPE)0x1.6a09e6p-1f));
}
inline TYPE tf_gelu_tanh_TYPE(TYPE x) {
  return (TYPE)0.5f * x * ((TYPE)1.0f + tanh((TYPE)0x1.988454p-1f * (x + (TYPE)0.044715f * x * x * x)));
}
""" + _DIVISION_HELPERS,
    "double": """
inline TYPE tf_maximum_TYPE(TYPE a, TYPE b) { return (isnan(a) || isnan(b)) ? (a + b) : fmax(a, b); }
inline TYPE tf_minimum_TYPE(TYPE a, TYPE b) { return (isnan(a) || isnan(b)) ? (a + b) : fmin(a, b); }
inline TYPE tf_erf_TYPE(TYPE x) { return erf(x); }
inline TYPE tf_gelu_erf_TYPE(TYPE x) { return (TYPE)0.5 * x * ((TYPE)1.0 + erf(x * (TYPE)M_SQRT1_2)); }
inline TYPE tf_gelu_tanh_TYPE(TYPE x) {
  return (TYPE)0.5 * x * ((TYPE)1.0 + tanh((TYPE)(M_SQRT2 * M_2_SQRTPI * 0.5) * (x + (TYPE)0.044715 * x * x * x)));
}
""" + _DIVISION_HELPERS,
}

# Ops whose templates are valid on OpenCL vector types (no comparisons, selects on masks, or casts).
VECTOR_SAFE = frozenset({
    "add", "sub", "mul", "div", "neg", "abs", "relu", "sigmoid", "silu", "gelu", "gelu_tanh", "tanh", "exp",
    "log", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "erf", "sin", "cos", "floor", "ceil", "round",
    "pow", "maximum", "minimum",
})


def vector_type(dtype: str, width: int) -> str:
    return C_TYPES[dtype] + (str(width) if width > 1 else "")


def helpers_c(scalar: str, width: int = 1) -> str:
    """The helper functions for one C type (scalar `float`/`double`, optionally as a vector)."""
    return _HELPER_TEMPLATES[scalar].replace("TYPE", scalar + (str(width) if width > 1 else ""))


def is_float(dtype: str) -> bool:
    return dtype in ("float32", "float64")


def c_expression(op: str, operands: list[str], dtype: str, width: int = 1) -> str:
    """The C expression for one instruction, operands already spelled as C (vectors when width > 1)."""
    definition = OPS[op]
    template = definition.c["f" if is_float(dtype) else "i"]
    names = dict(zip("abc", operands))
    c_type = vector_type(dtype, width)
    if op == "cast" and dtype == "bool":
        return f"((uchar)(({operands[0]}) != 0))"
    return template.format(T=c_type, **names)
