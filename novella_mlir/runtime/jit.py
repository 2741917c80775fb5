"""The JIT: MacroMeta + TileMeta + the actual length -> NPU instruction words.

Vectorized with NumPy: per macro and per template, every field is evaluated
over all grid points at once; there is no Python loop per instruction word.
Each template's constant fields are encoded once (its *base word*); an
instantiation only ORs the variable fields into it. Dependency tokens follow
one rule (below) evaluated over the whole program, so they live in no
per-tile list.

Dependency tokens and ping-pong slots are what `--novella-schedule` wrote:
each template's `slot` (address field -> slot stride, or [stride, slots], added
times the step index mod the slots) and each macro's `schedule` (the token step distances); the flags
are evaluated over the whole program by the one rule in `runtime/tokens.py`.
A barrier step, a single NOP, separates consecutive macros so DRAM written
by one is read by the next only after its stores finish; the leading loads
a macro's `schedule` marks `early` wait for less (`runtime/tokens.py`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from simulator import isa

from . import expr, jit_kernel, tokens

_QUEUE = {q: i for i, q in enumerate(isa.QUEUES)}
_NOP = isa.encode(isa.Opcode.NOP)
_FIELDS = {op: {f.name: f for f in fields} for op, fields in isa.LAYOUT.items()}


@dataclass
class Program:
    """Instruction words for one length, plus where each macro's words are."""

    words: np.ndarray  # (n, 4) uint64
    symbols: tuple
    spans: list  # [(tile name, start, end), ...]
    n_steps: int
    tile_spans: np.ndarray | None = None  # per tile of the artifact (start, end), -1: no words; None: not kept

    @property
    def n_words(self) -> int:
        return len(self.words)

    @property
    def nbytes(self) -> int:
        return self.words.nbytes


class _Plan:
    """One template, prepared for encoding: its base word and its variable fields.

    A tensor-relative `dram_base` is left out of the words: the JIT adds each
    tile's tensor base to it afterwards, so macros shared by several tiles
    (layers of the same shape) are expanded once per length."""

    def __init__(self, t):
        self.t = t
        self.op = isa.Opcode[t.opcode]
        self.queue = _QUEUE[isa.QUEUE_OF[self.op]]
        layout = _FIELDS[self.op]
        names = set(t.const) | set(t.var) | ({"dram_base"} if t.tensor is not None else set())
        self.ok = all(n in layout and n != "opcode" for n in names)
        self.base = np.zeros(isa.LANES, np.uint64)
        self.base[0] = np.uint64(int(self.op))
        self.relative = t.tensor is not None
        for name, v in t.const.items():
            if self.ok and not (self.relative and name == "dram_base"):
                bits = _bits(layout[name], v)
                self.ok = bits is not None
                self.base[layout[name].lane] |= np.uint64(bits or 0)
        skip = "dram_base" if self.relative else None
        self.guard = _key(t.when)
        self.var = []
        for name, progs in t.var.items():
            if name != skip:
                f = layout.get(name)
                self.var.append((f, progs, (self.guard, f, _key(progs))))
        self.dram = layout.get("dram_base") if self.relative else None
        self.slot = []  # (field, its value program(s), slot stride, slots): value + stride * (step mod slots)
        for name, entry in t.slot.items():
            stride, n = tokens.slot_of(entry)
            f = layout.get(name)
            if f is None or name == "dram_base":
                self.ok = False
                continue
            progs = t.var.get(name, [[t.const.get(name, 0)]])
            self.var = [v for v in self.var if v[0] is not f]
            if name in t.const:
                self.base[f.lane] &= ~np.uint64(f.mask << f.offset)
            self.slot.append((f, progs, stride, n))
        self.slotted = "sram_addr" in t.slot

    def encode(self, syms, dims, count, memo: dict, step=None) -> np.ndarray | None:
        """Words for the `count` selected grid points, or None if a field is out of range.

        `memo` holds the encoded bits of (guard, field, expression) within one
        expansion: templates of a macro share many fields (rows, strides).
        `step`: the step index of each selected point (for slotted fields)."""
        lanes = list(self.base)
        for f, progs, key in self.var:
            if key not in memo:
                memo[key] = _field_bits(f, expr.evaluate_min(progs, syms, dims))
            if memo[key] is None:
                return None
            lanes[f.lane] = lanes[f.lane] | memo[key]
        for f, progs, stride, n in self.slot:
            bits = _field_bits(f, np.asarray(expr.evaluate_min(progs, syms, dims), np.int64) + stride * (step % n))
            if bits is None:
                return None
            lanes[f.lane] = lanes[f.lane] | bits
        out = np.empty((count, isa.LANES), np.uint64)
        for i, v in enumerate(lanes):
            out[:, i] = v
        return out

    def relative_dram(self, syms, dims):
        """The tensor-relative `dram_base` value(s)."""
        if "dram_base" in self.t.var:
            return np.asarray(expr.evaluate_min(self.t.var["dram_base"], syms, dims), np.int64)
        return np.asarray(self.t.const.get("dram_base", 0), np.int64)


