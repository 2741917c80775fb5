"""Preparation for the fast path (`fast.py`): the whole program decoded, validated and costed with
NumPy, and each distinct instruction turned into a handler and its arguments (NumPy views of the
memories' tiles) plus the hazard checker's intervals."""

from __future__ import annotations

from operator import setitem

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .functional import _ERF_P, _ERF_Q, BINARY_OPS, F32, REDUCE_OPS, UNARY_OPS
from .hazards import Span
from .isa import BINARY_FNS, LAYOUT, QUEUE_OF, QUEUES, REDUCE_FNS, Opcode, VecFn, VecMode
from .timing import UNIT_OF
from .units import CHANNELS, TOKEN_ROUTES

_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")
_CH = {c: i for i, c in enumerate(CHANNELS)}
FAST_OPS = frozenset({Opcode.NOP, Opcode.LOAD, Opcode.STORE, Opcode.MATMUL, Opcode.VEC})
# The fields each fast form implements. A field added to an opcode's layout later (a new mode) makes
# every instruction that sets it take the readable path until its fast form knows the field.
_HEADER = ("opcode", "pop_prev", "pop_next", "push_prev", "push_next")
_DMA = ("mem", "sram_addr", "sram_stride", "row_step", "rows", "dram_base", "dram_stride", "row_start", "row_bound")
_MATMUL = ("acc_addr", "acc_stride", "m", "accumulate", "transpose_b", "a_addr", "a_stride", "b_addr", "b_stride")
_VEC = ("fn", "mode", "dst_mem", "dst_addr", "dst_stride", "rows", "a_mem", "a_addr", "a_stride", "b_mem", "b_addr")
FAST_FIELDS = {
    Opcode.NOP: frozenset(_HEADER),
    Opcode.LOAD: frozenset(_HEADER + _DMA + ("cols",)),
    Opcode.STORE: frozenset(_HEADER + _DMA + ("cols",)),
    Opcode.MATMUL: frozenset(_HEADER + _MATMUL + ("k", "n")),
    Opcode.VEC: frozenset(_HEADER + _VEC + ("b_stride", "cols", "imm")),
}


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


_BROADCAST_FNS = (VecFn.ADD, VecFn.SUB, VecFn.MUL, VecFn.DIV)  # `_fast_numba.broadcast_into`'s op codes
_REDUCE_UFUNC = {VecFn.ROWSUM: np.add, VecFn.ROWMAX: np.maximum}
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


def _matmul_acc(a, b, out, acc):
    np.matmul(a, b, out)  # `out`: a scratch tile of the product's shape
    np.add(out, acc, acc)  # the readable path's out += acc, written in place


def _matmul_copy_b(a, b, acc):
    np.matmul(a, np.ascontiguousarray(b), acc)


def _matmul_copy_b_acc(a, b, out, acc):
    np.matmul(a, np.ascontiguousarray(b), out)
    np.add(out, acc, acc)


def _binary(ufunc, a, b, dst):
    ufunc(a, b, out=dst)  # np.maximum / np.minimum take `out` by keyword only


def _select(a, b, dst):
    dst[...] = np.where(a != 0, b, dst)


def _unary(fn, a, dst):
    dst[...] = fn(a)


def _unary_out(ufunc, a, dst):
    ufunc(a, out=dst)


def _contiguous_ufunc(fn, a, dst) -> bool:
    """Whether `fn(a, out=dst)` runs the inner loop `dst[...] = fn(a)` runs (a ufunc; both tiles contiguous, so
    both calls take NumPy's contiguous loop, whose bits do not depend on where the output is)."""
    return isinstance(fn, np.ufunc) and a.flags.c_contiguous and dst.flags.c_contiguous


def _reduce(ufunc, a, dst):
    dst[...] = ufunc.reduce(a, 1, None, None, True)  # what np.sum / np.max(a, axis=1, keepdims=True) call


def _reduce_out(ufunc, a, dst):
    ufunc.reduce(a, 1, None, dst, True)  # the same reduction written in place (contiguous tiles that do not overlap)


def _erf(a, dst):
    from ._fast_numba import erf_into  # numba compiles on first use

    erf_into(a, dst, _ERF_P, _ERF_Q)


