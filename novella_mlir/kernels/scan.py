"""`novella.scan` (cumsum, cumprod): a blocked prefix scan on the vector unit, the running total
carried from grid step to grid step in SRAM.

The tensor is seen as `[outer, D, inner]` around the scanned dim D (which may be dynamic). Two forms:

* columns (inner = 1: the scan runs along the last dim): the view is `[R = outer, D]`, grid
  (R tiles of tr, D tiles of tc). A `[tr, tc]` tile is scanned along its columns;
* rows (otherwise): grid (outer, inner tiles of tn, D tiles of tm). A `[tm, tn]` tile is
  scanned along its rows.

Within a tile the scan is Hillis-Steele on two scratch buffers: level l (shift s = 2**l) writes
`dst[s:] = src[s:] (+) src[:-s]` and copies `dst[:s] = src[:s]`, ceil(log2(t)) levels, the last
one into the output buffer. Element i then combines elements 0..i of the tile, each level
combining contiguous runs, so an integer sum is exact while the sum of |x| is (frontend/dtypes.py),
and an inf or NaN reaches only the positions after it (a MATMUL against a 0/1 triangle would
spread `0 * inf = NaN` to the positions before it). Rows or columns of a partial last tile hold
zeros (a LOAD past the row bound) or stale data (columns past D): a position reads only
positions before it, so they never reach a stored position.

The carry: on every D step but the first, the output tile is combined (ADD/MUL, ROW or COL
broadcast) with the `carry` buffer, the last row (column) of the previous D step's output,
then that row (column) of this tile is copied into `carry` for the next step. The D loop is
the innermost grid dim and its steps must run in grid order: `novella.tiles` says which dim
(`carry = <grid dim>`); a scan of one step has no carry ops. `carry` and the scratch buffers
have one slot (they carry data across steps, or live within one step on the compute queue);
the loaded and stored tiles are streamed in two, so under the token rule the next tile's LOAD
runs under this step's VEC ops and this step's STORE under the next one's. Every dependency
between the VEC ops of a step, and on `carry` from one step to the next, is through SRAM. The
tile sizes are the cost model's cheapest fitting ones at the planned length."""

from __future__ import annotations

import math

from .. import symbolic as sy
from ..machine import costmodel as cm
from ..machine.target import MAX_COLS
from . import BufferPlan, Tiling, plan_lengths, tile_rows
from .support import ceildiv, extent, mul

_COMBINE = {"sum": "ADD", "prod": "MUL"}


def _view(op, tv):
    d = op.attributes["dim"].value
    shape = tv.shape(0)
    outer = sy.canon(mul(*shape[:d])) if d else sy.const(1)
    inner = sy.canon(mul(*shape[d + 1 :])) if d + 1 < len(shape) else sy.const(1)
    return outer, shape[d], inner


def _levels(t: int) -> list[int]:
    """The shifts of the Hillis-Steele levels of a t-long scan: 1, 2, 4, ... below t."""
    return [1 << lv for lv in range(math.ceil(math.log2(t)))] if t > 1 else []


def _plan(target, a: int, b: int, carry: int) -> BufferPlan:
    plan = BufferPlan(target)
    plan.add("x", "spad", a * b, stream=True)
    plan.add("out", "spad", a * b, stream=True)
    plan.add("p", "spad", a * b)
    plan.add("q", "spad", a * b)
    plan.add("carry", "spad", carry)
    return plan


def _step_vecs(target, rows: int, t: int, width: int, along_cols: bool, carried: bool) -> float:
    """VEC cycles of one step: the levels over a [rows, t] (columns form) or [t, width] (rows form) tile,
    the carry combine and the carry copy."""
    ops = []
    for s in _levels(t):
        ops += [("add", rows, t - s), ("copy", rows, s)] if along_cols else [("add", t - s, width), ("copy", s, width)]
    tile = (rows, t) if along_cols else (t, width)
    ops += [("add", *tile)] * carried + [("copy", rows, 1) if along_cols else ("copy", 1, width)]
    return cm.vecs(target, ops)