def _bits(f, v) -> int | None:
    """The bits of constant `v` in field `f` (shifted into place), None if not encodable."""
    if f.name in isa.FLOAT_FIELDS:
        return int(np.asarray(v, np.float32).view(np.uint32)) << f.offset
    if isinstance(v, float) or not f.lo <= int(v) <= f.hi:
        return None
    return (int(v) & f.mask) << f.offset


def _field_bits(f, v):
    """The value(s) `v` of field `f`, masked and shifted into place; None if any is out of range."""
    if f.name in isa.FLOAT_FIELDS:
        return np.asarray(v, np.float32).view(np.uint32).astype(np.uint64) << np.uint64(f.offset)
    a = np.asarray(v)
    if a.dtype.kind not in "iub" or (a.size and (a.min() < f.lo or a.max() > f.hi)):
        return None
    return (a.astype(np.int64) & f.mask).astype(np.uint64) << np.uint64(f.offset)


def _key(x):
    """A hashable copy of nested lists."""
    return tuple(_key(v) for v in x) if isinstance(x, list) else x


@dataclass
class _Expansion:
    """One macro expanded over its grid for one length, without the tiles' tensor bases or tokens."""

    words: np.ndarray
    n_steps: int
    dram: list  # [(word positions, Field, relative values, min, max, tensor slot), ...]
    step: np.ndarray  # per word: its step within the macro
    queue: np.ndarray  # per word: 0 load, 1 compute, 2 store
    slotted: np.ndarray  # per word: a load into a ping-pong slot
    schedule: tuple = (1, 1)  # (load_slots, store_slots)
    early: np.ndarray | None = None  # per word: its template's early tier (`schedule.early`)

    def without_early(self) -> _Expansion:
        """This expansion behind a macro that has no words (its early tiers were decided against that one)."""
        return self if self.early is None else dataclasses.replace(self, early=None)


def _empty() -> _Expansion:
    z = np.zeros(0, np.int64)
    return _Expansion(np.zeros((0, isa.LANES), np.uint64), 0, [], z, z, z.astype(bool))


_EMPTY = _empty()


