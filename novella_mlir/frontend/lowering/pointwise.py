"""Lowerings of math functions, compares, logical ops, where, clamp, pow and dtype conversions.

Integers and bools are held as f32 (see `frontend/dtypes.py`), so a conversion
between them, or from them to float, is the identity; float -> int truncates toward
zero (exactly, in fp32: `_truncate`). A compare gives a 0.0/1.0 mask, `~` is 1 - x, `&` a product and
`|` a maximum of masks."""

from __future__ import annotations

import math

from torch_mlir import ir

from ...dialects.novella import CompareOp, MathOp, MaximumOp, MinimumOp, MulOp, ScalarOp, SubOp, WhereOp


def _fn(v: str) -> ir.StringAttr:
    return ir.StringAttr.get(v)


def math_op(cx, fn: str, x=None, check: bool = True):
    return cx.emit(MathOp, check=check, input=cx.operand(0) if x is None else x, fn=_fn(fn))


def scalar_op(cx, fn: str, x, value: float, check: bool = True):
    return cx.emit(ScalarOp, check=check, input=x, fn=_fn(fn), value=ir.FloatAttr.get_f32(float(value)))


def unary(fn: str):
    def lower(cx):
        return math_op(cx, fn)

    lower.__name__ = f"lower_{fn}"
    return lower


def expm1(cx):
    """exp(x) - 1 as the EXPM1 vector function (relative accuracy near 0; docs/isa.md)."""
    return math_op(cx, "expm1")


def log1p(cx):
    """log(1 + x) as the LOG1P vector function (relative accuracy near 0; docs/isa.md)."""
    return math_op(cx, "log1p")


def logical_not(cx):
    if cx.kind(0) == "int" and "bitwise" in cx.op.name:
        raise cx.error("bitwise_not of an integer tensor is not supported (held as f32); only of a bool mask")
    if cx.kind(0) != "bool":
        return cx.emit(CompareOp, lhs=cx.operand(0), rhs=cx.scalar(0.0), fn=_fn("eq"))
    return math_op(cx, "not")


_SWAP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


def compare(fn: str):
    def lower(cx):
        x = cx.operand(0)
        other = cx.value(cx.op.operands[1])
        if isinstance(other, ir.Value):
            return cx.emit(CompareOp, lhs=x, rhs=other, fn=_fn(fn))
        if not isinstance(other, (int, float)):
            raise cx.error(f"compare with {other!r} is not supported (a symbolic size is not a tensor value)")
        return scalar_op(cx, fn, x, float(other))

    lower.__name__ = f"lower_{fn}"
    return lower


def _mask(cx, i: int):
    if cx.kind(i) == "int" and ("bitwise" in cx.op.name or "__" in cx.op.name):
        raise cx.error("bitwise ops on integer tensors are not supported (held as f32); only on bool masks")
    v = cx.operand(i)
    if cx.kind(i) == "bool":
        return v
    return cx.emit(CompareOp, check=False, lhs=v, rhs=cx.scalar(0.0), fn=_fn("ne"))


def logical_and(cx):
    return cx.emit(MulOp, lhs=_mask(cx, 0), rhs=_mask(cx, 1))


def logical_or(cx):
    return cx.emit(MaximumOp, lhs=_mask(cx, 0), rhs=_mask(cx, 1))


def logical_xor(cx):
    return cx.emit(CompareOp, lhs=_mask(cx, 0), rhs=_mask(cx, 1), fn=_fn("ne"))


def maximum(cx):
    return cx.emit(MaximumOp, lhs=cx.operand(0), rhs=cx.operand(1))


def minimum(cx):
    return cx.emit(MinimumOp, lhs=cx.operand(0), rhs=cx.operand(1))


def clamp(cx):
    x = cx.operand(0)
    lo, hi = (cx.value(cx.op.operands[i]) if i < cx.num_operands else None for i in (1, 2))
    for bound, fn, op_cls in ((lo, "max", MaximumOp), (hi, "min", MinimumOp)):
        if bound is None:
            continue
        x = cx.emit(op_cls, lhs=x, rhs=bound) if isinstance(bound, ir.Value) else scalar_op(cx, fn, x, bound)
    return x


