"""The JIT's compiled instantiation: the whole artifact as flat tables, one numba call per new length.

`Tables(artifact)` precompiles every expression of the artifact once (grid
extents, tensor bases, guards, fields: postfix programs become one
`expr.Table`, evaluated by `_expr_numba`) and every template once (its base word with the
constant fields, the bit position and range of each variable field). A new
length is then a single call to `instantiate`, which walks the tiles, their
grid points and templates, evaluates the expressions with Python's integer
semantics (floor division, non-negative modulo), encodes the words and sets
the dependency tokens by the rule in `tokens.py` over the whole program,
slots (`slot` strides and counts, `schedule` step distances) included.

It produces the same words as the NumPy expansion in `jit.py`, which
remains the reference (and the path for anything the tables cannot express,
and for error messages): any non-zero status falls back to it.
"""

from __future__ import annotations

import numpy as np

from simulator import isa

from . import expr
from .tokens import slot_of

_QUEUE = {q: i for i, q in enumerate(isa.QUEUES)}
OK, BAD_FIELD, NO_COMPUTE, LONG = 0, 1, 2, 3
_FIELDS = {op: {f.name: f for f in fields} for op, fields in isa.LAYOUT.items()}
# The kernel interprets each field of each word (~0.1 us per grid point and template); the NumPy
# expansion costs ~10-25 us per template of each tile, whatever the length. Beyond this many slots
# (+ SLOTS_PER_TILE_TEMPLATE per tile template), NumPy is the faster of the two.
SLOTS_MIN, SLOTS_PER_TILE_TEMPLATE = 4000, 100


