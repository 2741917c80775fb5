"""Symbolic sizes as MLIR affine expressions.

A dynamic size is an `AffineExpr` over symbols `s0, s1, ...` (the model's dynamic input dims); tile-level
addresses add dims `d0, d1, ...` (the tile grid indices). The compiler keeps them as MLIR attributes so they
print, parse and simplify like any MLIR IR; the artifact stores them as small postfix programs (see
`novella_mlir.symbolic.postfix` and `novella_mlir.runtime.expr`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from ..artifact.limits import MAX_STEPS as GRID_LIMIT
from .periodic import periodic_zero  # every grid index, and a difference of two, is below it

DYN = ir.ShapedType.get_dynamic_size() if hasattr(ir, "ShapedType") else -(2**63)


@dataclass(frozen=True)
class Symbol:
    """One dynamic input dim: affine symbol `s<position>` named `name` in [lo, hi]."""

    position: int
    name: str
    lo: int
    hi: int


def const(v: int) -> ir.AffineExpr:
    return ir.AffineConstantExpr.get(int(v))


def sym(i: int) -> ir.AffineExpr:
    return ir.AffineSymbolExpr.get(i)


def dim(i: int) -> ir.AffineExpr:
    return ir.AffineDimExpr.get(i)


def ceildiv(a: ir.AffineExpr, b: int) -> ir.AffineExpr:
    return ir.AffineExpr.get_ceil_div(a, const(b))


def floordiv(a: ir.AffineExpr, b: int) -> ir.AffineExpr:
    return ir.AffineExpr.get_floor_div(a, const(b))


def mod(a: ir.AffineExpr, b: int) -> ir.AffineExpr:
    return ir.AffineExpr.get_mod(a, const(b))


def step(e: ir.AffineExpr) -> ir.AffineExpr:
    """[e >= 1] as an affine expression, for e in (-GRID_LIMIT, GRID_LIMIT] (grid indices and their
    differences): ceildiv(e, GRID_LIMIT)."""
    return ceildiv(e, GRID_LIMIT)


def gate(e: ir.AffineExpr) -> ir.AffineExpr:
    """A result of a min map that is 0 where e = 0 and never binds (>= GRID_LIMIT, above every row
    count) where e >= 1, for e >= 0 on the grid."""
    return e * GRID_LIMIT


def canon(e: ir.AffineExpr) -> ir.AffineExpr:
    """`e` as its real subclass: the bindings type `c1 * c2` as a product even when MLIR folded it."""
    return e.maybe_downcast()


def as_int(e: ir.AffineExpr) -> int | None:
    """The value of a constant expression, else None."""
    e = canon(e)
    return e.value if isinstance(e, ir.AffineConstantExpr) else None


def make_map(exprs, n_syms: int, n_dims: int = 0) -> ir.AffineMapAttr:
    exprs = [const(e) if isinstance(e, int) else e for e in exprs]
    return ir.AffineMapAttr.get(ir.AffineMap.get(n_dims, n_syms, exprs))


def map_results(attr) -> list[ir.AffineExpr]:
    return list(ir.AffineMapAttr(attr).value.results)


# ---------------------------------------------------------------- module symbols


def read_symbols(module_op) -> list[Symbol]:
    """The `novella.symbols` module attribute, in symbol-position order.

    Written as `{s0 = ["T", 1, 2048]}` (name, min, max); `{s0 = array<i64: 1, 2048>}`
    is accepted too and names the symbol after its position."""
    attrs = module_op.attributes
    if "novella.symbols" not in attrs:
        return []
    d = ir.DictAttr(attrs["novella.symbols"])
    out = []
    for i in range(len(d)):
        na = d[i]
        if isinstance(na.attr, ir.DenseI64ArrayAttr):
            name, (lo, hi) = na.name, list(na.attr)
        else:
            items = list(ir.ArrayAttr(na.attr))
            name = ir.StringAttr(items[0]).value
            lo, hi = (ir.IntegerAttr(a).value for a in items[1:3])
        out.append(Symbol(int(na.name[1:]), name, lo, hi))
    return sorted(out, key=lambda s: s.position)


def write_symbols(module_op, symbols: list[Symbol]) -> None:
    i64 = ir.IntegerType.get_signless(64)
    module_op.attributes["novella.symbols"] = ir.DictAttr.get(
        {
            f"s{s.position}": ir.ArrayAttr.get(
                [ir.StringAttr.get(s.name), ir.IntegerAttr.get(i64, s.lo), ir.IntegerAttr.get(i64, s.hi)]
            )
            for s in symbols
        }
    )


# ---------------------------------------------------------------- tensor shapes


def shape_of(t: ir.RankedTensorType) -> list[ir.AffineExpr] | None:
    """Per-dim size expressions of a tensor type, or None if a `?` has none."""
    if t.encoding is not None and isinstance(t.encoding, ir.AffineMapAttr):
        return map_results(t.encoding)
    if any(t.is_dynamic_dim(i) for i in range(t.rank)):
        return None
    return [const(t.get_dim_size(i)) for i in range(t.rank)]


def tensor_type(exprs: list[ir.AffineExpr], element_type, n_syms: int) -> ir.RankedTensorType:
    """A ranked tensor type whose `?` dims carry `exprs` as encoding."""
    dims = [as_int(e) if as_int(e) is not None else DYN for e in exprs]
    if all(d != DYN for d in dims):
        return ir.RankedTensorType.get(dims, element_type)
    return ir.RankedTensorType.get(dims, element_type, make_map(exprs, n_syms))


def numel(exprs: list[ir.AffineExpr]) -> ir.AffineExpr:
    out = const(1)
    for e in exprs:
        out = out * e
    return out


# ---------------------------------------------------------------- evaluation


def evaluate(e: ir.AffineExpr, syms, dims=()) -> int:
    """Evaluates `e` at integer symbol (and dim) values."""
    e = canon(e)
    if isinstance(e, ir.AffineConstantExpr):
        return e.value
    if isinstance(e, ir.AffineSymbolExpr):
        return _value(syms[e.position])
    if isinstance(e, ir.AffineDimExpr):
        return _value(dims[e.position])
    a, b = evaluate(e.lhs, syms, dims), evaluate(e.rhs, syms, dims)
    if isinstance(e, ir.AffineAddExpr):
        return a + b
    if isinstance(e, ir.AffineMulExpr):
        return a * b
    if isinstance(e, ir.AffineFloorDivExpr):
        return a // b
    if isinstance(e, ir.AffineCeilDivExpr):
        return -(-a // b)
    if isinstance(e, ir.AffineModExpr):
        return a % b
    raise TypeError(f"unsupported affine expression {e}")


def _value(v):
    """An int, or an integer array evaluated elementwise (`fixed_value`)."""
    return v if isinstance(v, np.ndarray) else int(v)


def affine_in_symbols(e: ir.AffineExpr) -> bool:
    """`e` is a(d) + sum_k b_k(d) * s_k: affine in the symbols once the dims are fixed (no symbol
    inside a floordiv, ceildiv or mod, no product of two symbol terms)."""
    return _symbol_degree(e) <= 1


def dim_coefficients(e: ir.AffineExpr, n_dims: int) -> tuple[int, tuple[int, ...]] | None:
    """(c, (a_0, .., a_{n_dims - 1})) with e = c + sum_i a_i * d_i, when `e` is linear in dims below n_dims
    (no symbol, no floordiv, ceildiv or mod); else None. Read from the expression's structure."""
    e = canon(e)
    if isinstance(e, ir.AffineConstantExpr):
        return e.value, (0,) * n_dims
    if isinstance(e, ir.AffineDimExpr):
        return (0, tuple(int(i == e.position) for i in range(n_dims))) if e.position < n_dims else None
    if not isinstance(e, (ir.AffineAddExpr, ir.AffineMulExpr)):
        return None
    a, b = dim_coefficients(e.lhs, n_dims), dim_coefficients(e.rhs, n_dims)
    if a is None or b is None:
        return None
    if isinstance(e, ir.AffineAddExpr):
        return a[0] + b[0], tuple(x + y for x, y in zip(a[1], b[1]))
    if any(b[1]):
        a, b = b, a
    if any(b[1]):
        return None
    return a[0] * b[0], tuple(x * b[0] for x in a[1])


