"""The per-step patch of a bucket's words (`step.py`), one compiled call of four arguments per step.

A bucket's tables are one int64 array, its *state* (`state`): a header [n_parts, then per part its
start, end and columns], then the parts `PARTS` names. A call right after the NPU (the simulator)
has run finds the host's caches cold, so the call passes few arguments (each costs its unboxing), and
the patch reads its rows in the order of the words they write: the field rows whose value has a form
(`_step_numba.prepare`) are sorted by word, each with its group (`step.share`: the rows that share one
range of `forms`), so a step sweeps its rows and words forward once (the host prefetches a forward
sweep) instead of once per group. Rows without a form (the interpreter's) come first, in field order.

Parts: KEYV, KEYEX the grid extents of the bucket key and their expressions; EX, FREE, FDIMS the
expressions, field rows (`step.Plan._spec`, 15 columns) and dims of the rows without a form; FORMS,
GROUPS (forms range, 2 columns) what `_form` evaluates once per group; CODE, CONST, GRP, AT per row
(rows without a form first, then by word): its packed place (`_step_numba.pack`), the constant added
to its group's value, its group, the block table index of its last page mapping (-1: none); PAGES
the page addresses no symbol moves (word, lane, offset, mask, page, offset in the block); META [1 if
the words hold the last patch, used entries, one past the highest used entry, stack depth, number of
rows without a form, grid dims]; MEMO each group's value at the last patch; MOVED scratch (whether
it moved); PREV the block table at the used entries; REFS the used entries (each once) then a mark
per entry; KV the session's layout (pool base, block elements, vbase, vspan, then per cache slot its
page elements and offset in the block); BOX the program's [lo, hi] per symbol.
"""

from __future__ import annotations

import sys

import numba as nb
import numpy as np

from simulator import numba_cache
from simulator.first_build import announce

from ._expr_numba import minimum
from ._step_numba import MAX_ATOMS

numba_cache.ensure(__file__)

PARTS = ("KEYV", "KEYEX", "EX", "FREE", "FDIMS", "FORMS", "GROUPS", "HOT", "AT", "PAGES", "META", "MEMO", "PREV", "REFS",
         "KV", "BOX", "SCRATCH")  # fmt: skip
KEYV, KEYEX, EX, FREE, FDIMS, FORMS, GROUPS, HOT, AT, PAGES, META, MEMO, PREV, REFS, KV, BOX, SCRATCH = range(
    len(PARTS)
)
WARM, NREF, TOP, DEPTH, NFREE, NDIMS = range(6)  # META


def state(parts: dict) -> tuple[np.ndarray, dict]:
    """The state array of `parts` (name -> int64 array, 1-D or 2-D) and a view of each part in it."""
    head = 1 + 3 * len(PARTS)
    arrays = [np.ascontiguousarray(parts[n], np.int64) for n in PARTS]
    sizes = [a.size for a in arrays]
    st = np.zeros(head + sum(sizes), np.int64)
    st[0] = len(PARTS)
    at, views = head, {}
    for k, (name, a) in enumerate(zip(PARTS, arrays)):
        st[1 + 3 * k : 4 + 3 * k] = (at, at + a.size, a.shape[1] if a.ndim == 2 else 0)
        st[at : at + a.size] = a.ravel()
        views[name] = st[at : at + a.size].reshape(a.shape)
        at += a.size
    return st, views


@nb.njit(cache=True, inline="always")
def _part(st, k):
    return st[st[1 + 3 * k] : st[2 + 3 * k]]


