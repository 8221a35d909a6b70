"""Core-ATen elementwise ops → SSA instructions, with PyTorch's type promotion made explicit.

`POINTWISE` maps an ATen overload to a lowering `f(lowerer, node) -> value id`. A lowering raises
`NotLowerable` (with a reason) for argument combinations it does not cover; the node then stays in PyTorch.
Each operand is cast to the dtype eager would compute in: the result dtype for arithmetic, the promoted
operand dtype for comparisons. Python scalars become exact constants.
"""

from __future__ import annotations

import torch
import torch.fx as fx

from torchfuser.ir.dtypes import DTYPE_NAMES, is_float

from torchfuser.ir.ops import OPS
from torchfuser.ir.program import Const, ProgramBuilder

aten, prims = torch.ops.aten, torch.ops.prims


class NotLowerable(Exception):
    """This node (with these arguments) has no pointwise lowering."""


def tensor_meta(node) -> torch.Tensor | None:
    val = node.meta.get("val") if isinstance(node, fx.Node) else None
    return val if isinstance(val, torch.Tensor) else None


def dtype_name(node) -> str:
    meta = tensor_meta(node)
    if meta is None or meta.dtype not in DTYPE_NAMES:
        raise NotLowerable(f"dtype {getattr(meta, 'dtype', None)} is not supported by the kernels")
    return DTYPE_NAMES[meta.dtype]


