"""The JIT: MacroMeta + TileMeta + the actual length -> NPU instruction words.

Vectorized with NumPy: per macro and per template, every field is evaluated
over all grid points at once and encoded with `isa.encode_batch`; there is
no Python loop per instruction word. Dependency tokens follow one rule
(below) evaluated over the whole program, so they live in no per-tile list.

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


class Jit:
    """Instantiates programs from an artifact, with a per-length cache."""

    def __init__(self, artifact, cache_size: int = 16):
        self.art = artifact
        self.cache: OrderedDict = OrderedDict()
        self.cache_size = cache_size
        self.queues = [[_QUEUE[isa.QUEUE_OF[isa.Opcode[t.opcode]]] for t in m.insts] for m in artifact.macros]

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
            w, st, q = self._macro(tile, syms)
            if not len(w):
                continue
            if words:
                words.append(isa.encode(isa.Opcode.NOP)[None, :])
                steps.append(np.array([n_steps]))
                queues.append(np.array([1]))
                n_steps += 1
                start += 1
            words.append(w)
            steps.append(st + n_steps)
            queues.append(q)
            n_steps += int(st.max()) + 1 if len(st) else 0
            spans.append((tile.name, start, start + len(w)))
            start += len(w)
        if not words:
            return Program(np.zeros((0, isa.LANES), np.uint64), syms, spans, 0)
        words = np.concatenate(words)
        _set_tokens(words, np.concatenate(steps), np.concatenate(queues), n_steps)
        return Program(words, syms, spans, n_steps)

    def _macro(self, tile, syms):
        mm = self.art.macros[tile.macro]
        extents = [int(expr.evaluate(g, syms)) for g in tile.grid]
        n = int(np.prod(extents)) if extents else 1
        if n <= 0:
            return np.zeros((0, isa.LANES), np.uint64), np.zeros(0, np.int64), np.zeros(0, np.int64)
        dims = np.unravel_index(np.arange(n, dtype=np.int64), extents) if extents else ()
        bases = {int(k): int(expr.evaluate(p, syms)) for k, p in tile.bases.items()}
        masks = np.stack([_mask(t, syms, dims, n) for t in mm.insts], axis=1)
        pos = (np.cumsum(masks.ravel()) - 1).reshape(masks.shape)
        total = int(masks.sum())
        out = np.zeros((total, isa.LANES), np.uint64)
        step = np.repeat(np.arange(n, dtype=np.int64), masks.sum(axis=1))
        step = np.unique(step, return_inverse=True)[1].astype(np.int64)
        queue = np.zeros(total, np.int64)
        for j, t in enumerate(mm.insts):
            m = masks[:, j]
            count = int(m.sum())
            if count == 0:
                continue
            sel = tuple(d[m] for d in dims)
            out[pos[m, j]] = isa.encode_batch(isa.Opcode[t.opcode], count, _fields(t, syms, sel, bases))
            queue[pos[m, j]] = self.queues[tile.macro][j]
        return out, step, queue


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


def _firsts(key: np.ndarray) -> np.ndarray:
    _, idx = np.unique(key, return_index=True)
    return idx


def _set_tokens(words, step, queue, n_steps) -> None:
    n = len(words)
    has = np.zeros((3, n_steps), bool)
    has[queue, step] = True
    if not has[1].all():
        raise RuntimeError(f"steps {np.flatnonzero(~has[1])[:5]} have no compute instruction")
    key = step * 3 + queue
    first = np.zeros(n, bool)
    first[_firsts(key)] = True
    last = np.zeros(n, bool)
    last[n - 1 - _firsts(key[::-1])] = True
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
    for name, mask in flags.items():
        f = _HEADER[name]
        words[mask, f.lane] |= np.uint64(1 << f.offset)
