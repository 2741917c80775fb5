"""Lowerings of activations."""

from __future__ import annotations

from torch_mlir import ir

from ...dialects.novella import GeluOp, MathOp, ReluOp


def relu(cx):
    return cx.emit(ReluOp, input=cx.operand(0))


def gelu(cx):
    approximate = cx.const(1) if cx.num_operands > 1 else "none"
    if approximate == "tanh":
        return cx.emit(MathOp, input=cx.operand(0), fn=ir.StringAttr.get("gelu_tanh"))
    if approximate != "none":
        raise cx.error(f"gelu(approximate='{approximate}') is not supported; use 'none' or 'tanh'")
    return cx.emit(GeluOp, input=cx.operand(0))
