"""Per-step programs: instantiated once per shape bucket, then only the injected fields are rewritten.

The artifact says what a program's words depend on, so nothing is found by comparing programs:
  * the *structure* (which words exist) depends on the grid extents and the guards that refer to a
    symbol. The extents, and the outcome of each guard that is not "the last point of a grid dim"
    (proved at compile time and stored: `TileMeta.last`), are the bucket key: decode buckets are the key/value tile counts;
    a batched step's lane fields (`lane_fields`, which its attention's guards read) are part of it too;
  * an *injected* field is a template field whose expression refers to a symbol, or a tile-relative
    `dram_base` whose tile base does: the attended length and what is laid out by it (row lengths,
    bounds, strides, offsets of the score rows), and the append's write position;
  * a *page address* is the `dram_base` of a DMA into the paged cache's virtual window: mapped
    through the sequence's block table (`kv.py`) every step.
A bucket is one fresh instantiation by the JIT (the templates), relocated into the session's DRAM.
Each step evaluates only the injected fields' expressions at the new symbol values and the page
addresses at the current block table, and writes them into the bucket's words in place: one numba
call (`_patch_numba.patch`). Its value per word is the expression plus the constant the
instantiation fixed (ping-pong slot offset, tensor base, DRAM segment), taken from the bucket's
own words. `kv.Session.reference` (a fresh instantiation of the whole program) is the readable
path it is tested against, bit for bit.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from simulator import isa

from . import expr
from .jit import when_mask

KINDS = ("write address", "page address", "length")  # what an injected field is (Plan.kind)
_has_sym = expr.has_symbol
_MIX = np.random.default_rng(0).integers(1, 2**62, 64, dtype=np.int64) | 1  # `share`'s hash multipliers
_F = isa.field(isa.Opcode.LOAD, "dram_base")
_DMA = np.asarray([_F.lane, _F.offset, _F.mask], np.int64)  # every DMA's dram_base (`kv.py`)
_I64 = np.dtype(np.int64)


def _key(x):
    return tuple(_key(v) for v in x) if isinstance(x, list) else x


def _keyed(p) -> bool:
    """A guard whose outcome the bucket key holds by its guard bits: it refers to a symbol, not (only)
    to lane fields, which the key holds as values (`lane_fields`)."""
    return any(isinstance(t, str) and t[0] == "s" and t != expr.LANE for t in p)


def lane_fields(art) -> int:
    """The lane fields that follow a batched decode step's symbols (`expr.LANE`): one per sequence of
    the batch, where some guard reads them (`kernels/flash_decode.Lanes`); else 0."""
    progs = art.programs if "programs" in vars(art) else [art]
    if not any(expr.has_lane([p for _, p in t.when]) for g in progs for m in g.macros for t in m.insts):
        return 0
    return max(s.get("batch", 1) for g in progs for s in (g.kv or {}).get("slots", [{}]))


def with_lanes(art, syms) -> list:
    """`syms` followed by the program's lane fields (`lane_fields`), 0 for those not given: 0 attends a
    lane's every key tile (what a step without lane fields runs)."""
    syms = list(syms)
    return syms + [0] * (len(art.symbols) + lane_fields(art) - len(syms))


