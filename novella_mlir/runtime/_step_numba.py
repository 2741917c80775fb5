"""The numba kernel of `step.py`: rewrites a bucket's injected fields in place, in one call per step.

`ex` holds the bucket's expressions: [n_exprs, n_mins, n_items, per expression its token range, per
min its item range, the items (expression ids), the tokens (op, arg)]: `expr.Table`, its ops
those of `expr.py` (`CONST`, `SYM`, `DIM`, `OPCODES`).
A field row: word, lane, offset, mask, lo, hi, min id (-1: none), base min id (-1: none), constant,
paged (1: a virtual cache address, mapped through the block table), dims row, and a range of
`forms` rows [a, b_0, ...]: when not empty, the value is min over the range of a + b . s (fields
affine in the symbols need no interpreter; the constant is in a). A page row: word,
lane, offset, mask, logical page, offset in the block.
`kv`: pool base, block elements, vbase, vspan, then per cache slot (page elements, offset in the
block). Returns 0, -1 if the block table lacks a page, -2 if the symbols are not in the bucket, or
1 + the index of a field row whose value does not fit its field.
"""

from __future__ import annotations

import sys

import numba as nb
import numpy as np

from simulator import numba_cache
from simulator.first_build import announce

from ._expr_numba import depth, evaluate, minimum

numba_cache.ensure(__file__)


@nb.njit(cache=True)
def _scratch(syms, n_dims, stack):
    """[symbols | dims | stack] (`_expr_numba`), the symbols set."""
    sc = np.zeros(syms.size + n_dims + stack, np.int64)
    sc[: syms.size] = syms
    return sc


@nb.njit(cache=True)
def _form(forms, lo, hi, syms, ns):
    """min over forms lo..hi of a + b . s."""
    v = 0
    for r in range(lo, hi):
        w = forms[r, 0]
        for k in range(ns):
            w += forms[r, 1 + k] * syms[k]
        if r == lo or w < v:
            v = w
    return v


@nb.njit(cache=True)
def _put(words, w, lane, off, mask, v):
    m = np.uint64(mask) << np.uint64(off)
    words[w, lane] = (words[w, lane] & ~m) | ((np.uint64(v & mask)) << np.uint64(off))


@nb.njit(cache=True)
def _physical(v, kv, blocks):
    r = v - kv[2]
    slot = r // kv[3]
    rem = r % kv[3]
    pe = kv[4 + 2 * slot]
    page = rem // pe
    if page >= blocks.size or blocks[page] < 0:
        return -1
    return kv[0] + blocks[page] * kv[1] + kv[5 + 2 * slot] + rem % pe


@nb.njit(cache=True)
def patch(syms, key_ex, key, ex, fields, dims, forms, pages, words, kv, blocks):
    """Rewrites the injected fields and page addresses of a bucket's words for `syms` and `blocks`;
    first checks that `syms` are in the bucket (the grid extents `key_ex` evaluate to `key`), else -2."""
    ns, nd = syms.size, dims.shape[1]
    sc = _scratch(syms, nd, max(depth(ex, 0), depth(key_ex, 0)))
    st = ns + nd
    for m in range(key_ex[1]):
        if minimum(key_ex, 0, m, sc, ns, st) != key[m]:
            return -2
    for i in range(fields.shape[0]):
        if fields[i, 12] > fields[i, 11]:
            v = _form(forms, fields[i, 11], fields[i, 12], syms, ns)
        else:
            sc[ns:st] = dims[fields[i, 10]]
            v = fields[i, 8]
            if fields[i, 6] >= 0:
                v += minimum(ex, 0, fields[i, 6], sc, ns, st)
            if fields[i, 7] >= 0:
                v += minimum(ex, 0, fields[i, 7], sc, ns, st)
        if fields[i, 9]:
            v = _physical(v, kv, blocks)
            if v < 0:
                return -1
        if v < fields[i, 4] or v > fields[i, 5]:
            return 1 + i
        _put(words, fields[i, 0], fields[i, 1], fields[i, 2], fields[i, 3], v)
    for j in range(pages.shape[0]):
        if pages[j, 4] >= blocks.size or blocks[pages[j, 4]] < 0:
            return -1
        v = kv[0] + blocks[pages[j, 4]] * kv[1] + pages[j, 5]
        _put(words, pages[j, 0], pages[j, 1], pages[j, 2], pages[j, 3], v)
    return 0


