"""Lowering of aten.linear (batched matmuls live in attention.py)."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ...dialects.novella import LinearOp


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
