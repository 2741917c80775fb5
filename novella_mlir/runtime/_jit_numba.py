"""The numba kernel of `jit_kernel.py` (imported on first use; numba caches the machine code on disk).

Table layout (`Tables._freeze`): [n_dims, stack size, 12 offsets], then
the expressions (an `expr.Table`, evaluated by `_expr_numba`), tile macro,
tile ndim, tile grid (n_dims), tile base ranges (2), base slots, base
exprs, macros (4: template range, load_slots, store_slots), template rows
(15), guard kinds, guard exprs, var rows (8). A template row: queue, guard
range, var range, then the tensor-relative dram_base: has, slot, lane,
offset, mask, lo, hi, min id (-1: constant), constant; then 1 if it loads
into a ping-pong slot, plus 2 x its early tier (`schedule.early`). A var
row: lane, offset, mask, lo, hi, min id (-1: constant), constant, slot
stride and slots (the stride added times the step index within the macro
mod the slots).
"""

from __future__ import annotations

import sys

import numba as nb
import numpy as np

from simulator import isa, numba_cache
from simulator.first_build import announce

from ._expr_numba import minimum

numba_cache.ensure(__file__)

_POP_PREV, _POP_NEXT, _PUSH_PREV, _PUSH_NEXT = (isa.FLAG_BIT[n] for n in isa.FLAG_NAMES)
_L, _C, _S = (isa.QUEUES.index(q) for q in ("load", "compute", "store"))  # the queue indices of `wq`
_NQ = len(isa.QUEUES)


@nb.njit(cache=True, inline="always")  # inlined in numba's IR: no compile per literal k
def _part(tab, k):
    return tab[tab[2 + k] : (tab[3 + k] if k < 11 else tab.size)]


