"""The functions of `novella.math`, one entry each: the one place to add a unary math op.

An entry gives its body on the vector unit, VEC steps over three tiles: `a` (the input), `dst`
(the result) and `tmp` (scratch), each step `(fn, dst, a, b, mode, imm)` as the VEC fields of
docs/isa.md; and `aten`, the torch ops that lower to it as `novella.math` with nothing else to
decide (ops with a lowering of their own, e.g. `expm1` on integers, name their function in the op
table). The dialect's verifier, the frontend's lowerings (optable.py) and the pointwise kernel's
body all read this table."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Step:
    fn: str
    dst: str
    a: str | None = None
    b: str | None = None
    mode: str | None = None
    imm: float | None = None


@dataclass(frozen=True)
class MathFn:
    body: tuple[Step, ...]
    aten: tuple[str, ...] = ()


def _one(fn: str, *aten: str) -> MathFn:
    return MathFn((Step(fn, "dst", "a"),), aten)


def _scalar(fn: str, dst: str, a: str, imm: float) -> Step:
    return Step(fn, dst, a, mode="SCALAR", imm=imm)


_NEG_EXP_PLUS_1 = (_scalar("MUL", "tmp", "a", -1.0), Step("EXP", "tmp", "tmp"), _scalar("ADD", "tmp", "tmp", 1.0))
_GELU_TANH = (
    Step("MUL", "tmp", "a", "a"),
    Step("MUL", "tmp", "tmp", "a"),
    _scalar("MUL", "tmp", "tmp", 0.044715),
    Step("ADD", "tmp", "tmp", "a"),
    _scalar("MUL", "tmp", "tmp", math.sqrt(2.0 / math.pi)),
    Step("TANH", "tmp", "tmp"),
    _scalar("ADD", "tmp", "tmp", 1.0),
    _scalar("MUL", "tmp", "tmp", 0.5),
    Step("MUL", "dst", "tmp", "a"),
)
_FILL_1 = Step("FILL", "tmp", imm=1.0)

MATH: dict[str, MathFn] = {
    "exp": _one("EXP", "exp"),
    "exp2": MathFn((_scalar("MUL", "tmp", "a", math.log(2.0)), Step("EXP", "dst", "tmp")), ("exp2",)),
    "log": _one("LOG", "log"),
    "log2": MathFn((Step("LOG", "dst", "a"), _scalar("MUL", "dst", "dst", 1.0 / math.log(2.0))), ("log2",)),
    "tanh": _one("TANH", "tanh"),
    "rsqrt": _one("RSQRT", "rsqrt"),
    "sqrt": MathFn((Step("RSQRT", "dst", "a"), _FILL_1, Step("DIV", "dst", "tmp", "dst")), ("sqrt",)),
    "sigmoid": MathFn((*_NEG_EXP_PLUS_1, Step("FILL", "dst", imm=1.0), Step("DIV", "dst", "dst", "tmp")), ("sigmoid",)),
    "silu": MathFn((*_NEG_EXP_PLUS_1, Step("DIV", "dst", "a", "tmp")), ("silu",)),
    "neg": MathFn((_scalar("MUL", "dst", "a", -1.0),), ("neg",)),
    "abs": _one("ABS", "abs"),
    "sin": _one("SIN", "sin"),
    "cos": _one("COS", "cos"),
    "reciprocal": MathFn((_FILL_1, Step("DIV", "dst", "tmp", "a")), ("reciprocal",)),
    "gelu_tanh": MathFn(_GELU_TANH),
    "not": MathFn((_scalar("MUL", "dst", "a", -1.0), _scalar("ADD", "dst", "dst", 1.0))),
    "sign": MathFn(
        (_scalar("GT", "dst", "a", 0.0), _scalar("LT", "tmp", "a", 0.0), Step("SUB", "dst", "dst", "tmp")), ("sign",)
    ),
    "square": MathFn((Step("MUL", "dst", "a", "a"),), ("square",)),
    "erf": _one("ERF", "erf"),
    "expm1": _one("EXPM1"),
    "log1p": _one("LOG1P"),
}
