"""A kernel's emission as its cost model reads it (issue 23): the emitters write to a `Trace` (a
`MacroBuilder` whose grid dims are `Dim`s and sizes ints), and the cost model prices the recorded `Op`s
with `machine.costmodel`, the simulator's timing formulas, selecting them by their guards (`Op.on`)."""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from simulator import timing
from simulator.isa import EXEC_UNITS

from .. import symbolic as sy
from ..machine import costmodel as cm
from . import MacroBuilder, memoized

LOAD, STORE, VEC, MMA = "novella.dma_load", "novella.dma_store", "novella.vop", "novella.mma"


@dataclass(frozen=True)
class Op:
    """One emitted LOAD, STORE, VEC or MATMUL as priced: its sizes ([rows, cols]; a MATMUL's m, n and `k`),
    DRAM contiguity (`timing.contiguous`), VEC function and guard (`when`, grid dims as `Dim`)."""

    kind: str  # LOAD, STORE, VEC or MMA
    fn: str
    rows: int
    cols: int
    contiguous: bool
    when: tuple
    k: int = 0
    buffer: str = ""  # a LOAD's or STORE's SRAM buffer

    def on(self, point: dict) -> bool:
        """Whether the op runs at the grid point {dim: index} (dims not given: 1)."""
        return holds(self.when, point)

    def cycles(self, t) -> float:
        """A VEC's or a MATMUL's cycles on Target t."""
        if self.kind == MMA:
            return cm.matmul(t, self.rows, self.k, self.cols)
        return cm.vec(t, self.rows, self.cols, self.fn)


class Dim:
    """Grid dim `i` less `c`: the trace's `d(i)` in a guard."""

    def __init__(self, i: int, c: int = 0):
        self.i, self.c = i, c

    def __sub__(self, c: int) -> Dim:
        return Dim(self.i, self.c + c)

    def at(self, point: dict) -> int:
        return point.get(self.i, 1) - self.c


class Affine:
    """A guard's affine expression of the grid dims (`kernels.first`, `last`, or a trace's `d(i)`), as
    sum(coeffs[i] * d_i) + c where it is linear in them (`symbolic.dim_coefficients`), so a priced op holds
    no MLIR object; one that is not (a floordiv, a mod) is evaluated where asked."""

    def __init__(self, e: ir.AffineExpr):
        linear = sy.dim_coefficients(e, 3)
        self.c, self.coeffs = linear or (0, (0, 0, 0))
        self.expr = None if linear else e

    def at(self, point: dict) -> int:
        if self.expr is not None:
            return sy.evaluate(self.expr, (), (point.get(0, 1), point.get(1, 1), point.get(2, 1)))
        a0, a1, a2 = self.coeffs
        return self.c + a0 * point.get(0, 1) + a1 * point.get(1, 1) + a2 * point.get(2, 1)


@memoized
def _affine(e: ir.AffineExpr) -> Affine:
    """An `Affine` per guard expression, within one compile (a compile traces the same few guards for every
    candidate)."""
    return Affine(e)


def _when(f: dict) -> tuple:
    """A traced op's guards as `Op.on` reads them: (kind, int, `Dim` or `Affine`)."""
    return tuple((kind, e if isinstance(e, (int, Dim)) else _affine(e)) for kind, e in f.get("when") or ())