class Plan:
    """What an artifact's words depend on, read from its templates and tiles."""

    def __init__(self, art, vbase: int):
        self.art = art
        self.tile_index = {t.name: i for i, t in enumerate(art.tiles)}
        self.grid_progs = list({_key(g): g for t in art.tiles for g in t.grid if _has_sym([g])}.values())
        self.guard_keys, self.fields, self.paged = [], {}, {}
        self._grid_ex = None
        self.n_syms, self.lanes = len(art.symbols), lane_fields(art)
        for ti, tile in enumerate(art.tiles):
            for j, t in enumerate(art.macros[tile.macro].insts):
                if any(_keyed(p) and [j, g] not in tile.last for g, (_, p) in enumerate(t.when)):
                    self.guard_keys.append((ti, j))
                names = [n for n, progs in t.var.items() if _has_sym(progs)]
                if t.tensor is not None:
                    base = tile.bases.get(str(t.tensor))
                    if base is not None and _has_sym([base]) and "dram_base" not in names:
                        names.append("dram_base")
                    if base is not None and not _has_sym([base]) and expr.evaluate(base, []) >= vbase:
                        self.paged[ti, j] = True
                if names:
                    self.fields[ti, j] = names
        self.ex = expr.Table()
        self._flatten()
        self.table = self.ex.array()
        from ._bucket_numba import Kept
        from ._step_numba import guard_bits, values

        self._values, self._guard_bits = values, guard_bits  # bound once: an import costs a cold bucket
        self.kept = Kept(self.n_dims, len(art.symbols))  # the forms of earlier buckets (`prepare`)
        self._keys_array = np.asarray(self.guard_keys, np.int64).reshape(-1, 2)

    def _flatten(self) -> None:
        """The tables `_step_numba.build` walks: tiles, (tile, template) rows, guards, field specs."""
        tiles, tt, guards, specs, self.whats = [], [], [], [], []
        self.n_dims = max([len(t.grid) for t in self.art.tiles] + [1])
        for ti, tile in enumerate(self.art.tiles):
            insts = self.art.macros[tile.macro].insts
            t0, work = len(tt), 0
            for j, t in enumerate(insts):
                g0 = len(guards)
                guards += [[0 if kind == "eq" else 1, self.ex.min([p])] for kind, p in t.when]
                s0 = len(specs)
                for name in self.fields.get((ti, j), ()):
                    specs.append(self._spec(ti, j, name))
                paged = int(self.paged.get((ti, j), False))
                work |= len(specs) > s0 or paged
                tt.append([g0, len(guards), s0, len(specs), paged])
            grid = [self.ex.min([g]) for g in tile.grid] + [-1] * (self.n_dims - len(tile.grid))
            tiles.append([0, len(insts), len(tile.grid), t0, int(work), *grid])
        i64 = lambda x, c: np.asarray(x, np.int64).reshape(-1, c)  # noqa: E731
        self.tiles, self.tt = i64(tiles, 5 + self.n_dims), i64(tt, 5)
        self.guards, self.specs = i64(guards, 2), i64(specs, 11)

    def _spec(self, ti: int, j: int, name: str) -> list:
        """The spec row of one injected field of template j of tile ti (its `what` in `whats`):
        lane, offset, mask, lo, hi, min ids of its symbol terms (2), forms (`_bucket_numba.prepare`: 1 affine,
        2 maybe quasi-affine, 0 none), paged, bits, signed."""
        tile = self.art.tiles[ti]
        t = self.art.macros[tile.macro].insts[j]
        f = isa.field(t.opcode, name)
        terms = [(t.var.get(name, [[t.const.get(name, 0)]]), name in t.affine)]
        if name == "dram_base" and t.tensor is not None:
            terms.append(([tile.bases[str(t.tensor)]], str(t.tensor) in tile.affine))
        terms = sorted([(p, a) for p, a in terms if _has_sym(p)], key=lambda pa: len(pa[0]), reverse=True)
        ids = [self.ex.min(p) for p, _ in terms] + [-1] * (2 - len(terms))
        single = bool(terms) and sum(len(p) > 1 for p, _ in terms) <= 1
        forms = (1 if all(a for _, a in terms) else 2) if single else 0
        paged = name == "dram_base" and self.paged.get((ti, j), False)
        self.whats.append((ti, j, name, self.kind(ti, j, name)))
        return [f.lane, f.offset, f.mask, f.lo, f.hi, *ids, forms, int(paged), f.bits, int(f.signed)]

    def key_table(self) -> np.ndarray:
        """The symbol-dependent grid extents as an expression table (the numeric part of the key)."""
        if self._grid_ex is None:
            ex = expr.Table()
            for g in self.grid_progs:
                ex.min([g])
            self._grid_ex = ex.array()
        return self._grid_ex

    def key(self, syms) -> tuple:
        """The bucket of `syms`: the symbol-dependent grid extents and guard outcomes (one compiled call
        each; `key_slow` is the readable path they equal)."""
        s = np.asarray(self.full(syms), np.int64)
        k = tuple(self._values(s[: self.n_syms], self.key_table()).tolist())
        if self.guard_keys:
            bits = self._guard_bits(s, self.table, self.tiles, self.tt, self.guards, self._keys_array, self.n_dims)
            k += (bits.tobytes(),)
        return k + (tuple(s[self.n_syms :].tolist()),) if self.lanes else k

    def full(self, syms) -> tuple:
        """`syms` with the lane fields not given (`with_lanes`: 0)."""
        return tuple(syms) + (0,) * (self.n_syms + self.lanes - len(syms))

    def key_slow(self, syms) -> tuple:
        """The guard outcomes of `key`, by `jit.when_mask` per guarded template."""
        out = []
        for ti, j in self.guard_keys:
            tile = self.art.tiles[ti]
            extents = [int(expr.evaluate(g, syms)) for g in tile.grid]
            n = int(np.prod(extents)) if extents else 1
            dims = np.unravel_index(np.arange(max(n, 0)), extents) if extents and n > 0 else ()
            out.append(when_mask(self.art.macros[tile.macro].insts[j], syms, dims, max(n, 0)))
        return tuple(out)

    def kind(self, ti: int, j: int, name: str) -> str:
        if name == "dram_base" and self.paged.get((ti, j)):
            store = self.art.macros[self.art.tiles[ti].macro].insts[j].opcode == "STORE"
            return "write address" if store else "page address"
        return "length"


