"""Per-step programs: instantiated once per shape bucket, then only the injected fields are rewritten.

The artifact says what a program's words depend on, so nothing is found by comparing programs:
  * the *structure* (which words exist) depends on the grid extents and the guards that refer to a
    symbol. The extents, and the outcome of each guard that is not "the last point of a grid dim"
    (proved with `symbolic.equal`), are the bucket key: decode buckets are the page counts;
  * an *injected* field is a template field whose expression refers to a symbol, or a tile-relative
    `dram_base` whose tile base does: the attended length and what is laid out by it (row lengths,
    bounds, strides, offsets of the score rows), and the append's write position;
  * a *page address* is the `dram_base` of a DMA into the paged cache's virtual window: mapped
    through the sequence's block table (`kv.py`) every step.
A bucket is one fresh instantiation by the JIT (the templates), relocated into the session's DRAM.
Each step evaluates only the injected fields' expressions at the new symbol values and the page
addresses at the current block table, and writes them into the bucket's words in place: one numba
call (`_step_numba.patch`). Its value per word is the expression plus the constant the
instantiation fixed (ping-pong slot offset, tensor base, DRAM segment), taken from the bucket's
own words. `reference` is the readable path it is tested against, bit for bit.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np
from torch_mlir import ir

from simulator import isa

from .. import symbolic as sy
from . import expr

_OPS = {"+": 3, "*": 4, "floordiv": 5, "ceildiv": 6, "mod": 7}
_DMA = (isa.Opcode.LOAD, isa.Opcode.STORE, isa.Opcode.GATHER)
KINDS = ("write address", "page address", "length")


def _has_sym(progs) -> bool:
    return any(isinstance(tok, str) and tok[0] == "s" for p in progs for tok in p)


def _key(x):
    return tuple(_key(v) for v in x) if isinstance(x, list) else x


def _mask(t, syms, dims, n) -> np.ndarray:
    m = np.ones(n, bool)
    for kind, prog in t.when:
        v = expr.evaluate(prog, syms, dims)
        m &= (v == 0) if kind == "eq" else (v >= 0)
    return m


def _last_point(prog, grid) -> bool:
    """`prog == 0` says "the last point of a grid dim" (d_k == extent_k - 1), for every value."""
    with ir.Context():
        g = sy.from_postfix(prog)
        for k, ext in enumerate(grid):
            last = sy.dim(k) - sy.from_postfix(ext) + sy.const(1)
            if _has_sym([ext]) and (sy.equal(g, last) or sy.equal(g, last * -1)):
                return True
    return False


class Plan:
    """What an artifact's words depend on, read from its templates and tiles."""

    def __init__(self, art, vbase: int):
        self.art = art
        self.grid_progs = list({_key(g): g for t in art.tiles for g in t.grid if _has_sym([g])}.values())
        self.guard_keys, self.fields, self.paged, self._affine = [], {}, {}, {}
        self._grid_ex = None
        for ti, tile in enumerate(art.tiles):
            for j, t in enumerate(art.macros[tile.macro].insts):
                if any(not (kind == "eq" and _last_point(p, tile.grid)) for kind, p in t.when if _has_sym([p])):
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
        self.ex = _Exprs()
        self.specs = {k: [self._spec(*k, name) for name in names] for k, names in self.fields.items()}
        self.table = self.ex.table()

    def _spec(self, ti: int, j: int, name: str) -> tuple:
        """(field, paged, [min ids], linear, what) of one injected field of template j of tile ti."""
        tile = self.art.tiles[ti]
        t = self.art.macros[tile.macro].insts[j]
        f = next(f for f in isa.LAYOUT[isa.Opcode[t.opcode]] if f.name == name)
        terms = [t.var.get(name, [[t.const.get(name, 0)]])]
        if name == "dram_base" and t.tensor is not None:
            terms.append([tile.bases[str(t.tensor)]])
        terms = sorted([p for p in terms if _has_sym(p)], key=len, reverse=True)
        ids = [self.ex.min(p) for p in terms] + [-1] * (2 - len(terms))
        linear = bool(terms) and sum(len(p) > 1 for p in terms) <= 1 and all(self.affine(q) for p in terms for q in p)
        paged = name == "dram_base" and self.paged.get((ti, j), False)
        return f, paged, ids, linear, (ti, j, name, self.kind(ti, j, name))

    def affine(self, prog) -> bool:
        """`prog` is affine in the symbols for fixed dims (`symbolic.affine_in_symbols`)."""
        k = _key(prog)
        if k not in self._affine:
            with ir.Context():
                self._affine[k] = sy.affine_in_symbols(sy.from_postfix(prog))
        return self._affine[k]

    def key(self, syms) -> tuple:
        """The bucket of `syms`: the symbol-dependent grid extents and guard outcomes."""
        from ._step_numba import values

        if self._grid_ex is None:
            ex = _Exprs()
            for g in self.grid_progs:
                ex.min([g])
            self._grid_ex = ex.table()
        k = tuple(values(np.asarray(syms, np.int64), self._grid_ex).tolist())
        for ti, j in self.guard_keys:
            tile = self.art.tiles[ti]
            extents = [int(expr.evaluate(g, syms)) for g in tile.grid]
            n = int(np.prod(extents)) if extents else 1
            dims = np.unravel_index(np.arange(max(n, 0)), extents) if extents and n > 0 else ()
            k += (_mask(self.art.macros[tile.macro].insts[j], syms, dims, max(n, 0)).tobytes(),)
        return k

    def kind(self, ti: int, j: int, name: str) -> str:
        if name == "dram_base" and self.paged.get((ti, j)):
            store = self.art.macros[self.art.tiles[ti].macro].insts[j].opcode == "STORE"
            return "write address" if store else "page address"
        return "length"


