"""RMSNorm from its parts (--novella-fuse-elementwise, after the pointwise chains are merged): a row mean of
`x * x` whose only reader is a pointwise tail computing `x * rsqrt(mean + eps) * w` becomes one
`novella.rms_norm`, so the row is loaded once and squared, reduced and scaled on the tile in SRAM (the
square, the mean and the tail each went through DRAM before, three or four kernels' latencies).

What the tail computes is read from its body, not from its op order: the body (after the rsqrt of the mean,
if it is its own op, is inlined) is evaluated at a few points (`evaluate`, float64) against the formula,
with eps read from its value at x = w = 1, mean = 0. The square is recognized the same way. Anything else
(an offset weight `1 + w`, a centred variance, a missing weight) is left to the pointwise kernels.
"""

from __future__ import annotations

import math

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.novella import ReshapeOp, RmsNormOp
from ..machine.target import MAX_COLS
from . import generic_fusion as gf
from .normalization import RmsNorm

_BINARY = {"arith.addf": lambda a, b: a + b, "arith.subf": lambda a, b: a - b, "arith.mulf": lambda a, b: a * b,
           "arith.divf": lambda a, b: a / b, "arith.maximumf": max, "arith.minimumf": min,
           "math.powf": lambda a, b: a**b}  # fmt: skip
_UNARY = {"arith.negf": lambda a: -a, "math.rsqrt": lambda a: 1 / math.sqrt(a), "math.sqrt": math.sqrt,
          "math.exp": math.exp}  # fmt: skip
_POINTS = ((0.7, 0.3, 1.3), (-2.0, 5.0, -0.5), (1.5, 1e-3, 2.0), (3.0, 40.0, 0.25))


def evaluate(block, args: list) -> float | None:
    """The value a generic body yields at the scalar `args` (float64), or None when it holds an op this
    evaluator does not know or fails (a square root of a negative number)."""
    env = dict(zip(block.arguments, args))

    def get(v):
        if v in env:
            return env[v]
        owner = v.owner
        if isinstance(owner, ir.OpView) and owner.operation.name == "arith.constant":
            return float(ir.FloatAttr(owner.attributes["value"]).value)
        raise KeyError

    try:
        for o in block.operations:
            name = o.operation.name
            if name == "novella.yield":
                return float(get(o.operands[0]))
            if name == "arith.constant":
                env[o.results[0]] = float(ir.FloatAttr(o.attributes["value"]).value)
            elif name in _BINARY:
                env[o.results[0]] = _BINARY[name](get(o.operands[0]), get(o.operands[1]))
            elif name in _UNARY:
                env[o.results[0]] = _UNARY[name](get(o.operands[0]))
            else:
                return None
    except (KeyError, ValueError, ZeroDivisionError, OverflowError, TypeError):
        return None
    return None


def _map(attr):
    return ir.AffineMapAttr(attr).value


def _identity(m) -> bool:
    return m == ir.AffineMap.get_identity(m.n_dims)


def _dims(m) -> list:
    """Per result of map `m`: its dim's position, or None for a constant 0."""
    out = []
    for e in m.results:
        if isinstance(e, ir.AffineDimExpr):
            out.append(ir.AffineDimExpr(e).position)
        elif isinstance(e, ir.AffineConstantExpr) and ir.AffineConstantExpr(e).value == 0:
            out.append(None)
        else:
            out.append(-1)
    return out


def _row(v) -> bool:
    """Whether `v` is one row, [1, .., 1, C]."""
    return all(e == 1 for e in ir.RankedTensorType(v.type).shape[:-1])


def _only_use(v):
    uses = [u.owner for u in v.uses]
    return uses[0] if len(uses) == 1 else None


def _squared(op, made: list):
    """The x that pointwise `op` squares (its only input, read at the identity), or None."""
    if not gf.pointwise(op):
        return None
    g = gf.as_generic(op, made)
    maps = [_map(m) for m in ir.ArrayAttr(g.attributes["indexing_maps"])]
    xs = set(g.operands)
    if len(xs) != 1 or not all(_identity(m) for m in maps):
        return None
    body = g.regions[0].blocks[0]
    for a in (3.0, -1.5):
        y = evaluate(body, [a] * len(maps))
        if y is None or y != a * a:
            return None
    return g.operands[0]