@nb.njit(cache=True, inline="always")
def _rows(st, k):
    lo, hi, c = st[1 + 3 * k], st[2 + 3 * k], st[3 + 3 * k]
    return st[lo:hi].reshape((hi - lo) // max(c, 1), max(c, 1))


@nb.njit(cache=True, inline="always")
def _put(words, w, lane, off, mask, v):
    m = np.uint64(mask) << np.uint64(off)
    words[w, lane] = (words[w, lane] & ~m) | ((np.uint64(v & mask)) << np.uint64(off))


@nb.njit(cache=True, inline="always")
def _use(page, meta, refs, half):
    """Notes that the words use block table entry `page` (listed once in `refs`, marked at half + page)."""
    if refs[half + page] == 0:
        refs[half + page] = 1
        refs[meta[NREF]] = page
        meta[NREF] += 1
    meta[TOP] = max(meta[TOP], page + 1)


@nb.njit(cache=True, inline="always")
def _write(i, v, hot, at, words, kv, blocks, meta, refs):
    """Row i set to v (a paged one mapped through `blocks`): 0, -1 (no such block) or 1 + i (v does
    not fit its field)."""
    c = hot[i, 0]
    if (c >> 23) & 1:
        r = v - kv[2]
        slot = r // kv[3]
        rem = r % kv[3]
        pe = kv[4 + 2 * slot]
        page = rem // pe
        half = refs.size // 2
        if page >= blocks.size or page >= half or blocks[page] < 0:
            return -1
        at[i] = page
        _use(page, meta, refs, half)
        v = kv[0] + blocks[page] * kv[1] + kv[5 + 2 * slot] + rem % pe
    bits = (c >> 12) & 127
    if (c >> 22) & 1:
        lo, hi = -(np.int64(1) << (bits - 1)), (np.int64(1) << (bits - 1)) - 1
    else:
        lo, hi = np.int64(0), (np.int64(1) << bits) - 1
    if v < lo or v > hi:
        return 1 + i
    _put(words, c >> 24, c & 3, (c >> 2) & 63, (np.int64(1) << bits) - 1, v)
    return 0


@nb.njit(cache=True, inline="always")
def _form(forms, lo, hi, sc, ns, atoms):
    """`_step_numba._form` over the symbols at sc[:ns]."""
    v, na = 0, 0
    first = True
    for r in range(lo, hi):
        w = forms[r, 1]
        for k in range(ns):
            w += forms[r, 2 + k] * sc[k]
        for k in range(na):
            w += forms[r, 2 + ns + k] * atoms[k]
        if forms[r, 0] > 0:
            atoms[na] = w // forms[r, 0]
            na += 1
        elif first or w < v:
            v, first = w, False
    return v


@nb.njit(cache=True)
def patch(syms, st, words, blocks):
    """Rewrites the injected fields and page addresses of a bucket's words (`state` `st`) for `syms` (a
    tuple) and `blocks`. Returns 0; -2 if `syms` are outside the program's box or the bucket (the
    grid extents of its key); -1 if the block table lacks a page; 1 + the index of a row (CODE order)
    whose value does not fit its field.

    Each group is evaluated once; when META[WARM] is 1 the words hold the last patch, and a row is
    rewritten only when its group's value moved, or, paged, when its block table entry changed (only
    the entries the words use are compared and kept: `REFS`, `PREV`)."""
    ns = len(syms)
    meta, box = _part(st, META), _part(st, BOX)
    for k in range(ns):
        if syms[k] < box[2 * k] or syms[k] > box[2 * k + 1]:
            return -2
    nd = meta[NDIMS]
    sc = _part(st, SCRATCH)
    for k in range(ns):
        sc[k] = syms[k]
    key_ex, key = _part(st, KEYEX), _part(st, KEYV)
    for m in range(key.size):
        if minimum(key_ex, 0, m, sc, ns, ns + nd) != key[m]:
            return -2
    refs, prev, kv = _part(st, REFS), _part(st, PREV), _part(st, KV)
    hot, at = _rows(st, HOT), _part(st, AT)
    half = refs.size // 2
    warm = meta[WARM] == 1
    meta[WARM] = 0
    if not warm:
        for k in range(meta[NREF]):
            refs[half + refs[k]] = 0
        meta[NREF], meta[TOP] = 0, 0
    remapped = not warm or blocks.size < meta[TOP]
    for k in range(meta[NREF] if not remapped else 0):
        if blocks[refs[k]] != prev[refs[k]]:
            remapped = True
            break
    nf = meta[NFREE]
    if nf:
        ex, free, fdims = _part(st, EX), _rows(st, FREE), _rows(st, FDIMS)
        for i in range(nf):
            sc[ns : ns + nd] = fdims[i]
            v = free[i, 8]
            for c in range(6, 8):
                if free[i, c] >= 0:
                    v += minimum(ex, 0, free[i, c], sc, ns, ns + nd)
            rc = _write(i, v, hot, at, words, kv, blocks, meta, refs)
            if rc:
                return rc
    atoms = sc[sc.size - MAX_ATOMS :]
    rc = _sweep(st, sc, atoms, ns, warm, remapped, hot, at, words, kv, blocks, meta, refs, prev)
    if rc:
        return rc
    if remapped:
        rc = _remap(st, warm, words, kv, blocks, meta, refs, prev)
        if rc:
            return rc
    for k in range(meta[NREF]):
        prev[refs[k]] = blocks[refs[k]]
    meta[WARM] = 1
    return 0


@nb.njit(cache=True)
def _remap(st, warm, words, kv, blocks, meta, refs, prev):
    """The page addresses no symbol moves, at a step whose used block table entries changed (or the
    first): each one's entry must exist; those whose entry changed are rewritten. (On a warm step that
    changed no used entry, every one still holds.)"""
    pages = _rows(st, PAGES)
    half = refs.size // 2
    for j in range(pages.shape[0]):
        p = pages[j, 4]
        if p >= blocks.size or p >= half or blocks[p] < 0:
            return -1
        if not warm or blocks[p] != prev[p]:
            _put(words, pages[j, 0], pages[j, 1], pages[j, 2], pages[j, 3], kv[0] + blocks[p] * kv[1] + pages[j, 5])
        _use(p, meta, refs, half)
    return 0


@nb.njit(cache=True, inline="always")
def _sweep(st, sc, atoms, ns, warm, remapped, hot, at, words, kv, blocks, meta, refs, prev):
    """Each group's value; the rows of a group that moved are written, and when an entry the words
    use changed, the paged rows whose entry it is."""
    forms, groups = _rows(st, FORMS), _rows(st, GROUPS)
    memo = _part(st, MEMO)
    for g in range(memo.size):
        val = _form(forms, groups[g, 0], groups[g, 1], sc, ns, atoms)
        moved = not warm or val != memo[g]
        memo[g] = val
        if not moved and not remapped:
            continue
        for i in range(groups[g, 2], groups[g, 3]):
            p = at[i]
            if moved or (p >= 0 and (p >= blocks.size or blocks[p] != prev[p])):
                rc = _write(i, val + hot[i, 1], hot, at, words, kv, blocks, meta, refs)
                if rc:
                    return rc
    return 0


announce(sys.modules[__name__])