class _Exprs:
    """The bucket's expressions as flat int64 rows (the layout `_step_numba` reads)."""

    def __init__(self):
        self.ranges, self.tokens, self.mins, self.items = [], [], [], []
        self._ids: dict = {}
        self._mins: dict = {}

    def _expr(self, prog) -> int:
        k = _key(prog)
        if k not in self._ids:
            start = len(self.tokens) // 2
            for tok in prog:
                if isinstance(tok, int):
                    self.tokens += [0, tok]
                elif tok in _OPS:
                    self.tokens += [_OPS[tok], 0]
                else:
                    self.tokens += [1 if tok[0] == "s" else 2, int(tok[1:])]
            self._ids[k] = len(self.ranges)
            self.ranges.append((start, len(self.tokens) // 2))
        return self._ids[k]

    def min(self, progs) -> int:
        k = _key(progs)
        if k not in self._mins:
            ids = [self._expr(p) for p in progs]
            self._mins[k] = len(self.mins)
            self.mins.append((len(self.items), len(self.items) + len(ids)))
            self.items += ids
        return self._mins[k]

    def table(self) -> np.ndarray:
        head = [len(self.ranges), len(self.mins), len(self.items)]
        flat = head + [v for r in self.ranges for v in r] + [v for r in self.mins for v in r] + self.items
        return np.asarray(flat + self.tokens, np.int64)


def field_value(words: np.ndarray, f) -> np.ndarray:
    v = ((words[:, f.lane] >> np.uint64(f.offset)) & np.uint64(f.mask)).astype(np.int64)
    return np.where(v > f.hi, v - (1 << f.bits), v) if f.signed else v


class _Rows:
    """A bucket's patch tables while it is built: arrays per (tile, template, field)."""

    def __init__(self, ns: int):
        self.ns = ns
        self.rows, self.dims, self.paged, self.injected = [], [], [], []
        self.n_dims = 0

    def add_dims(self, d: np.ndarray) -> int:
        self.dims.append(d)
        self.n_dims += len(d)
        return self.n_dims - len(d)

    def add_rows(self, at, head, value, paged: int, d0: int, linear: bool, what) -> None:
        """Rows of one (tile, template, field); `_step_numba.prepare` completes them."""
        n = len(at)
        r = np.empty((n, 13), np.int64)
        r[:, 0], r[:, 1:8], r[:, 8], r[:, 9], r[:, 10] = at, head, value, paged, d0 + np.arange(n)
        r[:, 11], r[:, 12] = int(linear), 0
        self.rows.append(r)
        self.injected.extend([what] * n)


@dataclass
class Bucket:
    """One instantiation and its patch tables."""

    key: tuple
    words: np.ndarray  # (n, 4) uint64, patched in place every step
    ex: np.ndarray
    fields: np.ndarray  # (n_fields, 13) int64
    dims: np.ndarray  # (n_points, n_dims) int64
    forms: np.ndarray  # (n_forms, 1 + n_symbols) int64: a, b of the affine fields' a + b . s
    pages: np.ndarray  # (n_pages, 6) int64
    injected: list  # per field row: (tile index, template index, field name, kind)
    page_rows: np.ndarray  # words whose dram_base is a page address (not symbol-dependent)


class Stepper:
    """Words of one program for any symbol values and block table; one bucket per structure."""

    def __init__(self, art, jit, translate, kv: np.ndarray, cache_size: int = 64):
        self.art, self.jit, self.translate, self.kv = art, jit, translate, kv
        self.plan = Plan(art, int(kv[2]))
        self.buckets: OrderedDict = OrderedDict()
        self.cache_size = cache_size

    def bucket(self, syms: tuple) -> tuple[Bucket, bool]:
        """The bucket of `syms` and whether it was instantiated now."""
        k = self.plan.key(syms)
        b = self.buckets.get(k)
        if b is not None:
            self.buckets.move_to_end(k)
            return b, False
        b = self.buckets[k] = self._build(k, syms)
        if len(self.buckets) > self.cache_size:
            self.buckets.popitem(last=False)
        return b, True

    def words(self, syms: tuple, blocks: np.ndarray) -> tuple[np.ndarray, bool]:
        """The bucket's words patched for `syms` and `blocks` (in place), and whether it was new."""
        from ._step_numba import patch

        b, new = self.bucket(syms)
        status = patch(np.asarray(syms, np.int64), b.ex, b.fields, b.dims, b.forms, b.pages, b.words, self.kv, blocks)
        if status:
            self._fail(b, status, syms, blocks)
        return b.words, new

    def _fail(self, b: Bucket, status: int, syms, blocks) -> None:
        if status < 0:
            raise RuntimeError(f"the program addresses a page beyond the sequence's {blocks.size} blocks")
        ti, j, name, _ = b.injected[status - 1]
        raise RuntimeError(
            f"{self.art.tiles[ti].name}: field {name} of template {j} does not fit its ISA width at {list(syms)}"
        )

    def _build(self, key: tuple, syms: tuple) -> Bucket:
        from ._step_numba import prepare

        prog = self.jit.instantiate(list(syms))
        tr = self.translate(prog.words)
        spans = {name: (s, e) for name, s, e in prog.spans}
        acc = _Rows(len(syms))
        for ti, tile in enumerate(self.art.tiles):
            if tile.name in spans:
                self._tile(ti, tile, spans[tile.name], list(syms), prog.words, tr.words, acc)
        rows = np.concatenate(acc.rows) if acc.rows else np.zeros((0, 13), np.int64)
        paged = np.concatenate(acc.paged) if acc.paged else np.zeros(0, np.int64)
        if not np.array_equal(np.sort(tr.rows), np.sort(paged)):
            raise RuntimeError("the paged DMAs by address and by template disagree")
        patched = rows[[name == "dram_base" for *_, name, _ in acc.injected], 0] if len(rows) else rows[:, 0]
        pages = self._pages(tr, patched)
        n_dims = max([d.shape[1] for d in acc.dims] + [1])
        dims = np.zeros((max(sum(len(d) for d in acc.dims), 1), n_dims), np.int64)
        at = 0
        for d in acc.dims:
            dims[at : at + len(d), : d.shape[1]] = d
            at += len(d)
        ex = self.plan.table
        forms = prepare(np.asarray(syms, np.int64), ex, rows, dims)
        return Bucket(key, tr.words, ex, rows, dims, forms, pages, acc.injected, pages[:, 0].copy())

    def _tile(self, ti, tile, span, syms, raw, words, acc) -> None:
        mm = self.art.macros[tile.macro]
        todo = [j for j in range(len(mm.insts)) if (ti, j) in self.plan.fields or (ti, j) in self.plan.paged]
        if not todo:
            return
        extents = [int(expr.evaluate(g, syms)) for g in tile.grid]
        n = int(np.prod(extents)) if extents else 1
        grid = np.unravel_index(np.arange(n), extents) if extents else ()
        masks = np.stack([_mask(t, syms, grid, n) for t in mm.insts], axis=1)
        if int(masks.sum()) != span[1] - span[0]:
            raise RuntimeError(f"{tile.name}: {span[1] - span[0]} words, the templates give {int(masks.sum())}")
        pos = (np.cumsum(masks.ravel()) - 1).reshape(masks.shape)
        for j in todo:
            sel = masks[:, j]
            at = span[0] + pos[sel, j]
            if (ti, j) in self.plan.paged:
                acc.paged.append(at)
            point = tuple(d[sel] for d in grid)
            d0 = acc.add_dims(np.stack(point, 1) if point else np.zeros((len(at), 0), np.int64))
            for f, paged, ids, linear, what in self.plan.specs.get((ti, j), ()):
                value = field_value((raw if paged else words)[at], f)
                acc.add_rows(at, [f.lane, f.offset, f.mask, f.lo, f.hi, *ids], value, int(paged), d0, linear, what)

    def _pages(self, tr, patched: np.ndarray) -> np.ndarray:
        """Rows of the page addresses that no symbol moves: (word, lane, offset, mask, page, in-block offset)."""
        keep = ~np.isin(tr.rows, patched)
        rows = tr.rows[keep]
        out = np.zeros((len(rows), 6), np.int64)
        out[:, 0], out[:, 4] = rows, tr.page[keep]
        out[:, 5] = self.kv[5::2][tr.slot[keep]] + tr.offset[keep]
        op = (tr.words[rows, 0] & np.uint64(0xF)).astype(np.int64)
        for code in np.unique(op):
            f = next(f for f in isa.LAYOUT[isa.Opcode(int(code))] if f.name == "dram_base")
            out[op == code, 1:4] = (f.lane, f.offset, f.mask)
        return out

    def declared(self, b: Bucket) -> set:
        """(word, field) of every injected field and page address of bucket `b`."""
        out = {(int(r[0]), name) for r, (_, _, name, _) in zip(b.fields, b.injected)}
        return out | {(int(r), "dram_base") for r in b.page_rows}