class Jit:
    """Instantiates programs from an artifact, with a cache keyed by the tuple of symbol values.

    An artifact of several programs (`artifact.Program`: export-guard sub-ranges, shape buckets) gets
    one Jit per program; the symbol values pick the program (`Artifact.pick`)."""

    def __init__(self, artifact, cache_size: int = 16):
        self.art = artifact
        self.cache: OrderedDict = OrderedDict()
        self.cache_size = cache_size
        self.parts = []
        if len(artifact.programs) > 1:
            self.parts = [Jit(artifact.view(i), cache_size=0) for i in range(len(artifact.programs))]
            return
        self.queues = [[_QUEUE[isa.QUEUE_OF[isa.Opcode[t.opcode]]] for t in m.insts] for m in artifact.macros]
        self._plans = [[None] * len(m.insts) for m in artifact.macros]
        self._ids: dict = {}
        self._tables = None

    def instantiate(self, symbols) -> Program:
        key = tuple(map(int, symbols))
        prog = self.cache.get(key)
        if prog is not None:
            with contextlib.suppress(KeyError):  # another thread's _keep may have evicted it just now
                self.cache.move_to_end(key)
            return prog
        return self._keep(key, self._build(key))

    def prepare(self) -> None:
        """Builds the compiled instantiation's tables now (a function of the artifact alone), so that
        the first instantiation of a session's program does not pay them (`runtime/step.Stepper`)."""
        for jit in self.parts or [self]:
            if jit._tables is None:
                jit._tables = jit_kernel.Tables(jit.art)

    def check(self, symbols) -> None:
        """Raises `isa.EncodingError` unless every field of the program for `symbols` encodes: the NumPy
        expansion's checks, without words, nothing cached. It never loads numba: the compile's bound check
        would otherwise pay numba's first use in the process (~0.5 s CPU), which a run pays anyway."""
        key = tuple(map(int, symbols))
        if key not in self.cache:
            (self.parts[self.art.pick(key)] if self.parts else self)._build_numpy(key, words=False)

    def _keep(self, key, prog: Program) -> Program:
        prog.words.flags.writeable = False  # shared by every call at this length
        self.cache[key] = prog
        while len(self.cache) > self.cache_size:
            with contextlib.suppress(KeyError):
                self.cache.popitem(last=False)
        return prog

    def _build(self, syms, words: bool = True) -> Program | None:
        i = self.art.pick(syms)  # an InputError outside every program's box: nothing runs unvalidated
        if self.parts:
            return self.parts[i]._build(syms, words)
        if self._tables is None:
            self._tables = jit_kernel.Tables(self.art)
        if self._tables.ok:
            status, out, spans, n_steps, at = jit_kernel.instantiate(self._tables, syms)
            if status == jit_kernel.OK:
                tiles = self.art.tiles
                return Program(out, syms, [(tiles[i].name, s, e) for i, s, e in spans], n_steps, at)
        return self._build_numpy(syms, words)

    def _build_numpy(self, syms, words: bool = True) -> Program | None:
        """The NumPy expansion: the reference of the compiled kernel, and the path for its errors
        (`words=False`: only the encoding checks, no words, None)."""
        parts, spans, expanded = [], [], {}
        n_steps, start, ran = 0, 0, False
        for tile in self.art.tiles:
            extents = tuple(int(expr.evaluate(g, syms)) for g in tile.grid)
            key = (tile.macro, extents)
            if key not in expanded:
                expanded[key] = self._expand(tile.macro, syms, extents)
            ex = expanded[key]
            bases = {int(k): int(expr.evaluate(p, syms)) for k, p in tile.bases.items()}
            if ex is None or not _bases_fit(ex, bases):
                _raise_encoding_error(self.art.macros[tile.macro], syms, extents, bases)
            after, ran = ran, bool(len(ex.words))
            if not len(ex.words) or not words:
                continue
            if parts:
                parts.append((_BARRIER, None))
                n_steps, start = n_steps + 1, start + 1
            parts.append((ex if after else ex.without_early(), bases))
            n_steps += ex.n_steps
            spans.append((tile.name, start, start + len(ex.words)))
            start += len(ex.words)
        if not words:
            return None
        if not parts:
            return Program(np.zeros((0, isa.LANES), np.uint64), syms, spans, 0)
        out = np.concatenate([ex.words for ex, _ in parts])
        _add_bases(out, parts)
        out[:, 0] |= _program_tokens([ex for ex, _ in parts])
        return Program(out, syms, spans, n_steps)

    def _plan(self, macro: int, j: int) -> _Plan:
        plan = self._plans[macro][j]
        if plan is None:
            plan = self._plans[macro][j] = _Plan(self.art.macros[macro].insts[j])
            plan.var = [(f, p, self._ids.setdefault(key, len(self._ids))) for f, p, key in plan.var]
        return plan

    def _expand(self, macro: int, syms, extents) -> _Expansion | None:
        """The words of one macro over its grid; None if a field does not encode."""
        mm = self.art.macros[macro]
        n = int(np.prod(extents)) if extents else 1
        if n <= 0:
            return _EMPTY
        dims = np.unravel_index(np.arange(n, dtype=np.int64), extents) if extents else ()
        plans = [self._plan(macro, j) for j in range(len(mm.insts))]
        guards = {}
        for p in plans:
            if p.guard not in guards:
                guards[p.guard] = when_mask(p.t, syms, dims, n)
        masks = np.stack([guards[p.guard] for p in plans], axis=1)
        per_point = masks.sum(axis=1)
        pos = (np.cumsum(masks.ravel()) - 1).reshape(masks.shape)
        nonempty = per_point > 0
        step = np.repeat(np.cumsum(nonempty) - 1, per_point)
        out = np.empty((len(step), isa.LANES), np.uint64)
        queue = np.empty(len(step), np.int64)
        dram, memo, selected = [], {}, {(): (n, dims)}
        point_step = np.cumsum(nonempty) - 1
        slotted = np.zeros(len(step), bool)
        tiers = mm.schedule.get("early")
        early = np.zeros(len(step), np.int64) if tiers else None
        for j, (t, plan) in enumerate(zip(mm.insts, plans)):
            m = masks[:, j]
            if plan.guard not in selected:
                selected[plan.guard] = (int(m.sum()), tuple(d[m] for d in dims))
            count, sel = selected[plan.guard]
            if count == 0:
                continue
            at = pos[m, j] if t.when else pos[:, j]
            at_step = point_step[m] if plan.slot else None
            words = plan.encode(syms, sel, count, memo, at_step) if plan.ok else None
            if words is None:
                return None
            out[at] = words
            queue[at] = plan.queue
            slotted[at] = plan.slotted
            if early is not None:
                early[at] = tiers[j]
            if plan.dram is not None:
                rel = plan.relative_dram(syms, sel)
                dram.append((at, plan.dram, rel, int(rel.min()), int(rel.max()), t.tensor))
        schedule = (mm.schedule.get("load_slots", 1), mm.schedule.get("store_slots", 1))
        return _Expansion(out, int(nonempty.sum()), dram, step, queue, slotted, schedule, early)


