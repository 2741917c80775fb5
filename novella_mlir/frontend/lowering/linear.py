"""Lowerings of contractions: linear, mm, matmul, bmm."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ...dialects.novella import LinearOp, MatmulOp
from . import lowers


@lowers("torch.aten.linear")
def linear(cx):
    w = cx.operand(1)
    if _is_tensor(cx, 2):
        bias = cx.operand(2)
    else:
        n = ir.RankedTensorType(w.type).get_dim_size(0)
        bias = cx.add_weight("zero_bias", np.zeros(n))
    return cx.emit(LinearOp, input=cx.operand(0), weight=w, bias=bias)


def _is_tensor(cx, i) -> bool:
    return i < cx.num_operands and isinstance(cx.value(cx.op.operands[i]), ir.Value)


@lowers("torch.aten.mm", "torch.aten.bmm", "torch.aten.matmul")
def matmul(cx):
    a, b = cx.operand(0), cx.operand(1)
    ra, rb = ir.RankedTensorType(a.type).rank, ir.RankedTensorType(b.type).rank
    if ra != rb or ra < 2:
        raise cx.error(f"matmul of rank {ra} by rank {rb} is not supported; use equal ranks >= 2")
    return cx.emit(MatmulOp, lhs=a, rhs=b)
