"""A kernel's emission as its cost model reads it (issue 23): the emitters write to a `Trace` (a
`MacroBuilder` whose grid dims are `Dim`s and sizes ints), and the cost model prices the recorded `Op`s
with `machine.costmodel`, the simulator's timing formulas, selecting them by their guards (`Op.on`)."""

from __future__ import annotations

from dataclasses import dataclass

from torch_mlir import ir

from simulator import timing

from ..machine import costmodel as cm
from . import MacroBuilder

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

    def on(self, point: dict) -> bool:
        """Whether the op runs at the grid point {dim: index} (dims not given: 1)."""
        for kind, e in self.when:
            v = point.get(e.i, 1) - e.c if isinstance(e, Dim) else e
            if (v != 0) if kind == "eq" else (v < 0):
                return False
        return True

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


class Trace(MacroBuilder):
    """A builder the emitters write to for the cost model: grid dims are `Dim`s, sizes ints."""

    def __init__(self):
        super().__init__(3, 1)

    def d(self, i: int) -> Dim:
        return Dim(i)

    def priced(self) -> tuple[Op, ...]:
        out = []
        for name, f in self.ops:
            when = tuple(f.get("when") or ())
            if name == MMA:
                out.append(Op(name, "", f["m"], f["n"], False, when, f["k"]))
                continue
            dma = name != VEC
            out.append(Op(name, f.get("fn", ""), f["rows"], f["cols"], dma and bool(timing.contiguous(f)), when))
        return tuple(out)


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
