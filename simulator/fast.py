"""The fast path: the same machine as `machine.py`, with the per-instruction Python overhead removed.

It still executes every decoded instruction word, one at a time, in the
order the readable machine picks. What it does differently:

* decodes, validates and costs the whole program at once (NumPy over the
  (n, 4) words, timing formulas from `TimingModel` applied to field arrays);
* prepares each instruction once: its memory tiles become NumPy views of
  the unit's storage (shared by every instruction that names the same tile),
  so executing it is one or two NumPy calls on views, with no index arrays;
* hands the hazard checker precomputed address intervals (`Span`s).

An instruction it does not prepare (an opcode without a fast form, a tile
whose rows overlap, a zero-size or out-of-range access) runs through the
readable `FunctionalModel.exec_<mnemonic>` and `TimingModel.finish`, so a
new instruction works on both paths as soon as its `exec_` method exists.
`test/py/test_fast_path.py` checks outputs, cycles and stats bit for bit
against the readable path.
"""

from __future__ import annotations

from collections import deque

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .errors import DeadlockError
from .functional import BINARY_OPS, F32, REDUCE_OPS, UNARY_OPS
from .hazards import HazardTracker, Span, entry
from .isa import BINARY_FNS, LAYOUT, QUEUE_OF, QUEUES, REDUCE_FNS, Opcode, VecFn, VecMode, decode
from .units import CHANNELS, TOKEN_ROUTES

_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
_CH = {c: i for i, c in enumerate(CHANNELS)}
FAST_OPS = frozenset({Opcode.NOP, Opcode.LOAD, Opcode.STORE, Opcode.MATMUL, Opcode.VEC})


