"""Lowering of aten.linear (batched matmuls live in attention.py).

A linear whose weight is a static [N, K] tensor and whose input features K are static is
`novella.linear`. Otherwise (K is the length, or the weight is a model input sized by it)
it is `x @ w^T` as a 2-D `novella.matmul` with `transpose_rhs` (whose K loop runs over a
symbolic number of k-tiles), plus the bias."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import AddOp, LinearOp, MatmulOp
from .shape_ops import reshape


def linear(cx):
    x, w = cx.operand(0), cx.operand(1)
    has_bias = _is_tensor(cx, 2)
    if len(cx.shape(w)) != 2:
        raise cx.error(f"linear needs a 2-D weight, got rank {len(cx.shape(w))}")
    if any(sy.as_int(e) is None for e in [cx.shape(x)[-1], *cx.shape(w)]):
        return matmul_rows(cx, x, w, cx.operand(2) if has_bias else None)
    return emit_linear(cx, x, w, cx.operand(2) if has_bias else None)


def emit_linear(cx, x, w, bias):
    """`novella.linear` of x by the static [N, K] weight w, with a zero bias when there is none."""
    if bias is None:
        n = ir.RankedTensorType(w.type).get_dim_size(0)
        bias = cx.add_weight("zero_bias", np.zeros(n))
    return cx.emit(LinearOp, input=x, weight=w, bias=bias)


def matmul_rows(cx, x, w, bias=None, transpose_rhs: bool = True):
    """x [..., K] by w ([N, K] with `transpose_rhs`, else [K, N]) as a 2-D matmul of the flattened rows."""
    shape = cx.shape(x)
    rows = sy.canon(sy.numel(shape[:-1])) if len(shape) > 1 else sy.const(1)
    flat = reshape(cx, x, [rows, shape[-1]], check=False)
    y = cx.emit(MatmulOp, check=False, lhs=flat, rhs=w, transpose_rhs=ir.BoolAttr.get(transpose_rhs))
    n = cx.shape(w)[0 if transpose_rhs else 1]
    if bias is not None:
        y = cx.emit(AddOp, check=False, lhs=y, rhs=bias)
    return reshape(cx, y, list(shape[:-1]) + [n])


def _is_tensor(cx, i) -> bool:
    return i < cx.num_operands and isinstance(cx.value(cx.op.operands[i]), ir.Value)
