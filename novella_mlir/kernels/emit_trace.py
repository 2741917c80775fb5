"""A kernel's emission as its cost model reads it (issue 23): the emitters write to a `Trace` (a
`MacroBuilder` whose grid dims are `Dim`s and sizes ints), and the cost model prices the recorded `Op`s
with `machine.costmodel`, the simulator's timing formulas, selecting them by their guards (`Op.on`)."""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from simulator import timing

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
