"""Layer normalization and RMSNorm kernels."""

from __future__ import annotations

from .. import symbolic as sy
from ..machine import costmodel as cm
from . import BufferPlan, Tiling, first, memoized, plan_lengths, resident, tile_rows

# The VEC ops of one [r, C] tile (`emit_norm`): (fn, whole rows (else one column)).
NORM_OPS = (("rowsum", 1), ("div", 0), ("sub", 1), ("mul", 1), ("rowsum", 1), ("div", 0), ("add", 0), ("rsqrt", 0),
        ("mul", 1), ("mul", 1), ("add", 1))  # fmt: skip
# RMSNorm's (`emit_rms`): the square, its row sum, the mean, + eps, rsqrt, the COL and the ROW multiply.
RMS_OPS = (("mul", 1), ("rowsum", 1), ("mul", 0), ("add", 0), ("rsqrt", 0), ("mul", 1), ("mul", 1))


class LayerNorm:
    """`y = (x - mean) * rsqrt(var + eps) * w + b` per row, two-pass in SRAM.

    Row tiles of [tm, C]: ROWSUM gives the mean column, the centred tile is
    squared into `sq` and ROWSUM'd again for the (biased) variance; the
    normalization is a COL-broadcast multiply, the affine part ROW-broadcast
    ops against `w` and `b`, which stay resident from the first step. The
    result goes to `sq`, which no LOAD writes, so the next step's load of `x`
    cannot race this step's store. `x` and `sq` have two slots: the next row
    tile loads under this one's VECs and this one's STORE runs under the next."""

    OPS = NORM_OPS
    RESIDENT = 2  # [C] rows loaded on the first step (w, b)

    def _plan(self, target, tm, c):
        plan = BufferPlan(target)
        plan.add("x", "spad", tm * c, stream=True)
        plan.add("sq", "spad", tm * c, stream=True)
        plan.add("w", "spad", c)
        plan.add("b", "spad", c)
        plan.add("mean", "spad", tm)
        plan.add("var", "spad", tm)
        return plan

    def tile(self, op, tv, target, options):
        rows, forced = sy.evaluate(tv.rows(-1), plan_lengths(op)), options.get("tile-m")
        tm, plan = (
            self.robust(target, rows, tv.cols(0)) if not forced else self.best(target, rows, tv.cols(0), forced)[1:]
        )
        return Tiling({"tm": tm}, [sy.ceildiv(tv.rows(0), tm)], plan.check() + resident.buffers(op))

    def robust(self, target, rows: int, c: int, spread: int = 4, points: int = 2):
        """(tm, plan) of the fitting row tile whose predicted cycles stay closest to the best tile's over
        `rows`, rows / spread, ... (`points` lengths): the least sum of the relative excesses over the best,
        ties to the larger tile. A program runs at every length up to the one it is planned for, and the
        tile that is best there may leave a shorter length one step with nothing to overlap."""
        lengths = sorted({max(rows // spread**i, 1) for i in range(points)})
        fitting = [tm for tm in target.row_tiles(8) if self._plan(target, tm, c).fits()] or [1]
        least = {r: min(self.cost(target, (r, c), tm) for tm in fitting) for r in lengths}
        score = {
            tm: sum((self.cost(target, (r, c), tm) - least[r]) / max(least[r], 1) for r in lengths) for tm in fitting
        }
        tm = min(fitting, key=lambda t: (score[t], -t))
        return tm, self._plan(target, tm, c)

    def best(self, target, rows: int, c: int, forced: int | None = None):
        """(predicted cycles, tm, plan) of the cheapest fitting row tile over [rows, c] (or of `forced`)."""
        best = None
        for tm in [forced] if forced else target.row_tiles(8):
            plan = self._plan(target, tm, c)
            if plan.fits() or forced or (tm == 1 and best is None):
                key = (0.0 if forced else self.cost(target, (rows, c), tm), -tm)
                if best is None or key < best[0]:
                    best = (key, tm, plan)
        return best[0][0], best[1], best[2]

    @memoized
    def cost(self, target, dims, tm) -> float:
        """Predicted cycles (cost model) of row tile `tm` over dims = (rows, C): with two slots a step's loads
        run under the previous step's VECs and its STORE under the next step's (the first step, which also
        loads the resident `w` and `b`, waits for the previous compute)."""
        rows, c = dims

        def group(r, n, first_step=False):
            lq, ld = cm.dmas(target, [(r, c, True)] + [(1, c, True)] * self.RESIDENT * first_step)
            sq, sd = cm.dma(target, r, c, contiguous=True)
            ops = [(fn, r, c) if whole else (fn, 1, r) for fn, whole in self.OPS]
            slots = target.buffer_slots
            return cm.Group(lq, cm.vecs(target, ops), sq, ld + sd, n, 1 if first_step else slots, slots)

        return cm.pipeline(target, cm.with_first(group(min(tm, rows), 1, True), cm.row_groups(rows, tm, group)))

    def macro(self, op, tv, t, b):
        b = resident.wrap(b, op)
        tm, c, total = t.tiles["tm"], tv.cols(0), tv.rows(0)
        eps = op.attributes["eps"].value
        rows = tile_rows(0, tm, total)
        for buf, slot in (("w", 1), ("b", 2)):
            b.load_block(buf, slot, dram_offset=0, rows=1, cols=c, when=first(0))
        b.load_rows("x", 0, row_start=b.d(0) * tm, row_bound=total, rows=rows, cols=c)
        emit_norm(b, "x", "sq", "mean", "var", "w", "b", "sq", rows, c, eps)
        b.store_rows("sq", row_start=b.d(0) * tm, row_bound=total, rows=rows, cols=c)


def column(rows, when=None) -> dict:
    """The geometry of a VEC over a [rows] column of row statistics (stride 1) taken as the one row it is in
    memory: ceil(rows / lanes) beats, where [rows, 1] would take one beat per row."""
    return dict(rows=1, cols=rows, dst_stride=1, a_stride=1, b_stride=1, **({"when": when} if when else {}))


def emit_norm(
    b, x: str, sq: str, mean: str, var: str, w: str, bias: str, out: str, rows, c: int, eps: float, when=None
):
    """The VEC ops (`NORM_OPS`) of a layer norm of the [rows, c] tile in `x` (centred and scaled in
    place), with `sq` its scratch, `mean` / `var` [rows] columns and `w` / `bias` [c] rows; the result
    goes to `out` (which may be `x`)."""
    tile = dict(rows=rows, cols=c, dst_stride=c, a_stride=c, b_stride=c, when=when)
    col = column(rows, when)
    b.vop("ROWSUM", mean, x, rows=rows, cols=c, dst_stride=1, a_stride=c, when=when)
    b.vop("DIV", mean, mean, mode="SCALAR", imm=float(c), **col)
    b.vop("SUB", x, x, mean, mode="COL", **{**tile, "b_stride": 1})
    b.vop("MUL", sq, x, x, **tile)
    b.vop("ROWSUM", var, sq, rows=rows, cols=c, dst_stride=1, a_stride=c, when=when)
    b.vop("DIV", var, var, mode="SCALAR", imm=float(c), **col)
    b.vop("ADD", var, var, mode="SCALAR", imm=float(eps), **col)
    b.vop("RSQRT", var, var, **col)
    b.vop("MUL", x, x, var, mode="COL", **{**tile, "b_stride": 1})
    b.vop("MUL", x, x, w, mode="ROW", **tile)
    b.vop("ADD", out, x, bias, mode="ROW", **tile)


class RmsNorm(LayerNorm):
    """`novella.rms_norm`: `y = x * rsqrt(mean(x * x) + eps) * w` per row, one pass in SRAM: the row tile
    is loaded once, squared into `sq`, ROWSUM'd into the `ms` column, which becomes rsqrt(ms / C + eps);
    `x` is scaled by it (COL) and by `w` (ROW, resident from the first step) into `sq`, stored from
    there. Row tiles and slots as `LayerNorm`'s."""

    OPS = RMS_OPS
    RESIDENT = 1

    def _plan(self, target, tm, c):
        plan = BufferPlan(target)
        plan.add("x", "spad", tm * c, stream=True)
        plan.add("sq", "spad", tm * c, stream=True)
        plan.add("w", "spad", c)
        plan.add("ms", "spad", tm)
        return plan

    def macro(self, op, tv, t, b):
        b = resident.wrap(b, op)
        tm, c, total = t.tiles["tm"], tv.cols(0), tv.rows(0)
        rows = tile_rows(0, tm, total)
        b.load_block("w", 1, dram_offset=0, rows=1, cols=c, when=first(0))
        b.load_rows("x", 0, row_start=b.d(0) * tm, row_bound=total, rows=rows, cols=c, chain=1)
        emit_rms(b, "x", "sq", "ms", "w", rows, c, op.attributes["eps"].value)
        b.store_rows("sq", row_start=b.d(0) * tm, row_bound=total, rows=rows, cols=c)


def emit_rms(b, x: str, out: str, ms: str, w: str, rows, c: int, eps: float) -> None:
    """The VEC ops (`RMS_OPS`) of an RMSNorm of the [rows, c] tile in `x` into `out` (its scratch too),
    with `ms` a [rows] column and `w` a [c] row. The mean is the row sum times 1 / c, as `novella.reduce`'s."""
    tile = dict(rows=rows, cols=c, dst_stride=c, a_stride=c, b_stride=c)
    col = column(rows)
    b.vop("MUL", out, x, x, **tile)
    b.vop("ROWSUM", ms, out, rows=rows, cols=c, dst_stride=1, a_stride=c)
    b.vop("MUL", ms, ms, mode="SCALAR", imm=1.0 / c, **col)
    b.vop("ADD", ms, ms, mode="SCALAR", imm=float(eps), **col)
    b.vop("RSQRT", ms, ms, **col)
    b.vop("MUL", out, x, ms, mode="COL", **{**tile, "b_stride": 1})
    b.vop("MUL", out, out, w, mode="ROW", **tile)
