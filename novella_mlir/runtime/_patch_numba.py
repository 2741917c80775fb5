"""The per-step patch of a bucket's words (`step.py`), one compiled call of three arguments per step.

A bucket's tables are one int64 array, its *state* (`state`): a header [n_parts, then per part its
start, end and columns], then the parts `PARTS` names, those every step reads first. A step's patch runs right after the NPU (the
simulator) has run, the host's caches cold: the call takes the symbol (an int, `patch1`; a tuple of
several, `patch`), the state and the block table (each argument costs its typing and unboxing: the
words are a part of the state), allocates nothing, and walks the unmoved page addresses only when a block table entry
the words use changed.

Parts: KEYV, KEYEX the grid extents of the bucket key and their expressions; EX, FREE, FDIMS the
expressions, field rows (`step.Plan._spec`, 15 columns) and dims of the rows without a form (the
first NFREE rows); FORMS, GROUPS what `_form` evaluates once per group (`step.share`: a forms range
and its rows' range); HOT per row its packed place and the constant added to its group's value
(`_step_numba.pack`); AT per row the block table index of its last page mapping (-1: none); SLOT per
row its cache slot (paged rows) and SLOTS per slot its window base, page elements, their log2 (-1:
not a power of two) and offset in the block; PAGES the page addresses no symbol moves (word, lane,
offset, mask, page, offset in the block); META [1 if the words hold the last patch, used entries,
one past the highest used entry, stack depth, NFREE, grid dims]; MEMO each group's value at the last
patch; PREV the block of each used entry at the last patch, in REFS' order (read in sequence); REFS
the used entries (each once) then a mark (a byte) per entry (1: used, 2: its block changed this
step); KV the session's layout (pool base, block elements, vbase, vspan, then per cache slot its
page elements and offset in the block); BOX the program's [lo, hi] per symbol; SCRATCH the
symbols, dims, the interpreter's stack and the forms' atoms; WORDS the bucket's words (`words_of`).
"""

from __future__ import annotations

import sys

import numba as nb
import numpy as np
from llvmlite import ir as llvmir
from numba.core import cgutils
from numba.extending import intrinsic

from simulator import numba_cache
from simulator.first_build import announce

from ._expr_numba import minimum
from ._step_numba import MAX_ATOMS, _form

numba_cache.ensure(__file__)

PARTS = ("META", "BOX", "SCRATCH", "KV", "SLOTS", "KEYV", "KEYEX", "MEMO", "GROUPS", "FORMS", "HOT", "AT", "SLOT",
         "PAGES", "EX", "FREE", "FDIMS", "WORDS", "PREV", "REFS")  # fmt: skip
(META, BOX, SCRATCH, KV, SLOTS, KEYV, KEYEX, MEMO, GROUPS, FORMS, HOT, AT, SLOT, PAGES, EX, FREE, FDIMS, WORDS, PREV,
 REFS) = range(len(PARTS))  # fmt: skip
WARM, NREF, TOP, DEPTH, NFREE, NDIMS = range(6)  # META
ZERO = ("SCRATCH", "MEMO", "PREV", "REFS")  # parts given by their size alone (`state`)


def state(parts: dict) -> np.ndarray:
    """The state array of `parts`: name -> int64 array (1-D or 2-D; WORDS the (n, 4) uint64 words, held
    bit for bit) for every name of `PARTS`, or its size for those of `ZERO`, zeros. PREV and REFS'
    list, as many entries as the cache's pages, are left unset (REFS' marks after it, a byte per entry,
    are zeros): `patch` reads an entry of either only after writing it (PREV on a warm step: the step
    before wrote each used entry)."""
    arrays = [np.asarray(parts[n]) if n not in ZERO else parts[n] for n in PARTS]
    sizes = [a if isinstance(a, int) else a.size for a in arrays]
    cols = [a.shape[1] if not isinstance(a, int) and a.ndim == 2 else 0 for a in arrays]
    n_head = 1 + 3 * len(PARTS)
    ends = np.cumsum([n_head] + sizes)
    out = np.empty(int(ends[-1]), np.int64)
    head = out[:n_head]
    head[0], head[1::3], head[2::3], head[3::3] = len(PARTS), ends[:-1], ends[1:], cols
    flat = [np.zeros(a, np.int64) if isinstance(a, int) else _int64(a) for a in arrays[:PREV]]
    np.concatenate(flat, out=out[n_head : ends[PREV]])  # one copy of every part before PREV
    out[ends[REFS] + sizes[PREV] : ends[REFS + 1]] = 0  # REFS' marks
    return out


