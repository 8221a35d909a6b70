"""The C column of the op table: how each SSA op (ir/ops.py) is spelled in OpenCL C, and the helpers.

C templates use {a}, {b}, {c} for operands and {T} for the C type of the result. A template may differ for
floating and integer results ("f" / "i" keys).

NaN rules follow PyTorch, not C: maximum/minimum/clamp/relu propagate NaN, so they are not fmax/fmin.
"""

from __future__ import annotations

import math

import torch

from torchfuser.ir.dtypes import is_float

C_TYPES = {"bool": "uchar", "int32": "int", "int64": "long", "float32": "float", "float64": "double"}

# The C column of the op table (ir/ops.py): one template per op, or "f" / "i" templates for floating and
# integer results.
C_TEMPLATES: dict[str, str | dict] = {
    "add": "({a} + {b})",
    "sub": "({a} - {b})",
    "mul": "({a} * {b})",
    "div": "({a} / {b})",
    "neg": "(-{a})",
    "abs": {"f": "fabs({a})", "i": "(({a}) < 0 ? -({a}) : ({a}))"},
    "relu": "(({a}) < ({T})0 ? ({T})0 : ({a}))",
    "sigmoid": "(({T})1 / (({T})1 + exp(-({a}))))",
    "silu": "(({a}) / (({T})1 + exp(-({a}))))",
    "gelu": "tf_gelu_erf_{T}({a})",
    "gelu_tanh": "tf_gelu_tanh_{T}({a})",
    "tanh": "tf_tanh_{T}({a})",
    "exp": "exp({a})",
    "log": "log({a})",
    "log1p": "log1p({a})",
    "expm1": "expm1({a})",
    "sqrt": "sqrt({a})",
    "rsqrt": "rsqrt({a})",
    "reciprocal": "(({T})1 / ({a}))",
    "erf": "tf_erf_{T}({a})",
    "sin": "sin({a})",
    "cos": "cos({a})",
    "floor": "floor({a})",
    "ceil": "ceil({a})",
    "round": "rint({a})",
    "pow": "pow({a}, {b})",
    # integer forms assume a divisor that is neither 0 nor -1 (the lowering only passes such constants)
    "floor_divide": {"f": "tf_floordiv_{T}({a}, {b})",
                     "i": "(({a}) / ({b}) - ((({a}) % ({b}) != 0) & ((({a}) < 0) != (({b}) < 0))))"},
    "trunc_divide": {"f": "trunc(({a}) / ({b}))", "i": "(({a}) / ({b}))"},
    "remainder": {"f": "tf_remainder_{T}({a}, {b})",
                  "i": "(({a}) % ({b}) + ((({a}) % ({b}) != 0) & (((({a}) % ({b})) < 0) != (({b}) < 0))) * ({b}))"},
    "maximum": {"f": "tf_maximum_{T}({a}, {b})", "i": "max({a}, {b})"},
    "minimum": {"f": "tf_minimum_{T}({a}, {b})", "i": "min({a}, {b})"},
    "where": "(({a}) ? ({b}) : ({c}))",
    "eq": "({a} == {b})",
    "ne": "({a} != {b})",
    "lt": "({a} < {b})",
    "le": "({a} <= {b})",
    "gt": "({a} > {b})",
    "ge": "({a} >= {b})",
    "logical_not": "(!({a}))",
    "logical_and": "(({a}) && ({b}))",
    "logical_or": "(({a}) || ({b}))",
    "bitwise_and": {"f": "", "i": "({a} & {b})"},
    "bitwise_or": {"f": "", "i": "({a} | {b})"},
    "bitwise_xor": {"f": "", "i": "({a} ^ {b})"},
    "cast": "(({T})({a}))",
    "last_index": "(({T})jlast)",
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
# float32); PoCL's built-in erf is very slow. tanh: Eigen's rational approximation for float (a few ulp; PoCL's
# built-in tanh is several times slower). Their polynomials use fma, not mad: without fast-math flags mad is a
# multiply and an add, twice the latency along each polynomial's chain.
_HELPER_TEMPLATES = {
    "float": """
inline TYPE tf_maximum_TYPE(TYPE a, TYPE b) { return (isnan(a) || isnan(b)) ? (a + b) : fmax(a, b); }
inline TYPE tf_minimum_TYPE(TYPE a, TYPE b) { return (isnan(a) || isnan(b)) ? (a + b) : fmin(a, b); }
// n / d for the rational approximations' denominators (never 0, never subnormal): the hardware's reciprocal
// estimate and one Newton step (to float32 accuracy), where a division is several times slower
inline TYPE tf_quotient_TYPE(TYPE n, TYPE d) {
  TYPE r = native_recip(d);
  r = r * fma(-d, r, (TYPE)2.0f);
  return n * r;
}
inline TYPE tf_erf_TYPE(TYPE x) {
  TYPE xc = clamp(x, (TYPE)-4.0f, (TYPE)4.0f);
  TYPE x2 = xc * xc;
  TYPE p = (TYPE)-2.72614225801306e-10f;
  p = fma(x2, p, (TYPE)2.77068142495902e-08f); p = fma(x2, p, (TYPE)-2.10102402082508e-06f);
  p = fma(x2, p, (TYPE)-5.69250639462346e-05f); p = fma(x2, p, (TYPE)-7.34990630326855e-04f);
  p = fma(x2, p, (TYPE)-2.95459980854025e-03f); p = fma(x2, p, (TYPE)-1.60960333262415e-02f);
  TYPE q = (TYPE)-1.45660718464996e-05f;
  q = fma(x2, q, (TYPE)-2.13374055278905e-04f); q = fma(x2, q, (TYPE)-1.68282697438203e-03f);
  q = fma(x2, q, (TYPE)-7.37332916720468e-03f); q = fma(x2, q, (TYPE)-1.42647390514189e-02f);
  return isnan(x) ? x : tf_quotient_TYPE(xc * p, q);
}
inline TYPE tf_gelu_erf_TYPE(TYPE x) {
  return GELU_AT_INF(TYPE)0.5f * x * ((TYPE)1.0f + tf_erf_TYPE(x * (TYPE)0x1.6a09e6p-1f));
}
inline TYPE tf_tanh_TYPE(TYPE x) {
  const TYPE xc = clamp(x, (TYPE)-7.90531110763549805f, (TYPE)7.90531110763549805f);
  const TYPE x2 = xc * xc;
  TYPE p = (TYPE)-2.76076847742355e-16f;
  p = fma(x2, p, (TYPE)2.00018790482477e-13f); p = fma(x2, p, (TYPE)-8.60467152213735e-11f);
  p = fma(x2, p, (TYPE)5.12229709037114e-08f); p = fma(x2, p, (TYPE)1.48572235717979e-05f);
  p = fma(x2, p, (TYPE)6.37261928875436e-04f); p = fma(x2, p, (TYPE)4.89352455891786e-03f);
  TYPE q = (TYPE)1.19825839466702e-06f;
  q = fma(x2, q, (TYPE)1.18534705686654e-04f); q = fma(x2, q, (TYPE)2.26843463243900e-03f);
  q = fma(x2, q, (TYPE)4.89352518554385e-03f);
  const TYPE r = (isnan(x) || fabs(x) < (TYPE)0.0004f) ? x : tf_quotient_TYPE(xc * p, q);
  return fabs(x) >= (TYPE)9.0f ? copysign((TYPE)1.0f, x) : r;  // where float32's tanh is +-1 (and at +-inf)
}
inline TYPE tf_gelu_tanh_TYPE(TYPE x) {
  return (TYPE)0.5f * x * ((TYPE)1.0f + tf_tanh_TYPE((TYPE)0x1.988454p-1f * (x + (TYPE)0.044715f * x * x * x)));
}
""" + _DIVISION_HELPERS,
    "double": """
inline TYPE tf_maximum_TYPE(TYPE a, TYPE b) { return (isnan(a) || isnan(b)) ? (a + b) : fmax(a, b); }
inline TYPE tf_minimum_TYPE(TYPE a, TYPE b) { return (isnan(a) || isnan(b)) ? (a + b) : fmin(a, b); }
inline TYPE tf_erf_TYPE(TYPE x) { return erf(x); }
inline TYPE tf_tanh_TYPE(TYPE x) { return tanh(x); }
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


def _eager_gelu_is_nan_at_inf() -> bool:
    """ATen's vectorised float gelu gives NaN at +inf on some CPUs (its AVX-512 kernels) and inf, as the formula
    does, on others (AVX2): the kernels compute what eager computes on this machine."""
    return bool(torch.isnan(torch.nn.functional.gelu(torch.full((64,), math.inf)))[0])


_HELPER_TEMPLATES["float"] = _HELPER_TEMPLATES["float"].replace(
    "GELU_AT_INF", "isinf(x) ? (TYPE)NAN : " if _eager_gelu_is_nan_at_inf() else "")


VECTOR_WIDTHS = (2, 4, 8, 16)  # OpenCL C's vector widths (3 aside): vloadN, floatN and the _u types exist for these


def vector_type(dtype: str, width: int) -> str:
    return C_TYPES[dtype] + (str(width) if width > 1 else "")


def helpers_c(scalar: str, width: int = 1) -> str:
    """The helper functions for one C type (scalar `float`/`double`, optionally as a vector)."""
    return _HELPER_TEMPLATES[scalar].replace("TYPE", scalar + (str(width) if width > 1 else ""))


def c_expression(op: str, operands: list[str], dtype: str, width: int = 1) -> str:
    """The C expression for one instruction, operands already spelled as C (vectors when width > 1)."""
    template = C_TEMPLATES[op]
    if isinstance(template, dict):
        template = template["f" if is_float(dtype) else "i"]
    names = dict(zip("abc", operands))
    c_type = vector_type(dtype, width)
    if op == "cast" and dtype == "bool":
        return f"((uchar)(({operands[0]}) != 0))"
    return template.format(T=c_type, **names)
