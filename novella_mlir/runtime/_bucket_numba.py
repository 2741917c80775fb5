"""The numba kernels of a new bucket (`step.py`) that reach beyond its own rows: `prepare`, which
completes its field rows with their forms (`_step_numba._forms_of`), keeping what it derived for the
plan's later buckets (`Kept`), `relocate`, the session's translation of its words (`kv.py`),
`patch_tables`, the per-row tables of its patch, and `tables`, all of them after `relocate` in one
call, `relocated_tables` with `relocate` too (a bucket's instantiation pays each call's dispatch, its
host caches cold: ~30 us per compiled function after a simulator run)."""

from __future__ import annotations

import sys

import numba as nb
import numpy as np

from simulator import numba_cache
from simulator.first_build import announce

from ._expr_numba import depth, minimum
from ._patch_numba import (
    AT,
    BOX,
    EX,
    FDIMS,
    FORMS,
    FREE,
    GROUPS,
    HOT,
    KEYEX,
    KEYV,
    KV,
    MEMO,
    META,
    PAGES,
    PARTS,
    PREV,
    REFS,
    SCRATCH,
    SLOT,
    SLOTS,
    WORDS,
)
from ._step_numba import MAX_ATOMS, _firsts, _form, _forms_of, _scratch, build, pack_order, share_hashed, values

numba_cache.ensure(__file__)


def prepare(syms, ex, fields, dims, memo=True, kept=None):
    """Completes a new bucket's field rows in place: column 8 holds the field's value in the words;
    it becomes the constant (the value minus the terms at `syms`). Then each field row marked in
    column 11 (1: affine in the symbols, 2: maybe quasi-affine) gets its `_form` rows, from its min in
    column 6 plus the term in column 7: exact, the expressions being sums of constants, symbols and
    floordivs by constants (`_symbolic`), the dims fixed; rows without one keep the interpreter
    (columns 11, 12 equal). Returns the forms and -1, or the first affine row that got an atom or no form.

    `memo`: a row with the expressions, kind and dims of an earlier one (`_firsts`: the copies of one
    page's address across the heads and lanes of a batched step) takes its terms' value and its forms,
    their constant moved by the difference of the two rows' constants, without the interpreter (the
    same result as `memo=False`, which derives every row).

    `kept`: a `Kept` of the plan's earlier buckets: a row whose expressions, kind and dims one of them
    derived takes those forms (their value at `syms` its terms' value) instead of deriving them again
    (the same result: the forms are exact; a neighbouring bucket shares all but its new grid points)."""
    if kept is not None:
        kept.fit(len(fields))
    k = kept.arrays() if kept is not None else Kept.EMPTY
    forms, bad, full = _prepare(syms, ex, fields, dims, memo, *k)
    if kept is not None and full:
        kept.grow(full)  # the rows after it were not kept: the next bucket derives and keeps them
    return forms, bad


