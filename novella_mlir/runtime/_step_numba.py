"""The numba kernels of `step.py`'s new buckets: their field rows, forms, groups and keys (the per-step
patch that evaluates them is `_patch_numba.patch`).

`ex` holds the bucket's expressions: [n_exprs, n_mins, n_items, per expression its token range, per
min its item range, the items (expression ids), the tokens (op, arg)]: `expr.Table`, its ops
those of `expr.py` (`CONST`, `SYM`, `DIM`, `OPCODES`).
A field row: word, lane, offset, mask, lo, hi, min id (-1: none), base min id (-1: none), constant,
paged (1: a virtual cache address, mapped through the block table), dims row, a range of
`forms` rows [q, a, b_0, ..., c_0, ...], its spec, and the constant added to its forms' value: when
the range is not empty, the value is computed from them, without the interpreter: each row with q > 0 makes an atom, (a + b . s + c . atoms) floordiv q, and the value is
the min over the other rows of a + b . s + c . atoms, plus the field's constant (column 14; `share`
makes the fields that differ only by it, the copies of one page's row count or address across the
layers, heads, K and V, point at one range, evaluated once per step). Fields affine in the
symbols have no atom; a chained page's row count and address (`kv_cache.load_page_chain`) one
each (its step [x >= 1], the sequence's last page). A page row: word,
lane, offset, mask, logical page, offset in the block.
"""

from __future__ import annotations

import sys

import numba as nb
import numpy as np

from simulator import numba_cache
from simulator.first_build import announce

from ._expr_numba import binary, depth, minimum
from .expr import ADD, CEILDIV, CONST, DIM, MOD, MUL, SYM

numba_cache.ensure(__file__)

MAX_ATOMS = 4  # floordivs per field in its forms (`_bucket_numba.prepare`)


@nb.njit(cache=True, inline="always")  # no compile per literal n_dims
def _scratch(syms, n_dims, stack):
    """[symbols | dims | stack] (`_expr_numba`), the symbols set."""
    sc = np.zeros(syms.size + n_dims + stack, np.int64)
    sc[: syms.size] = syms
    return sc


@nb.njit(cache=True, inline="always")
def _form(forms, lo, hi, syms, ns, atoms):
    """Rows lo..hi of `forms` (`prepare`): atoms[k] = (a + b . s + c . atoms) floordiv q for the rows
    with q > 0, in order, then the min over the others (q = 0) of a + b . s + c . atoms."""
    v, na = 0, 0
    first = True
    for r in range(lo, hi):
        w = forms[r, 1]
        for k in range(ns):
            w += forms[r, 2 + k] * syms[k]
        for k in range(na):
            w += forms[r, 2 + ns + k] * atoms[k]
        if forms[r, 0] > 0:
            atoms[na] = w // forms[r, 0]
            na += 1
        elif first or w < v:
            v, first = w, False
    return v


@nb.njit(cache=True, inline="always")
def _value(i, syms, ex, fields, dims, forms, sc, atoms):
    """Field row i's value before the page mapping: its forms, else the interpreter."""
    ns, st = syms.size, syms.size + dims.shape[1]
    if fields[i, 12] > fields[i, 11]:
        return _form(forms, fields[i, 11], fields[i, 12], syms, ns, atoms) + fields[i, 14]
    sc[ns:st] = dims[fields[i, 10]]
    v = fields[i, 8]
    if fields[i, 6] >= 0:
        v += minimum(ex, 0, fields[i, 6], sc, ns, st)
    if fields[i, 7] >= 0:
        v += minimum(ex, 0, fields[i, 7], sc, ns, st)
    return v


@nb.njit(cache=True)
def field_values(syms, ex, fields, dims, forms):
    """Every field row's value at `syms` before the page mapping (what `_patch_numba.patch` writes)."""
    sc = _scratch(syms, dims.shape[1], depth(ex, 0))
    atoms = np.zeros(MAX_ATOMS, np.int64)
    out = np.zeros(fields.shape[0], np.int64)
    for i in range(fields.shape[0]):
        out[i] = _value(i, syms, ex, fields, dims, forms, sc, atoms)
    return out


