"""The band of key positions an attention mask lets through, read from the ops that build it.

A decoder's mask is computed in the graph from the positions: `arange` tables (weights tagged
`novella.iota`), constants (`novella.splat`), sums of ones sliced to the past length, compares
and products of compares, then `where(cond, 0, -inf)`. Each value is interpreted exactly, as a
function of x, the index along its last dim (the key position), and of the symbols:
  * `Lin(a, b)`: a * x + b, the same in every other dim (a integer, b an affine expression);
  * `Band(lo, hi)`: 1.0 where lo <= x <= hi, else 0.0 (a bound may be None: unbounded);
  * `Mask(lo, hi)`: 0 inside the band, -inf (or below -1e30) outside;
  * a float constant.
Anything else is unknown (None): no band is claimed. `band(mask)` is the mask's (lo, hi)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from torch_mlir import ir

from .. import symbolic as sy

_NEG = -1e30


@dataclass(frozen=True)
class Lin:
    a: int
    b: object


@dataclass(frozen=True)
class Band:
    lo: object
    hi: object


@dataclass(frozen=True)
class Mask:
    lo: object
    hi: object


def band(v) -> tuple | None:
    """(lo, hi) of the key positions the additive mask `v` keeps, or None if that is not proved."""
    got = _eval(v, {})
    return (got.lo, got.hi) if isinstance(got, Mask) else None


def _shape(v):
    return sy.shape_of(ir.RankedTensorType(v.type)) or []


def _last(v):
    s = _shape(v)
    return s[-1] if s else sy.const(1)


def _eval(v, memo):
    if v not in memo:
        memo[v] = _normal(v, _op(v, memo))
    return memo[v]


def _normal(v, got):
    """An iota along a last dim of size 1 is its one value."""
    if isinstance(got, Lin) and got.a and sy.as_int(_last(v)) == 1:
        return Lin(0, got.b)
    if isinstance(got, float) and got.is_integer() and abs(got) < 2**31:
        return Lin(0, sy.const(int(got)))
    return got


def _op(v, memo):
    owner = v.owner
    if not isinstance(owner, ir.OpView):
        return None
    name, attrs = owner.operation.name, owner.attributes
    args = [_eval(x, memo) for x in owner.operands] if name != "novella.weight" else []
    if name == "novella.weight":
        if "novella.splat" in attrs:
            return ir.FloatAttr(attrs["novella.splat"]).value
        return Lin(1, sy.const(0)) if "novella.iota" in attrs else None
    if name == "novella.reshape":
        x = args[0]
        uniform = isinstance(x, float) or (isinstance(x, Lin) and x.a == 0)
        return x if uniform or sy.equal(_last(owner.operands[0]), _last(v)) else None
    rule = _RULES.get(name)
    return rule(owner, args) if rule and all(a is not None for a in args) else None


def _slice(op, args):
    (x,) = args
    if not isinstance(op.attributes["start"], ir.IntegerAttr):
        return None
    dim, start = (ir.IntegerAttr(op.attributes[k]).value for k in ("dim", "start"))
    rank = len(_shape(op.operands[0]))
    if dim % rank != rank - 1 or isinstance(x, float) or x.a == 0:
        return x
    return Lin(x.a, sy.canon(x.b + sy.const(x.a * start))) if start >= 0 else None


def _reduce(op, args):
    (x,) = args
    fn = ir.StringAttr(op.attributes["fn"]).value
    if fn == "sum" and isinstance(x, Lin) and x.a == 0:
        return Lin(0, sy.canon(x.b * _last(op.operands[0]))) if sy.as_int(x.b) is not None else None
    return None


def _add(op, args):
    x, y = (_lin(a) for a in args)
    return Lin(x.a + y.a, sy.canon(x.b + y.b)) if x and y else None


def _lin(x):
    return x if isinstance(x, Lin) else None


def _scalar(op, args):
    (x,) = args
    fn, c = ir.StringAttr(op.attributes["fn"]).value, ir.FloatAttr(op.attributes["value"]).value
    if not isinstance(x, Lin) or not c.is_integer() or fn not in ("add", "sub"):
        return None
    return Lin(x.a, sy.canon(x.b + sy.const(int(c) if fn == "add" else -int(c))))


def _compare(op, args):
    """x <fn> y with x - y = a * x + b, a = +-1: one bound on x (integers: x > c is x >= c + 1)."""
    x, y = (_lin(a) for a in args)
    fn = ir.StringAttr(op.attributes["fn"]).value
    if not x or not y or x.a - y.a not in (1, -1) or fn not in ("gt", "ge", "lt", "le"):
        return None
    a, b = x.a - y.a, sy.canon(x.b - y.b)
    if fn in ("lt", "le"):  # -(x - y) >= 0 (le) or >= 1 (lt)
        a, b = -a, sy.canon(b * -1)
    strict = fn in ("gt", "lt")
    # a * x + b >= strict  <=>  x >= strict - b (a = 1)  or  x <= b - strict (a = -1)
    return Band(sy.canon(sy.const(int(strict)) - b), None) if a == 1 else Band(None, sy.canon(b - int(strict)))


def _one(x) -> bool:
    return isinstance(x, Lin) and x.a == 0 and sy.as_int(x.b) == 1


def _mul(op, args):
    x, y = args
    if _one(x) or _one(y):
        other = y if _one(x) else x
        return other if isinstance(other, Band) else None
    if isinstance(x, Band) and isinstance(y, Band):
        if (x.lo is None or y.lo is None) and (x.hi is None or y.hi is None):
            return Band(x.lo if y.lo is None else y.lo, x.hi if y.hi is None else y.hi)
    return None


def _where(op, args):
    cond, keep, drop = args
    if isinstance(keep, Lin) and keep.a == 0 and sy.as_int(keep.b) == 0:
        keep = 0.0
    if isinstance(cond, Band) and keep == 0.0 and isinstance(drop, float) and (math.isinf(drop) or drop <= _NEG):
        return Mask(cond.lo, cond.hi) if drop < 0 else None
    return None


_RULES = {
    "novella.slice": _slice,
    "novella.reduce": _reduce,
    "novella.add": _add,
    "novella.scalar": _scalar,
    "novella.compare": _compare,
    "novella.mul": _mul,
    "novella.where": _where,
}
