"""The compiled evaluator of `expr.py`'s expressions, for both numba kernels (`_jit_numba.py`,
`_step_numba.py`): the one interpreter of the tokens of an `expr.Table` (its layout, at offset `at`
of a larger table: [n_exprs, n_mins, n_items, per expression its token range, per min its item
range, the items, the tokens (op, arg)]).

Values live in one scratch array `sc`: the symbols from 0, the grid dims from `dims_at`, the stack
from `stack_at` (one array, so an inlined call costs little reference counting)."""

from __future__ import annotations

import numba as nb

from simulator import numba_cache

from .expr import ADD, CEILDIV, CONST, DIM, FLOORDIV, MUL, SYM, SYMAT

numba_cache.ensure(__file__)


@nb.njit(cache=True, inline="always")
def binary(o, a, b):
    if o == ADD:
        return a + b
    if o == MUL:
        return a * b
    if o == FLOORDIV:
        return a // b
    if o == CEILDIV:
        return -((-a) // b)
    return a % b


@nb.njit(cache=True, inline="always")
def _run(ex, tok, lo, hi, sc, dims_at, stack_at):
    """Tokens lo..hi of the token section at ex[tok:]."""
    sp = stack_at
    for i in range(lo, hi):
        o, a = ex[tok + 2 * i], ex[tok + 2 * i + 1]
        if o == CONST:
            sc[sp] = a
            sp += 1
        elif o == SYM:
            sc[sp] = sc[a]
            sp += 1
        elif o == DIM:
            sc[sp] = sc[dims_at + a]
            sp += 1
        elif o == SYMAT:  # a lane field: the symbol at the index on the stack
            sc[sp - 1] = sc[sc[sp - 1]]
        else:
            b = sc[sp - 1]
            x = sc[sp - 2]
            sp -= 1
            sc[sp - 1] = binary(o, x, b)
    return sc[stack_at]


@nb.njit(cache=True, inline="always")
def evaluate(ex, at, e, sc, dims_at, stack_at):
    """Expression e of the table at ex[at:]."""
    tok = at + 3 + 2 * ex[at] + 2 * ex[at + 1] + ex[at + 2]
    return _run(ex, tok, ex[at + 3 + 2 * e], ex[at + 4 + 2 * e], sc, dims_at, stack_at)


@nb.njit(cache=True, inline="always")
def minimum(ex, at, m, sc, dims_at, stack_at):
    """The minimum of the expressions of min id m of the table at ex[at:]."""
    mins = at + 3 + 2 * ex[at]
    items = mins + 2 * ex[at + 1]
    tok = items + ex[at + 2]
    lo, hi = ex[mins + 2 * m], ex[mins + 2 * m + 1]
    e = ex[items + lo]
    v = _run(ex, tok, ex[at + 3 + 2 * e], ex[at + 4 + 2 * e], sc, dims_at, stack_at)
    for j in range(lo + 1, hi):
        e = ex[items + j]
        w = _run(ex, tok, ex[at + 3 + 2 * e], ex[at + 4 + 2 * e], sc, dims_at, stack_at)
        if w < v:
            v = w
    return v


@nb.njit(cache=True, inline="always")  # no compile per literal `at`
def depth(ex, at):
    """A stack deep enough for every expression of the table at ex[at:] (its longest token run)."""
    d = 1
    for e in range(ex[at]):
        d = max(d, ex[at + 4 + 2 * e] - ex[at + 3 + 2 * e])
    return d
