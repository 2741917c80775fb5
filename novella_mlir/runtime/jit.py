"""The JIT: MacroMeta + TileMeta + the actual length -> NPU instruction words.

Vectorized with NumPy: per macro and per template, every field is evaluated
over all grid points at once; there is no Python loop per instruction word.
Each template's constant fields are encoded once (its *base word*); an
instantiation only ORs the variable fields into it. Dependency tokens follow
one rule (below) evaluated over the whole program, so they live in no
per-tile list.

Token rule, per *step* (one grid point of one macro; a barrier step, a
single NOP, separates consecutive macros so DRAM written by one is read by
the next only after its stores finish). With L/C/S the load, compute and
store instructions of step k:
  * the first L pops C2L if k > 0 (compute of step k-1 is done with SRAM);
  * the last L pushes L2C; the first C pops it if step k has loads;
  * the first C pops S2C if step k-1 stored; the last S of a step pushes S2C
    unless it is the program's last step;
  * the last C pushes C2S if step k stores (popped by its first S) and C2L
    if step k+1 loads.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from simulator import isa

from . import expr

_QUEUE = {"load": 0, "compute": 1, "store": 2}
_HEADER = {f.name: f for f in isa.LAYOUT[isa.Opcode.NOP]}
_NOP = isa.encode(isa.Opcode.NOP)


@dataclass
class Program:
    """Instruction words for one length, plus where each macro's words are."""

    words: np.ndarray  # (n, 4) uint64
    symbols: tuple
    spans: list  # [(tile name, start, end), ...]
    n_steps: int

    @property
    def n_words(self) -> int:
        return len(self.words)

    @property
    def nbytes(self) -> int:
        return self.words.nbytes


class _Plan:
    """One template, prepared for encoding: its base word and its variable fields."""

    def __init__(self, t):
        self.t = t
        self.op = isa.Opcode[t.opcode]
        self.queue = _QUEUE[isa.QUEUE_OF[self.op]]
        layout = {f.name: f for f in isa.LAYOUT[self.op]}
        names = set(t.const) | set(t.var) | ({"dram_base"} if t.tensor is not None else set())
        self.ok = all(n in layout and n != "opcode" for n in names)
        self.base = np.zeros(isa.LANES, np.uint64)
        self.base[0] = np.uint64(int(self.op))
        const = {k: v for k, v in t.const.items() if not (k == "dram_base" and t.tensor is not None)}
        for name, v in const.items():
            bits = _bits(layout[name], v) if self.ok else None
            self.ok = self.ok and bits is not None
            if self.ok:
                self.base[layout[name].lane] |= np.uint64(bits)
        self.var = [(layout[n], p) for n, p in t.var.items() if self.ok and n != "dram_base"]
        self.dram = layout.get("dram_base") if t.tensor is not None or "dram_base" in t.var else None

    def encode(self, syms, dims, count, bases) -> np.ndarray | None:
        """Words for the `count` selected grid points, or None if a field is out of range."""
        lanes = list(self.base)
        for f, progs in self.var:
            if not _put(lanes, f, expr.evaluate_min(progs, syms, dims)):
                return None
        if self.dram is not None and not _put(lanes, self.dram, self._dram_base(syms, dims, bases)):
            return None
        out = np.empty((count, isa.LANES), np.uint64)
        for i, v in enumerate(lanes):
            out[:, i] = v
        return out

    def _dram_base(self, syms, dims, bases):
        t = self.t
        if "dram_base" in t.var:
            v = expr.evaluate_min(t.var["dram_base"], syms, dims)
        else:
            v = t.const.get("dram_base", 0)
        return v + bases[t.tensor] if t.tensor is not None else v


def _bits(f, v) -> int | None:
    """The bits of constant `v` in field `f` (shifted into place), None if not encodable."""
    if f.name in isa.FLOAT_FIELDS:
        return int(np.asarray(v, np.float32).view(np.uint32)) << f.offset
    if isinstance(v, float) or not f.lo <= int(v) <= f.hi:
        return None
    return (int(v) & f.mask) << f.offset


def _put(lanes, f, v) -> bool:
    """ORs the value(s) `v` of field `f` into `lanes`; False if any is out of range."""
    if f.name in isa.FLOAT_FIELDS:
        bits = np.asarray(v, np.float32).view(np.uint32).astype(np.uint64)
    else:
        a = np.asarray(v)
        if a.dtype.kind not in "iub" or (a.size and (a.min() < f.lo or a.max() > f.hi)):
            return False
        bits = (a.astype(np.int64) & f.mask).astype(np.uint64)
    lanes[f.lane] = lanes[f.lane] | (bits << np.uint64(f.offset))
    return True


