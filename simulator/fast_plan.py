"""Preparation for the fast path (`fast.py`): the program decoded, validated and costed with NumPy.

Everything but the token flags is a function of an instruction's body (its
word without the flags): the cost, the unit, the tiles it touches (the hazard
checker's intervals) and the handler that executes it. A long program repeats
a few thousand bodies (its templates over their grids), so all of that is
derived once per distinct body and shared by the words through `kind`;
only the queue and the token channels are per word. DMA bodies, most of
the distinct ones (their DRAM addresses move with the length), are prepared
with NumPy over all of them at once; MATMUL and VEC by `fast_forms.Forms`."""

from __future__ import annotations

from operator import setitem

import numpy as np

from .fast_forms import Forms, _load, _nop, _Views
from .hazards import Span, entry
from .isa import FLAGS, LAYOUT, QUEUE_OF, QUEUES, Opcode, VecFn, opcodes
from .timing import UNIT_OF
from .units import CHANNELS, TOKEN_ROUTES

_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
_CH = {c: i for i, c in enumerate(CHANNELS)}
_ALLOWED_FLAGS = np.zeros(16, np.int64)  # per opcode: the token flag bits (pop_prev = 1, ...) its queue routes
for _op in LAYOUT:
    _ALLOWED_FLAGS[int(_op)] = sum(1 << b for b, f in enumerate(_FLAGS) if (QUEUE_OF[_op], f) in TOKEN_ROUTES)
_QUEUE_OF_CODE = np.zeros(16, np.int64)
for _op in LAYOUT:
    _QUEUE_OF_CODE[int(_op)] = QUEUES.index(QUEUE_OF[_op])
FAST_OPS = frozenset({Opcode.NOP, Opcode.LOAD, Opcode.STORE, Opcode.MATMUL, Opcode.VEC})
# The fields each fast form implements. A field added to an opcode's layout later (a new mode) makes
# every instruction that sets it take the readable path until its fast form knows the field.
_HEADER = ("opcode", "pop_prev", "pop_next", "push_prev", "push_next")
_DMA = ("mem", "sram_addr", "sram_stride", "row_step", "rows", "dram_base", "dram_stride", "row_start", "row_bound")
_MATMUL = ("acc_addr", "acc_stride", "m", "accumulate", "transpose_b", "a_addr", "a_stride", "b_addr", "b_stride")
_VEC = ("fn", "mode", "dst_mem", "dst_addr", "dst_stride", "rows", "a_mem", "a_addr", "a_stride", "b_mem", "b_addr")
FAST_FIELDS = {
    Opcode.NOP: frozenset(_HEADER),
    Opcode.LOAD: frozenset(_HEADER + _DMA + ("cols", "chain")),  # chain: timing only (`chain` per word)
    Opcode.STORE: frozenset(_HEADER + _DMA + ("cols", "chain")),
    Opcode.MATMUL: frozenset(_HEADER + _MATMUL + ("k", "n", "rowmax", "max_addr")),
    Opcode.VEC: frozenset(_HEADER + _VEC + ("b_stride", "cols", "imm", "rowsum", "sum_mem", "sum_addr")),
}