@nb.njit(cache=True)
def pack(fields):
    """Per field row what `_patch_numba.patch` reads when it writes it, 16 bytes instead of the row's 120 (a batched
    step's tens of thousands of page fields stay in the host's caches): word << 24 | paged << 23 |
    signed << 22 | bits << 12 | offset << 2 | lane, and the constant added to its forms' value."""
    return pack_order(fields, np.arange(fields.shape[0]), fields[:, 14].copy())


@nb.njit(cache=True)
def pack_order(fields, perm, const):
    """`pack` of the rows fields[perm], their column 14 `const`."""
    out = np.zeros((perm.size, 2), np.int64)
    last, bits = -1, 0
    for r in range(perm.size):
        i = perm[r]
        mask = fields[i, 3]
        if mask != last:  # rows of one field come together: its width once
            last, bits = mask, 0
            while bits < 63 and (np.int64(1) << bits) - 1 < mask:
                bits += 1
        if (np.int64(1) << bits) - 1 != mask or fields[i, 2] > 63 or fields[i, 1] > 3:
            raise ValueError("a field's mask is not a width the packed rows hold")
        code = (fields[i, 0] << 24) | (fields[i, 9] << 23) | (np.int64(fields[i, 4] < 0) << 22)
        out[r, 0] = code | (bits << 12) | (fields[i, 2] << 2) | fields[i, 1]
        out[r, 1] = const[r]
    return out


@nb.njit(cache=True)
def form_keys(fields, forms, has, mix):
    """Per field row has[j]: the constant of its forms (the first min term's a: `share` subtracts it from
    every min term, so the copies of one page's forms across layers, heads, K and V become equal) and a
    64-bit hash of its count and its forms so adjusted (`mix`: one odd multiplier per position). Rows
    that `prepare` pointed at one forms range are hashed once."""
    h = np.zeros(has.size, np.int64)
    const = np.zeros(has.size, np.int64)
    w = forms.shape[1]
    seen = np.full(forms.shape[0], -1, np.int64)  # per range start: the row j that hashed it
    for j in range(has.size):
        i = has[j]
        lo, hi = fields[i, 11], fields[i, 12]
        if seen[lo] >= 0 and fields[has[seen[lo]], 12] == hi:
            h[j], const[j] = h[seen[lo]], const[seen[lo]]
            continue
        seen[lo] = j
        c = 0
        for r in range(lo, hi):
            if forms[r, 0] == 0:
                c = forms[r, 1]
                break
        acc = (hi - lo) * mix[0]
        k = 1
        for r in range(lo, hi):
            for col in range(w):
                v = forms[r, col] - (c if col == 1 and forms[r, 0] == 0 else 0)
                acc = (acc ^ (v * mix[k % mix.size])) * np.int64(-7046029254386353131)
                k += 1
        h[j], const[j] = acc, c
    return h, const


@nb.njit(cache=True)
def distinct(h):
    """(index of each distinct value of `h` at its first occurrence, in order; per element the index of
    its value in that list): `np.unique(h, return_index=True, return_inverse=True)` up to the order of
    the values, by an open-addressing table (no sort)."""
    cap = 1
    while cap < 2 * h.size:
        cap *= 2
    slots = np.full(cap, -1, np.int64)
    first = np.zeros(h.size, np.int64)
    inv = np.zeros(h.size, np.int64)
    n = 0
    for j in range(h.size):
        at = (h[j] ^ (h[j] >> 31)) & (cap - 1)
        while slots[at] >= 0 and h[first[slots[at]]] != h[j]:
            at = (at + 1) & (cap - 1)
        if slots[at] < 0:
            slots[at], first[n] = n, j
            n += 1
        inv[j] = slots[at]
    return first[:n], inv


@nb.njit(cache=True)
def regroup(fields, has, inv, starts, sizes, const):
    """The field rows `share` returns: those without forms (not in `has`) first, then group by group
    (rows in their order): row has[j] pointed at its group inv[j]'s forms range, const[j] added to its
    column 14 (`regroup_order`'s rows, written out)."""
    perm, cols = regroup_order(fields, has, inv, starts, sizes, const)
    out = np.empty_like(fields)
    for r in range(perm.size):
        for c in range(fields.shape[1]):
            out[r, c] = fields[perm[r], c]
        out[r, 11], out[r, 12], out[r, 14] = cols[r, 0], cols[r, 1], cols[r, 2]
    return out


