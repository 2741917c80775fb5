"""Lowerings of elementwise arithmetic with broadcasting."""

from __future__ import annotations

from torch_mlir import ir

from ...dialects.novella import AddOp, DivOp, MulOp, ScalarOp, SubOp

_BINARY = {"add": AddOp, "sub": SubOp, "mul": MulOp, "div": DivOp}
_NEUTRAL = {"add": 0, "sub": 0, "mul": 1, "div": 1}


def _scalar(cx, fn: str, x, value: float):
    return cx.emit(ScalarOp, input=x, fn=ir.StringAttr.get(fn), value=ir.FloatAttr.get_f32(float(value)))


def _binary(kind: str):
    def lower(cx):
        x = cx.operand(0)
        alpha = cx.const(2) if kind in ("add", "sub") and cx.num_operands > 2 else 1
        other = cx.value(cx.op.operands[1])
        if not isinstance(other, ir.Value):
            value = other * alpha
            if value == _NEUTRAL[kind]:
                return x
            return _scalar(cx, kind, x, value)
        if alpha != 1:
            other = _scalar(cx, "mul", other, alpha)
        return cx.emit(_BINARY[kind], lhs=x, rhs=other)

    return lower


add = _binary("add")
sub = _binary("sub")
mul = _binary("mul")
div = _binary("div")
