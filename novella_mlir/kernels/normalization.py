"""Layer normalization kernels."""

from __future__ import annotations

from .. import symbolic as sy
from . import BufferPlan, Tiling, first, tile_rows


class LayerNorm:
    """`y = (x - mean) * rsqrt(var + eps) * w + b` per row, two-pass in SRAM.

    Row tiles of [tm, C]: ROWSUM gives the mean column, the centred tile is
    squared into `sq` and ROWSUM'd again for the (biased) variance; the
    normalization is a COL-broadcast multiply, the affine part ROW-broadcast
    ops against `w` and `b`, which stay resident from the first step. The
    result goes to `sq`, which no LOAD writes, so the next step's load of `x`
    cannot race this step's store."""

    def tile(self, op, tv, target, options):
        c = tv.cols(0)
        for tm in [options["tile-m"]] if options.get("tile-m") else target.row_tiles(8):
            plan = BufferPlan(target)
            plan.add("x", "spad", tm * c)
            plan.add("sq", "spad", tm * c)
            plan.add("w", "spad", c)
            plan.add("b", "spad", c)
            plan.add("mean", "spad", tm)
            plan.add("var", "spad", tm)
            if plan.fits() or options.get("tile-m") or tm == 1:
                return Tiling({"tm": tm}, [sy.ceildiv(tv.rows(0), tm)], plan.check())
        raise ValueError("unreachable")

    def macro(self, op, tv, t, b):
        tm, c, total = t.tiles["tm"], tv.cols(0), tv.rows(0)
        eps = op.attributes["eps"].value
        rows = tile_rows(0, tm, total)
        for buf, slot in (("w", 1), ("b", 2)):
            b.load_block(buf, slot, dram_offset=0, rows=1, cols=c, when=first(0))
        b.load_rows("x", 0, row_start=b.d(0) * tm, row_bound=total, rows=rows, cols=c)
        tile = dict(rows=rows, cols=c, dst_stride=c, a_stride=c, b_stride=c)
        col = dict(rows=rows, cols=1, dst_stride=1, a_stride=1, b_stride=1)
        b.vop("ROWSUM", "mean", "x", rows=rows, cols=c, dst_stride=1, a_stride=c)
        b.vop("DIV", "mean", "mean", mode="SCALAR", imm=float(c), **col)
        b.vop("SUB", "x", "x", "mean", mode="COL", **{**tile, "b_stride": 1})
        b.vop("MUL", "sq", "x", "x", **tile)
        b.vop("ROWSUM", "var", "sq", rows=rows, cols=c, dst_stride=1, a_stride=c)
        b.vop("DIV", "var", "var", mode="SCALAR", imm=float(c), **col)
        b.vop("ADD", "var", "var", mode="SCALAR", imm=float(eps), **col)
        b.vop("RSQRT", "var", "var", **col)
        b.vop("MUL", "x", "x", "var", mode="COL", **{**tile, "b_stride": 1})
        b.vop("MUL", "x", "x", "w", mode="ROW", **tile)
        b.vop("ADD", "sq", "x", "b", mode="ROW", **tile)
        b.store_rows("sq", row_start=b.d(0) * tm, row_bound=total, rows=rows, cols=c)