def _symbol_degree(e) -> int:
    """0: no symbol, 1: affine in the symbols (dims fixed), 2: neither."""
    e = canon(e)
    if isinstance(e, ir.AffineSymbolExpr):
        return 1
    if isinstance(e, (ir.AffineConstantExpr, ir.AffineDimExpr)):
        return 0
    a, b = _symbol_degree(e.lhs), _symbol_degree(e.rhs)
    if isinstance(e, ir.AffineAddExpr):
        return max(a, b)
    if isinstance(e, ir.AffineMulExpr):
        return a + b if min(a, b) == 0 else 2
    return 0 if a == b == 0 else 2


# ---------------------------------------------------------------- sympy (torch.export)


def from_sympy(expr, positions: dict) -> ir.AffineExpr:
    """Converts a torch.export sympy size expression to an affine expression.

    `positions` maps sympy symbols to affine symbol positions. Handles the forms torch emits for conv/pool
    output sizes: Add, Mul, Integer, FloorDiv and CeilDiv."""
    import sympy

    if isinstance(expr, int) or getattr(expr, "is_Integer", False):
        return const(int(expr))
    if isinstance(expr, sympy.Symbol):
        return sym(positions[expr])
    name = type(expr).__name__
    args = [from_sympy(a, positions) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return _fold(args, lambda a, b: a + b)
    if isinstance(expr, sympy.Mul):
        return _fold(args, lambda a, b: a * b)
    if name == "FloorDiv":
        return ir.AffineExpr.get_floor_div(args[0], args[1])
    if name in ("CeilDiv", "CeilToInt") and len(args) == 2:
        return ir.AffineExpr.get_ceil_div(args[0], args[1])
    if name in ("Mod", "PythonMod"):
        return ir.AffineExpr.get_mod(args[0], args[1])
    raise NotImplementedError(f"symbolic size '{expr}' ({name}) is not an affine expression")


def _fold(args, fn):
    out = args[0]
    for a in args[1:]:
        out = fn(out, a)
    return out


def integer_set_constraints(attr) -> list[tuple[str, ir.AffineExpr]]:
    """[("eq"|"ge", expr), ...] of an `affine_set` attribute (expr == 0 / expr >= 0).

    The Python bindings expose no accessor on IntegerSetAttr, so the printed
    set is split into its constraints and each is re-parsed by MLIR."""
    text = str(attr)
    head, body = text[len("affine_set<") : -1].split(" : ", 1)
    out = []
    for c in _split_top(body.strip()[1:-1]):
        kind = "eq" if "==" in c else "ge"
        lhs = c.split("==" if kind == "eq" else ">=")[0].strip()
        m = ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{head} -> ({lhs})>"))
        out.append((kind, m.value.results[0]))
    return out


def _split_top(s: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in s:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return parts + [cur] if cur.strip() else parts


# ---------------------------------------------------------------- reasoning: equality and "provably >="
#
# Expressions are compared as sympy expressions of integer symbols (floordiv, ceildiv and mod as sympy's
# floor / ceiling / Mod), never by their printed text. A comparison is a proof over every value of the
# symbols in a box (each symbol >= its lower bound, optionally <= its upper bound): floor/ceil/mod terms
# are replaced by the linear under- or over-estimate on the side the proof needs, then the polynomial
# is shifted to the box corner and proved non-negative coefficient by coefficient. Sound, not complete:
# False means "not proved".


def to_sympy(e: ir.AffineExpr):
    """`e` as a sympy expression over integer symbols `s<i>` (and dims `d<i>`)."""
    import sympy

    e = canon(e)
    if isinstance(e, ir.AffineConstantExpr):
        return sympy.Integer(e.value)
    if isinstance(e, ir.AffineSymbolExpr):
        return sympy.Symbol(f"s{e.position}", integer=True)
    if isinstance(e, ir.AffineDimExpr):
        return sympy.Symbol(f"d{e.position}", integer=True)
    a, b = to_sympy(e.lhs), to_sympy(e.rhs)
    if isinstance(e, ir.AffineAddExpr):
        return a + b
    if isinstance(e, ir.AffineMulExpr):
        return a * b
    if isinstance(e, ir.AffineFloorDivExpr):
        return _floor_div(a, b)
    if isinstance(e, ir.AffineCeilDivExpr):
        return sympy.ceiling(a / b)
    if isinstance(e, ir.AffineModExpr):
        return sympy.Mod(a, b)
    raise TypeError(f"unsupported affine expression {e}")


def fold(e: ir.AffineExpr) -> ir.AffineExpr:
    """`e` as a constant when its terms cancel (`s0 + (-s0 + 256)`, which MLIR keeps), else `e`."""
    v = _as_sympy(e).expand() if as_int(e) is None else None
    return const(int(v)) if v is not None and v.is_Integer else canon(e)


def _floor_div(a, b):
    """floor(a / b), nested floordivs by constants as one (floor((floor(c/d) + r)/b) = floor((c + r d)/(b d)) for
    integers c, r, d, b > 0): strided convs give `(s0 floordiv 5 - 1) floordiv 2` where torch has one floordiv."""
    import sympy

    terms = sympy.Add.make_args(a)
    floors = [t for t in terms if isinstance(t, sympy.floor)]
    if b.is_Integer and b > 0 and len(floors) == 1:
        num, den = sympy.fraction(sympy.together(floors[0].args[0]))
        rest = sympy.Add(*[t for t in terms if t is not floors[0]])
        if den.is_Integer and den > 0 and num.is_integer and rest.is_integer:
            return sympy.floor((num + rest * den) / (b * den))
    return sympy.floor(a / b)


def _as_sympy(e):
    import sympy

    if isinstance(e, int):
        return sympy.Integer(e)
    if isinstance(e, ir.AffineExpr):
        return to_sympy(e)
    return sympy.sympify(e)


def _estimate(x, side: str):
    """A floor/ceiling/Mod-free sympy expression <= x (side "lo") or >= x (side "hi"), or None."""
    import sympy

    flip = {"lo": "hi", "hi": "lo"}
    if x.is_Number or x.is_Symbol:
        return x
    if isinstance(x, sympy.Add):
        parts = [_estimate(a, side) for a in x.args]
        return None if any(p is None for p in parts) else sympy.Add(*parts)
    if isinstance(x, sympy.Mul):
        const, rest = x.as_coeff_Mul()
        if const != 1:
            inner = _estimate(rest, side if const > 0 else flip[side])
            return None if inner is None else const * inner
        return x if not x.has(sympy.floor, sympy.ceiling, sympy.Mod) else None
    if isinstance(x, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.together(x.args[0]))
        if not den.is_Integer or den <= 0:
            return None
        inner = _estimate(num, side)
        if inner is None:
            return None
        slack = (den - 1) if (side == "lo") == isinstance(x, sympy.floor) else 0
        return (inner - slack) / den if side == "lo" else (inner + slack) / den
    if isinstance(x, sympy.Mod) and x.args[1].is_Integer and x.args[1] > 0:
        return sympy.Integer(0) if side == "lo" else x.args[1] - 1
    if isinstance(x, sympy.Pow) and x.exp.is_Integer and x.exp > 0 and not x.has(sympy.floor, sympy.ceiling):
        return x
    return None


def _nonneg_on_box(poly_expr, box: dict, strict: bool = False) -> bool:
    """True when the polynomial is >= 0 (> 0 if `strict`) wherever each symbol s lies in box[s] = (lo, hi or None)."""
    import sympy

    expr = sympy.expand(poly_expr)
    if expr.is_Number:
        return bool(expr > 0 if strict else expr >= 0)
    free = sorted(expr.free_symbols, key=str)
    if any(s not in box for s in free):
        return False
    shifted = {}
    for s in free:
        lo, hi = box[s]
        t = sympy.Symbol(f"_t_{s}", nonnegative=True)
        shifted[s] = (lo + t) if lo is not None else ((hi - t) if hi is not None else None)
        if shifted[s] is None:
            return False
    p = sympy.Poly(sympy.expand(expr.subs(shifted)), *[sympy.Symbol(f"_t_{s}", nonnegative=True) for s in free])
    coeffs = p.as_dict()
    const = coeffs.get((0,) * len(free), 0)
    if all(c >= 0 for c in coeffs.values()) and (const > 0 or not strict):
        return True
    return _linear_box_check(expr, free, box, strict)


def _linear_box_check(expr, free, box, strict: bool) -> bool:
    """Exact check for an expression linear in every symbol with both bounds: its minimum is at a corner."""
    import itertools as it

    import sympy

    if any(box[s][0] is None or box[s][1] is None for s in free):
        return False
    if any(sympy.degree(expr, s) > 1 for s in free):
        return False
    values = [expr.subs(dict(zip(free, c))) for c in it.product(*[box[s] for s in free])]
    return all(v > 0 if strict else v >= 0 for v in values)


def symbol_box(symbols: list[Symbol] | None = None, *, lower_only: bool = False, lo: int | None = None) -> dict:
    """sympy symbol -> (lo, hi) for `symbols` (hi None when `lower_only`; `lo` overrides every lower bound)."""
    import sympy

    out = {}
    for s in symbols or []:
        key = sympy.Symbol(f"s{s.position}", integer=True)
        out[key] = (s.lo if lo is None else lo, None if lower_only else s.hi)
    return out


def provably_ge(a, b, box: dict) -> bool:
    """a >= b for every value of the symbols in `box` (see `symbol_box`); a, b affine, int or sympy."""
    import sympy

    # expand, not simplify: identical floor/ceil terms cancel, and simplify costs seconds on the long
    # sums of DRAM offsets; a difference it cannot bound is "not proved" (no reuse), never a wrong yes
    return _ge_zero(sympy.expand(_as_sympy(a) - _as_sympy(b)), box)


def _ge_zero(diff, box: dict) -> bool:
    return _ge_zero_on(diff, frozenset(box.items()))


@functools.lru_cache(maxsize=8192)
def _ge_zero_on(diff, box_items: frozenset) -> bool:
    """`_ge_zero`, remembered: a model's repeated layers ask the same questions."""
    box = dict(box_items)
    if diff.is_Number:
        return bool(diff >= 0)
    est = _estimate(diff, "lo")
    if est is None:
        return False
    # the difference is an integer, so est > -1 everywhere proves it >= 0
    return _nonneg_on_box(est, box) or _nonneg_on_box(est + 1, box, strict=True)


def forget() -> None:
    """Drops the remembered proofs (`compile_torch` starts each compile without them)."""
    _ge_zero_on.cache_clear()
    _equal_sympy.cache_clear()


def equal(a, b) -> bool:
    """a == b as expressions of the symbols (for every value, not at sampled points)."""
    if isinstance(a, ir.AffineExpr) and isinstance(b, ir.AffineExpr) and canon(a) == canon(b):
        return True
    return _equal_sympy(_as_sympy(a), _as_sympy(b))


@functools.lru_cache(maxsize=8192)
def _equal_sympy(sa, sb) -> bool:
    import sympy

    diff = sympy.expand(sa - sb)
    if diff.is_Number:
        return diff == 0
    if diff.has(sympy.floor, sympy.ceiling, sympy.Mod):
        if _differs_somewhere(diff):
            return False
        if sympy.simplify(diff) == 0 or periodic_zero(diff):
            return True
    box = {s: (1, None) for s in (sa - sb).free_symbols}
    return provably_ge(sa, sb, box) and provably_ge(sb, sa, box)


def _differs_somewhere(diff) -> bool:
    """A counterexample with every symbol >= 1 (the domain `equal` proves over): a disproof, never a proof,
    so the slow `simplify` only runs on differences that may be zero."""
    syms = sorted(diff.free_symbols, key=str)
    for k, v in enumerate((1, 2, 3, 5, 8, 13, 64, 101)):
        at = {x: v + (k * i) % 7 for i, x in enumerate(syms)}
        if diff.subs(at) != 0:
            return True
    return False


def equal_shapes(a, b) -> bool:
    return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b))