@nb.njit(cache=True)
def values(syms, ex):
    """Every min of `ex` at `syms` (expressions without dims: the bucket key's grid extents)."""
    sc = _scratch(syms, 0, depth(ex, 0))
    out = np.zeros(ex[1], np.int64)
    for m in range(ex[1]):
        out[m] = minimum(ex, 0, m, sc, syms.size, syms.size)
    return out


@nb.njit(cache=True)
def prepare(syms, ex, fields, dims):
    """Completes a new bucket's field rows in place: column 8 holds the field's value in the words;
    it becomes the constant (the value minus the terms at `syms`). Rows marked affine (column 11 = 1)
    get their forms: per result r of the min in column 6 (plus the term in column 7),
    [a, b_0, ...] with the value a + b . s (exact, the terms being affine in the symbols)."""
    ns, nd = syms.size, dims.shape[1]
    sc = _scratch(syms, nd, depth(ex, 0))
    st = ns + nd
    at = 3 + 2 * ex[0]
    items = at + 2 * ex[1]
    n_forms = 0
    for i in range(fields.shape[0]):
        if fields[i, 11] == 1:
            m = fields[i, 6]
            n_forms += ex[at + 2 * m + 1] - ex[at + 2 * m]
    forms = np.zeros((n_forms, 1 + ns), np.int64)
    k = 0
    for i in range(fields.shape[0]):
        sc[:ns] = syms
        sc[ns:st] = dims[fields[i, 10]]
        for c in range(6, 8):
            if fields[i, c] >= 0:
                fields[i, 8] -= minimum(ex, 0, fields[i, c], sc, ns, st)
        if fields[i, 11] != 1:
            fields[i, 11] = fields[i, 12] = 0
            continue
        m, other = fields[i, 6], fields[i, 7]
        fields[i, 11] = k
        for j in range(ex[at + 2 * m], ex[at + 2 * m + 1]):
            for q in range(ns + 1):
                for x in range(ns):
                    sc[x] = 1 if x == q - 1 else 0
                v = evaluate(ex, 0, ex[items + j], sc, ns, st)
                if other >= 0:
                    v += minimum(ex, 0, other, sc, ns, st)
                forms[k, q] = v
            for q in range(1, ns + 1):
                forms[k, q] -= forms[k, 0]
            forms[k, 0] += fields[i, 8]
            k += 1
        fields[i, 12] = k
    return forms


