"""Row gathers (embedding, index_select), column-range copies (slice and concat on any dim)
and last-dim reductions.

Slice and concat see every tensor as a 2-D row-major view `[outer, width]`, with `outer`
the product of the dims before the sliced/concatenated dim and `width` the product of
that dim and the ones after it: a slice is then a column range of each row, a concat
puts each input's rows side by side. Both tile rows (`tm`) and columns (`tc`); widths and
row counts may be symbolic.
"""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..machine.target import MAX_COLS
from . import BufferPlan, Tiling, first, last, module_symbols, resident, tile_rows
from .support import ceildiv, mul


def _extent(dim: int, t: int, total):
    v = sy.as_int(total)
    if v is not None and (v % t == 0 or v <= t):
        return min(v, t)
    return tile_rows(dim, t, total)


def _row_tiling(n_buffers: int, tc: int, target, options, extra: int = 0):
    for tm in [options["tile-m"]] if options.get("tile-m") else target.row_tiles(4):
        plan = BufferPlan(target)
        for i in range(n_buffers):
            plan.add(f"b{i}", "spad", tm * tc)
        if extra:
            plan.add("col", "spad", tm * extra)
        if plan.fits() or tm == 1:
            return tm, plan.check()
    raise AssertionError("unreachable")


def slice_start(op, size) -> ir.AffineExpr:
    """The first position a `novella.slice` reads along its dim of `size`: a negative start counts from the end,
    an affine map is an expression of the symbols."""
    if isinstance(op.attributes["start"], ir.AffineMapAttr):
        return sy.canon(sy.map_results(op.attributes["start"])[0])
    start = op.attributes["start"].value
    return sy.canon(size + sy.const(start)) if start < 0 else sy.const(start)


def view2d(shape, dim: int):
    """(outer, width) of `shape` cut before `dim`."""
    return mul(*shape[:dim]) if dim else sy.const(1), mul(*shape[dim:])


# ------------------------------------------------------------------ gather