def _groups(n_outer: int, row_pieces, scan_pieces, vec_of, dma_of) -> list[cm.Group]:
    """Step groups: (row piece) x (scan piece), the first scan step without the carry combine.
    vec_of(rows, carried) and dma_of(rows, cols) give a step's VEC cycles and one DMA's (queue, DRAM) cycles."""
    groups = []
    for r, nr in row_pieces:
        for j, (c, nc) in enumerate(scan_pieces):
            lq, ld = dma_of(r, c)
            for carried, count in ((False, 1), (True, nc - 1)) if j == 0 else ((True, nc),):
                groups.append(cm.Group(lq, vec_of(r, carried), lq, 2 * ld, n_outer * nr * count))
    return groups


def _pieces(total: int, t: int) -> list[tuple[int, int]]:
    full, rem = divmod(total, t)
    return [(t, full)] * (full > 0) + [(rem, 1)] * (rem > 0)


class Scan:
    def cost(self, target, form: str, dims: tuple[int, int, int], a: int, b: int) -> float:
        """Predicted cycles of the whole op: dims = (outer, D, inner) at some length, (a, b) = (tr, tc) in the
        columns form, (tm, tn) in the rows form."""
        outer, D, inner = dims
        if form == "cols":
            groups = _groups(
                1,
                _pieces(outer, a),
                _pieces(D, b),
                lambda r, carried: _step_vecs(target, r, b, 1, True, carried),
                lambda r, c: cm.dma(target, r, c, contiguous=c == D),
            )
        else:
            groups = _groups(
                outer * -(-inner // b),
                [(b, 1)],
                _pieces(D, a),
                lambda r, carried: _step_vecs(target, 1, a, b, False, carried),
                lambda r, c: cm.dma(target, c, r, contiguous=r == inner),
            )
        return cm.pipeline(target, groups)

    def _candidates(self, op, tv, target, options, at):
        outer, D, inner = _view(op, tv)
        dims = tuple(sy.evaluate(e, at) for e in (outer, D, inner))
        o, d, n = dims
        lanes = target.vector_lanes
        if sy.as_int(inner) == 1:
            whole = {d} if sy.as_int(D) and d <= MAX_COLS else set()
            tcs = sorted({c for c in target.pow2(MAX_COLS, lanes) if c < 2 * d} | whole)
            trs = [options["tile-m"]] if options.get("tile-m") else target.row_tiles(16)
            for tc in tcs:
                for tr in trs:
                    yield ("cols", tr, tc), self.cost(target, "cols", dims, tr, tc), _plan(target, tr, tc, tr)
            return
        static = sy.as_int(inner)
        divisors = [t for t in target.divisors(static, lanes) if t <= MAX_COLS] if static else []
        tns = sorted(set(divisors) | set(target.pow2(MAX_COLS, lanes)), reverse=True)
        tms = [options["tile-m"]] if options.get("tile-m") else target.row_tiles(16)
        for tn in [t for t in tns if t < 2 * n] or tns[-1:]:
            for tm in tms:
                yield ("rows", tm, tn), self.cost(target, "rows", dims, tm, tn), _plan(target, tm, tn, tn)

    def choose(self, op, tv, target, options, at):
        """((form, a, b), plan) of the cheapest fitting candidate at symbol values `at` (of equal costs, the one
        with the least SRAM), else the smallest one."""
        best, smallest = None, None
        for cand, cost, plan in self._candidates(op, tv, target, options, at):
            size = cand[1] * cand[2]
            if smallest is None or size < smallest[0]:
                smallest = (size, cand, plan)
            if plan.fits() and (best is None or (cost, size) < best[0]):
                best = ((cost, size), cand, plan)
        return (best or smallest)[1:]

    def predict(self, op, tv, target, options, plan, at) -> float | None:
        """Cycles at symbol values `at` of the tiling chosen when planning for `plan`."""
        (form, a, b), p = self.choose(op, tv, target, options, plan)
        if not p.fits():
            return None
        return self.cost(target, form, tuple(sy.evaluate(e, at) for e in _view(op, tv)), a, b)

    def tile(self, op, tv, target, options):
        (form, a, b), plan = self.choose(op, tv, target, options, plan_lengths(op))
        outer, D, inner = _view(op, tv)
        if form == "cols":
            grid = [ceildiv(outer, a), ceildiv(D, b)]
            return Tiling({"tr": a, "tc": b, "carry": 1}, grid, plan.check())
        grid = [outer, ceildiv(inner, b), ceildiv(D, a)]
        return Tiling({"tm": a, "tn": b, "carry": 2}, grid, plan.check())

    def macro(self, op, tv, t, b):
        outer, D, inner = _view(op, tv)
        combine = _COMBINE[op.attributes["fn"].value]
        if "tc" in t.tiles:
            _cols_macro(b, combine, t.tiles["tr"], t.tiles["tc"], outer, D, t.grid[1])
        else:
            _rows_macro(b, combine, t.tiles["tm"], t.tiles["tn"], outer, D, inner, t.grid[2])


def _carry_guards(b, dim: int, steps) -> tuple[list, list]:
    """(every step of the scan loop but the first, every step but the last)."""
    return [("ge", b.d(dim) - sy.const(1))], [("ge", steps - sy.const(2) - b.d(dim))]


def _scan_tile(b, combine: str, t: int, geo) -> None:
    """Hillis-Steele over a t-long tile from `x` into `out`; geo(lo, n) is the VEC geometry of positions
    [lo, lo + n) of every line (offsets for dst, a and b = a shifted back)."""
    shifts = _levels(t)
    if not shifts:
        b.vop("COPY", "out", "x", **geo(0, t, 0))
        return
    src = "x"
    for i, s in enumerate(shifts):
        left = len(shifts) - 1 - i
        dst = "out" if left == 0 else ("p" if left % 2 else "q")
        b.vop(combine, dst, src, src, **geo(s, t - s, s))
        b.vop("COPY", dst, src, **geo(0, s, 0))
        src = dst


def _cols_macro(b, combine, tr, tc, R, D, steps):
    rows, cols = tile_rows(0, tr, R), extent(1, tc, D)
    dma = dict(dram_offset=b.d(1) * tc, dram_stride=D, row_start=b.d(0) * tr, row_bound=R, cols=cols, sram_stride=tc)
    b.load_rows("x", 0, rows=tr, **dma)

    def geo(lo, n, shift):
        g = dict(rows=rows, cols=n, dst_stride=tc, a_stride=tc, dst_offset=lo, a_offset=lo)
        return {**g, "b_stride": tc, "b_offset": lo - shift} if shift else g

    _scan_tile(b, combine, tc, geo)
    if sy.as_int(steps) != 1:
        carried, more = _carry_guards(b, 1, steps)
        b.vop(combine, "out", "out", "carry", mode="COL", rows=rows, cols=tc, dst_stride=tc, a_stride=tc,
              b_stride=1, when=carried)  # fmt: skip
        b.vop("COPY", "carry", "out", rows=rows, cols=1, dst_stride=1, a_stride=tc, a_offset=tc - 1, when=more)
    b.store_rows("out", rows=rows, **dma)


def _rows_macro(b, combine, tm, tn, outer, D, inner, steps):
    cols = extent(1, tn, inner)
    base = b.d(0) * mul(D, inner) + b.d(1) * tn
    dma = dict(dram_offset=base, dram_stride=inner, row_start=b.d(2) * tm, row_bound=D, cols=cols, sram_stride=tn)
    b.load_rows("x", 0, rows=tm, **dma)

    def geo(lo, n, shift):
        g = dict(rows=n, cols=tn, dst_stride=tn, a_stride=tn, dst_offset=lo * tn, a_offset=lo * tn)
        return {**g, "b_stride": tn, "b_offset": (lo - shift) * tn} if shift else g

    _scan_tile(b, combine, tm, geo)
    if sy.as_int(steps) != 1:
        carried, more = _carry_guards(b, 2, steps)
        b.vop(combine, "out", "out", "carry", mode="ROW", rows=tm, cols=tn, dst_stride=tn, a_stride=tn, when=carried)
        b.vop("COPY", "carry", "out", rows=1, cols=tn, dst_stride=tn, a_stride=tn, a_offset=(tm - 1) * tn, when=more)
    b.store_rows("out", rows=tile_rows(2, tm, D), **dma)