@dataclass
class Bucket:
    """One instantiation and its patch tables."""

    key: tuple
    words: np.ndarray  # (n, 4) uint64, patched in place every step
    ex: np.ndarray
    order: tuple  # (rows, perm, cols): `fields` is rows[perm] with columns 11, 12, 14 cols (`share_order`)
    hot: np.ndarray  # (n_fields, 2) int64: a row's packed place and its constant (`_step_numba.pack`)
    dims: np.ndarray  # (n_points, n_dims) int64
    forms: np.ndarray  # (n_forms, 2 + n_symbols + MAX_ATOMS) int64: q, a, b, c (`_step_numba._form`)
    groups: np.ndarray  # (n_groups, 4) int64: each distinct range of `forms` and its fields' rows (`share`)
    pages: np.ndarray  # (n_pages, 6) int64
    whats: list  # per spec: (tile index, template index, field name, kind)
    state: np.ndarray  # what `_patch_numba.patch` reads and keeps between steps, one int64 array
    lanes: tuple = ()  # the lane fields it was instantiated for (`lane_fields`): they shape its guards

    @property
    def fields(self) -> np.ndarray:
        """(n_fields, 15) int64 field rows in the patch's order (column 13: the spec, 14: the constant
        added to its forms); written out when asked (the patch reads `hot`)."""
        rows, perm, cols = self.order
        out = rows[perm]
        out[:, [11, 12, 14]] = cols
        return out

    @property
    def page_rows(self) -> np.ndarray:
        """The words whose dram_base is a page address (not symbol-dependent)."""
        return self.pages[:, 0]

    @property
    def injected(self) -> list:
        """Per field row: (tile index, template index, field name, kind)."""
        return [self.whats[k] for k in self.fields[:, 13].tolist()]