def decode_columns(words: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(opcode codes, {field: int64 values}) of every word; `imm` as float32. Unknown opcodes decode no fields."""
    n = len(words)
    code = (words[:, 0] & np.uint64(0xF)).astype(np.int64)
    cols: dict[str, np.ndarray] = {}
    for op, layout in LAYOUT.items():
        sel = code == int(op)
        if not sel.any():
            continue
        for f in layout[1:]:
            v = ((words[sel, f.lane] >> np.uint64(f.offset)) & np.uint64(f.mask)).astype(np.int64)
            if f.signed:
                v = np.where(v > f.hi, v - (1 << f.bits), v)
            if f.name == "imm":
                cols.setdefault("imm", np.zeros(n, np.float32))[sel] = v.astype(np.uint32).view(np.float32)
            else:
                cols.setdefault(f.name, np.zeros(n, np.int64))[sel] = v
    return code, cols


def invalid(code, cols, config) -> bool:
    """Whether any word would fail the readable machine's decode or validation."""
    known = np.isin(code, [int(op) for op in LAYOUT])
    if not known.all():
        return True
    for op in LAYOUT:
        sel = code == int(op)
        for flag in _FLAGS:
            if (QUEUE_OF[op], flag) not in TOKEN_ROUTES and flag in cols and (cols[flag][sel] != 0).any():
                return True
    if "fn" in cols:
        ok = [fn.value for fn in VecFn if fn.name.lower() in config.vector_functions]
        if not np.isin(cols["fn"][code == Opcode.VEC], ok).all():
            return True
    return False


def _inbound_rows(start, step, bound, rows):
    """[j_lo, j_hi): the j in [0, rows) with 0 <= start + step * j < bound (a range, as step >= 0)."""
    safe = np.maximum(step, 1)
    lo = np.where(step > 0, np.maximum(0, -(start // safe)), 0)
    hi = np.where(step > 0, np.minimum(rows, -((start - bound) // safe)), rows)
    const_in = (start >= 0) & (start < bound)
    lo = np.where((step == 0) & ~const_in, 0, lo)
    hi = np.where((step == 0) & ~const_in, 0, hi)
    return lo, np.maximum(hi, lo)


_FLAG_MASK = np.uint64(~0xF0 & 0xFFFFFFFFFFFFFFFF)


def _distinct(words):
    """(index of one word per distinct instruction ignoring token flags, which of those each word is)."""
    body = words.copy()
    body[:, 0] &= _FLAG_MASK
    _, rep, inverse = np.unique(body.view(np.dtype((np.void, 32))).ravel(), return_index=True, return_inverse=True)
    return rep, inverse.ravel()


class _Views:
    """NumPy views of the memories' tiles, one per distinct (memory, addr, stride, rows, cols)."""

    def __init__(self, units):
        self.units = units  # MEMS order: spad, acc, dram
        self.cache: dict = {}

    def get(self, mem, addr, stride, rows, cols):
        key = (mem, addr, stride, rows, cols)
        v = self.cache.get(key)
        if v is None:
            d = self.units[mem].data
            if rows == 1 or stride == cols:
                v = d[addr : addr + rows * cols].reshape(rows, cols)
            elif stride > cols and addr + rows * stride <= d.size:
                v = d[addr : addr + rows * stride].reshape(rows, stride)[:, :cols]
            else:
                v = as_strided(d[addr:], (rows, cols), (stride * 4, 4))
            self.cache[key] = v
        return v


def _load(dst, jlo, jhi, src):
    if jlo:
        dst[:jlo] = 0
    if src is not None:
        dst[jlo:jhi] = src
    if jhi < len(dst):
        dst[jhi:] = 0


def _store(dst, src):
    dst[...] = src


def _matmul(a, b, acc, accumulate):
    out = np.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b))
    if accumulate:
        out += acc
    acc[...] = out


def _binary(ufunc, a, b, dst):
    dst[...] = ufunc(a, b)


def _select(a, b, dst):
    dst[...] = np.where(a != 0, b, dst)


def _unary(fn, a, dst):
    dst[...] = fn(a)


def _reduce(fn, a, dst):
    dst[...] = fn(a, axis=1, keepdims=True)


def _fill(value, dst):
    dst[...] = value


def _nop():
    pass


class Plan:
    """Per instruction: queue, token channels, handler + args (None: readable path), spans, cost."""

    def __init__(self, sim, words, code, cols):
        self.sim, self.words, self.code, self.c = sim, words, code, cols
        n = len(words)
        self.views = _Views((sim.spad, sim.acc, sim.dram))
        self.sizes = (sim.spad.size, sim.acc.size, sim.dram.size)
        self.span_cache: dict = {}
        self.queue = np.zeros(n, np.int64)
        for op in LAYOUT:
            self.queue[code == int(op)] = QUEUES.index(QUEUE_OF[op])
        names = {int(op): op.name for op in Opcode}
        self.mnemonic = [names.get(c, "?") for c in code.tolist()]
        self.handler: list = [None] * n
        self.args: list = [()] * n
        self.spans: list = [()] * n
        self.fixed = np.full(n, -1, np.int64)  # duration, or -1: DMA or readable timing
        self.dma = np.zeros(n, np.int64)
        self.macs = np.zeros(n, np.int64)
        self._tokens()
        self._costs()
        rep, inverse = _distinct(words)
        rep_code = code[rep]
        builders = {
            Opcode.LOAD: lambda idx: self._dma(Opcode.LOAD, idx),
            Opcode.STORE: lambda idx: self._dma(Opcode.STORE, idx),
            Opcode.MATMUL: self._matmul,
            Opcode.VEC: self._vec,
            Opcode.NOP: self._nop,
        }
        for op, build in builders.items():
            if op in FAST_OPS:
                build(rep[rep_code == op])
        of = rep[inverse].tolist()
        h, a, sp = self.handler, self.args, self.spans
        self.handler, self.args, self.spans = [h[k] for k in of], [a[k] for k in of], [sp[k] for k in of]

    def _costs(self) -> None:
        """Durations of fixed-length instructions, DMA bytes and MACs, over the whole program."""
        c, code, timing = self.c, self.code, self.sim.timing
        for op in (Opcode.LOAD, Opcode.STORE):
            idx = np.flatnonzero(code == op)
            if len(idx):
                lo, hi = _inbound_rows(*(c[k][idx] for k in ("row_start", "row_step", "row_bound", "rows")))
                self.dma[idx] = (hi - lo) * c["cols"][idx] * 4
        for op, cycles in ((Opcode.MATMUL, timing.matmul_cycles), (Opcode.VEC, timing.vec_cycles)):
            idx = np.flatnonzero(code == op)
            if len(idx):
                self.fixed[idx] = cycles({k: v[idx] for k, v in c.items()})
        idx = np.flatnonzero(code == Opcode.MATMUL)
        if len(idx):
            self.macs[idx] = c["m"][idx] * c["k"][idx] * c["n"][idx]
        self.fixed[code == Opcode.NOP] = 1

    def _tokens(self) -> None:
        table_pop, table_push = {}, {}
        for q, name in enumerate(QUEUES):
            for bits in range(4):
                on = {"prev": bits & 1, "next": bits >> 1}
                for table, kind in ((table_pop, "pop"), (table_push, "push")):
                    routes = [TOKEN_ROUTES.get((name, f"{kind}_{d}")) for d in ("prev", "next") if on[d]]
                    table[q * 4 + bits] = tuple(_CH[r] for r in routes if r is not None)
        c = self.c
        zero = np.zeros(len(self.code), np.int64)
        pk = self.queue * 4 + c.get("pop_prev", zero) + 2 * c.get("pop_next", zero)
        sk = self.queue * 4 + c.get("push_prev", zero) + 2 * c.get("push_next", zero)
        self.pops = [table_pop[k] for k in pk.tolist()]
        self.pushes = [table_push[k] for k in sk.tolist()]

    def _span(self, mem, write, addr, stride, rows, cols):
        """The tracker's `entry` of a tile, or None if it is out of range or empty; a writable view needs
        disjoint rows."""
        key = (mem, write, addr, stride, rows, cols)
        s = self.span_cache.get(key)
        if s is None:
            lo, hi = addr, addr + stride * (rows - 1) + cols
            bad = rows <= 0 or cols <= 0 or lo < 0 or hi > self.sizes[mem] or (write and rows > 1 and stride < cols)
            s = False if bad else (Span(mem, write, addr, stride, rows, cols), lo, hi, mem * 6)
            self.span_cache[key] = s
        return s or None

    def _prepare(self, i, spans, handler, args) -> None:
        if all(s is not None for s in spans):
            self.handler[i], self.args[i], self.spans[i] = handler, args, tuple(spans)

    def _nop(self, idx) -> None:
        for i in idx.tolist():
            self.handler[i] = _nop

    def _dma(self, op, idx) -> None:
        if not len(idx):
            return
        c = {k: v[idx] for k, v in self.c.items()}
        jlo, jhi = _inbound_rows(c["row_start"], c["row_step"], c["row_bound"], c["rows"])
        d_addr = c["dram_base"] + (c["row_start"] + c["row_step"] * jlo) * c["dram_stride"]
        d_stride = c["row_step"] * c["dram_stride"]
        cols = [x.tolist() for x in (c["mem"], c["sram_addr"], c["sram_stride"], c["rows"], c["cols"])]
        for i, mem, sa, ss, rows, nc, lo, hi, da, ds in zip(
            idx.tolist(), *cols, jlo.tolist(), jhi.tolist(), d_addr.tolist(), d_stride.tolist()
        ):
            n = hi - lo
            dram = self._span(2, op == Opcode.STORE, da, ds, n, nc) if n else None
            if op == Opcode.LOAD:
                sram = self._span(mem, True, sa, ss, rows, nc)
                if sram is None or (n and dram is None):
                    continue
                src = self.views.get(2, da, ds, n, nc) if n else None
                spans = [dram, sram] if n else [sram]
                self._prepare(i, spans, _load, (self.views.get(mem, sa, ss, rows, nc), lo, hi, src))
            elif n:
                sram = self._span(mem, False, sa + lo * ss, ss, n, nc)
                if sram is not None and dram is not None:
                    args = (self.views.get(2, da, ds, n, nc), self.views.get(mem, sa + lo * ss, ss, n, nc))
                    self._prepare(i, [sram, dram], _store, args)
            elif nc:
                self._prepare(i, [], _nop, ())

    def _matmul(self, idx) -> None:
        if not len(idx):
            return
        c = {k: v[idx] for k, v in self.c.items()}
        names = ("a_addr", "a_stride", "b_addr", "b_stride", "acc_addr", "acc_stride", "m", "k", "n")
        cols = [c[x].tolist() for x in (*names, "accumulate", "transpose_b")]
        v = self.views.get
        for i, aa, ast, ba, bst, ca, cst, m, k, n, accum, tb in zip(idx.tolist(), *cols):
            br, bc = (n, k) if tb else (k, n)
            spans = [self._span(0, False, aa, ast, m, k), self._span(0, False, ba, bst, br, bc)]
            if accum:
                spans.append(self._span(1, False, ca, cst, m, n))
            spans.append(self._span(1, True, ca, cst, m, n))
            if all(s is not None for s in spans):
                b = v(0, ba, bst, br, bc)
                self._prepare(i, spans, _matmul, (v(0, aa, ast, m, k), b.T if tb else b, v(1, ca, cst, m, n), accum))

    def _vec(self, idx) -> None:
        if not len(idx):
            return
        c = {k: v[idx] for k, v in self.c.items()}
        names = ("fn", "mode", "dst_mem", "dst_addr", "dst_stride", "rows", "cols")
        names += ("a_mem", "a_addr", "a_stride", "b_mem", "b_addr", "b_stride")
        cols = [c[x].tolist() for x in names]
        for i, fn, mode, dm, da, ds, rows, nc, am, aa, ast, bm, ba, bst, imm in zip(
            idx.tolist(), *cols, c["imm"].tolist()
        ):
            self._vec_one(i, VecFn(fn), mode, (dm, da, ds), rows, nc, (am, aa, ast), (bm, ba, bst), imm)

    def _vec_one(self, i, fn, mode, dst, rows, cols, a, b, imm) -> None:
        v = self.views.get
        out_cols = 1 if fn in REDUCE_FNS else cols
        d_span = self._span(dst[0], True, dst[1], dst[2], rows, out_cols)
        if d_span is None:
            return
        d_view = v(dst[0], dst[1], dst[2], rows, out_cols)
        if fn == VecFn.FILL:
            self._prepare(i, [d_span], _fill, (np.float32(imm), d_view))
            return
        spans = [self._span(a[0], False, a[1], a[2], rows, cols)]
        a_view = v(*a, rows, cols) if spans[0] is not None else None
        if fn in BINARY_FNS:
            if mode == VecMode.SCALAR:
                b_val = np.array(imm, dtype=F32)
            else:
                br, bc, bs = {VecMode.ROW: (1, cols, 0), VecMode.COL: (rows, 1, b[2])}.get(mode, (rows, cols, b[2]))
                spans.append(self._span(b[0], False, b[1], bs, br, bc))
                b_val = v(b[0], b[1], bs, br, bc) if spans[-1] is not None else None
            if fn == VecFn.SEL:  # dst = a != 0 ? b : dst: dst is read too
                spans.append(self._span(dst[0], False, dst[1], dst[2], rows, out_cols))
                self._prepare(i, [*spans, d_span], _select, (a_view, b_val, d_view))
                return
            self._prepare(i, [*spans, d_span], _binary, (BINARY_OPS[fn], a_view, b_val, d_view))
        elif fn in REDUCE_FNS:
            self._prepare(i, [*spans, d_span], _reduce, (REDUCE_OPS[fn], a_view, d_view))
        else:
            self._prepare(i, [*spans, d_span], _unary, (UNARY_OPS[fn], a_view, d_view))


def prepare(sim, words: np.ndarray) -> Plan:
    """Decodes, validates and prepares `words` for `sim`'s memories (raises the readable machine's errors)."""
    code, cols = decode_columns(words)
    if invalid(code, cols, sim.config):
        sim._decode(words)  # raises the readable machine's error for the first bad word
    slow = np.flatnonzero(~np.isin(code, [int(op) for op in FAST_OPS]))
    for i in slow.tolist():
        sim._validate(i, decode(words[i]))
    return Plan(sim, words, code, cols)


def run(sim, plan: Plan):
    """Runs a prepared program on `sim` (already reset) and returns its RunStats, as the readable loop would."""
    return _Loop(sim, plan).run()


class _Loop:
    def __init__(self, sim, plan: Plan):
        self.sim, self.p = sim, plan
        n = len(plan.code)
        self.qlists = [np.flatnonzero(plan.queue == q).tolist() for q in range(3)]
        self.start = [0] * n
        self.end = [0] * n
        self.order: list[int] = []
        self.waits = [[0, 0] for _ in CHANNELS]
        self.hazards = HazardTracker(self._describe) if sim.check_hazards else None

    def _describe(self, queue: str, seq: int) -> tuple[int, str]:
        i = self.qlists[QUEUES.index(queue)][seq]
        return i, Opcode(int(self.p.code[i])).name

    def run(self):
        p, sim = self.p, self.sim
        tm = sim.timing
        qlists, lens = self.qlists, [len(x) for x in self.qlists]
        heads, qfree = [0, 0, 0], [0, 0, 0]
        chan = [deque() for _ in CHANNELS]
        pops, pushes, handler, args, spans = p.pops, p.pushes, p.handler, p.args, p.spans
        fixed, dma = p.fixed.tolist(), p.dma.tolist()
        data = tm.dma_cycles(p.dma).tolist()  # DMA data-phase cycles
        latency, dram_free = sim.config.dma_latency, tm.dram_free
        starts, ends, order, waits = self.start, self.end, self.order, self.waits
        hz = self.hazards
        clocks = [(-1, -1, -1)] * 3
        extra = [0, 0, 0]  # readable-path DMA bytes loaded / stored, MACs
        progress = sim.progress
        with np.errstate(all="ignore"):
            while True:
                best, bstart = -1, 0
                for q in (0, 1, 2):
                    h = heads[q]
                    if h >= lens[q]:
                        continue
                    start = qfree[q]
                    for c in pops[qlists[q][h]]:
                        ch = chan[c]
                        if not ch:
                            break
                        if ch[0][0] > start:
                            start = ch[0][0]
                    else:
                        if best < 0 or start < bstart:
                            best, bstart = q, start
                if best < 0:
                    break
                q, start = best, bstart
                seq = heads[q]
                i = qlists[q][seq]
                heads[q] = seq + 1
                popped = [(c, chan[c].popleft()) for c in pops[i]]
                free = qfree[q]
                h = handler[i]
                if h is not None:
                    h(*args[i])
                    sp, nbytes = spans[i], dma[i]
                else:
                    inst, effect = self._readable(i)
                    sp = [entry(s) for s in effect.accesses if not s.empty]
                    nbytes = effect.dma_bytes
                    self._extra(extra, inst, effect)
                clock = None
                if hz is not None:
                    a, b, cc = clocks[q]
                    for _, tok in popped:
                        t = tok[1]
                        a, b, cc = max(a, t[0]), max(b, t[1]), max(cc, t[2])
                    clock = (seq, b, cc) if q == 0 else ((a, seq, cc) if q == 1 else (a, b, seq))
                    if sp:
                        hz.check_spans(i, p.mnemonic[i], q, clock, sp)
                    else:
                        hz.latest[q] = clock
                    clocks[q] = clock
                d = fixed[i]
                if d >= 0:
                    end = start + d
                elif h is not None:  # TimingModel._dma_end, inline
                    end = (start + latency if start + latency > dram_free else dram_free) + data[i]
                    dram_free = end
                else:
                    tm.queue_free[QUEUES[q]], tm.dram_free = qfree[q], dram_free
                    end = tm.finish(inst, start, nbytes)
                    dram_free = tm.dram_free
                qfree[q] = end
                for c in pushes[i]:
                    chan[c].append((end, clock))
                starts[i], ends[i] = start, end
                order.append(i)
                if popped and start > free:
                    ready = popped[0][1][0]
                    ch = popped[0][0]
                    for c, tok in popped[1:]:
                        if tok[0] > ready:
                            ready, ch = tok[0], c
                    waits[ch][0] += 1
                    waits[ch][1] += start - free
                if progress is not None and not len(order) & 1023:
                    progress.update(1024)
        for q, name in enumerate(QUEUES):
            tm.queue_free[name] = qfree[q]
        tm.dram_free = dram_free
        if any(heads[q] < lens[q] for q in range(3)):
            raise DeadlockError(self._blocked(heads, chan))
        return self._stats(extra)

    def _readable(self, i):
        inst = decode(self.p.words[i])
        return inst, self.sim.functional.execute(i, inst)

    @staticmethod
    def _extra(extra, inst, effect) -> None:
        if inst.opcode == Opcode.LOAD:
            extra[0] += effect.dma_bytes
        elif inst.opcode == Opcode.STORE:
            extra[1] += effect.dma_bytes
        extra[2] += effect.macs

    def _blocked(self, heads, chan):
        out = []
        for q, name in enumerate(QUEUES):
            if heads[q] < len(self.qlists[q]):
                i = self.qlists[q][heads[q]]
                empty = [CHANNELS[c] for c in self.p.pops[i] if not chan[c]]
                out.append((name, i, Opcode(int(self.p.code[i])).name, empty))
        return out

    def _stats(self, extra):
        from .machine import _UNIT_OF

        p, s = self.p, self.sim.stats
        order = np.asarray(self.order, np.int64)
        code = p.code[order]
        fast = np.asarray([p.handler[i] is not None for i in self.order], bool)
        s.instructions = len(order)
        ends = np.asarray(self.end, np.int64)
        s.cycles = int(ends.max()) if len(ends) else 0
        first = {}
        for k, c in zip(*np.unique(code, return_index=True)[::-1]):
            first[int(c)] = int(k)
        for c in sorted(first, key=first.get):
            s.by_mnemonic[Opcode(c).name] = int((code == c).sum())
        if "fn" in p.c:
            fns = p.c["fn"][order][code == Opcode.VEC]
            vals, firsts = np.unique(fns, return_index=True)
            for k in np.argsort(firsts):
                s.by_vec_fn[VecFn(int(vals[k])).name] = int((fns == vals[k]).sum())
        dma = p.dma[order] * fast
        s.dma_bytes_loaded = int(dma[code == Opcode.LOAD].sum()) + extra[0]
        s.dma_bytes_stored = int(dma[code == Opcode.STORE].sum()) + extra[1]
        s.macs = int((p.macs[order] * fast).sum()) + extra[2]
        busy = ends[order] - np.asarray(self.start, np.int64)[order]
        for c in first:
            s.busy[_UNIT_OF[Opcode(c)]] += int(busy[code == c].sum())
        for c, (count, cycles) in zip(CHANNELS, self.waits):
            s.token_waits[c]["count"] += count
            s.token_waits[c]["cycles"] += cycles
        return s