class Kept:
    """The forms `prepare` derived for a plan's earlier buckets, keyed by a row's expressions, kind and
    dims (an open-addressing table: `_kept_at`), with room for twice the rows of the largest bucket so
    far; grown (its entries kept) when a bucket finds it full."""

    EMPTY = (np.full(1, -1, np.int64), np.zeros((0, 4), np.int64), np.zeros((0, 2), np.int64),
             np.zeros((0, 1), np.int64), np.zeros(2, np.int64))  # fmt: skip

    def __init__(self, n_dims: int, n_syms: int):
        self.n_dims, self.width = n_dims, 2 + n_syms + MAX_ATOMS
        self.keys = np.zeros((0, 3 + n_dims), np.int64)
        self.ranges = np.zeros((0, 2), np.int64)
        self.forms = np.zeros((0, self.width), np.int64)
        self.count = np.zeros(2, np.int64)  # entries, forms rows used
        self._alloc(0)

    def _alloc(self, entries: int, rows: int = 0) -> None:
        cap = 1 << int(np.ceil(np.log2(2 * max(entries, 1))))
        e, f = self.count
        keys, ranges = np.zeros((entries, 3 + self.n_dims), np.int64), np.zeros((entries, 2), np.int64)
        forms = np.zeros((max(rows, f), self.width), np.int64)
        keys[:e], ranges[:e], forms[:f] = self.keys[:e], self.ranges[:e], self.forms[:f]
        self.keys, self.ranges, self.forms = keys, ranges, forms
        self.slots = np.full(cap, -1, np.int64)
        _rehash(self.slots, self.keys, e)

    def arrays(self) -> tuple:
        return self.slots, self.keys, self.ranges, self.forms, self.count

    def grow(self, need: int) -> None:
        self._alloc(max(2 * len(self.keys), need), 2 * max(len(self.forms), need))

    def fit(self, rows: int) -> None:
        """Room for a bucket of `rows` field rows (a quarter of them new entries of 3 forms rows: what a
        grid grown by one point needs; a bucket that finds it full grows it for the next)."""
        need = int(self.count[0]) + rows // 4 + 64
        if len(self.keys) < need:
            self._alloc(2 * need, 2 * (int(self.count[1]) + 3 * (rows // 4 + 64)))


@nb.njit(cache=True, inline="always")
def _hash(a, b, kind, dims, row):
    h = (a * np.int64(-7046029254386353131)) ^ (b + 0x9E3779B9) ^ (kind << 40)
    for d in range(dims.shape[1]):
        h = (h ^ dims[row, d]) * np.int64(1099511628211)
    return h ^ (h >> 29)


@nb.njit(cache=True)
def _rehash(slots, keys, n):
    """Places the first n entries of `keys` in the empty table `slots`."""
    dims = keys[:, 3:]
    for e in range(n):
        at = _hash(keys[e, 0], keys[e, 1], keys[e, 2], dims, e) & (slots.size - 1)
        while slots[at] >= 0:
            at = (at + 1) & (slots.size - 1)
        slots[at] = e


@nb.njit(cache=True)
def _kept_at(slots, keys, fields, kind, dims, i):
    """The table slot of field row i's key (expressions, kind, dims) in `slots`: its entry, or -1 there."""
    cap = slots.size
    nd = dims.shape[1]
    at = _hash(fields[i, 6], fields[i, 7], kind[i], dims, fields[i, 10]) & (cap - 1)
    while slots[at] >= 0:
        e = slots[at]
        same = keys[e, 0] == fields[i, 6] and keys[e, 1] == fields[i, 7] and keys[e, 2] == kind[i]
        for d in range(nd):
            same = same and keys[e, 3 + d] == dims[fields[i, 10], d]
        if same:
            return at
        at = (at + 1) & (cap - 1)
    return at


@nb.njit(cache=True)
def _keep(slots, keys, ranges, kforms, count, at, fields, kind, dims, i, forms, lo, n, const):
    """Stores row i's forms (forms[lo:lo + n], the constant `const` taken out; n = -1: none) at slot `at`.
    False when the table is full."""
    e, f = count[0], count[1]
    if e >= keys.shape[0] or 2 * (e + 1) > slots.size or f + max(n, 0) > kforms.shape[0]:
        return False
    keys[e, 0], keys[e, 1], keys[e, 2] = fields[i, 6], fields[i, 7], kind[i]
    keys[e, 3:] = dims[fields[i, 10]]
    ranges[e, 0], ranges[e, 1] = f, n
    for r in range(max(n, 0)):
        kforms[f + r] = forms[lo + r]
        if forms[lo + r, 0] == 0:
            kforms[f + r, 1] -= const
    slots[at] = e
    count[0], count[1] = e + 1, f + max(n, 0)
    return True


@nb.njit(cache=True)
def _prepare(syms, ex, fields, dims, memo, slots, keys, ranges, kforms, count):
    """`prepare`; returns (forms, bad, 0), or the entries `Kept` needs in the third when it was full."""
    ns, nd = syms.size, dims.shape[1]
    sc = _scratch(syms, nd, depth(ex, 0))
    st = ns + nd
    at = 3 + 2 * ex[0]
    width = 1 + ns + MAX_ATOMS
    stk = np.zeros((depth(ex, 0), width), np.int64)
    atoms = np.zeros((MAX_ATOMS, 1 + width), np.int64)
    katoms = np.zeros(MAX_ATOMS, np.int64)
    kind = fields[:, 11].copy()
    first = _firsts(fields, kind, dims) if memo else np.arange(fields.shape[0])
    use = slots.size > 1 and kforms.shape[1] == 1 + width
    bound = 0
    for i in range(fields.shape[0]):
        if kind[i] and first[i] == i:
            bound += MAX_ATOMS
            for c in range(6, 8):
                if fields[i, c] >= 0:
                    bound += ex[at + 2 * fields[i, c] + 1] - ex[at + 2 * fields[i, c]]
    forms = np.zeros((bound, 1 + width), np.int64)
    terms = np.zeros(fields.shape[0], np.int64)
    k, bad, full = np.int64(0), -1, 0  # k not a literal: numba would compile _keep for it as well
    for i in range(fields.shape[0]):
        j = first[i]
        if j != i:
            fields[i, 8] -= terms[j]
            if kind[i] == 1 and bad < 0 and (fields[j, 12] == fields[j, 11] or forms[fields[j, 11], 0] > 0):
                bad = i
            fields[i, 11], fields[i, 12] = fields[j, 11], fields[j, 12]
            if fields[j, 12] > fields[j, 11]:
                fields[i, 14] += fields[i, 8] - fields[j, 8]  # what `_form`'s value is added (`share`)
            continue
        slot = _kept_at(slots, keys, fields, kind, dims, i) if use and kind[i] else -1
        e = slots[slot] if slot >= 0 else -1
        if e >= 0 and ranges[e, 1] >= 0:
            lo, n = ranges[e, 0], ranges[e, 1]
            terms[i] = _form(kforms, lo, lo + n, syms, ns, katoms)
            fields[i, 8] -= terms[i]
            for r in range(n):
                for c in range(forms.shape[1]):
                    forms[k + r, c] = kforms[lo + r, c]
                if forms[k + r, 0] == 0:
                    forms[k + r, 1] += fields[i, 8]
        else:
            sc[ns:st] = dims[fields[i, 10]]
            for c in range(6, 8):
                if fields[i, c] >= 0:
                    terms[i] += minimum(ex, 0, fields[i, c], sc, ns, st)
            fields[i, 8] -= terms[i]
            n = _forms_of(ex, fields, i, dims[fields[i, 10]], ns, stk, atoms, forms[k:]) if kind[i] else -1
            if slot >= 0 and e < 0 and not full:
                if not _keep(
                    slots, keys, ranges, kforms, count, slot, fields, kind, dims, i, forms, k, n, fields[i, 8]
                ):
                    full = fields.shape[0]
        if kind[i] == 1 and bad < 0 and (n < 0 or forms[k, 0] > 0):
            bad = i
        fields[i, 11] = k
        k += max(n, 0)
        fields[i, 12] = k
    return forms[:k], bad, full


@nb.njit(cache=True)
def relocate(raw, dma, op, base, seg, vbase, vspan, page_elems):
    """`kv.Session._translate` in one pass: a copy of `raw` whose DMA descriptors (opcodes `dma`) below
    the cache window `vbase` have `seg` added to their `dram_base`, and per descriptor in the window
    (in word order) its row, cache slot, page and offset in the page. `op`, `base`: the opcode's and
    `dram_base`'s (lane, offset, mask, hi, bits, signed). Status 1: a slot the program does not have."""
    n = raw.shape[0]
    words = raw.copy()
    rows = np.zeros(n, np.int64)
    k = 0
    for w in range(n):
        code = np.int64((raw[w, op[0]] >> np.uint64(op[1])) & np.uint64(op[2]))
        is_dma = False
        for d in dma:
            is_dma = is_dma or code == d
        if not is_dma:
            continue
        v = np.int64((raw[w, base[0]] >> np.uint64(base[1])) & np.uint64(base[2]))
        if base[5] and v > base[3]:
            v -= np.int64(1) << np.int64(base[4])
        if v >= vbase:
            rows[k] = w
            k += 1
            continue
        m = np.uint64(base[2]) << np.uint64(base[1])
        words[w, base[0]] = (words[w, base[0]] & ~m) | (np.uint64((v + seg) & base[2]) << np.uint64(base[1]))
    rows = rows[:k]
    slot, page, off = np.zeros(k, np.int64), np.zeros(k, np.int64), np.zeros(k, np.int64)
    for j in range(k):
        w = rows[j]
        v = np.int64((raw[w, base[0]] >> np.uint64(base[1])) & np.uint64(base[2]))
        if base[5] and v > base[3]:
            v -= np.int64(1) << np.int64(base[4])
        v -= vbase
        slot[j] = v // vspan
        if slot[j] >= page_elems.size:
            return words, rows, slot, page, off, 1
        rem = v % vspan
        page[j], off[j] = rem // page_elems[slot[j]], rem % page_elems[slot[j]]
    return words, rows, slot, page, off, 0


@nb.njit(cache=True)
def patch_tables(fields, perm, const, n_words, rows, page, slot, offset, kv, dma):
    """A new bucket's per-row patch tables in one call: `pack_order(fields, perm, const)`, per row of
    fields[perm] the cache slot of its virtual address (paged rows, column 9: its word's translated
    DMA's; 0 otherwise), and the page addresses no symbol moves (word, lane, offset, mask, page,
    offset in the block: each translated DMA (`rows`, `page`, `slot`, `offset`: `kv.Translation`) whose
    word has no paged field). `dma`: the DMA's dram_base lane, offset, mask; `kv`: the session's layout
    (`kv.Session.kv_layout`)."""
    hot = pack_order(fields, perm, const)
    of_word = np.full(n_words, -1, np.int64)
    for j in range(rows.size):
        of_word[rows[j]] = slot[j]
    at = np.zeros(perm.size, np.int64)
    for r in range(perm.size):
        w = fields[perm[r], 0]
        if fields[perm[r], 9] == 1:
            at[r] = of_word[w]
    for r in range(perm.size):
        if fields[perm[r], 9] == 1:
            of_word[fields[perm[r], 0]] = -2  # moved by a symbol: patched by its field row
    n = 0
    for j in range(rows.size):
        n += of_word[rows[j]] != -2
    pages = np.zeros((n, 6), np.int64)
    n = 0
    for j in range(rows.size):
        if of_word[rows[j]] != -2:
            pages[n, 0], pages[n, 1], pages[n, 2], pages[n, 3] = rows[j], dma[0], dma[1], dma[2]
            pages[n, 4], pages[n, 5] = page[j], kv[5 + 2 * slot[j]] + offset[j]
            n += 1
    return hot, at, pages


@nb.njit(cache=True)
def tables(syms, ns, plan, spans, raw, tr, kv, dma, mix, kept):
    """`_step_numba.build`, `prepare` (`kept`: `Kept.arrays`), `share_hashed` and `patch_tables` of a new
    bucket in one call. `plan`: the plan's (ex, tiles, tt, guards, specs, n_dims); `tr`: the translation
    (words, rows, slot, page, offset: `kv.Translation`). Returns (status, rows, dims, forms, bad, full,
    perm, cols, groups, hot, slot, pages): status 1 when the words disagree with the templates, 2 on a
    hash collision of `share_hashed` (its has in perm, the rest of the tables empty: the caller shares
    the rows the lexicographic way), 0 otherwise; `bad`, `full`: `prepare`'s."""
    ex, tiles, tt, guards, specs, n_dims = plan
    words, tr_rows, tr_slot, tr_page, tr_offset = tr
    rows, dims, paged, status = build(syms, ex, tiles, tt, guards, specs, spans, raw, words, n_dims)
    same = paged.size == tr_rows.size and np.all(paged == tr_rows)
    e1 = np.zeros(0, np.int64)
    e2 = np.zeros((0, 2), np.int64)
    if status or not same:
        return 1, rows, dims, np.zeros((0, 1), np.int64), -1, 0, e1, e2, e2, e2, e1, e2
    forms, bad, full = _prepare(syms[:ns], ex, rows, dims, True, *kept)
    if bad >= 0:
        return 0, rows, dims, forms, bad, full, e1, e2, e2, e2, e1, e2
    ok, perm, cols, shared, groups = share_hashed(rows, forms, mix)
    if not ok:
        return 2, rows, dims, forms, bad, full, perm, cols, groups, e2, e1, e2
    hot, slot, pages = patch_tables(rows, perm, cols[:, 2].copy(), words.shape[0], tr_rows, tr_page, tr_slot,
                                    tr_offset, kv, dma)  # fmt: skip
    return 0, rows, dims, shared, bad, full, perm, cols, groups, hot, slot, pages


@nb.njit(cache=True)
def relocated_tables(syms, ns, plan, spans, raw, reloc, kv, dma, mix, kept):
    """`relocate` (`reloc`: its arguments after `raw`) and `tables` of its translation in one call:
    (relocate's status, the translation, `tables`' results); on a status of 1 the translation and the
    tables are empty."""
    words, rows, slot, page, off, bad = relocate(raw, *reloc)
    if bad:
        rows, slot, page, off = rows[:0], slot[:0], page[:0], off[:0]
        spans = np.full_like(spans, -1)
    tr = (words, rows, slot, page, off)
    return bad, tr, tables(syms, ns, plan, spans, raw, tr, kv, dma, mix, kept)


@nb.njit(cache=True)
def relocated_state(syms, ns, plan, spans, raw, reloc, kv, dma, mix, kept, fixed):
    """`relocated_tables` and the new bucket's `_patch_numba` state in one call: (its results, the state;
    empty unless every status is 0, when the caller builds the state the readable way: `Stepper._state`).
    `fixed`: what every bucket of the plan's state holds alike (`Stepper._fixed`): the key's extents'
    expressions, the cache slots (`Stepper._slots`), per program its box (n_programs, ns, 2), and
    [block table entries, stack depth]."""
    bad, tr, out = relocated_tables(syms, ns, plan, spans, raw, reloc, kv, dma, mix, kept)
    status, rows, dims, forms, wrong, full, perm, cols, groups, hot, slot, pages = out
    if bad or status or wrong >= 0:
        return bad, tr, out, np.zeros(0, np.int64)
    keyex, slots, boxes, ints = fixed
    prog = _pick(syms, ns, boxes)
    if prog < 0:
        return bad, tr, out, np.zeros(0, np.int64)
    ex = plan[0]
    return bad, tr, out, _assembled(syms[:ns], ex, keyex, kv, slots, boxes[prog], ints, rows, dims, forms, perm,
                                    groups, hot, slot, pages, tr[0])  # fmt: skip


@nb.njit(cache=True)
def _pick(syms, ns, boxes):
    """`Artifact.pick`: the first program whose box holds syms[:ns]; -1 if none does."""
    for i in range(boxes.shape[0]):
        inside = True
        for k in range(ns):
            inside = inside and boxes[i, k, 0] <= syms[k] <= boxes[i, k, 1]
        if inside:
            return i
    return -1


@nb.njit(cache=True)
def _assembled(syms, ex, keyex, kv, slots, box, ints, rows, dims, forms, perm, groups, hot, slot, pages, words):
    """`_patch_numba.state` of the parts `Stepper._state` gives it, bit for bit (PREV and REFS' list left
    unset by both)."""
    n_pages, stack = ints[0], ints[1]
    nf = groups[0, 2] if groups.shape[0] else perm.size
    nd, nc = dims.shape[1], rows.shape[1]
    keyv = values(syms, keyex)
    n = len(PARTS)
    size, cols = np.zeros(n, np.int64), np.zeros(n, np.int64)
    size[META], size[BOX], size[SCRATCH], size[KV] = 6, box.size, syms.size + nd + stack + MAX_ATOMS, kv.size
    size[SLOTS], size[KEYV], size[KEYEX], size[MEMO] = slots.size, keyv.size, keyex.size, groups.shape[0]
    size[GROUPS], size[FORMS], size[HOT], size[AT] = groups.size, forms.size, hot.size, hot.shape[0]
    size[SLOT], size[PAGES], size[EX], size[FREE] = slot.size, pages.size, ex.size if nf else 0, nf * nc
    size[FDIMS], size[WORDS], size[PREV], size[REFS] = nf * nd, words.size, n_pages, n_pages + (n_pages + 7) // 8
    cols[BOX], cols[SLOTS], cols[GROUPS], cols[FORMS], cols[HOT] = 2, slots.shape[1], 4, forms.shape[1], 2
    cols[PAGES], cols[FREE], cols[FDIMS], cols[WORDS] = pages.shape[1], nc, nd, words.shape[1]
    head = 1 + 3 * n
    st = np.empty(head + size.sum(), np.int64)
    st[0], at = n, head
    for k in range(n):
        st[1 + 3 * k], st[2 + 3 * k], st[3 + 3 * k] = at, at + size[k], cols[k]
        at += size[k]
    _copy(st, META, np.array([0, 0, 0, stack, nf, nd], np.int64))
    _copy(st, BOX, box.ravel())
    for k in (SCRATCH, MEMO):
        st[st[1 + 3 * k] : st[2 + 3 * k]] = 0
    _copy(st, KV, kv)
    _copy(st, SLOTS, slots.ravel())
    _copy(st, KEYV, keyv)
    _copy(st, KEYEX, keyex)
    _copy(st, GROUPS, groups.ravel())
    _copy(st, FORMS, forms.ravel())
    _copy(st, HOT, hot.ravel())
    st[st[1 + 3 * AT] : st[2 + 3 * AT]] = -1
    _copy(st, SLOT, slot)
    _copy(st, PAGES, pages.ravel())
    if nf:
        _copy(st, EX, ex)
    f, d = st[1 + 3 * FREE], st[1 + 3 * FDIMS]
    for r in range(nf):
        st[f + r * nc : f + (r + 1) * nc] = rows[perm[r]]
        st[d + r * nd : d + (r + 1) * nd] = dims[rows[perm[r], 10]]
    _copy(st, WORDS, words.view(np.int64).ravel())
    st[st[1 + 3 * REFS] + n_pages : st[2 + 3 * REFS]] = 0
    return st


@nb.njit(cache=True, inline="always")
def _copy(st, k, a):
    st[st[1 + 3 * k] : st[2 + 3 * k]] = a


announce(sys.modules[__name__])