class Trace(MacroBuilder):
    """A builder the emitters write to for the cost model, sizes ints: its grid dims are the compile's
    (`MacroBuilder.d`, affine expressions, built in `context()`), and the guards of the priced ops
    `Dim`s or `Affine`s (read by `Op.on`)."""

    def __init__(self):
        super().__init__(3, 1)

    def priced(self) -> tuple[Op, ...]:
        out = []
        for name, f in self.ops:
            when = _when(f)
            if name == MMA:
                out.append(Op(name, "", f["m"], f["n"], False, when, f["k"]))
                continue
            dma = name != VEC
            contiguous = dma and bool(timing.contiguous(f))
            out.append(Op(name, f.get("fn", ""), f["rows"], f["cols"], contiguous, when, buffer=f.get("buffer", "")))
        return tuple(out)

    def run(self, t, points: list[dict], slotted=()) -> list[float]:
        """The cycle each grid point's compute has retired (the last: its stores ended too) when the points run
        in order, timed as the simulator does: the compute queue's in-order issue onto the two units and the
        range scoreboard between them (`timing.ComputeUnits`), the DMA queues and the DRAM channel
        (`timing.DmaQueue`, `Target`'s DMA formulas), and the token rule of two-slot loads and stores: step k's
        loads wait for step k - 2's compute, its compute for its loads, its stores for its compute.
        `slotted`: the two-slot buffers (slot k mod 2 at step k)."""
        units = timing.ComputeUnits(_Units(t.issue_cycles, t.unit_queue_depth))
        clock = _Clock(t)
        issue, retired = 0, [0.0, 0.0]
        for k, point in enumerate(points):
            dims = tuple(point.get(i, 1) for i in range(self.n_dims))
            issue = max(issue, clock.dmas(LOAD, self.dmas(point), retired[-2]))
            if k:  # the step before's stores, after this step's loads (which wait for an earlier token)
                clock.dmas(STORE, self.dmas(points[k - 1]), retired[-1])
            for name, f in self.ops:
                if name not in (VEC, MMA) or not holds(_when(f), point):
                    continue
                unit = EXEC_UNITS.index("matrix" if name == MMA else "vector")
                issue = max(issue, units.room(unit))
                work = (_mma_work if name == MMA else _vec_work)(t, f, dims)
                units.execute(unit, issue, int(work), _ranges(name, f, dims, k, slotted))
                issue += t.issue_cycles
            retired.append(float(units.retired))
        ends = retired[2:]
        if ends:
            ends[-1] = max(ends[-1], clock.dmas(STORE, self.dmas(points[-1]), ends[-1]))
        return ends

    def dmas(self, point: dict) -> list[tuple[str, int, int, bool]]:
        """(kind, rows, cols, contiguous) of the LOADs and STOREs that run at grid point `point` {dim: index},
        their sizes evaluated there (`charged`): for emitters whose sizes are min-lists of the grid dims."""
        dims = tuple(point.get(i, 1) for i in range(self.n_dims))
        out = []
        for name, f in self.ops:
            if name in (LOAD, STORE) and holds(_when(f), point):
                out.append((name, *charged(f, dims)))
        return out


def holds(when, point: dict) -> bool:
    """Whether guards `when` ((kind, `Dim` / `Affine` / int)) hold at the grid point {dim: index}."""
    for kind, e in when:
        v = e if isinstance(e, int) else e.at(point)
        if (v != 0) if kind == "eq" else (v < 0):
            return False
    return True


def _size(e, dims) -> int:
    """A size field at grid point `dims`: an int, an affine expression of the dims, or a min-list of them."""
    if isinstance(e, list):
        return min(_size(x, dims) for x in e)
    return e if isinstance(e, int) else sy.evaluate(e, (), dims)


def charged(f: dict, dims) -> tuple[int, int, bool]:
    """A LOAD's or STORE's (rows, cols, contiguous) at grid point `dims` as the simulator charges it: the rows
    it moves are those in bounds (`functional._dma_rows`: row_start + row_step * k in [0, row_bound))."""
    rows, cols, start, bound, stride = (
        _size(f[k], dims) for k in ("rows", "cols", "row_start", "row_bound", "dram_stride")
    )
    step = f.get("row_step", 1)
    if step == 1:
        inside = min(start + rows, bound) - max(start, 0)
    elif step == 0:
        inside = rows * (0 <= start < bound)
    else:
        inside = sum(0 <= start + step * k < bound for k in range(rows))
    return max(inside, 0), cols, bool(timing.contiguous(dict(row_step=step, dram_stride=stride, cols=cols)))


def cycles(t, ops, point: dict, kind: str | None = None) -> float:
    """The VEC and MATMUL cycles (or `kind`'s only) of the ops that run at grid point `point`."""
    return sum(op.cycles(t) for op in ops if op.kind in ((kind,) if kind else (VEC, MMA)) and op.on(point))


_CONTEXT: list = []


