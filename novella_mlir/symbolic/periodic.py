"""A proof for `symbolic.equal` of one-symbol size identities that sympy leaves open: a quasi-linear difference
(linear in the symbol and in floors / ceilings / mods by constants of such terms, e.g. a pad to a multiple,
`L + (-L) mod b - ceildiv(L, b) * b`) is zero everywhere iff it is zero on 0..P, P the product of its divisors."""

from __future__ import annotations

_PERIOD_MAX = 4096


def periodic_zero(diff) -> bool:
    """diff == 0 for every integer value of its one symbol: with P the product of every divisor,
    d(L + P) = d(L) + c * P, so d = 0 at 0, 1, ..., P proves c = 0 and d = 0 on a period, hence everywhere."""
    import sympy

    syms = diff.free_symbols
    period = _period(diff) if len(syms) == 1 else None
    if period is None or period > _PERIOD_MAX:
        return False
    fn = sympy.lambdify(list(syms), diff, modules="sympy")
    return all(fn(sympy.Integer(v)) == 0 for v in range(period + 1))


def _period(e) -> int | None:
    """The product of the divisors of the floors, ceilings and mods in the quasi-linear `e`, else None."""
    import sympy

    if e.is_Symbol or e.is_Integer:
        return 1
    if e.is_Rational:
        return int(e.q)
    if isinstance(e, sympy.Add) or isinstance(e, sympy.Mul) and sum(not a.is_Number for a in e.args) <= 1:
        out = 1
        for a in e.args:
            p = _period(a)
            if p is None:
                return None
            out *= p
        return out
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        return _period(e.args[0])
    if isinstance(e, sympy.Mod) and e.args[1].is_Integer and e.args[1] > 0:
        inner = _period(e.args[0])
        return None if inner is None else inner * int(e.args[1])
    return None
