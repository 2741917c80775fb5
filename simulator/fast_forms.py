"""The fast path's forms of MATMUL and VEC (`fast_plan.Plan` builds the rest): for one distinct
instruction, the handler the run calls and its arguments (NumPy views of the memories' tiles), chosen so
that the call does the readable `exec_<mnemonic>`'s fp32 operations bit for bit, plus the tiles it touches.
"""

from __future__ import annotations

from operator import setitem

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .functional import _ERF_P, _ERF_Q, BINARY_OPS, F32, REDUCE_OPS, UNARY_OPS
from .hazards import Span
from .isa import BINARY_FNS, REDUCE_FNS, VecFn, VecMode, vec_dst_shape

_BROADCAST_FNS = (VecFn.ADD, VecFn.SUB, VecFn.MUL, VecFn.DIV)  # `_fast_numba.broadcast_into`'s op codes
_REDUCE_UFUNC = {VecFn.ROWSUM: np.add, VecFn.ROWMAX: np.maximum}


class _Views:
    """NumPy views of the memories' tiles, one per distinct (memory, addr, stride, rows, cols)."""

    def __init__(self, units):
        self.units = units  # MEMS order: spad, acc, dram
        self.cache: dict = {}
        self.rows_of: dict = {}  # stride -> the DRAM as (size // stride, stride)

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

    def dram(self, addr, stride, rows, cols):
        """`get(2, ...)` without the cache (DRAM tiles are mostly distinct): a tile of whole-row runs is a
        slice of the DRAM seen as rows of `stride` (one indexing call, the same view)."""
        if rows > 1 and stride > cols:
            m = self.rows_of.get(stride)
            if m is None:
                d = self.units[2].data
                m = self.rows_of[stride] = d[: d.size - d.size % stride].reshape(-1, stride)
            r, c = divmod(addr, stride)
            if c + cols <= stride and r + rows <= len(m):
                return m[r : r + rows, c : c + cols]
        return self.get(2, addr, stride, rows, cols)


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


def _with_rowmax(handler, args, acc, maxima):
    """A MATMUL with `rowmax`: its product, then the row maxima of C (as the readable path's out.max(axis=1))."""
    handler(*args)
    np.maximum.reduce(acc, 1, None, maxima)


def _with_rowsum(handler, args, dst, sums):
    """A VEC with `rowsum`: its result, then the row sums of dst (as the readable path's np.sum(out, axis=1))."""
    handler(*args)
    sums[...] = np.add.reduce(dst, 1, None, None, False)


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


def _same_or_apart(a, dst, a_span, d_span) -> bool:
    """Whether tiles (mem, addr, stride) of the same shape are the same tile or touch disjoint ranges."""
    return a == dst or a[0] != dst[0] or d_span[2] <= a_span[1] or a_span[2] <= d_span[1]


def _fill(value, dst):
    dst[...] = value


def _nop():
    pass


class Forms:
    """The per-instruction builders of `Plan`: each fills `handler`, `args` and `spans` (its tiles as the
    tracker's entries) of the distinct instructions it can prepare; the others keep handler None."""

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

    def _matmul(self, idx) -> None:
        if not len(idx):
            return
        c = {k: v[idx] for k, v in self.c.items()}
        names = ("a_addr", "a_stride", "b_addr", "b_stride", "acc_addr", "acc_stride", "m", "k", "n")
        cols = [c[x].tolist() for x in (*names, "accumulate", "transpose_b", "rowmax", "max_addr")]
        v = self.views.get
        for i, aa, ast, ba, bst, ca, cst, m, k, n, accum, tb, rowmax, ma in zip(idx.tolist(), *cols):
            br, bc = (n, k) if tb else (k, n)
            spans = [self._span(0, False, aa, ast, m, k), self._span(0, False, ba, bst, br, bc)]
            if accum:
                spans.append(self._span(1, False, ca, cst, m, n))
            spans.append(self._span(1, True, ca, cst, m, n))
            if rowmax:  # the maxima: the readable path runs one with five accesses or no columns
                spans.append(self._span(0, True, ma, m, 1, m) if len(spans) < 4 and n else None)
            if all(s is not None for s in spans):
                acc = v(1, ca, cst, m, n)
                call = self._matmul_call(v(0, aa, ast, m, k), v(0, ba, bst, br, bc), tb, acc, accum)
                if rowmax:
                    call = _with_rowmax, (*call, acc, v(0, ma, m, 1, m)[0])
                self._prepare(i, spans, *call)

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
        sums = [c[x].tolist() for x in ("rowsum", "sum_mem", "sum_addr")]
        for i, fn, mode, dm, da, ds, rows, nc, am, aa, ast, bm, ba, bst, imm, rs, sm, sa in zip(
            idx.tolist(), *cols, c["imm"].tolist(), *sums
        ):
            self._vec_one(i, VecFn(fn), mode, (dm, da, ds), rows, nc, (am, aa, ast), (bm, ba, bst), imm)
            if rs:
                self._rowsum(i, VecFn(fn), (dm, da, ds), rows, nc, (sm, sa))

    def _rowsum(self, i, fn, dst, rows, cols, sums) -> None:
        """Adds the row sums of dst (`rowsum`) to the prepared form of VEC i; without one (or with four
        accesses already, or not elementwise) the readable path runs it."""
        spans = self.spans[i]
        if self.handler[i] is None or fn in REDUCE_FNS or fn == VecFn.TRANSPOSE or not spans or len(spans) > 3:
            self.handler[i] = None
            return
        s_span = self._span(sums[0], True, sums[1], rows, 1, rows)
        if s_span is None:
            self.handler[i] = None
            return
        d_view, s_view = (
            self.views.get(dst[0], dst[1], dst[2], rows, cols),
            self.views.get(sums[0], sums[1], rows, 1, rows),
        )
        self.handler[i], self.args[i] = _with_rowsum, (self.handler[i], self.args[i], d_view, s_view[0])
        self.spans[i] = (*spans, s_span)

    def _vec_one(self, i, fn, mode, dst, rows, cols, a, b, imm) -> None:
        if fn != VecFn.FILL and fn not in BINARY_OPS and fn not in REDUCE_OPS and fn not in UNARY_OPS:
            return  # no fast form (e.g. SEL reads its destination): the readable exec_vec runs it
        v = self.views.get
        out_rows, out_cols = vec_dst_shape(fn, rows, cols)
        d_span = self._span(dst[0], True, dst[1], dst[2], out_rows, out_cols)
        if d_span is None:
            return
        d_view = v(dst[0], dst[1], dst[2], out_rows, out_cols)
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
            from ._fast_numba import erf_into  # numba compiles on first use

            self._prepare(i, [*spans, d_span], erf_into, (a_view, d_view, _ERF_P, _ERF_Q))
        elif fn == VecFn.TRANSPOSE and a_view is not None:
            self._prepare(i, [*spans, d_span], setitem, (d_view, ..., a_view.T))  # NumPy buffers an overlap
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