@nb.njit(cache=True)
def regroup_order(fields, has, inv, starts, sizes, const):
    """`regroup` without copying the rows: per returned row the index of its row in `fields` and its
    columns 11, 12 and 14."""
    n, ng = fields.shape[0], starts.size
    perm = np.empty(n, np.int64)
    cols = np.empty((n, 3), np.int64)
    grouped = np.zeros(n, np.bool_)
    pos = np.zeros(ng + 1, np.int64)
    for j in range(has.size):
        grouped[has[j]] = True
        pos[inv[j] + 1] += 1
    w = 0
    for i in range(n):
        if not grouped[i]:
            perm[w] = i
            cols[w, 0], cols[w, 1], cols[w, 2] = fields[i, 11], fields[i, 12], fields[i, 14]
            w += 1
    pos[0] = w
    for g in range(ng):
        pos[g + 1] += pos[g]
    for j in range(has.size):
        g = inv[j]
        r = pos[g]
        pos[g] += 1
        perm[r] = has[j]
        cols[r, 0], cols[r, 1], cols[r, 2] = starts[g], starts[g] + sizes[g], fields[has[j], 14] + const[j]
    return perm, cols


@nb.njit(cache=True)
def gather(fields, forms, has, first, const):
    """The forms of each group's first row has[first[g]], one range after the other, the constant
    const[first[g]] taken out of their min rows (`share`)."""
    total = 0
    for g in range(first.size):
        i = has[first[g]]
        total += fields[i, 12] - fields[i, 11]
    out = np.empty((total, forms.shape[1]), np.int64)
    r = 0
    for g in range(first.size):
        i = has[first[g]]
        c = const[first[g]]
        for q in range(fields[i, 11], fields[i, 12]):
            for col in range(forms.shape[1]):
                out[r, col] = forms[q, col]
            if out[r, 0] == 0:
                out[r, 1] -= c
            r += 1
    return out


@nb.njit(cache=True)
def same_forms(fields, forms, has, const, first, inv):
    """Whether every field row has[j]'s adjusted forms equal those of its group's first row (no two
    distinct ones share a hash)."""
    for j in range(has.size):
        a, b = has[j], has[first[inv[j]]]
        n = fields[a, 12] - fields[a, 11]
        if n != fields[b, 12] - fields[b, 11]:
            return False
        if fields[a, 11] == fields[b, 11]:
            continue  # one range: the same forms, the same constant taken out
        ca, cb = const[j], const[first[inv[j]]]
        for r in range(n):
            ra, rb = fields[a, 11] + r, fields[b, 11] + r
            for col in range(forms.shape[1]):
                va = forms[ra, col] - (ca if col == 1 and forms[ra, 0] == 0 else 0)
                vb = forms[rb, col] - (cb if col == 1 and forms[rb, 0] == 0 else 0)
                if va != vb:
                    return False
    return True


@nb.njit(cache=True)
def share_hashed(fields, forms, mix):
    """`step.share_order` by hash in one call (a bucket's instantiation pays each call's dispatch):
    (whether no two distinct adjusted forms share a hash, then the order of the rows and their columns
    11, 12, 14, the forms, the groups). On a collision the caller falls back to the lexicographic
    unique (`step._share_rows`)."""
    n = fields[:, 12] - fields[:, 11]
    has = np.flatnonzero(n > 0)
    if has.size == 0:
        none = np.empty(0, np.int64)
        perm, cols = regroup_order(fields, has, none, none, none, none)
        return True, perm, cols, np.empty((0, forms.shape[1]), np.int64), np.zeros((0, 4), np.int64)
    h, const = form_keys(fields, forms, has, mix)
    first, inv = distinct(h)
    if not same_forms(fields, forms, has, const, first, inv):
        return False, has, np.empty((0, 3), np.int64), forms[:0].copy(), np.zeros((0, 4), np.int64)
    ng = first.size
    sizes = np.empty(ng, np.int64)
    starts = np.empty(ng, np.int64)
    at = 0
    for g in range(ng):
        sizes[g] = n[has[first[g]]]
        starts[g] = at
        at += sizes[g]
    out = gather(fields, forms, has, first, const)
    perm, cols = regroup_order(fields, has, inv, starts, sizes, const)
    return True, perm, cols, out, group_table(fields.shape[0] - has.size, inv, starts, sizes)