class Tables:
    """Flat int64 tables of one artifact; `ok` is False if some template cannot be expressed."""

    def __init__(self, art):
        self.ok = True
        self.ex = expr.Table()
        self._tiles(art)
        self._macros(art)
        if self.ok:
            self._freeze()

    def _min(self, progs) -> int:
        """Id of the minimum of several expressions (`expr.Table`)."""
        return self.ex.min(progs)

    def _tiles(self, art) -> None:
        self.tile_macro = [t.macro for t in art.tiles]
        self.n_dims = max([len(t.grid) for t in art.tiles] + [1])
        self.tile_grid = [[self._min([g]) for g in t.grid] + [-1] * (self.n_dims - len(t.grid)) for t in art.tiles]
        self.tile_ndim = [len(t.grid) for t in art.tiles]
        self.base_range, self.base_slot, self.base_expr = [], [], []
        for t in art.tiles:
            start = len(self.base_slot)
            for slot, prog in t.bases.items():
                self.base_slot.append(int(slot))
                self.base_expr.append(self._min([prog]))
            self.base_range.append((start, len(self.base_slot)))

    def _macros(self, art) -> None:
        self.macro_range, t_rows, self.t_base = [], [], []
        self.guard_kind, self.guard_expr, self.var_rows = [], [], []
        for m in art.macros:
            start = len(t_rows)
            tiers = m.schedule.get("early") or [0] * len(m.insts)
            for t, tier in zip(m.insts, tiers):
                t_rows.append(self._template(t))
                t_rows[-1][-1] |= int(tier) << 1  # the word's `wslot`: slotted, plus 2 x its early tier
            slots = (int(m.schedule.get("load_slots", 1)), int(m.schedule.get("store_slots", 1)))
            self.macro_range.append((start, len(t_rows), *slots))
        self.t_rows = t_rows

    def _template(self, t) -> list:
        op = isa.Opcode[t.opcode]
        layout = _FIELDS[op]
        base = [0] * isa.LANES  # Python ints, one array for all templates in `_freeze`
        base[0] = int(op)
        relative = t.tensor is not None
        for name, v in t.const.items():
            if relative and name == "dram_base":
                continue
            bits = _const_bits(layout.get(name), v)
            if bits is None:
                self.ok = False
            elif name not in t.slot:
                base[layout[name].lane] |= bits
        self.t_base.append(base)
        g0 = len(self.guard_kind)
        for kind, prog in t.when:
            self.guard_kind.append(0 if kind == "eq" else 1)
            self.guard_expr.append(self._min([prog]))
        v0 = len(self.var_rows)
        for name, progs in t.var.items():
            if (relative and name == "dram_base") or name in t.slot:
                continue
            self._var_row(layout.get(name), progs, (0, 1))
        for name, entry in t.slot.items():  # value + stride * (step mod slots), as `jit._Plan`
            if name == "dram_base":
                self.ok = False
                continue
            self._var_row(layout.get(name), t.var.get(name), slot_of(entry), t.const.get(name, 0))
        dram = [0] * 9
        if relative:
            f = layout.get("dram_base")
            if f is None:
                self.ok = False
            else:
                rel = t.var.get("dram_base")
                const = t.const.get("dram_base", 0)
                dram = [1, t.tensor, f.lane, f.offset, f.mask, f.lo, f.hi, self._min(rel) if rel else -1, int(const)]
        queue = _QUEUE[isa.QUEUE_OF[op]]
        return [queue, g0, len(self.guard_kind), v0, len(self.var_rows), *dram, int("sram_addr" in t.slot)]

    def _var_row(self, f, progs, slot: tuple, const=0) -> None:
        """A variable field: lane, offset, mask, lo, hi, min id (-1: constant), constant, slot stride, slots
        (`slot`: the last two)."""
        if f is None or f.name in isa.FLOAT_FIELDS or f.name == "opcode" or isinstance(const, float):
            self.ok = False
            return
        self.var_rows.append(
            [f.lane, f.offset, f.mask, f.lo, f.hi, self._min(progs) if progs else -1, int(const), *slot]
        )

    def _freeze(self) -> None:
        """One int64 array (a header of offsets, then the tables) and the base words: a cheap numba call."""
        i64 = lambda x, shape=(0,): np.asarray(x, np.int64) if len(x) else np.zeros(shape, np.int64)  # noqa: E731
        parts = (
            self.ex.array(),
            i64(self.tile_macro),
            i64(self.tile_ndim),
            i64(self.tile_grid, (0, self.n_dims)),
            i64(self.base_range, (0, 2)),
            i64(self.base_slot),
            i64(self.base_expr),
            i64(self.macro_range, (0, 4)),
            i64(self.t_rows, (0, 15)),
            i64(self.guard_kind),
            i64(self.guard_expr),
            i64(self.var_rows, (0, 9)),
        )
        stack = max([b - a for a, b in self.ex.ranges] + [0]) + 1
        offsets, pos = [], 2 + len(parts)
        for part in parts:
            offsets.append(pos)
            pos += part.size
        head = np.asarray([self.n_dims, stack, *offsets], np.int64)
        self.table = np.concatenate([head, *(part.ravel() for part in parts)])
        per_tile = [r[1] - r[0] for r in self.macro_range]
        self.limit = SLOTS_MIN + SLOTS_PER_TILE_TEMPLATE * sum(per_tile[m] for m in self.tile_macro)
        self.t_base_words = np.asarray(self.t_base, np.uint64).reshape(-1, isa.LANES)


def _const_bits(f, v):
    if f is None or f.name == "opcode":
        return None
    if f.name in isa.FLOAT_FIELDS:
        return int(np.asarray(v, np.float32).view(np.uint32)) << f.offset
    if isinstance(v, float) or not f.lo <= int(v) <= f.hi:
        return None
    return (int(v) & f.mask) << f.offset


_KERNEL = None


def kernel():
    """The numba-compiled instantiation (compiled on first use, cached on disk by numba)."""
    global _KERNEL
    if _KERNEL is None:
        from . import _jit_numba

        _KERNEL = _jit_numba.instantiate
    return _KERNEL


def instantiate(tables: Tables, syms) -> tuple[int, np.ndarray, list, int, np.ndarray]:
    """(status, words, [(tile index, start, end) of the tiles with words], number of steps, the same per
    tile as an (n_tiles, 2) array, -1 for a tile without words) for `syms`."""
    words, info = kernel()(np.array(syms or (0,), np.int64), tables.table, tables.t_base_words, tables.limit)
    nt = (len(info) - 3) // 2
    at = np.stack([info[3 : 3 + nt], info[3 + nt :]], 1)
    at[at[:, 0] < 0] = -1
    info = info.tolist()
    spans = [(i, s, e) for i, s, e in zip(range(nt), info[3 : 3 + nt], info[3 + nt :]) if s >= 0]
    return info[0], words, spans, info[2], at