class GatherRows:
    """`novella.gather_rows`: per row tile, LOAD the indices, GATHER the table rows they pick. Rows wider
    than a GATHER takes (its cols field) are gathered a column tile at a time (a second grid dim)."""

    def _dims(self, tv):
        return sy.numel(tv.shape(1)), tv.shape(0)[0], tv.cols(0)

    def tile(self, op, tv, target, options):
        n, _, c = self._dims(tv)
        tc = c if c <= MAX_COLS else target.col_tile(c)
        for tm in [options["tile-m"]] if options.get("tile-m") else target.row_tiles(4):
            plan = BufferPlan(target)
            plan.add("idx", "spad", tm)
            plan.add("rows", "spad", tm * tc)
            plan.add("out", "spad", tm * tc)
            if plan.fits() or tm == 1:
                kept = resident.buffers(op)
                if tc == c:
                    return Tiling({"tm": tm}, [ceildiv(n, tm)], plan.check() + kept)
                return Tiling({"tm": tm, "tc": tc}, [ceildiv(n, tm), sy.const(-(-c // tc))], plan.check() + kept)
        raise AssertionError("unreachable")

    def macro(self, op, tv, t, b):
        n, rows_in_table, c = self._dims(tv)
        tm, tc = t.tiles["tm"], t.tiles.get("tc", c)
        rows, b = _extent(0, tm, n), resident.wrap(b, op)
        cols, col0 = (c, 0) if tc == c else (_extent(1, tc, sy.const(c)), b.d(1) * tc)
        b.load_rows("idx", 1, row_start=b.d(0) * tm, rows=rows, row_bound=n, cols=1, dram_stride=1, sram_stride=1)
        b.gather("rows", 0, idx="idx", dram_offset=col0, dram_stride=c, row_bound=rows_in_table, rows=rows,
                 cols=cols, sram_stride=tc)  # fmt: skip
        src = "rows"
        if "out" not in resident.regions(op):  # resident: the store is itself the step's COPY
            b.vop("COPY", "out", "rows", rows=rows, cols=cols, dst_stride=tc, a_stride=tc)
            src = "out"
        b.store_rows(src, row_start=b.d(0) * tm, rows=rows, row_bound=n, cols=cols, dram_offset=col0,
                     dram_stride=c, sram_stride=tc)  # fmt: skip


# ------------------------------------------------------------------ slice / concat as column ranges


class ColumnSlice:
    """`novella.slice` on any dim: the column range [start*inner, (start+len)*inner) of each outer row."""

    def _dims(self, op, tv):
        d = op.attributes["dim"].value
        x, y = tv.shape(0), tv.shape(-1)
        outer, width_in = view2d(x, d)
        _, width = view2d(y, d)
        start = slice_start(op, x[d])
        return outer, width_in, width, start * mul(*x[d + 1 :]) if d + 1 < len(x) else start

    def tile(self, op, tv, target, options):
        outer, _, width, _ = self._dims(op, tv)
        start = slice_start(op, tv.shape(0)[op.attributes["dim"].value])
        if not sy.provably_ge(start, sy.const(0), sy.symbol_box(module_symbols(op))):
            raise ValueError(f"slice from {start} starts before the dim for some lengths")
        tc = target.col_tile(sy.as_int(width))
        tm, bufs = _row_tiling(2, tc, target, options)
        return Tiling({"tm": tm, "tc": tc}, [ceildiv(outer, tm), ceildiv(width, tc)], bufs)

    def macro(self, op, tv, t, b):
        outer, width_in, width, offset = self._dims(op, tv)
        tm, tc = t.tiles["tm"], t.tiles["tc"]
        rows, cols = _extent(0, tm, outer), _extent(1, tc, width)
        row = dict(row_start=b.d(0) * tm, rows=rows, row_bound=outer, cols=cols, sram_stride=tc)
        b.load_rows("b0", 0, dram_offset=offset + b.d(1) * tc, dram_stride=width_in, **row)
        b.vop("COPY", "b1", "b0", rows=rows, cols=cols, dst_stride=tc, a_stride=tc)
        b.store_rows("b1", dram_offset=b.d(1) * tc, dram_stride=width, **row)


class Concat:
    """`novella.concat`: input i fills columns [off_i, off_i + width_i) of each output row.

    The column grid covers the widest input; an input's copy is guarded (`when`) to the column tiles
    inside its width. When no input is the widest at every length (a pad of 15 beside a length that is
    2 at one end of the range and 65 at the other), the column grid walks the inputs one after the
    other: input i's tiles are the steps [n_0 + ... + n_(i-1), ... + n_i), n_i = ceil(width_i / tc)."""

    def _dims(self, op, tv):
        d = op.attributes["dim"].value
        n = len(op.operands)
        outer, width = view2d(tv.shape(-1), d)
        widths = [view2d(tv.shape(i), d)[1] for i in range(n)]
        offsets, acc = [], sy.const(0)
        for w in widths:
            offsets.append(acc)
            acc = acc + w
        return outer, width, widths, offsets

    def _widest(self, widths, op) -> int | None:
        """The input at least as wide as every other at every length, else None."""
        from .support import upper

        syms = module_symbols(op)
        box = sy.symbol_box(syms)
        i = max(range(len(widths)), key=lambda i: upper(widths[i], syms))
        return i if all(sy.provably_ge(widths[i], w, box) for w in widths) else None

    def _tc(self, op, widths, target) -> int:
        from .support import upper

        return target.col_tile(max(upper(w, module_symbols(op)) for w in widths))

    def tile(self, op, tv, target, options):
        outer, _, widths, _ = self._dims(op, tv)
        tc = self._tc(op, widths, target)
        tm, bufs = _row_tiling(2 * len(widths), tc, target, options)
        widest = self._widest(widths, op)
        steps = ceildiv(widths[widest], tc) if widest is not None else _sum(ceildiv(w, tc) for w in widths)
        return Tiling({"tm": tm, "tc": tc}, [ceildiv(outer, tm), steps], bufs)

    def macro(self, op, tv, t, b):
        outer, width, widths, offsets = self._dims(op, tv)
        tm, tc = t.tiles["tm"], t.tiles["tc"]
        rows = _extent(0, tm, outer)
        widest, first_step = self._widest(widths, op), sy.const(0)
        for i, (w, off) in enumerate(zip(widths, offsets)):
            if widest is None:  # this input's tiles are the steps [first_step, first_step + n)
                n, col = ceildiv(w, tc), b.d(1) - first_step
                when, cols = [("ge", col), ("ge", n - sy.const(1) - col)], _cols(tc, w, col)
                first_step = first_step + n
            else:
                col, cols = b.d(1), _extent(1, tc, w)
                when = None if i == widest else [("ge", w - b.d(1) * tc - sy.const(1))]
            row = dict(row_start=b.d(0) * tm, rows=rows, row_bound=outer, cols=cols, sram_stride=tc, when=when)
            src = _loaded_before(op, i) if widest is not None else None  # cat(x, x): x's tile loaded once
            if src is None:
                b.load_rows(f"b{2 * i}", i, dram_offset=col * tc, dram_stride=w, **row)
                src = i
            b.vop("COPY", f"b{2 * i + 1}", f"b{2 * src}", rows=rows, cols=cols, dst_stride=tc, a_stride=tc, when=when)
            b.store_rows(f"b{2 * i + 1}", dram_offset=off + col * tc, dram_stride=width, **row)


def _loaded_before(op, i: int) -> int | None:
    """An input before `i` that is the same value (so the same width, and the same tiles of it loaded)."""
    return next((j for j in range(i) if op.operands[j] == op.operands[i]), None)


def _sum(exprs):
    out = sy.const(0)
    for e in exprs:
        out = out + e
    return out


def _cols(tc: int, width, col):
    """Columns of the tile `col` (an index expression) of `width`: min(tc, width - col * tc)."""
    v = sy.as_int(width)
    return min(v, tc) if v is not None and (v % tc == 0 or v <= tc) else [sy.const(tc), width - col * tc]


# ------------------------------------------------------------------ reductions


class Reduce:
    """`novella.reduce` over the last dim: per row tile, ROWSUM/ROWMAX of each column chunk into
    `part`, combined into `acc` across the column loop; the last chunk scales (mean) and stores."""

    def _dims(self, op, tv):
        x = tv.shape(0)
        return sy.numel(x[:-1]), x[-1], op.attributes["fn"].value

    def tile(self, op, tv, target, options):
        rows, c, fn = self._dims(op, tv)
        if fn == "mean" and sy.as_int(c) is None:
            raise ValueError("mean over a dynamic last dim is not supported; sum and divide by the length")
        tc = target.col_tile(sy.as_int(c))
        tm, bufs = _row_tiling(1, tc, target, options, extra=3)
        return Tiling({"tm": tm, "tc": tc}, [ceildiv(rows, tm), ceildiv(c, tc)], bufs)

    def macro(self, op, tv, t, b):
        total, c, fn = self._dims(op, tv)
        tm, tc = t.tiles["tm"], t.tiles["tc"]
        rows, cols = _extent(0, tm, total), _extent(1, tc, c)
        steps = ceildiv(c, tc)
        b.load_rows("b0", 0, row_start=b.d(0) * tm, rows=rows, row_bound=total, cols=cols, dram_offset=b.d(1) * tc,
                    dram_stride=c, sram_stride=tc)  # fmt: skip
        tile = dict(rows=rows, cols=cols, dst_stride=tc, a_stride=tc)
        col = dict(rows=rows, cols=1, dst_stride=1, a_stride=1, b_stride=1)
        if fn == "min":
            b.vop("MUL", "b0", "b0", mode="SCALAR", imm=-1.0, **tile)
        red, comb = ("ROWSUM", "ADD") if fn in ("sum", "mean") else ("ROWMAX", "MAX")
        b.vop(red, "col", "b0", rows=rows, cols=cols, dst_stride=1, a_stride=tc)
        b.vop("COPY", "col", "col", **col, when=first(1), dst_offset=tm, a_offset=0)
        b.vop(
            comb,
            "col",
            "col",
            "col",
            **col,
            when=[("ge", b.d(1) - sy.const(1))],
            dst_offset=tm,
            a_offset=tm,
            b_offset=0,
        )
        scale = {"mean": 1.0 / sy.as_int(c) if sy.as_int(c) else 1.0, "min": -1.0}.get(fn)
        if scale is not None:
            b.vop(
                "MUL",
                "col",
                "col",
                mode="SCALAR",
                imm=scale,
                **col,
                when=last(1, steps),
                dst_offset=2 * tm,
                a_offset=tm,
            )
        else:
            b.vop("COPY", "col", "col", **col, when=last(1, steps), dst_offset=2 * tm, a_offset=tm)
        b.store_rows(
            "col", row_start=b.d(0) * tm, rows=rows, row_bound=total, cols=1, buf_offset=2 * tm, when=last(1, steps)
        )
