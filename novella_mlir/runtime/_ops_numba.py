"""The binary operators of `expr.py`'s compiled tokens (its `OPCODES`), compiled once for both numba
evaluators (`_jit_numba.py` and `_step_numba.py`)."""

from __future__ import annotations

import numba as nb

from simulator import numba_cache

from .expr import ADD, CEILDIV, FLOORDIV, MUL

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