def _int64(a: np.ndarray) -> np.ndarray:
    return a.reshape(-1).view(np.int64) if a.dtype == np.uint64 else a.reshape(-1).astype(np.int64, copy=False)


def words_of(st: np.ndarray) -> np.ndarray:
    """The (n, 4) uint64 words held in state `st` (a view: what `patch` rewrites in place)."""
    lo, hi = int(st[1 + 3 * WORDS]), int(st[2 + 3 * WORDS])
    return st[lo:hi].view(np.uint64).reshape(-1, 4)


@nb.njit(cache=True, inline="always")
def _part(st, k):
    return st[st[1 + 3 * k] : st[2 + 3 * k]]


@nb.njit(cache=True, inline="always")
def _rows(st, k):
    lo, hi, c = st[1 + 3 * k], st[2 + 3 * k], st[3 + 3 * k]
    return st[lo:hi].reshape((hi - lo) // max(c, 1), max(c, 1))


@nb.njit(cache=True, inline="always")
def _marks(refs, n_pages):
    """REFS' marks: a byte per block table entry, after its list of `n_pages` entries."""
    return refs[n_pages:].view(np.uint8)


@nb.njit(cache=True, inline="always")
def _words(st):
    lo, hi = st[1 + 3 * WORDS], st[2 + 3 * WORDS]
    return st[lo:hi].view(np.uint64).reshape(((hi - lo) // 4, 4))


@nb.njit(cache=True, inline="always")
def _put(words, w, lane, off, mask, v):
    m = np.uint64(mask) << np.uint64(off)
    words[w, lane] = (words[w, lane] & ~m) | ((np.uint64(v & mask)) << np.uint64(off))


@nb.njit(cache=True, inline="always")
def _placed(old, c, v):
    """(whether v fits the field of packed row code c, the word lane `old` with the field set to v)."""
    bits = (c >> 12) & 127
    if (c >> 22) & 1:
        lo, hi = -(np.int64(1) << (bits - 1)), (np.int64(1) << (bits - 1)) - 1
    else:
        lo, hi = np.int64(0), (np.int64(1) << bits) - 1
    mask = (np.int64(1) << bits) - 1
    m = np.uint64(mask) << np.uint64((c >> 2) & 63)
    return lo <= v <= hi, (old & ~m) | (np.uint64(v & mask) << np.uint64((c >> 2) & 63))


@nb.njit(cache=True, inline="always")
def _page_of(v, base, pe, sh, span):
    """(page, offset in it) of virtual address v in the cache slot window at `base` (`span` long, pages
    of `pe` elements, sh = log2(pe) or -1); (-1, 0) outside the window."""
    r = v - base
    if r < 0 or r >= span:
        return -1, 0
    page = r >> sh if sh >= 0 else r // pe
    return page, r - page * pe


@nb.njit(cache=True)
def _use(page, meta, refs, marks):
    """Notes that the words use block table entry `page` (listed once in `refs`, marked in `marks`)."""
    if marks[page] == 0:
        marks[page] = 1
        refs[meta[NREF]] = page
        meta[NREF] += 1
    meta[TOP] = max(meta[TOP], page + 1)


@nb.njit(cache=True)
def patch(syms, st, blocks):
    """Rewrites the injected fields and page addresses of the words a bucket's state `st` holds
    (`words_of`) for `syms` (a tuple) and `blocks`. Returns 0; -2 if `syms` are outside the program's
    box or the bucket (the grid extents of its key); -1 if the block table lacks a page; 1 + the index
    of a field row whose value does not fit its field.

    Each group is evaluated once; when META[WARM] is 1 the words hold the last patch, and a row is
    rewritten only when its group's value moved, or, paged, when its block table entry changed (only
    the entries the words use are compared and kept: `REFS`, `PREV`)."""
    sc = _part(st, SCRATCH)
    for k in range(len(syms)):
        sc[k] = syms[k]
    return _patch(st, blocks, len(syms))


@nb.njit(cache=True)
def patch1(s, st, blocks):
    """`patch` of a program of one symbol, its value `s` an int: the cheapest call numba dispatches
    (an int and two arrays; a tuple costs its own typing and unboxing every step)."""
    sc = _part(st, SCRATCH)
    sc[0] = s
    return _patch(st, blocks, 1)


@intrinsic
def _address(typingctx, addr):
    """The int64 pointer at address `addr` (an int)."""

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(nb.types.CPointer(nb.types.int64)))

    return nb.types.CPointer(nb.types.int64)(nb.types.int64), codegen


@intrinsic
def _prefetch(typingctx, addr):
    """A software prefetch (`llvm.prefetch`, into the second-level cache) of the line at address `addr`."""

    def codegen(context, builder, signature, args):
        i8p, i32 = llvmir.IntType(8).as_pointer(), llvmir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, llvmir.FunctionType(llvmir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0i8")  # fmt: skip
        builder.call(fn, [builder.inttoptr(args[0], i8p), i32(0), i32(2), i32(1)])
        return context.get_dummy_value()

    return nb.types.void(nb.types.int64), codegen


@nb.njit(cache=True, inline="always")
def _at(where):
    """The state and the block table whose addresses and sizes the int64 vector at address `where` holds
    (state address, its size, block table address, its size; the caller keeps all three alive)."""
    w = nb.carray(_address(where), 4)
    return nb.carray(_address(w[0]), w[1]), nb.carray(_address(w[2]), w[3])


@nb.njit(cache=True)
def patch1_at(s, where):
    """`patch1` of the state and block table at `where` (`_at`). Two ints cost less to pass than two
    arrays or a tuple (numba unboxes an array into a struct and a reference, and each int of a tuple is
    an object of its own: right after a simulator run, the host's caches cold, each costs its misses)."""
    st, blocks = _at(where)
    _part(st, SCRATCH)[0] = s
    return _patch(st, blocks, 1)


@nb.njit(cache=True)
def patch_at(syms, where):
    """`patch` of the state and block table at `where` (`_at`)."""
    st, blocks = _at(where)
    sc = _part(st, SCRATCH)
    for k in range(len(syms)):
        sc[k] = syms[k]
    return _patch(st, blocks, len(syms))


def entry(ns: int):
    """The compiled `patch1_at` (one symbol: an int) or `patch_at` (a tuple of `ns` ints), called without
    numba's dispatch: the dispatcher types every argument at every call, ~3-4 us right after a
    simulator run. The entry unboxes by its signature: the caller passes exactly those types."""
    t = nb.types
    sym = t.int64 if ns == 1 else t.UniTuple(t.int64, ns)
    return (patch1_at if ns == 1 else patch_at).compile((sym, t.int64))


@nb.njit(cache=True)
def where(out, st, blocks):
    """Writes `patch1_at`'s `where` vector for state `st` and block table `blocks` into `out` (4 int64,
    whose `address` the caller passes): one compiled call, a few us cheaper than reading two
    `__array_interface__`s."""
    out[0], out[1], out[2], out[3] = st.ctypes.data, st.size, blocks.ctypes.data, blocks.size


def address(a: np.ndarray) -> int:
    """The address of `a`'s data (`patch1_at`'s `where`)."""
    return a.__array_interface__["data"][0]


@nb.njit(cache=True)
def _patch(st, blocks, ns):
    """`patch`, the symbols in SCRATCH[:ns]."""
    meta, box = _part(st, META), _part(st, BOX)
    sc = _part(st, SCRATCH)
    for k in range(ns):
        if sc[k] < box[2 * k] or sc[k] > box[2 * k + 1]:
            return -2
    nd = meta[NDIMS]
    key_ex, key = _part(st, KEYEX), _part(st, KEYV)
    for m in range(key.size):
        if minimum(key_ex, 0, m, sc, ns, ns + nd) != key[m]:
            return -2
    words = _words(st)
    refs, prev = _part(st, REFS), _part(st, PREV)
    marks = _marks(refs, prev.size)
    warm = meta[WARM] == 1 and blocks.size >= meta[TOP]
    meta[WARM] = 0
    if not warm:
        for k in range(meta[NREF]):
            marks[refs[k]] = 0
        meta[NREF], meta[TOP] = 0, 0
    remapped = _changed(blocks, meta, refs, prev, marks) if warm else True
    n_ref = meta[NREF]
    rc = _sweep(st, sc, ns, warm, remapped, words, blocks, meta, refs, marks)
    if rc:
        return rc
    if remapped:
        rc = _remap(st, warm, words, blocks, meta, refs, prev, marks)
        if rc:
            return rc
        n_ref = 0
    for k in range(n_ref, meta[NREF]):  # the entries listed before, unless remapped, equal their PREV
        prev[k] = blocks[refs[k]]
        marks[refs[k]] = 1
    meta[WARM] = 1
    return 0


@nb.njit(cache=True, inline="always")
def _changed(blocks, meta, refs, prev, marks):
    """Whether a block table entry the words use changed since the last patch (PREV[k]: entry REFS[k]
    then, in the list's order: read in sequence); each changed one is marked 2."""
    out = False
    for k in range(meta[NREF]):
        if blocks[refs[k]] != prev[k]:
            marks[refs[k]] = 2
            out = True
    return out


@nb.njit(cache=True)
def _keeps(st, v, key_ex, key):
    """Whether symbol value v (a program of one symbol) gives grid extents `key` (`key_ex`'s values)."""
    sc = _part(st, SCRATCH)
    sc[0] = v
    nd = _part(st, META)[NDIMS]
    for m in range(key.size):
        if minimum(key_ex, 0, m, sc, 1, 1 + nd) != key[m]:
            return False
    return True


@nb.njit(cache=True)
def narrow(st, s, lo, hi, key_ex, key):
    """For a bucket of a program of one symbol whose key (`key`, the values of `key_ex`) value `s` gives:
    BOX set to the values around `s` within the program's box [lo, hi] whose key is the bucket's, every
    one checked, and KEYV emptied (its header range), so that a step's key check is the box check
    (`_patch`: no interpreter). Returns the new box."""
    box = _part(st, BOX)
    a, b = s, s
    while a > lo and _keeps(st, a - 1, key_ex, key):
        a -= 1
    while b < hi and _keeps(st, b + 1, key_ex, key):
        b += 1
    box[0], box[1] = a, b
    st[2 + 3 * KEYV] = st[1 + 3 * KEYV]
    return a, b


@nb.njit(cache=True)
def _remap(st, warm, words, blocks, meta, refs, prev, marks):
    """The page addresses no symbol moves, at a step whose used block table entries changed (or the
    first): each one's entry must exist; those whose entry changed are rewritten. (On a warm step that
    changed no used entry, every one still holds.)"""
    pages, kv = _rows(st, PAGES), _part(st, KV)
    half = prev.size
    for j in range(pages.shape[0]):
        p = pages[j, 4]
        if p >= blocks.size or p >= half or blocks[p] < 0:
            return -1
        if not warm or marks[p] == 2:
            _put(words, pages[j, 0], pages[j, 1], pages[j, 2], pages[j, 3], kv[0] + blocks[p] * kv[1] + pages[j, 5])
        _use(p, meta, refs, marks)
    return 0


@nb.njit(cache=True, inline="always")
def _ahead(words, forms, groups, memo, hot, sc, ns, atoms):
    """Prefetches the words of every group whose value moved, before any is written: right after a
    simulator run each is a cache miss, and a row's write waits for its word (B = 32, past 16: 1,366
    fields in 1,233 words; the cold patch's best of 150, 27.7 -> 21.3 us, on a loaded host)."""
    at = words.ctypes.data
    for g in range(memo.size):
        if _form(forms, groups[g, 0], groups[g, 1], sc, ns, atoms) != memo[g]:
            for i in range(groups[g, 2], groups[g, 3]):
                _prefetch(at + (hot[i, 0] >> 24) * words.strides[0])


@nb.njit(cache=True, inline="always")
def _sweep(st, sc, ns, warm, remapped, words, blocks, meta, refs, marks):
    """The rows without a form (the interpreter's, every step), then each group's value: the rows of a
    group that moved are written, and when an entry the words use changed, the paged rows whose entry
    it is. A row's write is written out here, without calls that take arrays (numba counts their
    references at every call: ~40 ns a row): a paged value is mapped through `blocks` (its cache
    slot `SLOT`, whose window base, page elements, their log2 (-1: not a power of two) and offset in
    the block are `SLOTS`), then checked against its field's width (`_placed`)."""
    forms, groups, memo = _rows(st, FORMS), _rows(st, GROUPS), _part(st, MEMO)
    hot, at, kv = _rows(st, HOT), _part(st, AT), _part(st, KV)
    slot, slots = _part(st, SLOT), _rows(st, SLOTS)
    ex, free, fdims = _part(st, EX), _rows(st, FREE), _rows(st, FDIMS)
    atoms = sc[sc.size - MAX_ATOMS :]
    half, nf, nd = st[2 + 3 * PREV] - st[1 + 3 * PREV], meta[NFREE], meta[NDIMS]
    if warm:
        _ahead(words, forms, groups, memo, hot, sc, ns, atoms)
    for g in range(-1 if nf else 0, memo.size):
        if g < 0:
            lo, hi, moved, val = 0, nf, True, 0
        else:
            lo, hi = groups[g, 2], groups[g, 3]
            val = _form(forms, groups[g, 0], groups[g, 1], sc, ns, atoms)
            moved = not warm or val != memo[g]
            memo[g] = val
            if not moved and not remapped:
                continue
        for i in range(lo, hi):
            if not moved:
                p = at[i]
                if p < 0 or marks[p] != 2:
                    continue
            c, v = hot[i, 0], val + hot[i, 1]
            if g < 0:
                sc[ns : ns + nd] = fdims[i]
                v = free[i, 8]
                for col in range(6, 8):
                    if free[i, col] >= 0:
                        v += minimum(ex, 0, free[i, col], sc, ns, ns + nd)
            if (c >> 23) & 1:
                k = slot[i]
                page, off = _page_of(v, slots[k, 0], slots[k, 1], slots[k, 2], kv[3])
                if page < 0 or page >= blocks.size or page >= half or blocks[page] < 0:
                    return -1
                at[i] = page
                if marks[page] == 0 or page >= meta[TOP]:
                    _use(page, meta, refs, marks)
                v = kv[0] + blocks[page] * kv[1] + slots[k, 3] + off
            ok, new = _placed(words[c >> 24, c & 3], c, v)
            if not ok:
                return 1 + i
            words[c >> 24, c & 3] = new
    return 0


announce(sys.modules[__name__])