def node_arg(node: fx.Node, index: int, name: str, default=None):
    """An argument given by position or by keyword."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


# ops whose every element is one Python number, and where their argument list holds it
CONSTANT_OPS = {aten.scalar_tensor.default: 0, aten.full.default: 1, aten.full_like.default: 1}


def constant_value(node) -> Const | None:
    """The one value of every element of a scalar_tensor, full or full_like node (HF masks fill with
    finfo.min or -inf this way; zeros_like, ones_like and fill_ arrive as full_like), at the node's dtype;
    None for other nodes. Kernels take it as a literal: it is no input, and the host op goes once no reader
    is left."""
    if not isinstance(node, fx.Node) or node.target not in CONSTANT_OPS:
        return None
    value = node.args[CONSTANT_OPS[node.target]]
    meta = tensor_meta(node)
    if meta is None or meta.dtype not in DTYPE_NAMES or not isinstance(value, (bool, int, float)):
        return None
    dtype = DTYPE_NAMES[meta.dtype]
    if not is_float(dtype) and isinstance(value, float) and (value != value or abs(value) == float("inf")):
        return None  # eager's conversion of nan/inf to an integer is undefined: leave it to eager
    return Const(value, dtype)


class Lowerer:
    """Builds one program; `values` maps group-external and already-lowered nodes to value ids."""

    def __init__(self, builder: ProgramBuilder, values: dict):
        self.b = builder
        self.values = values

    def operand(self, arg, dtype: str):
        """A value id or Const for arg, cast to dtype."""
        if isinstance(arg, fx.Node):
            if arg in self.values:
                return self.b.cast(self.values[arg], dtype)
            constant = constant_value(arg)
            if constant is None:
                raise NotLowerable(f"operand {arg.name} is not available to the kernel")
            return self.b.cast(constant, dtype)
        if isinstance(arg, bool):
            return self.b.cast(Const(arg, "bool"), dtype)
        if isinstance(arg, int):
            return self.b.cast(Const(arg, "int64"), dtype)
        if isinstance(arg, float):
            return self.b.cast(Const(arg, "float64"), dtype)
        raise NotLowerable(f"operand {arg!r} is not a tensor or a number")

    def emit(self, op: str, args, dtype: str) -> int:
        if OPS[op].float_only and not is_float(dtype):
            raise NotLowerable(f"{op} is lowered for floating dtypes only, not {dtype}")
        return self.b.emit(op, args, dtype)

    def lower(self, node: fx.Node) -> int:
        rule = POINTWISE.get(node.target)
        if rule is None:
            raise NotLowerable(f"{node.target} is not an elementwise op the kernels know")
        with self.b.producing([node.name]):
            return rule(self, node)


def lowering_problem(node: fx.Node) -> str | None:
    """None when `node` lowers on its own (its tensor operands as program inputs), else why not."""
    if node.op != "call_function" or node.target not in POINTWISE:
        return f"{node.target} is not an elementwise op the kernels know"
    if tensor_meta(node) is None or any(tensor_meta(i) is None for i in node.all_input_nodes):
        return "an operand or the result is not a single tensor"
    builder = ProgramBuilder()
    try:
        values = {i: builder.add_input(dtype_name(i)) for i in node.all_input_nodes}
        Lowerer(builder, values).lower(node)
        dtype_name(node)
    except NotLowerable as why:
        return str(why)
    return None


def _promoted(args) -> str:
    """The dtype eager computes a comparison in (torch.result_type on stand-ins of the operands)."""
    stand_ins = []
    for a in args:
        meta = tensor_meta(a)
        if meta is not None:
            stand_ins.append(torch.empty((1,) if meta.dim() else (), dtype=meta.dtype))
        elif isinstance(a, (bool, int, float)):
            stand_ins.append(a)
        else:
            raise NotLowerable(f"operand {a!r} is not a tensor or a number")
    if len(stand_ins) == 1:
        stand_ins.append(stand_ins[0])
    dtype = torch.result_type(*stand_ins)
    if dtype not in DTYPE_NAMES:
        raise NotLowerable(f"dtype {dtype} is not supported by the kernels")
    return DTYPE_NAMES[dtype]


def _unary(op):
    def lower(lw: Lowerer, node):
        dtype = dtype_name(node)
        return lw.emit(op, (lw.operand(node.args[0], dtype),), dtype)

    return lower


def _binary(op, with_alpha=False, reverse=False):
    def lower(lw: Lowerer, node):
        dtype = dtype_name(node)
        x, y = (lw.operand(a, dtype) for a in node.args[:2])
        alpha = node.kwargs.get("alpha", node.args[2] if len(node.args) > 2 else 1)
        if with_alpha and alpha != 1:
            y = lw.emit("mul", (y, lw.operand(alpha, dtype)), dtype)
        return lw.emit(op, (y, x) if reverse else (x, y), dtype)

    return lower


def _compare(op):
    def lower(lw: Lowerer, node):
        common = _promoted(node.args[:2])
        x, y = (lw.operand(a, common) for a in node.args[:2])
        return lw.emit(op, (x, y), "bool")

    return lower


def _isnan(lw: Lowerer, node):
    """x != x: true exactly for NaN (an integer or bool x is never NaN, and x != x is false for it too)."""
    x = lw.operand(node.args[0], _promoted(node.args[:1]))
    return lw.emit("ne", (x, x), "bool")


def _logical(op):
    def lower(lw: Lowerer, node):
        args = [lw.operand(a, "bool") for a in node.args[: OPS[op].arity]]
        return lw.b.cast(lw.emit(op, args, "bool"), dtype_name(node))

    return lower


def _bitwise(op):
    def lower(lw: Lowerer, node):
        dtype = dtype_name(node)
        if is_float(dtype):
            raise NotLowerable(f"{op} on {dtype}")
        return lw.emit(op, tuple(lw.operand(a, dtype) for a in node.args[:2]), dtype)

    return lower


def _gelu(lw: Lowerer, node):
    approximate = node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none")
    if approximate not in ("none", "tanh"):
        raise NotLowerable(f"gelu approximate={approximate!r}")
    dtype = dtype_name(node)
    return lw.emit("gelu" if approximate == "none" else "gelu_tanh", (lw.operand(node.args[0], dtype),), dtype)


def _pow_scalar(lw: Lowerer, node):
    dtype = dtype_name(node)
    x, exponent = lw.operand(node.args[0], dtype), node.args[1]
    if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
        raise NotLowerable("pow with a non-number exponent")
    if exponent == 1:
        return x
    if exponent == 2:
        return lw.emit("mul", (x, x), dtype)
    if exponent == 3:
        return lw.emit("mul", (lw.emit("mul", (x, x), dtype), x), dtype)
    if exponent == 0.5:
        return lw.emit("sqrt", (x,), dtype)
    if exponent == -1:
        return lw.emit("reciprocal", (x,), dtype)
    return lw.emit("pow", (x, lw.operand(float(exponent), dtype)), dtype)


def _clamp(lw: Lowerer, node, low=None, high=None):
    dtype = dtype_name(node)
    value = lw.operand(node.args[0], dtype)
    for op, bound in (("maximum", low), ("minimum", high)):
        if bound is not None:
            if isinstance(bound, fx.Node):
                raise NotLowerable("clamp with tensor bounds")
            value = lw.emit(op, (value, lw.operand(bound, dtype)), dtype)
    return value


def _clamp_default(lw, node):
    low = node.kwargs.get("min", node.args[1] if len(node.args) > 1 else None)
    high = node.kwargs.get("max", node.args[2] if len(node.args) > 2 else None)
    return _clamp(lw, node, low, high)


def _where(lw: Lowerer, node):
    dtype = dtype_name(node)
    cond = lw.operand(node.args[0], "bool")
    return lw.emit("where", (cond, lw.operand(node.args[1], dtype), lw.operand(node.args[2], dtype)), dtype)


def _cast(lw: Lowerer, node):
    kwargs = dict(node.kwargs)
    kwargs.pop("dtype", None)
    if node.target is aten._to_copy.default:
        device = kwargs.pop("device", None)
        if device is not None and torch.device(device).type != "cpu":
            raise NotLowerable("_to_copy to another device")
        if kwargs.pop("memory_format", None) not in (None, torch.preserve_format, torch.contiguous_format):
            raise NotLowerable("_to_copy with a memory format")
        kwargs.pop("layout", None), kwargs.pop("pin_memory", None), kwargs.pop("non_blocking", None)
    if kwargs:
        raise NotLowerable(f"cast with {sorted(kwargs)}")
    return lw.b.cast(lw.operand(node.args[0], dtype_name(node.args[0])), dtype_name(node))


def _identity(lw: Lowerer, node):
    return lw.operand(node.args[0], dtype_name(node))


def _leaky_relu(lw: Lowerer, node):
    dtype = dtype_name(node)
    x = lw.operand(node.args[0], dtype)
    slope = node.args[1] if len(node.args) > 1 else 0.01
    positive = lw.emit("gt", (x, lw.operand(0, dtype)), "bool")
    return lw.emit("where", (positive, x, lw.emit("mul", (x, lw.operand(slope, dtype)), dtype)), dtype)


def _div(lw: Lowerer, node):
    mode = node.kwargs.get("rounding_mode")
    if mode is None:
        return _binary("div")(lw, node)
    return _rounded_division({"floor": "floor_divide", "trunc": "trunc_divide"}[mode])(lw, node)


def _rounded_division(op):
    """floor/trunc division and remainder. On integers eager raises for a zero divisor, which a kernel cannot:
    only constant divisors other than 0 (and -1, whose overflow at the minimum is undefined in C) are taken."""
    def lower(lw: Lowerer, node):
        if not is_float(dtype_name(node)):
            divisor = node.args[1]
            constant = constant_value(divisor) if isinstance(divisor, fx.Node) else Const(divisor, "int64")
            if constant is None or constant.value in (0, -1):
                raise NotLowerable(f"integer {op} by a tensor, 0 or -1 (eager raises for a zero divisor)")
        return _binary(op)(lw, node)

    return lower


POINTWISE = {
    aten.add.Tensor: _binary("add", with_alpha=True),
    aten.add.Scalar: _binary("add", with_alpha=True),
    aten.sub.Tensor: _binary("sub", with_alpha=True),
    aten.sub.Scalar: _binary("sub", with_alpha=True),
    aten.rsub.Scalar: _binary("sub", with_alpha=True, reverse=True),
    aten.rsub.Tensor: _binary("sub", with_alpha=True, reverse=True),
    aten.mul.Tensor: _binary("mul"),
    aten.mul.Scalar: _binary("mul"),
    aten.div.Tensor: _binary("div"),
    aten.div.Scalar: _binary("div"),
    aten.div.Tensor_mode: _div,
    aten.div.Scalar_mode: _div,
    aten.remainder.Tensor: _rounded_division("remainder"),
    aten.remainder.Scalar: _rounded_division("remainder"),
    aten.maximum.default: _binary("maximum"),
    aten.minimum.default: _binary("minimum"),
    aten.eq.Tensor: _compare("eq"), aten.eq.Scalar: _compare("eq"),
    aten.ne.Tensor: _compare("ne"), aten.ne.Scalar: _compare("ne"),
    aten.lt.Tensor: _compare("lt"), aten.lt.Scalar: _compare("lt"),
    aten.le.Tensor: _compare("le"), aten.le.Scalar: _compare("le"),
    aten.gt.Tensor: _compare("gt"), aten.gt.Scalar: _compare("gt"),
    aten.ge.Tensor: _compare("ge"), aten.ge.Scalar: _compare("ge"),
    aten.logical_not.default: _logical("logical_not"), aten.isnan.default: _isnan,
    aten.logical_and.default: _logical("logical_and"),
    aten.logical_or.default: _logical("logical_or"),
    aten.bitwise_and.Tensor: _bitwise("bitwise_and"),
    aten.bitwise_or.Tensor: _bitwise("bitwise_or"),
    aten.bitwise_xor.Tensor: _bitwise("bitwise_xor"),
    aten.where.self: _where,
    aten.clamp.default: _clamp_default,
    aten.clamp_min.default: lambda lw, n: _clamp(lw, n, low=n.args[1]),
    aten.clamp_max.default: lambda lw, n: _clamp(lw, n, high=n.args[1]),
    # relu6 arrives as hardtanh(x, 0, 6): the clamp it is (NaN stays NaN in both)
    aten.hardtanh.default: lambda lw, n: _clamp(lw, n, node_arg(n, 1, "min_val", -1.0), node_arg(n, 2, "max_val", 1.0)),
    aten.gelu.default: _gelu,
    aten.pow.Tensor_Scalar: _pow_scalar,
    aten.leaky_relu.default: _leaky_relu,
    aten._to_copy.default: _cast,
    prims.convert_element_type.default: _cast,
    aten.clone.default: _identity,
    aten.lift_fresh_copy.default: _identity,  # a copy of a constant made in forward (torch.tensor(...))
    **{
        getattr(aten, name).default: _unary(op)
        for name, op in [
            ("neg", "neg"), ("abs", "abs"), ("relu", "relu"), ("sigmoid", "sigmoid"), ("silu", "silu"),
            ("tanh", "tanh"), ("exp", "exp"), ("log", "log"), ("log1p", "log1p"), ("expm1", "expm1"),
            ("sqrt", "sqrt"), ("rsqrt", "rsqrt"), ("reciprocal", "reciprocal"), ("erf", "erf"),
            ("sin", "sin"), ("cos", "cos"), ("floor", "floor"), ("ceil", "ceil"), ("round", "round"),
        ]
    },
}