@nb.njit(cache=True, inline="always")
def _rows(tab, k, cols):
    part = _part(tab, k)
    return part.reshape((part.size // cols, cols))


@nb.njit(cache=True, inline="always")  # inlined in numba's IR: no call per field
def _min(m, tab, sc, ns):
    """The minimum of the expressions of min id m; `sc` = [symbols (ns), dims (n_dims + 1), stack]."""
    return minimum(tab, tab[2], m, sc, ns, ns + tab[0] + 1)


@nb.njit(cache=True, inline="always")
def _memo_min(m, tab, sc, ns, memo, stamp, point):
    """`_min` once per grid point (`point`): the templates of a point share most of their expressions."""
    if stamp[m] != point:
        memo[m] = _min(m, tab, sc, ns)
        stamp[m] = point
    return memo[m]


@nb.njit(cache=True)
def _edges(wstep, wq, n, n_steps):
    """first[k, q], last[k, q]: the first and last word of queue q in step k (-1: none)."""
    first = np.full((n_steps, _NQ), -1, np.int64)
    last = np.full((n_steps, _NQ), -1, np.int64)
    for w in range(n):
        k, q = wstep[w], wq[w]
        if first[k, q] < 0:
            first[k, q] = w
        last[k, q] = w
    return first, last


@nb.njit(cache=True, inline="always")  # inlined in numba's IR: no call per field
def _set(words, w, bit):
    words[w, 0] |= np.uint64(bit)


@nb.njit(cache=True)
def _tokens(words, wstep, wq, wslot, n, n_steps, s_load, s_store, s_bar, s_before):
    """The token rule of `tokens.flags` over the whole program; False if a step has no compute instruction.
    wslot: per word, 1 if it loads into a ping-pong slot, plus 2 x its early tier; s_before: per step, the
    barrier before the previous macro, -2 if its early tiers do not apply."""
    first, last = _edges(wstep, wq, n, n_steps)
    unslotted = np.zeros(n_steps, np.bool_)
    for w in range(n):
        if wq[w] == _L and wslot[w] & 1 == 0:
            unslotted[wstep[w]] = True
    latest = np.full(n_steps, -1, np.int64)  # the latest step <= k with stores
    before_l, before_s = -1, -1
    for k in range(n_steps):
        if first[k, _C] < 0:
            return False
        latest[k] = k if first[k, _S] >= 0 else (latest[k - 1] if k > 0 else -1)
    macro, leading = -3, False
    for w in range(n):  # L pops C2L, the last C of the step it waits for pushes it
        if wq[w] != _L:
            continue
        k = wstep[w]
        b = s_bar[k]
        if b != macro:
            macro, leading = b, True
        d = 1 if unslotted[k] else s_load[k]
        tier = wslot[w] >> 1
        need = max(k - d, b)
        leading = leading and tier > 0 and b >= 0 and k == b + 1 and s_before[k] >= -1
        if leading:
            need = b - 1 if tier == 1 else s_before[k]
        if need > before_l and need >= 0:
            _set(words, w, _POP_NEXT)
            _set(words, last[need, _C], _PUSH_PREV)
            before_l = need
    for k in range(n_steps):
        if first[k, _L] >= 0:
            _set(words, last[k, _L], _PUSH_NEXT)  # L pushes L2C
            _set(words, first[k, _C], _POP_PREV)  # C pops L2C
        if first[k, _S] >= 0:
            _set(words, last[k, _C], _PUSH_NEXT)  # C pushes C2S
            _set(words, first[k, _S], _POP_PREV)  # S pops C2S
        j = min(k - s_store[k], n_steps - 1)
        need = latest[j] if j >= 0 else -1
        if need > before_s and need >= 0:
            _set(words, first[k, _C], _POP_NEXT)  # C pops S2C
            _set(words, last[need, _S], _PUSH_PREV)  # S pushes S2C
        before_s = max(before_s, need)
    return True


@nb.njit(cache=True, inline="always")  # inlined in numba's IR: no call per field
def _field(words, w, rows, r, c, v):
    """ORs value v into word w at the field described by rows[r, c:c + 5] (lane, offset, mask, lo, hi)."""
    if v < rows[r, c + 3] or v > rows[r, c + 4]:
        return False
    words[w, rows[r, c]] |= np.uint64(v & rows[r, c + 2]) << np.uint64(rows[r, c + 1])
    return True


@nb.njit(cache=True)
def instantiate(syms, tab, t_base, limit):
    n_dims, stack_size = tab[0], tab[1]
    ns = syms.size
    sc = np.zeros(ns + n_dims + 1 + stack_size, np.int64)
    sc[:ns] = syms
    dims = sc[ns : ns + n_dims + 1]
    tile_macro, tile_ndim, tile_grid = _part(tab, 1), _part(tab, 2), _rows(tab, 3, n_dims)
    base_range, base_slot, base_expr = _rows(tab, 4, 2), _part(tab, 5), _part(tab, 6)
    macro_range, t_rows = _rows(tab, 7, 4), _rows(tab, 8, 15)
    guard_kind, guard_expr, var_rows = _part(tab, 9), _part(tab, 10), _rows(tab, 11, 9)
    nt = tile_macro.size
    ext = np.zeros((nt, n_dims), np.int64)
    npts = np.zeros(nt, np.int64)
    bound = 0
    for ti in range(nt):
        n = 1
        for g in range(tile_ndim[ti]):
            e = _min(tile_grid[ti, g], tab, sc, ns)
            ext[ti, g] = e
            n = n * e if e > 0 else 0
        npts[ti] = n
        m = tile_macro[ti]
        bound += n * (macro_range[m, 1] - macro_range[m, 0]) + 1
    info = np.full(3 + 2 * nt, -1, np.int64)  # status, words, steps, tile starts, tile ends
    if bound > limit:  # a long program: the NumPy expansion is faster
        info[0] = 3
        return np.zeros((0, 4), np.uint64), info
    words = np.zeros((bound, 4), np.uint64)
    wstep = np.zeros(bound, np.int64)
    wq = np.zeros(bound, np.int64)
    wslot = np.zeros(bound, np.int64)
    s_load = np.ones(bound, np.int64)  # per step: load_slots, store_slots, the barrier before it
    s_store = np.ones(bound, np.int64)
    s_bar = np.full(bound, -1, np.int64)
    s_before = np.full(bound, -2, np.int64)  # the barrier before the previous macro; -2: no early loads
    barrier, before, step0 = -1, -2, 0
    t_start = info[3 : 3 + nt]
    t_end = info[3 + nt :]
    w, step = 0, 0
    base_val = np.zeros(base_slot.size, np.int64)
    n_mins = tab[tab[2] + 1]
    memo, stamp, point = np.zeros(n_mins, np.int64), np.full(n_mins, -1, np.int64), 0
    for ti in range(nt):
        m = tile_macro[ti]
        for b in range(base_range[ti, 0], base_range[ti, 1]):
            base_val[b] = _min(base_expr[b], tab, sc, ns)
        for p in range(npts[ti]):
            r = p
            for g in range(tile_ndim[ti] - 1, -1, -1):
                dims[g] = r % ext[ti, g]
                r //= ext[ti, g]
            point += 1
            emitted = False
            for t in range(macro_range[m, 0], macro_range[m, 1]):
                ok = True
                for gi in range(t_rows[t, 1], t_rows[t, 2]):
                    v = _memo_min(guard_expr[gi], tab, sc, ns, memo, stamp, point)
                    if (guard_kind[gi] == 0 and v != 0) or (guard_kind[gi] == 1 and v < 0):
                        ok = False
                        break
                if not ok:
                    continue
                if t_start[ti] < 0:
                    if w > 0:  # the barrier step before a macro
                        wstep[w], wq[w] = step, _C
                        before = barrier if t_start[ti - 1] >= 0 else -2  # its IR predecessor ran
                        barrier = s_bar[step] = step
                        w += 1
                        step += 1
                    t_start[ti] = w
                    step0 = step
                for lane in range(4):
                    words[w, lane] = t_base[t, lane]
                for vi in range(t_rows[t, 3], t_rows[t, 4]):
                    e = var_rows[vi, 5]
                    v = var_rows[vi, 6] if e < 0 else _memo_min(e, tab, sc, ns, memo, stamp, point)
                    v += var_rows[vi, 7] * ((step - step0) % var_rows[vi, 8])
                    if not _field(words, w, var_rows, vi, 0, v):
                        info[0] = 1
                        return words, info
                if t_rows[t, 5]:
                    v = (
                        t_rows[t, 13]
                        if t_rows[t, 12] < 0
                        else _memo_min(t_rows[t, 12], tab, sc, ns, memo, stamp, point)
                    )
                    found = False
                    for b in range(base_range[ti, 0], base_range[ti, 1]):
                        if base_slot[b] == t_rows[t, 6]:
                            v += base_val[b]
                            found = True
                    if not found or not _field(words, w, t_rows, t, 7, v):
                        info[0] = 1
                        return words, info
                wstep[w], wq[w], wslot[w] = step, t_rows[t, 0], t_rows[t, 14]
                w += 1
                emitted = True
            if emitted:
                s_load[step], s_store[step], s_bar[step] = macro_range[m, 2], macro_range[m, 3], barrier
                s_before[step] = before
                step += 1
        if t_start[ti] >= 0:
            t_end[ti] = w
    # np.int64: numba would compile _tokens again for each literal type inference tries on the way
    ok = _tokens(words, wstep, wq, wslot, np.int64(w), np.int64(step), s_load, s_store, s_bar, s_before)
    info[0] = 0 if ok else 2
    info[1], info[2] = w, step
    return words[:w], info


announce(sys.modules[__name__])