def _tail(tail, x, mean, made: list):
    """(the generic computing `tail`, its reads classed 'x' / 'm' / 'w' in operand order, the weight
    value) when it reads x at the identity, the mean broadcast over the columns and one weight row
    broadcast over the rows; else None."""
    g = gf.as_generic(tail, made)
    n = ir.RankedTensorType(g.results[0].type).rank
    roles, weight = [], None
    for v, m in zip(g.operands, [_map(a) for a in ir.ArrayAttr(g.attributes["indexing_maps"])]):
        d = _dims(m)
        if v == x and _identity(m):
            roles.append("x")
        elif v == mean and d[-1] is None:
            roles.append("m")
        elif d[-1] == n - 1 and _row(v) and (weight is None or v == weight):
            roles.append("w")
            weight = v
        else:
            return None
    if sorted(set(roles)) != ["m", "w", "x"]:
        return None
    return g, roles, weight


def _eps(body, roles: list) -> float | None:
    """eps when `body` computes x * rsqrt(m + eps) * w at every test point, else None."""

    def at(x, m, w):
        return evaluate(body, [{"x": x, "m": m, "w": w}[r] for r in roles])

    y0 = at(1.0, 0.0, 1.0)
    if y0 is None or not (y0 > 0 and math.isfinite(y0)):
        return None
    eps = 1.0 / (y0 * y0)
    for x, m, w in _POINTS:
        y, ref = at(x, m, w), x * w / math.sqrt(m + eps)
        if y is None or abs(y - ref) > 1e-6 * abs(ref):
            return None
    return eps


def form(reduce_op, target):
    """Replaces the RMSNorm whose mean is `reduce_op` by one `novella.rms_norm`; the new op, or None (the
    IR unchanged) when the pattern does not hold or its kernel cannot take the rows (a row wider than a
    LOAD or than the scratchpad holds: the pointwise kernels tile columns)."""
    if ir.StringAttr(reduce_op.attributes["fn"]).value != "mean":
        return None
    made: list = []
    square, mean = reduce_op.operands[0].owner, reduce_op.results[0]
    if not isinstance(square, ir.OpView):
        return None
    use = _only_use(square.results[0])
    if use is None or use != reduce_op.operation:  # the square is read by more than the mean
        return None
    x = _squared(square, made)
    user = _only_use(mean)
    if x is None or user is None or not gf.pointwise(user.opview):
        gf.erase(made)
        return None
    user, inner = user.opview, None
    if len(set(user.operands)) == 1 and _only_use(user.results[0]) is not None:  # rsqrt(mean + eps) on its own
        inner, user = user, _only_use(user.results[0]).opview
        if not gf.pointwise(user):
            gf.erase(made)
            return None
        fused = gf.fuse(gf.as_generic(user, made), gf.as_generic(inner, made), inner.results[0], made)
        found = _tail(fused, x, mean, made) if fused is not None else None
    else:
        found = _tail(user, x, mean, made)
    eps = _eps(found[0].regions[0].blocks[0], found[1]) if found else None
    c = sy.as_int(sy.shape_of(ir.RankedTensorType(x.type))[-1])
    wide = c is None or c > MAX_COLS or not RmsNorm()._plan(target, (1, 0), c).fits()
    if eps is None or wide or x.type != user.results[0].type:
        gf.erase(made)
        return None
    return _replace(user, [o for o in (inner, reduce_op, square) if o is not None], x, found[2], c, eps, made)


def _replace(tail, parts: list, x, weight, c: int, eps: float, made: list):
    while _is_view(weight.owner):  # the [1, .., C] views of w
        weight = weight.owner.operands[0]
    gf.erase(made)
    views = [v for v in [weight] if ir.RankedTensorType(v.type).shape == [c]]
    with ir.InsertionPoint(tail), tail.location:
        wt = ir.RankedTensorType.get([c], ir.F32Type.get())
        w = views[0] if views else ReshapeOp(input=weight, result=wt).result
        norm = RmsNormOp(x, w, ir.FloatAttr.get(ir.F32Type.get(), eps), result=tail.results[0].type)
    tail.results[0].replace_all_uses_with(norm.result)
    old = [v.owner for o in (tail, *parts) for v in o.operands]
    for o in (tail, *parts):
        o.operation.erase()
    for o in old:
        if _is_view(o) and not list(o.results[0].uses):
            o.operation.erase()
    return norm


def _is_view(op) -> bool:
    return isinstance(op, ir.OpView) and op.operation.name == "novella.reshape"