@nb.njit(cache=True)
def group_table(n_free, inv, starts, sizes):
    """Per group (`inv`: each grouped row's group) its forms range [starts, starts + sizes) and its rows'
    range in `regroup_order`'s order, after the n_free rows without forms."""
    ng = starts.size
    counts = np.zeros(ng, np.int64)
    for j in range(inv.size):
        counts[inv[j]] += 1
    groups = np.empty((ng, 4), np.int64)
    end = n_free
    for g in range(ng):
        end += counts[g]
        groups[g, 0], groups[g, 1], groups[g, 2], groups[g, 3] = starts[g], starts[g] + sizes[g], end - counts[g], end
    return groups


@nb.njit(cache=True)
def values(syms, ex):
    """Every min of `ex` at `syms` (expressions without dims: the bucket key's grid extents)."""
    sc = _scratch(syms, 0, depth(ex, 0))
    out = np.zeros(ex[1], np.int64)
    for m in range(ex[1]):
        out[m] = minimum(ex, 0, m, sc, syms.size, syms.size)
    return out


@nb.njit(cache=True)
def _symbolic(ex, e, dims, ns, stk, atoms, na):
    """Expression e with the dims fixed, as a vector [a, b_0.., c_0..] of a + b . s + c . atoms into
    stk[0], its floordivs of non-constants becoming atoms (rows [q, vector] of `atoms`, q > 0, shared
    when equal) from na on. Returns the new atom count, -1 if e is not of that form (a product of two
    non-constants, a division by a non-constant or zero, more than MAX_ATOMS atoms)."""
    tok = 3 + 2 * ex[0] + 2 * ex[1] + ex[2]
    sp = 0
    for t in range(ex[3 + 2 * e], ex[4 + 2 * e]):
        o, arg = ex[tok + 2 * t], ex[tok + 2 * t + 1]
        if o <= DIM:
            stk[sp, :] = 0
            if o == SYM:
                stk[sp, 1 + arg] = 1
            else:
                stk[sp, 0] = arg if o == CONST else dims[arg]
            sp += 1
            continue
        sp -= 1
        x, y = stk[sp - 1], stk[sp]
        xc, yc = not np.any(x[1:]), not np.any(y[1:])
        if o == ADD:
            x += y
        elif o == MUL:
            if xc:
                x[:] = y * x[0]
            elif yc:
                x *= y[0]
            else:
                return -1
        elif not yc or y[0] == 0:
            return -1
        elif xc:
            x[0] = binary(o, x[0], y[0])
        else:
            q = y[0]
            inner = -x if o == CEILDIV else x.copy()
            if q < 0:
                inner, q = -inner, -q
            k = 0
            while k < na and not (atoms[k, 0] == q and np.array_equal(atoms[k, 1:], inner)):
                k += 1
            if k == na:
                if na == MAX_ATOMS:
                    return -1
                atoms[na, 0], atoms[na, 1:] = q, inner
                na += 1
            if o == MOD:
                x[1 + ns + k] -= y[0]
            else:
                x[:] = 0
                x[1 + ns + k] = -1 if o == CEILDIV else 1
    return na