@nb.njit(cache=True)
def build(syms, ex, tiles, tt, guards, specs, spans, raw, words, n_dims):
    """The field rows of a new bucket (before `prepare`), their dims, and the words of the paged DMAs.

    `tiles`: per tile, its template range (lo, hi), number of dims, first `tt` row, whether it has
    work, then its grid's min ids; `tt`: per (tile, template), guard range, spec range, paged;
    `guards`: kind (0 eq, 1 ge), min id; `specs`: lane, offset, mask, lo, hi, min ids (2), affine,
    paged, bits, signed; `spans`: each tile's words (start, end; -1: none). The points and
    templates are walked in the JIT's order, so each word's index is the running count. Status 1:
    a tile's words disagree with its templates."""
    ns, st = syms.size, syms.size + n_dims
    sc = _scratch(syms, n_dims, depth(ex, 0))
    dims = sc[ns:st]
    nt = tiles.shape[0]
    ext = np.zeros((nt, n_dims), np.int64)
    npts = np.zeros(nt, np.int64)
    n_rows, n_paged = 0, 0
    for ti in range(nt):
        if spans[ti, 0] < 0 or tiles[ti, 4] == 0:
            continue
        n = 1
        for g in range(tiles[ti, 2]):
            ext[ti, g] = minimum(ex, 0, tiles[ti, 5 + g], sc, ns, st)
            n *= max(ext[ti, g], 0)
        npts[ti] = n
        for j in range(tiles[ti, 1] - tiles[ti, 0]):
            k = tiles[ti, 3] + j
            n_rows += n * (tt[k, 3] - tt[k, 2])
            n_paged += n * tt[k, 4]
    rows = np.zeros((n_rows, 14), np.int64)
    rdims = np.zeros((n_rows, n_dims), np.int64)
    paged = np.zeros(n_paged, np.int64)
    r, pg = 0, 0
    for ti in range(nt):
        if spans[ti, 0] < 0 or tiles[ti, 4] == 0:
            continue
        w = spans[ti, 0]
        for p in range(npts[ti]):
            q = p
            for g in range(tiles[ti, 2] - 1, -1, -1):
                dims[g] = q % ext[ti, g]
                q //= ext[ti, g]
            for j in range(tiles[ti, 1] - tiles[ti, 0]):
                k = tiles[ti, 3] + j
                ok = True
                for gi in range(tt[k, 0], tt[k, 1]):
                    v = minimum(ex, 0, guards[gi, 1], sc, ns, st)
                    if (guards[gi, 0] == 0 and v != 0) or (guards[gi, 0] == 1 and v < 0):
                        ok = False
                        break
                if not ok:
                    continue
                if tt[k, 4]:
                    paged[pg] = w
                    pg += 1
                for sp in range(tt[k, 2], tt[k, 3]):
                    lane, off, mask = specs[sp, 0], specs[sp, 1], specs[sp, 2]
                    src = raw if specs[sp, 8] else words
                    v = np.int64((src[w, lane] >> np.uint64(off)) & np.uint64(mask))
                    if specs[sp, 10] and v > specs[sp, 4]:
                        v -= np.int64(1) << np.int64(specs[sp, 9])
                    rows[r, 0], rows[r, 1], rows[r, 2], rows[r, 3] = w, lane, off, mask
                    for c in range(3, 7):
                        rows[r, 1 + c] = specs[sp, c]  # lo, hi, the two min ids
                    rows[r, 8], rows[r, 9], rows[r, 10], rows[r, 11] = v, specs[sp, 8], r, specs[sp, 7]
                    rows[r, 13] = sp
                    rdims[r] = dims
                    r += 1
                w += 1
        if w != spans[ti, 1]:
            return rows[:r], rdims[:r], paged[:pg], 1
    return rows[:r], rdims[:r], paged[:pg], 0


@nb.njit(cache=True)
def guard_bits(syms, ex, tiles, tt, guards, keys, n_dims):
    """The outcome (0/1) at every grid point of each guarded template in `keys` (tile, template), in
    grid order: the part of a bucket key the symbol-dependent guards make (what `jit.when_mask` says)."""
    ns, st = syms.size, syms.size + n_dims
    sc = _scratch(syms, n_dims, depth(ex, 0))
    dims = sc[ns:st]
    ext = np.zeros((keys.shape[0], n_dims), np.int64)
    npts = np.zeros(keys.shape[0], np.int64)
    for i in range(keys.shape[0]):
        ti = keys[i, 0]
        n = 1
        for g in range(tiles[ti, 2]):
            ext[i, g] = minimum(ex, 0, tiles[ti, 5 + g], sc, ns, st)
            n *= max(ext[i, g], 0)
        npts[i] = n
    out = np.zeros(npts.sum() + keys.shape[0], np.uint8)
    at = 0
    for i in range(keys.shape[0]):
        ti = keys[i, 0]
        k = tiles[ti, 3] + keys[i, 1]
        out[at] = 2  # a separator: the point counts are in the key too
        at += 1
        for p in range(npts[i]):
            q = p
            for g in range(tiles[ti, 2] - 1, -1, -1):
                dims[g] = q % ext[i, g]
                q //= ext[i, g]
            ok = 1
            for gi in range(tt[k, 0], tt[k, 1]):
                v = minimum(ex, 0, guards[gi, 1], sc, ns, st)
                if (guards[gi, 0] == 0 and v != 0) or (guards[gi, 0] == 1 and v < 0):
                    ok = 0
                    break
            out[at] = ok
            at += 1
    return out


announce(sys.modules[__name__])
