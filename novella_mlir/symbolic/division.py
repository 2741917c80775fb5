"""Exact division of products of symbolic sizes: the -1 of a view, `prod(shape) / prod(sizes)`.

Each floordiv, ceildiv or mod term is one opaque atom (the same term is the same atom), so the quotient
is a polynomial division sympy does exactly: `s0 * 16 * 128 / s0` is 2048, `(s0 ceildiv 64) * 64 * 8 /
(s0 ceildiv 64)` is 512. A quotient that is not a polynomial in the symbols and atoms is not claimed.
"""

from __future__ import annotations

from torch_mlir import ir

from . import as_int, canon, const, sym

_OPAQUE = (ir.AffineFloorDivExpr, ir.AffineCeilDivExpr, ir.AffineModExpr)


def quotient(num: list, den: list) -> ir.AffineExpr | None:
    """prod(num) / prod(den) as an affine expression when it is a polynomial with integer coefficients in
    the symbols and the floordiv/ceildiv/mod terms, else None."""
    import sympy

    atoms: dict = {}
    n = sympy.Mul(*[_atomized(e, atoms) for e in num])
    d = sympy.Mul(*[_atomized(e, atoms) for e in den])
    if d == 0:
        return None
    q = sympy.cancel(n / d)
    top, bottom = sympy.fraction(q)
    if bottom != 1:
        return None
    poly = sympy.Poly(sympy.expand(top), *sorted(atoms, key=str)) if atoms else None
    if poly is None:
        return const(int(top)) if top.is_Integer else None
    if any(not c.is_Integer for c in poly.coeffs()):
        return None
    out = const(0)
    gens = [atoms[g] for g in poly.gens]
    for powers, c in poly.terms():
        term = const(int(c))
        for g, k in zip(gens, powers):
            for _ in range(k):
                term = term * g
        out = out + term
    return canon(out)


def _atomized(e, atoms: dict):
    """`e` (an int or affine expression) in sympy, each symbol and each floordiv/ceildiv/mod term a symbol of
    `atoms` (sympy symbol -> its affine expression)."""
    import sympy

    if isinstance(e, int):
        return sympy.Integer(e)
    e = canon(e)
    if as_int(e) is not None:
        return sympy.Integer(as_int(e))
    if isinstance(e, ir.AffineSymbolExpr) or isinstance(e, _OPAQUE):
        return _atom(e, atoms)
    if isinstance(e, ir.AffineDimExpr):
        raise ValueError(f"a view size with a dim {e}")
    a, b = _atomized(e.lhs, atoms), _atomized(e.rhs, atoms)
    return a + b if isinstance(e, ir.AffineAddExpr) else a * b


def _atom(e: ir.AffineExpr, atoms: dict):
    import sympy

    for s, v in atoms.items():
        if v == e:  # affine expressions are uniqued in their context: equal terms are one object
            return s
    if isinstance(e, ir.AffineSymbolExpr):
        s = sympy.Symbol(f"s{e.position}", integer=True, positive=True)
    else:
        s = sympy.Symbol(f"a{len(atoms)}", integer=True)
    atoms[s] = e if not isinstance(e, ir.AffineSymbolExpr) else sym(e.position)
    return s
