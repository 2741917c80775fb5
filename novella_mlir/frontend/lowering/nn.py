"""Lowerings of layer_norm, conv1d and other nn ops."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ...dialects.novella import Conv1dOp, LayerNormOp


def _tensor_or_none(cx, i: int):
    if i >= cx.num_operands:
        return None
    v = cx.value(cx.op.operands[i])
    return v if isinstance(v, ir.Value) else None


def _layer_norm(cx, eps: float):
    x = cx.operand(0)
    normalized = cx.const(1)
    c = ir.RankedTensorType(x.type).get_dim_size(ir.RankedTensorType(x.type).rank - 1)
    if len(normalized) != 1 or normalized[0] != c:
        raise cx.error(f"layer_norm over {normalized} is not supported; only over the last dim ({c})")
    w = _tensor_or_none(cx, 2)
    b = _tensor_or_none(cx, 3)
    w = w if w is not None else cx.add_weight("ln_ones", np.ones(c))
    b = b if b is not None else cx.add_weight("ln_zeros", np.zeros(c))
    return cx.emit(LayerNormOp, input=x, weight=w, bias=b, eps=ir.FloatAttr.get_f32(float(eps)))


def layer_norm(cx):
    return _layer_norm(cx, cx.const(4))


def native_layer_norm(cx):
    return [_layer_norm(cx, cx.const(4)), None, None]


def _single(cx, i: int, what: str) -> int:
    v = cx.const(i)
    v = v if isinstance(v, int) else list(v)
    if isinstance(v, list):
        if len(set(v)) != 1:
            raise cx.error(f"conv1d {what} {v} is not supported")
        v = v[0]
    return v


def conv1d(cx):
    x, w = cx.operand(0), cx.operand(1)
    stride, padding, dilation = (_single(cx, i, n) for i, n in ((3, "stride"), (4, "padding"), (5, "dilation")))
    groups = cx.const(6) if cx.num_operands > 6 else 1
    if dilation != 1 or groups != 1 or isinstance(padding, str):
        raise cx.error(f"conv1d with dilation {dilation}, groups {groups}, padding {padding!r} is not supported")
    b = _tensor_or_none(cx, 2)
    if b is None:
        b = cx.add_weight("zero_bias", np.zeros(ir.RankedTensorType(w.type).get_dim_size(0)))
    i64 = ir.IntegerType.get_signless(64)
    return cx.emit(
        Conv1dOp,
        input=x,
        weight=w,
        bias=b,
        stride=ir.IntegerAttr.get(i64, stride),
        padding=ir.IntegerAttr.get(i64, padding),
        layout=ir.StringAttr.get("ncw"),
        act=ir.StringAttr.get("none"),
    )
