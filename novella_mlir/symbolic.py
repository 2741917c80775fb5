"""Symbolic sizes as MLIR affine expressions.

A dynamic size is an `AffineExpr` over symbols `s0, s1, ...` (the model's
dynamic input dims); tile-level addresses add dims `d0, d1, ...` (the tile
grid indices). The compiler keeps them as MLIR attributes so they print,
parse and simplify like any MLIR IR; the artifact stores them as small
postfix programs (see `to_postfix` and `novella_mlir.runtime.expr`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from torch_mlir import ir

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
        return int(syms[e.position])
    if isinstance(e, ir.AffineDimExpr):
        return int(dims[e.position])
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


def value_range(e: ir.AffineExpr, symbols: list[Symbol]) -> tuple[int, int]:
    """(min, max) of a size expression over the symbols' bounds.

    Size expressions are monotone in each symbol, so the extremes are at the
    corners of the bounds box."""
    if not symbols:
        v = evaluate(e, [])
        return v, v
    vals = [evaluate(e, c) for c in itertools.product(*[(s.lo, s.hi) for s in symbols])]
    return min(vals), max(vals)


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


# ---------------------------------------------------------------- sympy (torch.export)


def from_sympy(expr, positions: dict) -> ir.AffineExpr:
    """Converts a torch.export sympy size expression to an affine expression.

    `positions` maps sympy symbols to affine symbol positions. Handles the
    forms torch emits for conv/pool output sizes: Add, Mul, Integer,
    FloorDiv and CeilDiv."""
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