def context() -> ir.Context:
    """An MLIR context for the offsets an emitter builds as affine expressions (the trace does not read
    them): the compile's, or one kept for traces run outside a compile (a cost model asked by a bench)."""
    if ir.Context.current is None and not _CONTEXT:
        _CONTEXT.append(ir.Context())
    return ir.Context.current or _CONTEXT[0]


@dataclass(frozen=True)
class _Units:
    """What `timing.ComputeUnits` reads of a config."""

    issue_cycles: int
    unit_queue_depth: int


class _Clock:
    """The DMA queues and the DRAM channel of `Trace.run`."""

    def __init__(self, t):
        self.t, self.dram = t, 0
        self.queues = {LOAD: timing.DmaQueue(t.load_dma_engines), STORE: timing.DmaQueue(t.store_dma_engines)}

    def dmas(self, kind: str, moves, ready: float) -> float:
        """Runs a step's `kind` DMAs ((kind, rows, cols, contiguous)) once `ready`; their queue's retire point."""
        q, t = self.queues[kind], self.t
        for name, rows, cols, contiguous in moves:
            if name != kind:
                continue
            start = max(q.free(), int(ready))
            end = max(start + t.issue_cycles + t.dma_latency, self.dram) + int(cm.dma(t, rows, cols, contiguous)[1])
            self.dram = end
            q.run(start, t.issue_cycles, end)
        return q.retired


def _mma_work(t, f: dict, dims) -> float:
    return cm.matmul(t, _size(f["m"], dims), _size(f["k"], dims), _size(f["n"], dims)) - t.issue_cycles


def _vec_work(t, f: dict, dims) -> float:
    return cm.vec(t, _size(f["rows"], dims), _size(f["cols"], dims), f["fn"]) - t.issue_cycles


def _tile(buffer, write: bool, offset, stride, rows: int, cols: int, dims, k: int, slotted) -> tuple:
    """A tile's (buffer, write, lo, hi) as the scoreboard compares them (bounds, not elements); a two-slot
    buffer's slot far from the other."""
    lo = (0 if offset is None else _size(offset, dims)) + (k % 2) * (1 << 40) * (buffer in slotted)
    return buffer, write, lo, lo + max(0, _size(stride, dims) * (rows - 1)) + cols


def _ranges(name: str, f: dict, dims, k: int, slotted) -> list[tuple]:
    """The SRAM ranges of a traced VEC or MATMUL (`functional.exec_vec`, `exec_matmul`)."""
    at = lambda *a: _tile(*a, dims, k, slotted)  # noqa: E731
    if name == MMA:
        m, kk, n = (_size(f[x], dims) for x in ("m", "k", "n"))
        b_rows, b_cols = (n, kk) if f.get("transpose_b") else (kk, n)
        out = [at(f["lhs"], False, f.get("lhs_offset"), f["a_stride"], m, kk),
               at(f["rhs"], False, f.get("rhs_offset"), f["b_stride"], b_rows, b_cols),
               at(f["acc"], True, f.get("acc_offset"), f["acc_stride"], m, n)]  # fmt: skip
        if f.get("rowmax"):
            out.append(at(f["max"], True, f.get("max_offset"), 1, 1, m))
        return out
    rows, cols = _size(f["rows"], dims), _size(f["cols"], dims)
    reduce = f["fn"] in ("ROWMAX", "ROWSUM")
    out = [at(f["dst"], True, f.get("dst_offset"), f.get("dst_stride", cols), rows, 1 if reduce else cols)]
    if "a" in f:
        out.append(at(f["a"], False, f.get("a_offset"), f.get("a_stride", cols), rows, cols))
    mode = f.get("mode", "TENSOR")
    if "b" in f and mode != "SCALAR":
        shape = {"COL": (rows, 1), "ROW": (1, cols)}.get(mode, (rows, cols))
        out.append(at(f["b"], False, f.get("b_offset"), 0 if mode == "ROW" else f.get("b_stride", cols), *shape))
    if f.get("rowsum"):
        out.append(at(f["sum"], True, f.get("sum_offset"), 1, 1, rows))
    return out