def pow_tensor_scalar(cx):
    """x ** e: products for small integer e, sqrt/rsqrt/reciprocal, else exp(e * log(x))."""
    x, e = cx.operand(0), cx.const(1)
    if not isinstance(e, (int, float)):
        raise cx.error(f"pow with exponent {e!r} is not supported")
    if e == 1:
        return x
    if float(e).is_integer() and 2 <= e <= 8:
        out = x
        for _ in range(int(e) - 1):
            out = cx.emit(MulOp, check=False, lhs=out, rhs=x)
        return out
    named = {0.5: "sqrt", -0.5: "rsqrt", -1: "reciprocal"}
    if e in named:
        return math_op(cx, named[e], x)
    if e == -2:
        return math_op(cx, "reciprocal", cx.emit(MulOp, check=False, lhs=x, rhs=x))
    log = math_op(cx, "log", x, check=False)
    return math_op(cx, "exp", scalar_op(cx, "mul", log, float(e), check=False))


def pow_tensor_tensor(cx):
    """x ** y = exp(y * ln x): exact in range for x > 0 (a negative x gives NaN, where torch may not).
    An integer result is refused: exp(y * ln x) is not an exact integer and integer powers overflow."""
    if cx.result_kind() != "float":
        raise cx.error(
            "pow of two integer tensors is not supported: the NPU computes it as exp(y * ln x) in float32, which "
            "is not an exact integer, and integer powers wrap around where float32 does not; cast x to float first"
        )
    log = math_op(cx, "log", cx.operand(0), check=False)
    return math_op(cx, "exp", cx.emit(MulOp, check=False, lhs=log, rhs=cx.operand(1)))


def pow_scalar(cx):
    """b ** x = exp(x * ln b) for a positive scalar base."""
    base = cx.const(0)
    if not isinstance(base, (int, float)) or base <= 0:
        raise cx.error(f"pow with base {base!r} is supported only for a positive number")
    return math_op(cx, "exp", scalar_op(cx, "mul", cx.operand(1), math.log(base), check=False))


def convert(cx):
    """to / _to_copy / convert_element_type: the identity, except float -> int (truncated) and -> bool (x != 0)."""
    src, dst = cx.kind(0), cx.result_kind()
    if not dst:
        raise cx.error(f"conversion to {cx.op.results[0].type} is not supported (only f32, integer and bool)")
    x = cx.operand(0)
    if dst == "bool" and src != "bool":
        return cx.emit(CompareOp, lhs=x, rhs=cx.scalar(0.0), fn=_fn("ne"))
    if src == "float" and dst == "int":
        return _truncate(cx, x)
    return x


_ROUNDER = float(2**23)  # a + 2**23 - 2**23 rounds 0 <= a < 2**23 to an integer; fp32 from 2**23 up holds only integers


def _truncate(cx, x):
    """trunc(x) (what `.long()` does), exact in fp32: with a = |x|, r = (a + 2**23) - 2**23 is a rounded to
    the nearest integer (both steps exact below 2**23), floor(a) = r - (r > a), and a >= 2**23 is already an
    integer; the sign is put back by where(x < 0). NaN and +-inf have no integer value (eager's is undefined)."""
    a = math_op(cx, "abs", x, check=False)
    r = scalar_op(cx, "sub", scalar_op(cx, "add", a, _ROUNDER, check=False), _ROUNDER, check=False)
    over = cx.emit(CompareOp, check=False, lhs=r, rhs=a, fn=_fn("gt"))
    floor = cx.emit(SubOp, check=False, lhs=r, rhs=over)
    whole = cx.emit(WhereOp, check=False, cond=scalar_op(cx, "ge", a, _ROUNDER, check=False), x=a, y=floor)
    neg = cx.emit(CompareOp, check=False, lhs=x, rhs=cx.scalar(0.0), fn=_fn("lt"))
    return cx.emit(WhereOp, cond=neg, x=math_op(cx, "neg", whole, check=False), y=whole)