_BARRIER = _Expansion(_NOP[None, :], 1, [], np.zeros(1, np.int64), np.ones(1, np.int64), np.zeros(1, bool))


def _bases_fit(ex: _Expansion, bases) -> bool:
    for _, f, rel, lo, hi, slot in ex.dram:
        if rel.dtype.kind not in "iu" or lo + bases[slot] < f.lo or hi + bases[slot] > f.hi:
            return False
    return True


def _add_bases(words, parts) -> None:
    """ORs each tile's tensor-relative `dram_base` plus its tensor base into the words."""
    start = 0
    for ex, bases in parts:
        for at, f, rel, _, _, slot in ex.dram:
            bits = ((rel + bases[slot]) & f.mask).astype(np.uint64) << np.uint64(f.offset)
            words[start + at, f.lane] |= bits
        start += len(ex.words)


def _raise_encoding_error(mm, syms, extents, bases) -> None:
    """Encodes the macro the plain way, which raises the encoder's error for the first bad field."""
    n = int(np.prod(extents)) if extents else 1
    dims = np.unravel_index(np.arange(n, dtype=np.int64), extents) if extents else ()
    for t in mm.insts:
        m = when_mask(t, syms, dims, n)
        if m.any():
            sel = tuple(d[m] for d in dims)
            isa.encode_batch(isa.Opcode[t.opcode], int(m.sum()), _fields(t, syms, sel, bases))
    raise RuntimeError(f"macro {mm.kernel}: a field does not encode, but the encoder accepts every value")


def when_mask(t, syms, dims, n) -> np.ndarray:
    m = np.ones(n, bool)
    for kind, prog in t.when:
        v = expr.evaluate(prog, syms, dims)
        m &= (v == 0) if kind == "eq" else (v >= 0)
    return m


def _fields(t, syms, dims, bases) -> dict:
    f = dict(t.const)
    for name, progs in t.var.items():
        f[name] = expr.evaluate_min(progs, syms, dims)
    if t.tensor is not None:
        f["dram_base"] = f.get("dram_base", 0) + bases[t.tensor]
    return f


def _program_tokens(parts) -> np.ndarray:
    """Token header bits of the concatenated parts (macros and barrier steps), by `tokens.flags`."""
    step, queue, slotted, early, load_slots, store_slots, barrier, before = [], [], [], [], [], [], [], []
    n_steps, last_barrier, prev_barrier = 0, -1, -1
    for ex in parts:
        step.append(ex.step + n_steps)
        queue.append(ex.queue)
        slotted.append(ex.slotted)
        early.append(np.zeros(len(ex.step), np.int64) if ex.early is None else ex.early)
        if ex is _BARRIER:
            prev_barrier, last_barrier = last_barrier, n_steps
            load_slots.append([1])
            store_slots.append([1])
        else:
            load_slots.append(np.full(ex.n_steps, ex.schedule[0]))
            store_slots.append(np.full(ex.n_steps, ex.schedule[1]))
        barrier.append(np.full(ex.n_steps, last_barrier))
        before.append(np.full(ex.n_steps, prev_barrier))
        n_steps += ex.n_steps
    cat = np.concatenate
    return tokens.flags(
        cat(step), cat(queue), cat(slotted), cat(load_slots), cat(store_slots), cat(barrier).astype(np.int64),
        cat(early), cat(before).astype(np.int64),
    )  # fmt: skip