class Stepper:
    """Words of one program for any symbol values and block table; one bucket per structure."""

    def __init__(self, art, jit, translate, kv: np.ndarray, cache_size: int = 64, relocation: tuple | None = None):
        self.art, self.jit, self.translate, self.kv = art, jit, translate, kv
        self.relocation = relocation  # `translate` as `_bucket_numba.relocate`'s arguments: one call less
        self.plan = Plan(art, int(kv[2]))
        self.buckets: OrderedDict = OrderedDict()
        self.cache_size = cache_size
        self._last: Bucket | None = None
        self._fast = not self.plan.guard_keys  # else every step's key needs the guards (`Plan.key`)
        jit.prepare()  # the artifact's tables, once: not a bucket's cost
        self._layout = self._constants()
        n_pages, stack, boxes, slots = self._layout
        ns = len(art.symbols)
        self._fixed = (self.plan.key_table(), slots, np.stack(boxes).reshape(len(boxes), ns, 2),
                       np.asarray([n_pages, stack], np.int64))  # fmt: skip
        from . import _bucket_numba, _patch_numba

        self._one = len(art.symbols) == 1
        self._patch = _patch_numba.patch1 if self._one else _patch_numba.patch
        self._entry = _patch_numba.entry(len(art.symbols))
        self._ns = self.plan.n_syms
        self._width = self._ns + self.plan.lanes if self._fast else -1  # -1: every step takes the key
        self._go = None  # the fast path's operands (`_takes`)
        self._where = np.zeros(4, np.int64)  # the addresses `_go` passes (`_patch_numba.where`)
        self._where_at = _patch_numba.address(self._where)
        self._seen = None  # the block array of the last step through the dispatcher (`_takes`)
        self._nb = _bucket_numba, _patch_numba  # bound once: an import costs a cold bucket

    def clear(self) -> None:
        """Forgets every bucket (the next step of each structure instantiates again)."""
        self.buckets.clear()
        self._last = self._go = None

    def bucket(self, syms: tuple) -> tuple[Bucket, bool]:
        """The bucket of `syms` and whether it was instantiated now."""
        syms = self.plan.full(syms)
        k = self.plan.key(syms)
        b = self.buckets.get(k)
        if b is not None:
            self.buckets.move_to_end(k)
            return b, False
        b = self.buckets[k] = self._build(k, syms)
        if len(self.buckets) > self.cache_size:
            if self.buckets.popitem(last=False)[1] is self._last:
                self._last = self._go = None
        return b, True

    def words(self, syms: tuple, blocks: np.ndarray) -> tuple[np.ndarray, bool]:
        """The bucket's words patched for `syms` (a tuple of ints) and `blocks` (in place), and whether
        it was new.

        When `blocks` is the int64 vector the last bucket's steps were given (`_takes`: `BatchStep.table`
        is, every step; `kv.Session` keeps one per program for a single sequence) and `syms` carry the
        bucket's lane fields (and its key needs no guards), the patch checks the program's box and the
        bucket's key itself, one compiled call without numba's dispatch on the address of a vector of
        the arrays' addresses (`_patch_numba.entry`), its operands one tuple (`_go`): right after a
        simulator run (the host's caches cold) every Python object touched costs its cache misses.
        Else the last bucket is tried through the dispatcher. Symbol values outside every program's
        box are an InputError (`Artifact.pick`)."""
        go = self._go
        if go is not None:
            held, width, ns, lanes, call, at, words = go
            if blocks is held and len(syms) == width and syms[ns:] == lanes:
                if not call(syms[0] if ns == 1 else syms[:ns], at):
                    return words, False
                return self._words(syms, blocks)
        b = self._last
        if b is not None and len(syms) == self._width and syms[self._ns :] == b.lanes:
            status = self._patch(syms[0] if self._one else syms[: self._ns], b.state, blocks)
            if not status:
                self._takes(blocks)
                return b.words, False
        return self._words(syms, blocks)

    def _takes(self, blocks) -> None:
        """`blocks` becomes the array the fast path of `words` takes (`_go`) when it comes a second time
        in a row (its addresses cost a compiled call: an array given once is not worth it), if the last bucket may take it (a C-contiguous int64 vector, and a bucket whose key
        needs no guards). The vector of addresses (`_patch_numba.where`) is the stepper's own."""
        seen, self._seen = self._seen, blocks
        b = self._last
        if blocks is not seen or b is None or not self._fast or not isinstance(blocks, np.ndarray):
            return
        if blocks.dtype == _I64 and blocks.ndim == 1 and blocks.flags.c_contiguous:
            self._nb[1].where(self._where, b.state, blocks)
            self._go = (blocks, self._width, self._ns, b.lanes, self._entry, self._where_at, b.words)

    def _words(self, syms: tuple, blocks: np.ndarray) -> tuple[np.ndarray, bool]:
        """`words` past its first try: the bucket looked up by the key (instantiated if new), then patched
        by numba's dispatcher (any array type); `blocks` becomes the array `_entry` takes (`_takes`)."""
        syms = tuple(map(int, self.plan.full(syms)))
        at = syms[: self._ns]
        self.art.pick(syms)
        b, new = self.bucket(syms)
        status = self._patch(at[0] if self._one else at, b.state, blocks)
        if status == -2 and self._one:  # the bucket's key again, beyond the values its box holds
            self._narrow(b, syms)
            status = self._patch(at[0], b.state, blocks)
        if status:
            self._fail(b, status, syms, blocks)
        self._last, self._go, self._seen = b, None, None
        self._takes(blocks)
        return b.words, new

    def _fail(self, b: Bucket, status: int, syms, blocks) -> None:
        if status == -2:
            raise RuntimeError(f"{list(syms)} are not in the bucket {b.key} they were looked up in")
        if status < 0:
            raise RuntimeError(
                f"the program addresses a page beyond the sequence's {blocks.size} blocks or one freed out of its window"
            )
        ti, j, name, _ = b.whats[int(b.fields[status - 1, 13])]
        raise RuntimeError(
            f"{self.art.tiles[ti].name}: field {name} of template {j} does not fit its ISA width at {list(syms)}"
        )

    def _build(self, key: tuple, syms: tuple) -> Bucket:
        bn, pn = self._nb
        prog = self.jit.instantiate(list(syms))
        p = self.plan
        spans = prog.tile_spans
        if spans is None:  # the NumPy expansion's program: its spans by tile name
            spans = np.full((len(self.art.tiles), 2), -1, np.int64)
            if prog.spans:
                at = p.tile_index
                spans[[at[name] for name, _, _ in prog.spans]] = [(start, end) for _, start, end in prog.spans]
        p.kept.fit(len(prog.words))  # the rows, not known before `tables`, are about as many as the words
        args = (np.asarray(syms, np.int64), p.n_syms, (p.table, p.tiles, p.tt, p.guards, p.specs, p.n_dims), spans,
                prog.words)  # fmt: skip
        if self.relocation is None:
            t = self.translate(prog.words)
            tr = (t.words, t.rows, t.slot, t.page, t.offset)
            out, state = bn.tables(*args, tr, self.kv, _DMA, _MIX, p.kept.arrays()), None
        else:
            moved, tr, out, state = bn.relocated_state(*args, self.relocation, self.kv, _DMA, _MIX, p.kept.arrays(),
                                                       self._fixed)  # fmt: skip
            if moved:
                raise RuntimeError("a DMA descriptor addresses a cache slot the program does not have")
        words, t_rows, t_slot, t_page, t_offset = tr
        status, rows, dims, forms, bad, full, perm, cols, groups, hot, slot, pages = out
        if status == 1:
            raise RuntimeError("the program's words disagree with its templates (the JIT and the plan differ)")
        if full:
            p.kept.grow(full)  # the rows after it were not kept: the next bucket derives and keeps them
        if bad >= 0:
            ti, j, name, _ = p.whats[int(rows[bad, 13])]
            raise RuntimeError(
                f"{self.art.tiles[ti].name}: field {name} of template {j} is affine but got no affine form"
            )
        if status == 2:  # a hash collision: the lexicographic way
            perm, cols, forms, groups = _share_rows(rows, forms, perm, rows[:, 12] - rows[:, 11])
            hot, slot, pages = bn.patch_tables(rows, perm, cols[:, 2].copy(), len(words), t_rows, t_page, t_slot,
                                               t_offset, self.kv, _DMA)  # fmt: skip
        if state is None or not state.size:  # a collision, or no compiled state: the readable way (`_state`)
            kv = np.asarray(key[: len(p.grid_progs)], np.int64)
            nf = int(groups[0, 2]) if len(groups) else len(perm)
            free = rows[perm[:nf]]  # not grouped: columns 11, 12, 14 as they were
            state = self._state(syms[: p.n_syms], kv, free, hot, forms, groups, dims, pages, slot, words)
        b = Bucket(key, pn.words_of(state), p.table, (rows, perm, cols), hot, dims, forms, groups, pages, p.whats,
                   state, tuple(syms[p.n_syms :]))  # fmt: skip
        self._narrow(b, syms)
        return b

    def _narrow(self, b: Bucket, syms) -> None:
        """A bucket of a program of one symbol checks its key by its box (`_patch_numba.narrow`): the
        values around `syms[0]` that give its grid extents (a step outside them, if the key's values are
        not contiguous, narrows it again there: `_words`)."""
        if self._one:
            lo, hi = self._layout[2][self.art.pick(syms)][0].tolist()
            key = np.asarray(b.key[: len(self.plan.grid_progs)], np.int64)
            self._nb[1].narrow(b.state, int(syms[0]), lo, hi, self.plan.key_table(), key)

    def _constants(self) -> tuple:
        """What every bucket's state holds alike: (block table entries, stack depth, per program its box,
        `_slots`)."""
        from ._expr_numba import depth

        p = self.plan
        n_pages = max(-(-int(self.kv[3]) // int(pe)) for pe in self.kv[4::2])
        stack = max(depth(p.table, 0), depth(p.key_table(), 0))
        boxes = [np.asarray(prog.ranges, np.int64).reshape(-1, 2) for prog in self.art.programs]
        return n_pages, stack, boxes, self._slots()

    def _state(self, syms, key_values, free, hot, forms, groups, dims, pages, slot, words) -> np.ndarray:
        """The bucket's `_patch_numba` state (`free`: the field rows without forms, first in its order),
        holding its `words`."""
        pn = self._nb[1]
        p, n, nf = self.plan, len(hot), len(free)
        n_pages, stack, boxes, slots = self._layout
        meta = [0, 0, 0, stack, nf, dims.shape[1]]
        return pn.state({"KEYV": key_values, "KEYEX": p.key_table(), "EX": p.table if nf else p.table[:0],
                         "FREE": free, "FDIMS": dims[free[:, 10]], "FORMS": forms, "GROUPS": groups, "HOT": hot,
                         "AT": np.full(n, -1, np.int64), "PAGES": pages, "META": np.asarray(meta, np.int64),
                         "MEMO": len(groups), "PREV": n_pages, "REFS": n_pages + -(-n_pages // 8),
                         "KV": self.kv, "BOX": boxes[self.art.pick(syms)], "WORDS": words,
                         "SCRATCH": len(syms) + dims.shape[1] + stack + pn.MAX_ATOMS,
                         "SLOT": slot, "SLOTS": slots})  # fmt: skip

    def _slots(self) -> np.ndarray:
        """Per cache slot its window base, page elements, their log2 (-1: not a power of two) and offset
        in the block."""
        kv, vbase, vspan = self.kv, int(self.kv[2]), int(self.kv[3])
        pe = kv[4::2]
        log = np.where(pe & (pe - 1) == 0, np.log2(np.maximum(pe, 1)).astype(np.int64), -1)
        return np.stack([vbase + vspan * np.arange(len(pe)), pe, log, kv[5::2]], 1)

    def declared(self, b: Bucket) -> set:
        """(word, field) of every injected field and page address of bucket `b`."""
        out = {(int(r[0]), name) for r, (_, _, name, _) in zip(b.fields, b.injected)}
        return out | {(int(r), "dram_base") for r in b.page_rows}


def share(fields: np.ndarray, forms: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`share_order`, its rows written out: (field rows, forms, groups)."""
    return _written(fields, *share_order(fields, forms))


def _written(fields, perm, cols, forms, groups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = fields[perm]
    rows[:, [11, 12, 14]] = cols
    return rows, forms, groups


def share_order(fields: np.ndarray, forms: np.ndarray) -> tuple:
    """Forms rows of equal fields made one: two fields whose forms differ only by a constant added to
    every result of their min (the same page's row count or address read by each layer, head, K and V)
    point at one range of the returned forms, the constant in their column 14. Returns the order of the
    field rows (those without a form first, then grouped by range: `regroup_order`'s index of each in
    `fields` and its columns 11, 12, 14), the forms, and per group its forms range and
    its field rows' range (`_patch_numba.patch` evaluates each group once). Rows are grouped by a hash
    of their adjusted forms (`_step_numba.form_keys`), checked row by row against their group's first
    (`same_forms`), all in one compiled call (`_step_numba.share_hashed`); on a collision, by the
    lexicographic unique of the whole rows (`_share_rows`)."""
    from ._step_numba import share_hashed

    ok, perm, cols, out, groups = share_hashed(fields, forms, _MIX)
    if ok:
        return perm, cols, out, groups
    return _share_rows(fields, forms, perm, fields[:, 12] - fields[:, 11])


def _grouped(fields, has, n, inv, starts, sizes, const) -> tuple:
    from ._step_numba import regroup_order

    return regroup_order(fields, has, inv.astype(np.int64), starts.astype(np.int64), sizes.astype(np.int64),
                   np.asarray(const, np.int64))  # fmt: skip


def _groups(n, inv, starts, sizes) -> np.ndarray:
    from ._step_numba import group_table

    return group_table(int((n <= 0).sum()), *(np.asarray(a, np.int64) for a in (inv, starts, sizes)))


def _share_rows(fields, forms, has, n) -> tuple:
    """`share_order` by the lexicographic unique of each field's whole adjusted forms block."""
    r = int(n.max())
    at = fields[has, 11, None] + np.arange(r)
    valid = np.arange(r) < n[has, None]
    block = np.where(valid[..., None], forms[np.minimum(at, len(forms) - 1)], 0)
    is_min = valid & (block[..., 0] == 0)
    const = block[np.arange(has.size), is_min.argmax(1), 1]
    block[..., 1] -= np.where(is_min, const[:, None], 0)
    key = np.concatenate([n[has, None], block.reshape(has.size, -1)], 1)
    uniq, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
    inv = inv.ravel()
    sizes = uniq[:, 0]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = block[first][np.arange(r) < sizes[:, None]]
    return (*_grouped(fields, has, n, inv, starts, sizes, const), out, _groups(n, inv, starts, sizes))
