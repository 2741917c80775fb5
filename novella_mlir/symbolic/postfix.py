"""Affine size expressions as the artifact's postfix programs, and back.

A postfix program is a list: ints are constants, "s<i>"/"d<i>" operands, then the operator tokens below.
`novella_mlir.runtime.expr` evaluates them without MLIR.
"""

from __future__ import annotations

from torch_mlir import ir

from . import canon, const, dim, sym

_TOKENS = {
    ir.AffineAddExpr: "+",
    ir.AffineMulExpr: "*",
    ir.AffineFloorDivExpr: "floordiv",
    ir.AffineCeilDivExpr: "ceildiv",
    ir.AffineModExpr: "mod",
}


def to_postfix(e: ir.AffineExpr) -> list:
    """Serializes `e` as a postfix program: ints are constants, "s<i>"/"d<i>" operands, then ops."""
    e = canon(e)
    if isinstance(e, ir.AffineConstantExpr):
        return [e.value]
    if isinstance(e, ir.AffineSymbolExpr):
        return [f"s{e.position}"]
    if isinstance(e, ir.AffineDimExpr):
        return [f"d{e.position}"]
    return to_postfix(e.lhs) + to_postfix(e.rhs) + [_TOKENS[type(e)]]


_FROM_TOKENS = {
    "+": lambda a, b: a + b,
    "*": lambda a, b: a * b,
    "floordiv": ir.AffineExpr.get_floor_div,
    "ceildiv": ir.AffineExpr.get_ceil_div,
    "mod": ir.AffineExpr.get_mod,
}


def from_postfix(program: list) -> ir.AffineExpr:
    """The affine expression of a postfix program (the inverse of `to_postfix`; needs a Context)."""
    stack = []
    for tok in program:
        if isinstance(tok, int):
            stack.append(const(tok))
        elif tok in _FROM_TOKENS:
            b = stack.pop()
            stack.append(_FROM_TOKENS[tok](stack.pop(), b))
        else:
            stack.append((sym if tok[0] == "s" else dim)(int(tok[1:])))
    return stack[0]