@nb.njit(cache=True)
def _forms_of(ex, fields, i, dims, ns, stk, atoms, out):
    """The rows of field row i (`_form`) into `out`: its atoms, then one row per result of its min
    (the other term, a single result, and the constant added to each). Returns their count, -1 if the
    field has no such form."""
    at = 3 + 2 * ex[0]
    items = at + 2 * ex[1]
    m, other = fields[i, 6], fields[i, 7]
    if other >= 0 and ex[at + 2 * other + 1] - ex[at + 2 * other] > 1:
        m, other = other, m
    if m < 0 or (other >= 0 and ex[at + 2 * other + 1] - ex[at + 2 * other] > 1):
        return -1
    na = np.int64(0)  # not a literal: numba would compile _symbolic for it as well
    add = np.zeros(stk.shape[1], np.int64)
    if other >= 0:
        na = _symbolic(ex, ex[items + ex[at + 2 * other]], dims, ns, stk, atoms, na)
        if na < 0:
            return -1
        add[:] = stk[0]
    add[0] += fields[i, 8]
    lo, hi = ex[at + 2 * m], ex[at + 2 * m + 1]
    res = np.zeros((hi - lo, stk.shape[1]), np.int64)
    for j in range(lo, hi):
        na = _symbolic(ex, ex[items + j], dims, ns, stk, atoms, na)
        if na < 0:
            return -1
        res[j - lo] = stk[0] + add
    out[:na, 0] = atoms[:na, 0]
    out[:na, 1:] = atoms[:na, 1:]
    out[na : na + hi - lo, 0] = 0
    out[na : na + hi - lo, 1:] = res
    return na + hi - lo


@nb.njit(cache=True, inline="always")
def _same_row(fields, kind, dims, i, j):
    """Whether field rows i and j have the same expressions, form kind and dims (the same forms up to
    their constant)."""
    if fields[i, 6] != fields[j, 6] or fields[i, 7] != fields[j, 7] or kind[i] != kind[j]:
        return False
    a, b = fields[i, 10], fields[j, 10]
    for d in range(dims.shape[1]):
        if dims[a, d] != dims[b, d]:
            return False
    return True


@nb.njit(cache=True)
def _firsts(fields, kind, dims):
    """Per field row the first row with the same expressions, form kind and dims (`_same_row`: itself
    when none before it), by an open-addressing table of their hashes."""
    n = fields.shape[0]
    cap = 1
    while cap < 2 * n:
        cap *= 2
    slots = np.full(cap, -1, np.int64)
    first = np.arange(n)
    for i in range(n):
        h = (fields[i, 6] * np.int64(-7046029254386353131)) ^ (fields[i, 7] + 0x9E3779B9) ^ (kind[i] << 40)
        for d in range(dims.shape[1]):
            h = (h ^ dims[fields[i, 10], d]) * np.int64(1099511628211)
        at = (h ^ (h >> 29)) & (cap - 1)
        while slots[at] >= 0 and not _same_row(fields, kind, dims, i, slots[at]):
            at = (at + 1) & (cap - 1)
        if slots[at] < 0:
            slots[at] = i
        else:
            first[i] = slots[at]
    return first


@nb.njit(cache=True)
def build(syms, ex, tiles, tt, guards, specs, spans, raw, words, n_dims):
    """The field rows of a new bucket (before `prepare`), their dims, and the words of the paged DMAs.

    `tiles`: per tile, its template range (lo, hi), number of dims, first `tt` row, whether it has
    work, then its grid's min ids; `tt`: per (tile, template), guard range, spec range, paged;
    `guards`: kind (0 eq, 1 ge), min id; `specs`: lane, offset, mask, lo, hi, min ids (2), forms kind,
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
    rows = np.zeros((n_rows, 15), np.int64)
    rdims = np.zeros((n_rows, n_dims), np.int64)
    paged = np.zeros(n_paged, np.int64)
    seen = np.full(ex[1], -1, np.int64)  # per min id: the point (a running count) its value is memoized at
    memo = np.zeros(ex[1], np.int64)
    r, pg, at = 0, 0, 0
    for ti in range(nt):
        if spans[ti, 0] < 0 or tiles[ti, 4] == 0:
            continue
        w = spans[ti, 0]
        for p in range(npts[ti]):
            q = p
            for g in range(tiles[ti, 2] - 1, -1, -1):
                dims[g] = q % ext[ti, g]
                q //= ext[ti, g]
            at += 1
            for j in range(tiles[ti, 1] - tiles[ti, 0]):
                k = tiles[ti, 3] + j
                ok = True
                for gi in range(tt[k, 0], tt[k, 1]):
                    m = guards[gi, 1]
                    if seen[m] != at:  # the templates of a point share most of their guards
                        seen[m], memo[m] = at, minimum(ex, 0, m, sc, ns, st)
                    v = memo[m]
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