def find_equal(items, e) -> int | None:
    """Index of the first item equal to `e`, else None."""
    return next((i for i, x in enumerate(items) if equal(x, e)), None)


def plain_sympy(x):
    """A torch.export size expression with torch's FloorDiv / CeilDiv / Mod functions as sympy's own."""
    import sympy

    def rebuild(e):
        if not e.args or e.is_Number or e.is_Symbol:
            return e
        args = [rebuild(a) for a in e.args]
        name = type(e).__name__
        if name in ("FloorDiv", "IntTrueDiv") and len(args) == 2:
            return sympy.floor(args[0] / args[1])
        if name in ("CeilDiv", "CeilToInt") and len(args) == 2:
            return sympy.ceiling(args[0] / args[1])
        if name in ("Mod", "PythonMod") and len(args) == 2:
            return sympy.Mod(args[0], args[1])
        if name == "CleanDiv":
            return args[0] / args[1]
        return e.func(*args)

    return rebuild(sympy.sympify(x))


def provably_holds(cond, box: dict) -> bool:
    """A torch.export condition (Eq/Ne/Le/Lt/Ge/Gt, And/Or, Min/Max sides) proved over `box`."""
    import sympy

    cond = plain_sympy(cond)
    if cond in (sympy.true, True):
        return True
    if isinstance(cond, sympy.And):
        return all(provably_holds(c, box) for c in cond.args)
    if isinstance(cond, sympy.Or):
        return any(provably_holds(c, box) for c in cond.args)
    if not isinstance(cond, sympy.core.relational.Relational):
        return False
    a, b = cond.lhs, cond.rhs
    kinds = {sympy.Ge: [(a, b, 0)], sympy.Gt: [(a, b, 1)], sympy.Le: [(b, a, 0)], sympy.Lt: [(b, a, 1)]}
    if isinstance(cond, sympy.Eq):
        return equal(a, b)
    if isinstance(cond, sympy.Ne):
        return _ge_minmax(a, b + 1, box) or _ge_minmax(b, a + 1, box)
    for cls, pairs in kinds.items():
        if isinstance(cond, cls):
            return all(_ge_minmax(x, y + k, box) for x, y, k in pairs)
    return False


def _ge_minmax(a, b, box) -> bool:
    """a >= b with Min/Max on either side split into the cases that prove it."""
    import sympy

    if isinstance(a, sympy.Min):
        return all(_ge_minmax(x, b, box) for x in a.args)
    if isinstance(a, sympy.Max):
        return any(_ge_minmax(x, b, box) for x in a.args)
    if isinstance(b, sympy.Max):
        return all(_ge_minmax(a, y, box) for y in b.args)
    if isinstance(b, sympy.Min):
        return any(_ge_minmax(a, y, box) for y in b.args)
    return provably_ge(a, b, box)
