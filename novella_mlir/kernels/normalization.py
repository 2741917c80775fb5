"""Layer normalization and RMSNorm kernels."""

from __future__ import annotations

from .. import symbolic as sy
from ..machine import costmodel as cm
from . import BufferPlan, Tiling, first, memoized, plan_lengths, resident, tile_rows

# The VEC ops of one [r, C] tile (`emit_norm`): (fn, whole rows (else the [1, r] row of a column)).
NORM_OPS = (("rowsum", 1), ("div", 0), ("sub", 1), ("mul", 1), ("rowsum", 1), ("div", 0), ("add", 0), ("rsqrt", 0),
        ("mul", 1), ("mul", 1), ("add", 1))  # fmt: skip
# RMSNorm's (`emit_rms`): the square, its row sum, the mean, + eps, rsqrt, the COL and the ROW multiply.
RMS_OPS = (("mul", 1), ("rowsum", 1), ("mul", 0), ("add", 0), ("rsqrt", 0), ("mul", 1), ("mul", 1))


class LayerNorm:
    """`y = (x - mean) * rsqrt(var + eps) * w + b` per row, two-pass in SRAM.

    Row tiles of [tm, C]. With `mm = 0` (`emit_norm`) ROWSUM gives the mean column, the centred tile is
    squared into `sq` and ROWSUM'd again for the (biased) variance: seven passes over the tile on the
    vector unit. With `mm = 1` (`emit_norm_mm`) the two row sums run on the matrix unit, otherwise idle: a
    MATMUL by the row of ones `ones` (FILLed on the first step) gives the row sums, and one of the centred
    tile by itself transposed each row's sum of squares on the diagonal of `accq`: four passes on the
    vector unit (the MATMUL's passes cost the array's rows each, so short tiles keep the ROWSUMs; the cost
    model picks). The normalization is a COL-broadcast multiply, the affine part ROW-broadcast ops against
    `w` and `b`, which stay resident from the first step. The result goes to `sq`, which no LOAD writes, so
    the next step's load of `x` cannot race this step's store. `x` and `sq` have two slots: the next row
    tile loads under this one's compute and this one's STORE runs under the next."""

    RESIDENT = 2  # [C] rows loaded on the first step (w, b)
    VARIANTS = (0, 1)  # `mm`: the row sums on the vector unit, or on the matrix unit

    def _plan(self, target, cand, c):
        (tm, mm), plan = cand, BufferPlan(target)
        plan.add("x", "spad", tm * c, stream=True)
        plan.add("sq", "spad", tm * c, stream=True)
        plan.add("w", "spad", c)
        plan.add("b", "spad", c)
        plan.add("mean", "spad", tm)
        plan.add("var", "spad", tm)
        if mm:
            plan.add("ones", "spad", c)
            plan.add("accs", "acc", tm)
            plan.add("accq", "acc", tm * tm)
        return plan

    def tile(self, op, tv, target, options):
        rows, forced = sy.evaluate(tv.rows(-1), plan_lengths(op)), options.get("tile-m")
        cand, plan = (
            self.robust(target, rows, tv.cols(0)) if not forced else self.best(target, rows, tv.cols(0), forced)[1:]
        )
        tm, mm = cand
        tiles = {"tm": tm} | ({"mm": 1} if mm else {})
        return Tiling(tiles, [sy.ceildiv(tv.rows(0), tm)], plan.check() + resident.buffers(op))

    def _candidates(self, target, c, tms) -> list:
        return [(tm, mm) for tm in tms for mm in self.VARIANTS if self._plan(target, (tm, mm), c).fits()]

    def robust(self, target, rows: int, c: int, spread: int = 4, points: int = 2):
        """((tm, mm), plan) of the fitting candidate whose predicted cycles stay closest to the best one's over
        `rows`, rows / spread, ... (`points` lengths): the least sum of the relative excesses over the best,
        ties to the larger tile. A program runs at every length up to the one it is planned for, and the
        tile that is best there may leave a shorter length one step with nothing to overlap."""
        lengths = sorted({max(rows // spread**i, 1) for i in range(points)})
        fitting = self._candidates(target, c, target.row_tiles(8)) or [(1, 0)]
        least = {r: min(self.cost(target, (r, c), cand) for cand in fitting) for r in lengths}
        score = {
            cand: sum((self.cost(target, (r, c), cand) - least[r]) / max(least[r], 1) for r in lengths)
            for cand in fitting
        }
        cand = min(fitting, key=lambda t: (score[t], -t[0], t[1]))
        return cand, self._plan(target, cand, c)

    def best(self, target, rows: int, c: int, forced: int | None = None):
        """(predicted cycles, (tm, mm), plan) of the cheapest fitting candidate over [rows, c] (of row tile
        `forced`, if given)."""
        cands = self._candidates(target, c, [forced] if forced else target.row_tiles(8))
        cands = cands or [(forced or 1, 0)]
        key = lambda cand: (self.cost(target, (rows, c), cand), -cand[0], cand[1])  # noqa: E731
        cand = min(cands, key=key)
        return key(cand)[0], cand, self._plan(target, cand, c)

    @memoized
    def cost(self, target, dims, cand) -> float:
        """Predicted cycles (cost model) of candidate (tm, mm) over dims = (rows, C): with two slots a step's
        loads run under the previous step's compute and its STORE under the next step's (the first step,
        which also loads the resident `w` and `b`, waits for the previous compute)."""
        rows, c = dims
        tm, mm = cand

        def group(r, n, first_step=False):
            lq, ld = cm.dmas(target, [(r, c, True)] + [(1, c, True)] * self.RESIDENT * first_step)
            sq, sd = cm.dma(target, r, c, contiguous=True)
            compute, vector, issues = (
                self._compute(target, r, c, first_step) if mm else (self._vecs(target, r, c), 0.0, 0)
            )
            slots = target.buffer_slots
            return cm.Group(lq, compute, sq, ld + sd, n, 1 if first_step else slots, slots, vector=vector,
                            overlap=True, issues=issues)  # fmt: skip

        return cm.pipeline(target, cm.with_first(group(min(tm, rows), 1, True), cm.row_groups(rows, tm, group)))

    @staticmethod
    def _vecs(target, r: int, c: int) -> float:
        """The VECs of `emit_norm` in series."""
        return cm.vecs(target, [(fn, r, c) if whole else (fn, 1, r) for fn, whole in NORM_OPS])

    @staticmethod
    def _compute(target, r: int, c: int, first_step: bool) -> tuple[float, float, int]:
        """(compute chain, its part on the vector unit, instructions) of a step of r rows (`emit_norm_mm`): the
        row sums' MATMUL, then on the vector unit the mean, the centring, the wait for the squares' MATMUL,
        the variance's column ops and the three passes of the normalization (the next step's row sums run
        on the matrix unit beside them)."""
        whole = [("sub", r, c), ("mul", r, c), ("mul", r, c), ("add", r, c)]
        cols = [("div", 1, r), ("div", r, 1), ("add", 1, r), ("rsqrt", 1, r)] + [("fill", 1, c)] * first_step
        vector = cm.vecs(target, whole + cols) + cm.matmul(target, r, c, r)
        return cm.matmul(target, r, c, 1) + vector, vector, 3 + len(whole) + len(cols)

    def macro(self, op, tv, t, b):
        b = resident.wrap(b, op)
        tm, c, total = t.tiles["tm"], tv.cols(0), tv.rows(0)
        eps = op.attributes["eps"].value
        rows = tile_rows(0, tm, total)
        for buf, slot in (("w", 1), ("b", 2)):
            b.load_block(buf, slot, dram_offset=0, rows=1, cols=c, when=first(0))
        if t.tiles.get("mm"):
            b.vop("FILL", "ones", rows=1, cols=c, dst_stride=c, imm=1.0, when=first(0))
        b.load_rows("x", 0, row_start=b.d(0) * tm, row_bound=total, rows=rows, cols=c)
        if t.tiles.get("mm"):
            emit_norm_mm(b, rows, tm, c, eps)
        else:
            emit_norm(b, "x", "sq", "mean", "var", "w", "b", "sq", rows, c, eps)
        b.store_rows("sq", row_start=b.d(0) * tm, row_bound=total, rows=rows, cols=c)


def emit_norm_mm(b, rows, tm: int, c: int, eps: float) -> None:
    """`LayerNorm`'s ops on the [rows, c] tile in `x` (centred and scaled in place) into `sq`: the row sums
    (x by the row `ones`) into `accs`, the mean into `mean`; the centred rows' squares summed on the
    diagonal of `accq` (x by x transposed, [rows, rows] at stride tm), the variance into `var`."""
    tile = dict(rows=rows, cols=c, dst_stride=c, a_stride=c, b_stride=c)
    b.mma("accs", "x", "ones", a_stride=c, b_stride=c, acc_stride=1, m=rows, k=c, n=1, accumulate=0, transpose_b=1)
    b.vop("DIV", "mean", "accs", mode="SCALAR", imm=float(c), **column(rows))
    b.vop("SUB", "x", "x", "mean", mode="COL", **{**tile, "b_stride": 1})
    b.mma("accq", "x", "x", a_stride=c, b_stride=c, acc_stride=tm, m=rows, k=c, n=rows, accumulate=0, transpose_b=1)
    b.vop("DIV", "var", "accq", mode="SCALAR", imm=float(c), rows=rows, cols=1, dst_stride=1, a_stride=tm + 1)
    b.vop("ADD", "var", "var", mode="SCALAR", imm=float(eps), **column(rows))
    b.vop("RSQRT", "var", "var", **column(rows))
    b.vop("MUL", "x", "x", "var", mode="COL", **{**tile, "b_stride": 1})
    b.vop("MUL", "x", "x", "w", mode="ROW", **tile)
    b.vop("ADD", "sq", "x", "b", mode="ROW", **tile)


def column(rows, when=None) -> dict:
    """The geometry of a VEC over a [rows] column of row statistics (stride 1) taken as the one row it is in
    memory: ceil(rows / lanes) beats, where [rows, 1] would take one beat per row."""
    return dict(rows=1, cols=rows, dst_stride=1, a_stride=1, b_stride=1, **({"when": when} if when else {}))


def emit_norm(
    b, x: str, sq: str, mean: str, var: str, w: str, bias: str, out: str, rows, c: int, eps: float, when=None
):
    """The VEC ops of a layer norm of the [rows, c] tile in `x` (centred and scaled in
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

    RESIDENT = 1
    VARIANTS = (0,)

    @staticmethod
    def _vecs(target, r: int, c: int) -> float:
        """The VECs of `emit_rms` in series."""
        return cm.vecs(target, [(fn, r, c) if whole else (fn, 1, r) for fn, whole in RMS_OPS])

    def _plan(self, target, cand, c):
        (tm, _), plan = cand, BufferPlan(target)
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
