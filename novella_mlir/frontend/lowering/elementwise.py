"""Lowerings of elementwise arithmetic with broadcasting.

A scalar operand or `alpha` that is a symbolic size (e.g. `x + x.shape[1]`) is a
run-time value: it becomes a 0-d tensor computed on the NPU (`size_value`)."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import AddOp, DivOp, MulOp, ReduceOp, ReshapeOp, ScalarOp, SliceOp, SubOp
from ...symbolic import box as sb

_BINARY = {"add": AddOp, "sub": SubOp, "mul": MulOp, "div": DivOp}
_NEUTRAL = {"add": 0, "sub": 0, "mul": 1, "div": 1}


def _scalar(cx, fn: str, x, value: float, check: bool = True):
    return cx.emit(ScalarOp, check=check, input=x, fn=ir.StringAttr.get(fn), value=ir.FloatAttr.get_f32(float(value)))


def size_value(cx, e: ir.AffineExpr) -> ir.Value:
    """The value of size expression `e` as a 0-d tensor: the sum of a row of ones sliced to length `e`."""
    hi = sb.value_range(e, cx.symbols)[1]
    ones = cx.add_weight("ones", np.ones((1, max(hi, 1))))
    i64 = ir.IntegerType.get_signless(64)
    part = cx.emit(SliceOp, result_shape=[sy.const(1), e], check=False, input=ones,
                   dim=ir.IntegerAttr.get(i64, 1), start=ir.IntegerAttr.get(i64, 0))  # fmt: skip
    total = cx.emit(ReduceOp, check=False, input=part, fn=ir.StringAttr.get("sum"))
    return cx.emit(ReshapeOp, result_shape=[], check=False, input=total)


def _binary(kind: str):
    def lower(cx):
        x = cx.operand(0)
        alpha = cx.const(2) if kind in ("add", "sub") and cx.num_operands > 2 else 1
        other = cx.value(cx.op.operands[1])
        data = cx.weight_data(other) if isinstance(other, ir.Value) else None
        if data is not None and data.ndim == 0:  # a 0-d constant (prim.NumToTensor) is a scalar operand
            other = float(data)
        if isinstance(other, ir.AffineExpr):
            other = size_value(cx, other)
        if not isinstance(other, ir.Value):
            if isinstance(alpha, ir.AffineExpr):
                other, alpha = size_value(cx, alpha), other
            else:
                value = other * alpha
                if value == _NEUTRAL[kind]:
                    return x
                return _scalar(cx, kind, x, value)
        if isinstance(alpha, ir.AffineExpr):
            other = cx.emit(MulOp, check=False, lhs=other, rhs=size_value(cx, alpha))
        elif alpha != 1:
            other = _scalar(cx, "mul", other, alpha, check=False)
        return cx.emit(_BINARY[kind], lhs=x, rhs=other)

    return lower


add = _binary("add")
sub = _binary("sub")
mul = _binary("mul")
div = _binary("div")
