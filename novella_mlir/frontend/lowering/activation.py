"""Lowerings of activations."""

from __future__ import annotations

from ...dialects.novella import GeluOp, ReluOp


def relu(cx):
    return cx.emit(ReluOp, input=cx.operand(0))


def gelu(cx):
    approximate = cx.const(1) if cx.num_operands > 1 else "none"
    if approximate != "none":
        raise cx.error(f"gelu(approximate='{approximate}') is not supported; use the erf form")
    return cx.emit(GeluOp, input=cx.operand(0))