class Jit:
    """Instantiates programs from an artifact, with a per-length cache."""

    def __init__(self, artifact, cache_size: int = 16):
        self.art = artifact
        self.cache: OrderedDict = OrderedDict()
        self.cache_size = cache_size
        self.queues = [[_QUEUE[isa.QUEUE_OF[isa.Opcode[t.opcode]]] for t in m.insts] for m in artifact.macros]
        self._plans: dict = {}

    def instantiate(self, symbols) -> Program:
        key = tuple(int(s) for s in symbols)
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        prog = self._build(key)
        self.cache[key] = prog
        if len(self.cache) > self.cache_size:
            self.cache.popitem(last=False)
        return prog

    def _build(self, syms) -> Program:
        words, steps, queues, spans = [], [], [], []
        n_steps, start = 0, 0
        for tile in self.art.tiles:
            w, st, q, k = self._macro(tile, syms)
            if not len(w):
                continue
            if words:
                words.append(_NOP[None, :])
                steps.append(np.array([n_steps]))
                queues.append(np.array([1]))
                n_steps += 1
                start += 1
            words.append(w)
            steps.append(st + n_steps)
            queues.append(q)
            n_steps += k
            spans.append((tile.name, start, start + len(w)))
            start += len(w)
        if not words:
            return Program(np.zeros((0, isa.LANES), np.uint64), syms, spans, 0)
        words = np.concatenate(words)
        _set_tokens(words, np.concatenate(steps), np.concatenate(queues), n_steps)
        return Program(words, syms, spans, n_steps)

    def _plan(self, macro: int, j: int) -> _Plan:
        key = (macro, j)
        if key not in self._plans:
            self._plans[key] = _Plan(self.art.macros[macro].insts[j])
        return self._plans[key]

    def _macro(self, tile, syms):
        """(words, step of each word, queue of each word, number of steps) of one macro."""
        mm = self.art.macros[tile.macro]
        extents = [int(expr.evaluate(g, syms)) for g in tile.grid]
        n = int(np.prod(extents)) if extents else 1
        if n <= 0:
            return np.zeros((0, isa.LANES), np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64), 0
        dims = np.unravel_index(np.arange(n, dtype=np.int64), extents) if extents else ()
        bases = {int(k): int(expr.evaluate(p, syms)) for k, p in tile.bases.items()}
        masks = np.stack([_mask(t, syms, dims, n) for t in mm.insts], axis=1)
        per_point = masks.sum(axis=1)
        pos = (np.cumsum(masks.ravel()) - 1).reshape(masks.shape)
        nonempty = per_point > 0
        step = np.repeat(np.cumsum(nonempty) - 1, per_point)
        out = np.zeros((int(per_point.sum()), isa.LANES), np.uint64)
        queue = np.zeros(len(out), np.int64)
        for j, t in enumerate(mm.insts):
            m = masks[:, j]
            count = int(m.sum()) if t.when else n
            if count == 0:
                continue
            sel = tuple(d[m] for d in dims) if t.when else dims
            at = pos[m, j] if t.when else pos[:, j]
            out[at] = self._encode(tile.macro, j, syms, sel, count, bases)
            queue[at] = self.queues[tile.macro][j]
        return out, step, queue, int(nonempty.sum())

    def _encode(self, macro, j, syms, dims, count, bases) -> np.ndarray:
        plan = self._plan(macro, j)
        words = plan.encode(syms, dims, count, bases) if plan.ok else None
        if words is None:  # out of range: the encoder names the field and value
            t = plan.t
            words = isa.encode_batch(plan.op, count, _fields(t, syms, dims, bases))
        return words


def _mask(t, syms, dims, n) -> np.ndarray:
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


def _edges(step, queue, q):
    """Indices of the first and last word of queue `q` in each step that has one."""
    idx = np.flatnonzero(queue == q)
    s = step[idx]
    change = s[1:] != s[:-1]
    first = idx[np.concatenate(([True], change))] if len(idx) else idx
    last = idx[np.concatenate((change, [True]))] if len(idx) else idx
    return first, last


def _set_tokens(words, step, queue, n_steps) -> None:
    n = len(words)
    has = np.zeros((3, n_steps), bool)
    has[queue, step] = True
    if not has[1].all():
        raise RuntimeError(f"steps {np.flatnonzero(~has[1])[:5]} have no compute instruction")
    first = np.zeros(n, bool)
    last = np.zeros(n, bool)
    for q in range(3):
        f, lst = _edges(step, queue, q)
        first[f] = True
        last[lst] = True
    nxt = np.minimum(step + 1, n_steps - 1)
    has_next = step + 1 < n_steps
    prev_stored = np.where(step > 0, has[2, np.maximum(step - 1, 0)], False)
    is_l, is_c, is_s = queue == 0, queue == 1, queue == 2
    flags = {
        "pop_next": (is_l & first & (step > 0)) | (is_c & first & prev_stored),
        "push_next": (is_l & last) | (is_c & last & has[2, step]),
        "pop_prev": (is_c & first & has[0, step]) | (is_s & first),
        "push_prev": (is_c & last & has_next & has[0, nxt]) | (is_s & last & has_next),
    }
    header = np.zeros(n, np.uint64)
    for name, mask in flags.items():
        header |= mask.astype(np.uint64) << np.uint64(_HEADER[name].offset)
    words[:, 0] |= header
