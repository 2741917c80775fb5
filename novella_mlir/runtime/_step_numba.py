"""The numba kernel of `step.py`: rewrites a bucket's injected fields in place, in one call per step.

`ex` holds the bucket's expressions: [n_exprs, n_mins, n_items, per expression its token range, per
min its item range, the items (expression ids), the tokens (op, arg)]; the ops are
those of `expr.py` (0 constant, 1 symbol, 2 dim, 3 +, 4 *, 5 floordiv, 6 ceildiv, 7 mod).
A field row: word, lane, offset, mask, lo, hi, min id (-1: none), base min id (-1: none), constant,
paged (1: a virtual cache address, mapped through the block table), dims row, and a range of
`forms` rows [a, b_0, ...]: when not empty, the value is min over the range of a + b . s (fields
affine in the symbols need no interpreter; the constant is in a). A page row: word,
lane, offset, mask, logical page, offset in the block.
`kv`: pool base, block elements, vbase, vspan, then per cache slot (page elements, offset in the
block). Returns 0, -1 if the block table lacks a page, or 1 + the index of a field row whose
value does not fit its field.
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True)
def _eval(ex, e, syms, dims, stack):
    tok = 3 + 2 * ex[0] + 2 * ex[1] + ex[2]
    sp = 0
    for i in range(ex[3 + 2 * e], ex[4 + 2 * e]):
        o, a = ex[tok + 2 * i], ex[tok + 2 * i + 1]
        if o == 0:
            stack[sp] = a
            sp += 1
        elif o == 1:
            stack[sp] = syms[a]
            sp += 1
        elif o == 2:
            stack[sp] = dims[a]
            sp += 1
        else:
            b = stack[sp - 1]
            x = stack[sp - 2]
            sp -= 1
            if o == 3:
                r = x + b
            elif o == 4:
                r = x * b
            elif o == 5:
                r = x // b
            elif o == 6:
                r = -((-x) // b)
            else:
                r = x % b
            stack[sp - 1] = r
    return stack[0]


@nb.njit(cache=True)
def _min(ex, m, syms, dims, stack):
    at = 3 + 2 * ex[0]
    items = at + 2 * ex[1]
    lo, hi = ex[at + 2 * m], ex[at + 2 * m + 1]
    v = _eval(ex, ex[items + lo], syms, dims, stack)
    for j in range(lo + 1, hi):
        w = _eval(ex, ex[items + j], syms, dims, stack)
        if w < v:
            v = w
    return v


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
    if page >= blocks.size:
        return -1
    return kv[0] + blocks[page] * kv[1] + kv[5 + 2 * slot] + rem % pe


@nb.njit(cache=True)
def patch(syms, ex, fields, dims, forms, pages, words, kv, blocks):
    depth = 1
    for e in range(ex[0]):
        depth = max(depth, ex[4 + 2 * e] - ex[3 + 2 * e])
    stack = np.zeros(depth, np.int64)
    ns = syms.size
    for i in range(fields.shape[0]):
        if fields[i, 12] > fields[i, 11]:
            v = _form(forms, fields[i, 11], fields[i, 12], syms, ns)
        else:
            d = dims[fields[i, 10]]
            v = fields[i, 8]
            if fields[i, 6] >= 0:
                v += _min(ex, fields[i, 6], syms, d, stack)
            if fields[i, 7] >= 0:
                v += _min(ex, fields[i, 7], syms, d, stack)
        if fields[i, 9]:
            v = _physical(v, kv, blocks)
            if v < 0:
                return -1
        if v < fields[i, 4] or v > fields[i, 5]:
            return 1 + i
        _put(words, fields[i, 0], fields[i, 1], fields[i, 2], fields[i, 3], v)
    for j in range(pages.shape[0]):
        if pages[j, 4] >= blocks.size:
            return -1
        v = kv[0] + blocks[pages[j, 4]] * kv[1] + pages[j, 5]
        _put(words, pages[j, 0], pages[j, 1], pages[j, 2], pages[j, 3], v)
    return 0


@nb.njit(cache=True)
def values(syms, ex):
    """Every min of `ex` at `syms` (expressions without dims: the bucket key's grid extents)."""
    depth = 1
    for e in range(ex[0]):
        depth = max(depth, ex[4 + 2 * e] - ex[3 + 2 * e])
    stack = np.zeros(depth, np.int64)
    dims = np.zeros(1, np.int64)
    out = np.zeros(ex[1], np.int64)
    for m in range(ex[1]):
        out[m] = _min(ex, m, syms, dims, stack)
    return out


@nb.njit(cache=True)
def prepare(syms, ex, fields, dims):
    """Completes a new bucket's field rows in place: column 8 holds the field's value in the words;
    it becomes the constant (the value minus the terms at `syms`). Rows marked affine (column 11 = 1)
    get their forms: per result r of the min in column 6 (plus the term in column 7),
    [a, b_0, ...] with the value a + b . s (exact, the terms being affine in the symbols)."""
    ns = syms.size
    depth = 1
    for e in range(ex[0]):
        depth = max(depth, ex[4 + 2 * e] - ex[3 + 2 * e])
    stack = np.zeros(depth, np.int64)
    at = 3 + 2 * ex[0]
    items = at + 2 * ex[1]
    n_forms = 0
    for i in range(fields.shape[0]):
        if fields[i, 11] == 1:
            m = fields[i, 6]
            n_forms += ex[at + 2 * m + 1] - ex[at + 2 * m]
    forms = np.zeros((n_forms, 1 + ns), np.int64)
    s = np.zeros(ns, np.int64)
    k = 0
    for i in range(fields.shape[0]):
        d = dims[fields[i, 10]]
        for c in range(6, 8):
            if fields[i, c] >= 0:
                fields[i, 8] -= _min(ex, fields[i, c], syms, d, stack)
        if fields[i, 11] != 1:
            fields[i, 11] = fields[i, 12] = 0
            continue
        m, other = fields[i, 6], fields[i, 7]
        fields[i, 11] = k
        for j in range(ex[at + 2 * m], ex[at + 2 * m + 1]):
            for q in range(ns + 1):
                for x in range(ns):
                    s[x] = 1 if x == q - 1 else 0
                v = _eval(ex, ex[items + j], s, d, stack)
                if other >= 0:
                    v += _min(ex, other, s, d, stack)
                forms[k, q] = v
            for q in range(1, ns + 1):
                forms[k, q] -= forms[k, 0]
            forms[k, 0] += fields[i, 8]
            k += 1
        fields[i, 12] = k
    return forms
