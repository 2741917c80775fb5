"""The binary operators of `expr.py`'s postfix programs, compiled once for both numba evaluators
(`_jit_numba.py` and `_step_numba.py`): 3 +, 4 *, 5 floordiv, 6 ceildiv, 7 mod."""

from __future__ import annotations

import numba as nb

from simulator import numba_cache

numba_cache.ensure(__file__)


@nb.njit(cache=True, inline="always")
def binary(o, a, b):
    if o == 3:
        return a + b
    if o == 4:
        return a * b
    if o == 5:
        return a // b
    if o == 6:
        return -((-a) // b)
    return a % b