def decode_columns(words: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(opcode codes, {field: int64 values}) of every word; `imm` as float32. Unknown opcodes decode no fields."""
    n = len(words)
    code = opcodes(words)
    cols: dict[str, np.ndarray] = {}
    for op, layout in LAYOUT.items():
        sel = code == int(op)
        if not sel.any():
            continue
        for f in layout[1:]:
            v = f.get(words[sel])
            if f.name == "imm":
                cols.setdefault("imm", np.zeros(n, np.float32))[sel] = v.astype(np.uint32).view(np.float32)
            else:
                cols.setdefault(f.name, np.zeros(n, np.int64))[sel] = v
    return code, cols


def invalid(code, words, rep_code, cols, config) -> bool:
    """Whether any word would fail the readable machine's decode or validation: an unknown opcode, a token
    flag its queue has no route for (`code`, `words`: every word), an unknown vector function (`rep_code`,
    `cols`: the distinct bodies)."""
    if not np.isin(rep_code, [int(op) for op in LAYOUT]).all():
        return True
    flags = FLAGS.get(words)
    if (flags & ~_ALLOWED_FLAGS[code]).any():
        return True
    if "fn" in cols:
        ok = [fn.value for fn in VecFn if fn.name.lower() in config.vector_functions]
        if not np.isin(cols["fn"][rep_code == Opcode.VEC], ok).all():
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


_FLAG_MASK = ~np.uint64(FLAGS.placed)


def distinct(words) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first word of each distinct body, in program order; which of those each word is). A
    body is a word without its token flags; bodies are compared whole (`_fast_numba.distinct`)."""
    from ._fast_numba import distinct as kernel  # numba compiles on first use

    if not len(words):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return kernel(np.ascontiguousarray(words, np.uint64), _FLAG_MASK)


def _token_tables():
    """Per (queue * 4 + the two pop or push flag bits): the channels, as tuples and padded to two with -1."""
    pop, push = {}, {}
    for q, name in enumerate(QUEUES):
        for bits in range(4):
            on = {"prev": bits & 1, "next": bits >> 1}
            for table, kind in ((pop, "pop"), (push, "push")):
                routes = [TOKEN_ROUTES.get((name, f"{kind}_{d}")) for d in ("prev", "next") if on[d]]
                table[q * 4 + bits] = tuple(_CH[r] for r in routes if r is not None)
    pad = lambda table: np.asarray([(*table[k], -1, -1)[:2] for k in range(12)], np.int64)  # noqa: E731
    return pop, push, pad(pop), pad(push)


_POPS, _PUSHES, _POP_CH, _PUSH_CH = _token_tables()


def _fits(size, write, addr, stride, rows, cols):
    """Which tiles `Forms._span` accepts (NumPy over many): in range, not empty, a written one's rows disjoint."""
    ok = (rows > 0) & (cols > 0) & (addr >= 0) & (addr + stride * (rows - 1) + cols <= size)
    return ok & ~(write & (rows > 1) & (stride < cols))


class Plan(Forms):
    """Per word: its queue, token channels (`pop_ch`, `push_ch`) and `kind`, the distinct body it is; per
    distinct body (`rep`: its first word): cost, unit, accesses (`access`, `n_access`: (mem, write, addr,
    stride, rows, cols) rows, the tracker's spans) and handler + args (None: the readable path). `fixed`,
    `unit` and `charged` are also spread per word, for the compiled issue loop."""

    def __init__(self, sim, words, code, rep, kind, cols):
        self.sim, self.words, self.code, self.rep, self.kind, self.c = sim, words, code, rep, kind, cols
        self.rep_code = rc = code[rep]
        nr = len(rep)
        self.views = _Views((sim.spad, sim.acc, sim.dram))
        self.sizes = (sim.spad.size, sim.acc.size, sim.dram.size)
        self.span_cache: dict = {}
        self.scratch: dict = {}  # shape -> a scratch tile (products before accumulation)
        self.queue = _QUEUE_OF_CODE[code]
        flags = FLAGS.get(words)
        self._pk, self._sk = self.queue * 4 + (flags & 3), self.queue * 4 + (flags >> 2)
        self.pop_ch, self.push_ch = _POP_CH[self._pk], _PUSH_CH[self._sk]
        self.handler: list = [None] * nr
        self.args: list = [()] * nr
        self.spans: list = [()] * nr  # the tracker's entries; None: made from `access` when asked
        self.access = np.zeros((nr, 4, 6), np.int64)
        self.n_access = np.zeros(nr, np.int64)
        self.r_fixed = np.full(nr, -1, np.int64)  # compute: work on its unit (`TimingModel.work`); -1: DMA
        self.r_unit = np.full(nr, -1, np.int64)  # execution unit (`timing.UNIT_OF`), -1: none
        self.r_dma = np.zeros(nr, np.int64)
        self.r_charged = np.zeros(nr, np.int64)  # DMA bytes rounded up to whole bursts (timing)
        self.r_macs = np.zeros(nr, np.int64)
        self._costs()
        builders = {
            Opcode.LOAD: lambda idx: self._dma(Opcode.LOAD, idx),
            Opcode.STORE: lambda idx: self._dma(Opcode.STORE, idx),
            Opcode.MATMUL: self._matmul,
            Opcode.VEC: self._vec,
            Opcode.NOP: self._nop,
        }
        for op, build in builders.items():
            if op in FAST_OPS:
                build(np.flatnonzero((rc == op) & ~self._unknown_fields(op)))
        self.fast = np.fromiter((h is not None for h in self.handler), bool, nr)
        self.compiled = bool(self.fast.all())
        self.fixed, self.unit, self.charged = self.r_fixed[kind], self.r_unit[kind], self.r_charged[kind]
        dmas = (rc == Opcode.LOAD) | (rc == Opcode.STORE)
        chained = dmas & (cols["chain"] != 0) if "chain" in cols else np.zeros(nr, bool)
        self.chain = chained.astype(np.int64)[kind]  # per word: a chained LOAD/STORE (`TimingModel.start_time`)
        if self.compiled:
            self._access_tables()
        self.schedules: dict = {}  # check_hazards -> the compiled issue loop's result (`fast._schedule`)

    @property
    def pops(self) -> list:
        """Per word: the channels it pops (for the Python loop)."""
        return [_POPS[k] for k in self._pk.tolist()]

    @property
    def pushes(self) -> list:
        return [_PUSHES[k] for k in self._sk.tolist()]

    def entries(self, k: int) -> tuple:
        """The tracker's entries (`hazards.entry`) of distinct body k's accesses, in access order."""
        e = self.spans[k]
        if e is None:
            rows = self.access[k, : self.n_access[k]].tolist()
            e = self.spans[k] = tuple(entry(Span(m, bool(w), a, s, r, c)) for m, w, a, s, r, c in rows)
        return e

    def _unknown_fields(self, op) -> np.ndarray:
        """Distinct bodies that set a field of `op`'s layout its fast form does not implement."""
        out = np.zeros(len(self.rep_code), bool)
        for f in LAYOUT[op]:
            if f.name not in FAST_FIELDS[op] and f.name in self.c:
                out |= (self.rep_code == int(op)) & (self.c[f.name] != 0)
        return out

    def _costs(self) -> None:
        """Durations of fixed-length instructions, DMA bytes and MACs, over the distinct bodies."""
        c, code, timing = self.c, self.rep_code, self.sim.timing
        for op in (Opcode.LOAD, Opcode.STORE):
            idx = np.flatnonzero(code == op)
            if len(idx):
                lo, hi = _inbound_rows(*(c[k][idx] for k in ("row_start", "row_step", "row_bound", "rows")))
                self.r_dma[idx] = (hi - lo) * c["cols"][idx] * 4
                f = {k: c[k][idx] for k in ("cols", "row_step", "dram_stride")}
                self.r_charged[idx] = timing.burst_bytes(op, f, self.r_dma[idx])
        for op, u in UNIT_OF.items():
            idx = np.flatnonzero(code == op)
            self.r_unit[idx] = u
            if len(idx):
                self.r_fixed[idx] = timing.work(op, {k: v[idx] for k, v in c.items()})
        idx = np.flatnonzero(code == Opcode.MATMUL)
        if len(idx):
            self.r_macs[idx] = c["m"][idx] * c["k"][idx] * c["n"][idx]
        self.r_fixed[code == Opcode.NOP] = 0

    def _access_tables(self) -> None:
        """The compiled issue loop's tables (`_fast_numba.schedule`): span rows (span id = 4 * body + its
        access), each word's span ids, and the offsets of the hazard windows (one per memory, queue and
        kind, sized to fit every access of the program)."""
        for k in np.flatnonzero(np.isin(self.rep_code, (Opcode.MATMUL, Opcode.VEC))).tolist():
            spans = self.spans[k]
            self.n_access[k] = len(spans)
            for j, e in enumerate(spans):
                s = e[0]
                self.access[k, j] = (s.mem, s.write, s.addr, s.stride, s.rows, s.cols)
        nr = len(self.rep)
        mem, write, addr, stride, rows, cols = np.moveaxis(self.access.reshape(-1, 6), 1, 0)
        ext = stride * (rows - 1)
        lo, hi = addr + np.minimum(0, ext), addr + np.maximum(0, ext) + cols
        dense = (rows <= 1) | (stride == cols)
        start = np.where(stride >= 0, addr, lo)
        self.span_rows = np.stack([mem, write, lo, hi, start, np.abs(stride), rows, cols, dense], 1)
        ids = np.arange(nr * 4, dtype=np.int64).reshape(nr, 4)
        rep_ids = np.where(np.arange(4) < self.n_access[:, None], ids, -1)
        self.acc_ids = rep_ids[self.kind]
        valid = rep_ids >= 0
        cls = (self.access[:, :, 0] * 3 + _QUEUE_OF_CODE[self.rep_code][:, None]) * 2 + self.access[:, :, 1]
        uses = np.broadcast_to(np.bincount(self.kind, minlength=nr)[:, None], valid.shape)
        sizes = np.bincount(cls[valid], weights=uses[valid], minlength=18).astype(np.int64)
        self.win_off = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    def _dma(self, op, idx) -> None:
        """LOAD / STORE bodies, NumPy over all of them: the in-bound rows, the tiles and which fit (as
        `Forms._span`); then only the views and the calls one by one."""
        if not len(idx):
            return
        c = {k: self.c[k][idx] for k in (*_DMA, "cols")}
        rows, nc, mem, sa, ss = c["rows"], c["cols"], c["mem"], c["sram_addr"], c["sram_stride"]
        jlo, jhi = _inbound_rows(c["row_start"], c["row_step"], c["row_bound"], rows)
        n = jhi - jlo
        da = c["dram_base"] + (c["row_start"] + c["row_step"] * jlo) * c["dram_stride"]
        ds = c["row_step"] * c["dram_stride"]
        store = op == Opcode.STORE
        sram_size = np.asarray(self.sizes)[mem]
        dram_ok, moved = _fits(self.sizes[2], store, da, ds, n, nc), n > 0
        dram = np.stack([np.full_like(n, 2), np.full_like(n, int(store)), da, ds, n, nc], 1)
        if store:
            s_addr = sa + jlo * ss
            ok = moved & dram_ok & _fits(sram_size, False, s_addr, ss, n, nc)
            nop = ~moved & (nc != 0)
            first, second, count = np.stack([mem, 0 * mem, s_addr, ss, n, nc], 1), dram, 2 * ok
        else:
            nop = (rows == 0) | (nc == 0)
            ok = ~nop & _fits(sram_size, True, sa, ss, rows, nc) & (~moved | dram_ok)
            sram = np.stack([mem, 1 + 0 * mem, sa, ss, rows, nc], 1)
            first, second, count = np.where(moved[:, None], dram, sram), sram, ok * (1 + moved)
        self.access[idx, 0], self.access[idx, 1], self.n_access[idx] = first, second, count
        for k in idx[nop].tolist():
            self.handler[k], self.args[k] = _nop, ()
        sel = np.flatnonzero(ok)
        cols = [x[sel].tolist() for x in (mem, sa, ss, rows, nc, jlo, jhi, da, ds)]
        v, dv, handler, args, spans = self.views.get, self.views.dram, self.handler, self.args, self.spans
        for k, m, a, s, r, cc, lo, hi, d, dstride in zip(idx[sel].tolist(), *cols):
            spans[k] = None
            if store:
                handler[k], args[k] = setitem, (dv(d, dstride, hi - lo, cc), ..., v(m, a + lo * s, s, hi - lo, cc))
                continue
            dst, src = v(m, a, s, r, cc), (dv(d, dstride, hi - lo, cc) if hi > lo else None)
            if lo == 0 and hi == r:  # every row in bounds: a copy (dst[...] = src: no copyto dispatch)
                handler[k], args[k] = setitem, (dst, ..., src)
            else:
                handler[k], args[k] = _load, (dst, lo, hi, src)
