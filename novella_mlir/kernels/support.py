"""Helpers shared by the kernels: the sizes tiles are planned for, constant-folded products and ceil
divisions of extents, the partial last tile, and the tile-size candidates of a dim."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from . import NOMINAL_LENGTH, tile_rows


def upper(e: ir.AffineExpr, symbols) -> int:
    """The size used to plan tiles: the value of a static dim, else its value at
    every symbol = NOMINAL_LENGTH.

    Deliberately not the symbols' upper bounds: tiling (and so the artifact)
    must not change with max_len, and a static compile (bounds [T, T]) must
    give the same instructions as the JIT at T."""
    return sy.evaluate(e, [NOMINAL_LENGTH] * max(len(symbols), 1))


def mul(*factors: ir.AffineExpr) -> ir.AffineExpr:
    """Product with the constants folded in Python (the bindings mistype a folded const * const)."""
    c, out = 1, None
    for f in factors:
        v = sy.as_int(f)
        if v is not None:
            c *= v
        else:
            out = f if out is None else out * f
    if out is None:
        return sy.const(c)
    return out if c == 1 else out * c


def ceildiv(e: ir.AffineExpr, t: int) -> ir.AffineExpr:
    v = sy.as_int(e)
    return sy.const(-(-v // t)) if v is not None else sy.ceildiv(e, t)


def extent(dim: int, t: int, total: ir.AffineExpr):
    """Size of tile `d<dim>` of `t` along `total`: `t` if every tile is full, else min(t, total - d*t)."""
    v = sy.as_int(total)
    if v is not None and (v % t == 0 or v < t):
        return min(v, t)
    return tile_rows(dim, t, total)


def producer(v: ir.Value, name: str):
    """The op named `name` that defines `v`, or None (a block argument, or another op)."""
    owner = v.owner
    return owner if isinstance(owner, ir.OpView) and owner.operation.name == name else None


def replace_fused(new, old) -> None:
    """`new`, a fusion's op, takes `old`'s `novella.*` annotations and its uses; `old` is erased."""
    for a in old.attributes:
        name = a.name if hasattr(a, "name") else a
        if name.startswith("novella."):
            new.operation.attributes[name] = old.attributes[name]
    old.results[0].replace_all_uses_with(new.result)
    old.operation.erase()


def _flag(op, name: str) -> bool:
    return name in op.attributes and bool(ir.IntegerAttr(op.attributes[name]).value)


def _candidates(extent: ir.AffineExpr, symbols, sizes) -> list[int]:
    """Tile sizes for a dim: the whole dim if static and small enough, then `sizes` below its maximum."""
    hi = upper(extent, symbols)
    out = [s for s in sizes if s < hi]
    if hi <= sizes[0] and (sy.as_int(extent) is not None or not out):
        out.insert(0, hi)
    return out or [min(hi, sizes[-1])]


def _pieces(total: int, t: int) -> list[tuple[int, int]]:
    """(tile size, how many) of the full tiles of `t` along `total` and the partial last one."""
    full, rem = divmod(total, t)
    return [(t, full)] * (full > 0) + [(rem, 1)] * (rem > 0)
