"""`novella.flip`: one dim reversed, on the view `[outer, D, inner]` cut around it.

Two forms, both exact copies (no arithmetic):

* columns (D static, at most MAX_UNROLL, D * inner static): a row tile of `[tm, D * inner]`
  is loaded whole and its D column blocks are copied in reverse order, one VEC COPY each;
* rows (otherwise: D may be dynamic; inner static): grid (outer, D tiles). Output rows
  [i*tm, i*tm + tm) are input rows [D - (i+1)*tm, D - i*tm), loaded as one tile whose
  rows before 0 are zero-filled (the partial last tile), reversed by one COPY per row,
  and stored with the row bound D. Where each row is one element (`inner = 1`, a 1-D vector such as a
  decode mask's reversed positions), the tile of tm = a * k elements is reversed as an [a, k] matrix
  (`_split`): transposed, its k rows copied in reverse order, transposed back, its a rows copied in
  reverse order: a + k + 2 VECs instead of tm, and the tile and the result stream (two slots), so
  a tile's DMA runs under the VECs of the one before."""

from __future__ import annotations

from .. import symbolic as sy
from ..machine.target import MAX_COLS
from . import BufferPlan, Tiling, tile_rows
from .data_movement import MAX_UNROLL
from .support import ceildiv, mul


def _view(op, tv):
    d = op.attributes["dim"].value
    shape = tv.shape(0)
    outer = sy.canon(mul(*shape[:d])) if d else sy.const(1)
    inner = sy.as_int(sy.canon(mul(*shape[d + 1 :]))) if d + 1 < len(shape) else 1
    if inner is None or inner > MAX_COLS:
        raise ValueError(
            f"flip of dim {d} of {[str(e) for e in shape]}: the dims after it must be static and at most "
            f"{MAX_COLS} elements (the frontend moves a dynamic one first)"
        )
    return outer, shape[d], inner


def _columns(D, inner) -> bool:
    n = sy.as_int(D)
    return n is not None and n <= MAX_UNROLL and n * inner <= MAX_COLS


class Flip:
    def tile(self, op, tv, target, options):
        outer, D, inner = _view(op, tv)
        if _columns(D, inner):
            width, grid = sy.as_int(D) * inner, lambda tm: [ceildiv(outer, tm)]
            tops = target.row_tiles(32)
        else:
            width, grid = inner, lambda tm: [outer, ceildiv(D, tm)]
            n = sy.as_int(D)
            tops = [min(n, MAX_UNROLL)] if n is not None and n <= MAX_UNROLL else target.pow2(MAX_UNROLL)
        for tm in [options["tile-m"]] if options.get("tile-m") else tops:
            plan = BufferPlan(target)
            split = not _columns(D, inner) and _split(tm, inner)
            plan.add("t", "spad", tm * width, stream=bool(split))
            plan.add("o", "spad", tm * width, stream=bool(split))
            if split:
                plan.add("u", "spad", tm)
                plan.add("w", "spad", tm)
            if plan.fits() or options.get("tile-m") or tm == tops[-1]:
                return Tiling({"tm": tm}, grid(tm), plan.check())
        raise AssertionError("unreachable")

    def macro(self, op, tv, t, b):
        outer, D, inner = _view(op, tv)
        tm = t.tiles["tm"]
        if _columns(D, inner):
            _column_macro(b, tm, outer, sy.as_int(D), inner)
        else:
            _row_macro(b, tm, outer, D, inner)


def _column_macro(b, tm, outer, n, inner):
    width = n * inner
    rows = tile_rows(0, tm, outer)
    b.load_rows("t", 0, row_start=b.d(0) * tm, rows=rows, row_bound=outer, cols=width)
    for k in range(n):
        b.vop("COPY", "o", "t", rows=rows, cols=inner, dst_stride=width, a_stride=width,
              dst_offset=(n - 1 - k) * inner, a_offset=k * inner)  # fmt: skip
    b.store_rows("o", row_start=b.d(0) * tm, rows=rows, row_bound=outer, cols=width)


def _split(tm: int, inner: int) -> int:
    """Columns k of the [tm / k, k] matrix a 1-D tile is reversed as (about sqrt(tm)); 0: one COPY per row."""
    k = 1 << (tm.bit_length() // 2)
    return k if inner == 1 and tm >= 16 and tm % k == 0 else 0


def _reverse_split(b, tm: int, k: int) -> None:
    """o = t reversed (tm elements), as the [a, k] matrix t: its columns reversed through two transposes
    (u = t^T, w = u's rows reversed, u = w^T), then its rows (`_split`)."""
    a = tm // k
    b.vop("TRANSPOSE", "u", "t", rows=a, cols=k, a_stride=k, dst_stride=a)
    for r in range(k):
        b.vop("COPY", "w", "u", rows=1, cols=a, a_stride=a, dst_stride=a, dst_offset=r * a, a_offset=(k - 1 - r) * a)
    b.vop("TRANSPOSE", "u", "w", rows=k, cols=a, a_stride=a, dst_stride=k)
    for r in range(a):
        b.vop("COPY", "o", "u", rows=1, cols=k, a_stride=k, dst_stride=k, dst_offset=r * k, a_offset=(a - 1 - r) * k)


def _row_macro(b, tm, outer, D, inner):
    base = b.d(0) * mul(D, sy.const(inner))
    start = D - (b.d(1) + sy.const(1)) * tm
    b.load("t", 0, dram_offset=base, dram_stride=inner, row_start=start, row_step=1, row_bound=D,
           rows=tm, cols=inner, sram_stride=inner)  # fmt: skip
    k = _split(tm, inner)
    if k:
        _reverse_split(b, tm, k)
    for j in range(0 if k else tm):
        b.vop("COPY", "o", "t", rows=1, cols=inner, dst_stride=inner, a_stride=inner,
              dst_offset=j * inner, a_offset=(tm - 1 - j) * inner)  # fmt: skip
    b.store("o", -1, dram_offset=base, dram_stride=inner, row_start=b.d(1) * tm, row_step=1, row_bound=D,
            rows=tile_rows(1, tm, D), cols=inner, sram_stride=inner)  # fmt: skip
