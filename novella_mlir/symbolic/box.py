"""Size expressions over the symbols' box (each symbol between its bounds): the constant a size is over the
whole box (`fixed_value`), and its range (`value_range`), both from every point of the box when it is
small enough, never sampled."""

from __future__ import annotations

import itertools

import numpy as np
from torch_mlir import ir

from . import Symbol, affine_in_symbols, as_int, canon, const, evaluate, provably_ge, to_sympy

BOX_POINTS = 1 << 20  # the most points of a symbol box `fixed_value` evaluates an expression at


def fixed_value(e: ir.AffineExpr, symbols: list[Symbol]) -> int | None:
    """The value of `e` when it is one value at every point of the symbols' box, else None: a size the
    length makes 1 over the whole range (the frames of a strided conv stack under its first window) is
    that constant. Checked at every point of the box (at most BOX_POINTS of them), never sampled. A box of
    one point (a static compile, bounds [T, T]) folds nothing: its instructions must be the JIT's at T."""
    if as_int(e) is not None:
        return as_int(e)
    used = sorted(symbols_in(e))
    box = {s.position: s for s in symbols}
    if not used or any(p not in box for p in used) or all(box[p].lo == box[p].hi for p in used):
        return None
    corners = {evaluate(e, [box[p].lo if p in used else 0 for p in range(max(used) + 1)]),
               evaluate(e, [box[p].hi if p in used else 0 for p in range(max(used) + 1)])}  # fmt: skip
    if len(corners) > 1 or int(np.prod([box[p].hi - box[p].lo + 1 for p in used])) > BOX_POINTS:
        return None
    values = _at_every_point(e, {p: (box[p].lo, box[p].hi) for p in used})
    return int(values.flat[0]) if np.all(values == values.flat[0]) else None


def fixed(e: ir.AffineExpr, symbols: list[Symbol]) -> ir.AffineExpr:
    """`e`, or the constant it is over the whole box (`fixed_value`)."""
    v = fixed_value(e, symbols)
    return e if v is None else const(v)


def symbols_in(e: ir.AffineExpr) -> set[int]:
    """The positions of the symbols `e` reads."""
    e = canon(e)
    if isinstance(e, ir.AffineSymbolExpr):
        return {e.position}
    if isinstance(e, (ir.AffineConstantExpr, ir.AffineDimExpr)):
        return set()
    return symbols_in(e.lhs) | symbols_in(e.rhs)


def value_range(e: ir.AffineExpr, symbols: list[Symbol]) -> tuple[int, int]:
    """(min, max) of a size expression over the symbols' box: exact (every point evaluated at once) for a
    box of at most BOX_POINTS points, else interval bounds that hold it (a `mod` need not peak at a corner)."""
    if as_int(e) is not None:
        return as_int(e), as_int(e)
    box = {s.position: (s.lo, s.hi) for s in symbols or []}
    used = sorted(symbols_in(e))
    if affine_in_symbols(e):  # linear: the extremes are at corners (interval terms would not cancel s0 - s0)
        axes = [box[p] if p in used else (0,) for p in range(max(used, default=-1) + 1)]
        vals = [evaluate(e, c) for c in itertools.product(*axes)]
        return min(vals), max(vals)
    if int(np.prod([box[p][1] - box[p][0] + 1 for p in used])) > BOX_POINTS:
        return _interval(canon(e), box)
    values = _at_every_point(e, {p: box[p] for p in used})
    return int(values.min()), int(values.max())


def _interval(e: ir.AffineExpr, box: dict) -> tuple[int, int]:
    """Bounds of `e` over `box` (position -> (lo, hi)) by interval arithmetic, each term on its own."""
    if isinstance(e, ir.AffineConstantExpr):
        return e.value, e.value
    if isinstance(e, ir.AffineSymbolExpr):
        return box[e.position]
    (a, b), (c, d) = _interval(e.lhs, box), _interval(e.rhs, box)
    if isinstance(e, ir.AffineAddExpr):
        return a + c, b + d
    if isinstance(e, ir.AffineMulExpr):
        products = (a * c, a * d, b * c, b * d)
        return min(products), max(products)
    if c != d or c <= 0:
        raise TypeError(f"a division or mod by a non-constant in {e}")
    if isinstance(e, ir.AffineFloorDivExpr):
        return a // c, b // c
    if isinstance(e, ir.AffineCeilDivExpr):
        return -(-a // c), -(-b // c)
    if isinstance(e, ir.AffineModExpr):
        return (a % c, b % c) if a // c == b // c else (0, c - 1)
    raise TypeError(f"unsupported affine expression {e}")


def _at_every_point(e: ir.AffineExpr, box: dict) -> np.ndarray:
    """`e` evaluated at every point of `box` (symbol position -> (lo, hi)) at once."""
    used = sorted(box)
    grid = np.meshgrid(*[np.arange(box[p][0], box[p][1] + 1, dtype=np.int64) for p in used], indexing="ij")
    at = {p: g.ravel() for p, g in zip(used, grid)}
    return np.asarray(evaluate(e, [at.get(p, np.zeros(1, np.int64)) for p in range(max(used, default=0) + 1)]))


def disjoint(a: tuple, b: tuple, box: dict) -> bool:
    """Ranges a = (lo, size) and b = (lo, size) (affine expressions or ints) share no element at any
    symbol values in `box` (`symbol_box`): one provably ends where the other begins or before."""
    end = [to_sympy(canon(x if isinstance(x, ir.AffineExpr) else const(x))) for x in (a[0], a[1], b[0], b[1])]
    return provably_ge(b[0], end[0] + end[1], box) or provably_ge(a[0], end[2] + end[3], box)
