"""Lowerings of batched matmul, softmax and attention."""

from __future__ import annotations

import math

from torch_mlir import ir

from ... import symbolic as sy
from ...dialects import shapes
from ...dialects.novella import AttentionOp, MatmulOp, SoftmaxOp


def _rank(v: ir.Value) -> int:
    return ir.RankedTensorType(v.type).rank


def matmul(cx):
    """`a @ b` for operands of equal rank 2 to 4 (batch dims equal or 1)."""
    a, b = cx.operand(0), cx.operand(1)
    ra, rb = _rank(a), _rank(b)
    if ra != rb or not 2 <= ra <= 4:
        raise cx.error(f"matmul of rank {ra} by rank {rb} is not supported; use equal ranks 2 to 4")
    return cx.emit(MatmulOp, lhs=a, rhs=b, transpose_rhs=ir.BoolAttr.get(False))


def _softmax(cx):
    x = cx.operand(0)
    rank = _rank(x)
    dim = cx.const(1)
    if dim is None or dim % rank != rank - 1:
        raise cx.error(f"softmax over dim {dim} of a rank-{rank} tensor is not supported; only the last dim")
    return cx.emit(SoftmaxOp, input=x)


def softmax_internal(cx):
    if cx.const(2):
        raise cx.error("softmax with half_to_float is not supported; the NPU computes in f32")
    return _softmax(cx)


def softmax(cx):
    return _softmax(cx)


_SDPA_ARGS = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _sdpa_options(cx) -> dict:
    opts = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
    for i, name in enumerate(_SDPA_ARGS, start=3):
        if i < cx.num_operands:
            v = cx.value(cx.op.operands[i])
            opts[name] = "a tensor" if isinstance(v, ir.Value) else v
    return opts


def scaled_dot_product_attention(cx):
    """SDPA without mask, dropout or causal masking; `scale` defaults to 1/sqrt(head dim)."""
    q, k, v = cx.operand(0), cx.operand(1), cx.operand(2)
    opts = _sdpa_options(cx)
    if opts["attn_mask"] is not None:
        raise cx.error("scaled_dot_product_attention with attn_mask is not supported; pass attn_mask=None")
    if opts["dropout_p"]:
        raise cx.error(f"scaled_dot_product_attention with dropout_p={opts['dropout_p']} is not supported")
    if opts["is_causal"]:
        raise cx.error("scaled_dot_product_attention with is_causal=True is not supported")
    if opts["enable_gqa"]:
        raise cx.error("scaled_dot_product_attention with enable_gqa=True is not supported")
    ranks = {_rank(q), _rank(k), _rank(v)}
    if len(ranks) != 1 or not 2 <= min(ranks) <= 4:
        raise cx.error(f"scaled_dot_product_attention needs query, key, value of equal rank 2 to 4, got {ranks}")
    head_dim = sy.as_int(cx.shape(q)[-1])
    if head_dim is None:
        raise cx.error("scaled_dot_product_attention needs a static head dim")
    scale = opts["scale"] if opts["scale"] is not None else 1.0 / math.sqrt(head_dim)
    try:
        shapes.infer("novella.attention", [cx.shape(t) for t in (q, k, v)], {}, None)
    except shapes.ShapeError as e:
        raise cx.error(
            f"{e}; derive query, key and value from one input so their lengths are the same symbol"
        ) from None
    return cx.emit(AttentionOp, query=q, key=k, value=v, scale=ir.FloatAttr.get_f32(float(scale)))