def _same_or_apart(a, dst, a_span, d_span) -> bool:
    """Whether tiles (mem, addr, stride) of the same shape are the same tile or touch disjoint ranges."""
    return a == dst or a[0] != dst[0] or d_span[2] <= a_span[1] or a_span[2] <= d_span[1]


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
        self.scratch: dict = {}  # shape -> a scratch tile (products before accumulation)
        self.queue = np.zeros(n, np.int64)
        for op in LAYOUT:
            self.queue[code == int(op)] = QUEUES.index(QUEUE_OF[op])
        names = {int(op): op.name for op in Opcode}
        self.mnemonic = [names.get(c, "?") for c in code.tolist()]
        self.handler: list = [None] * n
        self.args: list = [()] * n
        self.spans: list = [()] * n
        self.fixed = np.full(n, -1, np.int64)  # compute: work on its unit (`TimingModel.work`); -1: DMA
        self.unit = np.full(n, -1, np.int64)  # execution unit (`timing.UNIT_OF`), -1: none
        self.dma = np.zeros(n, np.int64)
        self.charged = np.zeros(n, np.int64)  # DMA bytes rounded up to whole bursts (timing)
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
                build(rep[(rep_code == op) & ~self._unknown_fields(op)[rep]])
        self.compiled = all(self.handler[k] is not None for k in rep.tolist())
        if self.compiled:
            self._access_tables(rep, inverse)
        of = rep[inverse].tolist()
        h, a, sp = self.handler, self.args, self.spans
        self.handler, self.args, self.spans = [h[k] for k in of], [a[k] for k in of], [sp[k] for k in of]
        self.calls = list(zip(self.handler, self.args))
        self.schedules: dict = {}  # check_hazards -> the compiled issue loop's result (`fast._schedule`)

    def _unknown_fields(self, op) -> np.ndarray:
        """Words that set a field of `op`'s layout its fast form does not implement."""
        out = np.zeros(len(self.code), bool)
        for f in LAYOUT[op]:
            if f.name not in FAST_FIELDS[op] and f.name in self.c:
                out |= (self.code == int(op)) & (self.c[f.name] != 0)
        return out

    def _costs(self) -> None:
        """Durations of fixed-length instructions, DMA bytes and MACs, over the whole program."""
        c, code, timing = self.c, self.code, self.sim.timing
        for op in (Opcode.LOAD, Opcode.STORE):
            idx = np.flatnonzero(code == op)
            if len(idx):
                lo, hi = _inbound_rows(*(c[k][idx] for k in ("row_start", "row_step", "row_bound", "rows")))
                self.dma[idx] = (hi - lo) * c["cols"][idx] * 4
                f = {k: c[k][idx] for k in ("cols", "row_step", "dram_stride")}
                self.charged[idx] = timing.burst_bytes(op, f, self.dma[idx])
        for op, u in UNIT_OF.items():
            idx = np.flatnonzero(code == op)
            self.unit[idx] = u
            if len(idx):
                self.fixed[idx] = timing.work(op, {k: v[idx] for k, v in c.items()})
        idx = np.flatnonzero(code == Opcode.MATMUL)
        if len(idx):
            self.macs[idx] = c["m"][idx] * c["k"][idx] * c["n"][idx]
        self.fixed[code == Opcode.NOP] = 0

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
        pad = lambda table: np.asarray([(*table[k], -1, -1)[:2] for k in range(12)], np.int64)  # noqa: E731
        self.pop_ch, self.push_ch = pad(table_pop)[pk], pad(table_push)[sk]

    def _access_tables(self, rep, inverse) -> None:
        """The compiled issue loop's tables (`_fast_numba.schedule`): span rows, each instruction's span
        ids, and the offsets of the hazard windows (one per memory, queue and kind, sized to fit)."""
        ids, rows = {}, []
        rep_ids = np.full((len(rep), 4), -1, np.int64)
        for r, k in enumerate(rep.tolist()):
            for j, e in enumerate(self.spans[k]):
                s = e[0]
                sid = ids.get(s)
                if sid is None:
                    sid = ids[s] = len(rows)
                    stride, addr = (s.stride, s.addr) if s.stride >= 0 else (-s.stride, e[1])
                    rows.append((s.mem, s.write, e[1], e[2], addr, stride, s.rows, s.cols, s.dense))
                rep_ids[r, j] = sid
        self.span_rows = np.asarray(rows, np.int64).reshape(-1, 9)
        self.acc_ids = rep_ids[inverse]
        valid = self.acc_ids >= 0
        sid = self.acc_ids[valid]
        cls = (self.span_rows[sid, 0] * 3 + np.broadcast_to(self.queue[:, None], valid.shape)[valid]) * 2
        cls += self.span_rows[sid, 1]
        self.win_off = np.concatenate([[0], np.cumsum(np.bincount(cls, minlength=18))]).astype(np.int64)

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
            if op == Opcode.LOAD and not (rows and nc):  # moves nothing, as a STORE with no row in bounds
                self._prepare(i, [], _nop, ())
            elif op == Opcode.LOAD:
                sram = self._span(mem, True, sa, ss, rows, nc)
                if sram is None or (n and dram is None):
                    continue
                src = self.views.get(2, da, ds, n, nc) if n else None
                spans = [dram, sram] if n else [sram]
                dst = self.views.get(mem, sa, ss, rows, nc)
                if lo == 0 and hi == rows:  # every row in bounds: a copy
                    self._prepare(i, spans, setitem, (dst, ..., src))  # dst[...] = src: no copyto dispatch
                else:
                    self._prepare(i, spans, _load, (dst, lo, hi, src))
            elif n:
                sram = self._span(mem, False, sa + lo * ss, ss, n, nc)
                if sram is not None and dram is not None:
                    args = (self.views.get(2, da, ds, n, nc), ..., self.views.get(mem, sa + lo * ss, ss, n, nc))
                    self._prepare(i, [sram, dram], setitem, args)
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
                self._prepare(
                    i,
                    spans,
                    *self._matmul_call(v(0, aa, ast, m, k), v(0, ba, bst, br, bc), tb, v(1, ca, cst, m, n), accum),
                )

    def _matmul_call(self, a, b, tb, acc, accumulate):
        """(handler, args) of one MATMUL. B is handed to BLAS as the readable path hands it: a transposed
        tile as a transposed view (the same NT product, bit for bit, as of a transposed copy), a strided
        plain tile as a contiguous copy (a strided column would take another dot-product path)."""
        copy = not tb and not b.flags.c_contiguous
        b = b.T if tb else b
        if not accumulate:
            return (_matmul_copy_b, (a, b, acc)) if copy else (np.matmul, (a, b, acc))
        out = self.scratch.get(acc.shape)
        if out is None:
            out = self.scratch[acc.shape] = np.empty(acc.shape, np.float32)
        return (_matmul_copy_b_acc if copy else _matmul_acc), (a, b, out, acc)

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
        if fn != VecFn.FILL and fn not in BINARY_OPS and fn not in REDUCE_OPS and fn not in UNARY_OPS:
            return  # no fast form (e.g. SEL reads its destination): the readable exec_vec runs it
        v = self.views.get
        out_cols = 1 if fn in REDUCE_FNS else cols
        d_span = self._span(dst[0], True, dst[1], dst[2], rows, out_cols)
        if d_span is None:
            return
        d_view = v(dst[0], dst[1], dst[2], rows, out_cols)
        if fn == VecFn.FILL:
            self._prepare(i, [d_span], _fill, (np.float32(imm), d_view))
            return
        if fn == VecFn.SEL:  # reads its destination too: the readable path runs it
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
            if self._broadcast(i, fn, mode, a, dst, spans, d_span, a_view, b_val, d_view):
                return
            ufunc = BINARY_OPS[fn]  # exact IEEE arithmetic; NumPy buffers inputs that overlap the output
            if ufunc in (np.maximum, np.minimum):
                self._prepare(i, [*spans, d_span], _binary, (ufunc, a_view, b_val, d_view))
            else:
                self._prepare(i, [*spans, d_span], ufunc, (a_view, b_val, d_view))
        elif fn in REDUCE_FNS:
            ufunc = _REDUCE_UFUNC[fn]
            apart = a_view is not None and (a[0] != dst[0] or d_span[2] <= spans[0][1] or spans[0][2] <= d_span[1])
            into = apart and a_view.flags.c_contiguous and d_view.flags.c_contiguous
            self._prepare(i, [*spans, d_span], _reduce_out if into else _reduce, (ufunc, a_view, d_view))
        elif fn == VecFn.ERF and a_view is not None and _same_or_apart(a, dst, spans[0], d_span):
            self._prepare(i, [*spans, d_span], _erf, (a_view, d_view))
        elif fn == VecFn.COPY and a_view is not None:
            self._prepare(i, [*spans, d_span], setitem, (d_view, ..., a_view))  # NumPy buffers an overlap
        elif a_view is not None and _contiguous_ufunc(UNARY_OPS[fn], a_view, d_view):
            self._prepare(i, [*spans, d_span], _unary_out, (UNARY_OPS[fn], a_view, d_view))
        else:
            self._prepare(i, [*spans, d_span], _unary, (UNARY_OPS[fn], a_view, d_view))

    def _broadcast(self, i, fn, mode, a, dst, spans, d_span, a_view, b_val, d_view) -> bool:
        """+, -, *, / of a row, column or scalar operand: the compiled loop (`_fast_numba.broadcast_into`, the
        same fp32 operation per element; NumPy's broadcasting loop is 2-3x slower), if no tile overlaps."""
        if fn not in _BROADCAST_FNS or mode == VecMode.TENSOR or a_view is None or b_val is None:
            return False
        if not _same_or_apart(a, dst, spans[0], d_span):
            return False
        if mode == VecMode.SCALAR:
            b_val = np.full((1, 1), b_val, F32)
        elif not (spans[1][3] != d_span[3] or d_span[2] <= spans[1][1] or spans[1][2] <= d_span[1]):
            return False
        from ._fast_numba import broadcast_into  # numba compiles on first use

        self._prepare(i, [*spans, d_span], broadcast_into, (int(fn), a_view, b_val, d_view))
        return True
