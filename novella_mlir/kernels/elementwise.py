"""Row-tiled elementwise kernels: binary ops with broadcasting, scalar ops, activations."""

from __future__ import annotations

import math

from .. import symbolic as sy
from . import BufferPlan, Tiling, first, kernel, tile_rows

ROW_TILES = (64, 32, 16, 8, 4, 2, 1)


def emit_act(b, act: str, buf: str, tmp: str, rows, cols: int, stride: int, when=None) -> None:
    """Applies `act` in place on `buf` ([rows, cols], row stride `stride`); gelu uses `tmp`."""
    geo = dict(rows=rows, cols=cols, dst_stride=stride, a_stride=stride, b_stride=stride, when=when)
    if act == "relu":
        b.vop("RELU", buf, buf, **geo)
    elif act == "gelu":
        b.vop("MUL", tmp, buf, mode="SCALAR", imm=1.0 / math.sqrt(2.0), **geo)
        b.vop("ERF", tmp, tmp, **geo)
        b.vop("ADD", tmp, tmp, mode="SCALAR", imm=1.0, **geo)
        b.vop("MUL", tmp, tmp, mode="SCALAR", imm=0.5, **geo)
        b.vop("MUL", buf, buf, tmp, **geo)
    elif act != "none":
        raise ValueError(f"unknown activation {act}")


def row_tiling(op_desc: str, rows, cols: int, budget, n_buffers: int, options, extra=()) -> Tiling:
    """Largest row tile such that `n_buffers` [tm, cols] SPAD buffers (+ `extra`) fit."""
    first = options.get("tile-m")
    for tm in [first] if first else ROW_TILES:
        plan = BufferPlan(op_desc, budget)
        for i in range(n_buffers):
            plan.add(f"t{i}", "spad", tm * cols)
        for name, size in extra:
            plan.add(name, "spad", size)
        if plan.fits() or tm == 1 or first:
            return Tiling({"tm": tm}, [sy.ceildiv(rows, tm)], plan.check())
    raise AssertionError("unreachable")


def _load_rows(b, buf, tensor, tm, rows_total, cols, rows):
    b.load(
        buf, tensor, dram_offset=0, dram_stride=cols, row_start=b.d(0) * tm, row_step=1,
        row_bound=rows_total, rows=rows, cols=cols, sram_stride=cols,
    )


def _store_rows(b, buf, tm, rows_total, cols, rows):
    b.store(
        buf, -1, dram_offset=0, dram_stride=cols, row_start=b.d(0) * tm, row_step=1,
        row_bound=rows_total, rows=rows, cols=cols, sram_stride=cols,
    )


@kernel("novella.add", "novella.sub", "novella.mul", "novella.div")
class Binary:
    """`out = a op b`; b has a's rows, or is one row broadcast over all rows."""

    def _row_broadcast(self, tv) -> bool:
        return str(tv.rows(1)) == "1" and str(tv.rows(0)) != "1"

    def tile(self, op, tv, budget, options):
        if tv.cols(1) != tv.cols(-1) or (str(tv.rows(1)) != str(tv.rows(-1)) and not self._row_broadcast(tv)):
            raise ValueError(
                f"broadcast of {tv.shape(1)} against {tv.shape(0)} is not supported; only equal "
                "shapes or a single row broadcast over rows"
            )
        if str(tv.rows(0)) != str(tv.rows(-1)) or tv.cols(0) != tv.cols(-1):
            raise ValueError("the left operand must have the result's shape")
        return row_tiling(op.name, tv.rows(-1), tv.cols(-1), budget, 2, options)

    def macro(self, op, tv, t, b):
        tm, cols, total = t.tiles["tm"], tv.cols(-1), tv.rows(-1)
        rows = tile_rows(0, tm, total)
        _load_rows(b, "t0", 0, tm, total, cols, rows)
        geo = dict(rows=rows, cols=cols, dst_stride=cols, a_stride=cols, b_stride=cols)
        fn = op.name.split(".")[1].upper()
        if self._row_broadcast(tv):
            b.load("t1", 1, dram_offset=0, dram_stride=cols, row_start=0, row_step=1, row_bound=1,
                   rows=1, cols=cols, sram_stride=cols, when=first(0))
            b.vop(fn, "t0", "t0", "t1", mode="ROW", **geo)
        else:
            _load_rows(b, "t1", 1, tm, total, cols, rows)
            b.vop(fn, "t0", "t0", "t1", **geo)
        _store_rows(b, "t0", tm, total, cols, rows)


@kernel("novella.scalar", "novella.relu", "novella.gelu")
class Unary:
    """Activations and ops with a compile-time scalar, in place on a row tile."""

    def tile(self, op, tv, budget, options):
        return row_tiling(op.name, tv.rows(-1), tv.cols(-1), budget, 2, options)

    def macro(self, op, tv, t, b):
        tm, cols, total = t.tiles["tm"], tv.cols(-1), tv.rows(-1)
        rows = tile_rows(0, tm, total)
        geo = dict(rows=rows, cols=cols, dst_stride=cols, a_stride=cols, b_stride=cols)
        _load_rows(b, "t0", 0, tm, total, cols, rows)
        kind = op.name.split(".")[1]
        if kind == "scalar":
            fn = op.attributes["fn"].value
            value = op.attributes["value"].value
            if fn == "rsub":
                b.vop("MUL", "t0", "t0", mode="SCALAR", imm=-1.0, **geo)
                b.vop("ADD", "t0", "t0", mode="SCALAR", imm=value, **geo)
            else:
                b.vop(fn.upper(), "t0", "t0", mode="SCALAR", imm=value, **geo)
        else:
            emit_act(b, kind, "t0", "t1", rows, cols, cols)
        _store_rows(b, "t0", tm, total, cols, rows)
