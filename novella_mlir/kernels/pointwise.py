"""Pointwise kernels over any shape: dynamic dims anywhere (the last included) and NumPy
broadcasting in any dim, for math functions, compares, where, broadcast copies, and the
elementwise ops the row kernels of `elementwise.py` cannot take.

The result is seen as `[*batch, R, C]` (R = dim -2, C = the last dim). The grid is one
loop per batch dim of size > 1, then row tiles of `tm` and column tiles of `tc`, each
partial at its end. An operand is read at its own strides: a broadcast batch dim has
stride 0, a broadcast row is repeated by the DMA (`row_step = 0`), a broadcast column is
loaded once per row and read in COL mode (or first spread over a full tile).
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import symbolic as sy
from ..dialects.math_fns import MATH
from . import BufferPlan, Tiling, tile_rows
from .support import ceildiv, mul


@dataclass
class Operand:
    """How one operand is read: per grid batch dim its element stride, and whether its rows/cols broadcast."""

    slot: int
    batch_strides: list
    row_full: bool
    col_full: bool
    cols: object  # its DRAM row stride (its own last dim, unless `Geometry` moved the rows: `_axes`)


@dataclass
class _Axis:
    """Dims of the result read as one: its size, the result's stride and each operand's (0: broadcast)."""

    dim: int  # the outermost dim
    size: object
    out: object
    strides: list


class Geometry:
    """The [*batch, R, C] view of an op's result and how each operand maps onto it.

    R is dim -2, unless that is 1 while a dim before it is not (a decode step's one query row,
    `[B, heads, 1, d]`): then the dims before the last are merged where every operand is full in both
    or broadcast in both, and R is the largest of them (a symbolic one before a static one), each
    operand read at its own row stride, so that a tile holds many rows instead of one."""

    def __init__(self, tv, slots):
        y = list(tv.shape(-1))
        if len(y) < 2:
            y = [sy.const(1)] * (2 - len(y)) + y
        self.c = y[-1]
        shapes = [[sy.const(1)] * (len(y) - len(s)) + s for s in (list(tv.shape(k)) for k in slots)]
        for k, s in zip(slots, shapes):
            for a, b in zip(s, y):
                if sy.as_int(a) != 1 and not sy.equal(a, b):
                    raise ValueError(f"operand #{k} {[str(e) for e in s]} does not broadcast to {[str(e) for e in y]}")
        axes = _axes(y, shapes) if sy.as_int(y[-2]) == 1 else []
        self.moved = bool(axes)  # R is not dim -2
        if axes:
            row = _row_axis(axes)
            batch = [a for i, a in enumerate(axes) if i != row]
            self.r, self.out_row = axes[row].size, axes[row].out
            rows = [(st, sy.as_int(st) != 0 or sy.as_int(self.r) == 1) for st in axes[row].strides]
        else:
            batch = [_Axis(i, y[i], _stride(y, i), [_bstride(s, i) for s in shapes]) for i, e in enumerate(y[:-2])
                     if sy.as_int(e) != 1]  # fmt: skip
            self.r, self.out_row = y[-2], y[-1]
            rows = [(s[-1], sy.as_int(s[-2]) != 1 or sy.as_int(self.r) == 1) for s in shapes]
        self.batch = [a.dim for a in batch]
        self.batch_sizes = [a.size for a in batch]
        self.out_strides = [a.out for a in batch]
        self.ops = []
        for j, (k, s, (stride, full)) in enumerate(zip(slots, shapes, rows)):
            col_full = sy.as_int(s[-1]) != 1 or sy.as_int(self.c) == 1
            self.ops.append(Operand(k, [a.strides[j] for a in batch], full, col_full, stride if full else s[-1]))

    def tiles(self, target, n_buffers: int, options) -> tuple[int, int, list]:
        tc = target.col_tile(sy.as_int(self.c))
        r = sy.as_int(self.r)
        for tm in [options["tile-m"]] if options.get("tile-m") else target.row_tiles(4):
            tm = min(tm, r) if r is not None else tm
            plan = BufferPlan(target)
            for i in range(n_buffers):
                plan.add(f"p{i}", "spad", tm * tc)
            if plan.fits() or tm == 1:
                return tm, tc, plan.check()
        raise AssertionError("unreachable")

    def grid(self, tm: int, tc: int) -> list:
        return [*self.batch_sizes, ceildiv(self.r, tm), ceildiv(self.c, tc)]


def _stride(shape, i: int):
    return mul(*shape[i + 1 :]) if i + 1 < len(shape) else sy.const(1)


def _bstride(shape, i: int):
    return sy.const(0) if sy.as_int(shape[i]) == 1 else _stride(shape, i)


def _axes(y, shapes) -> list[_Axis]:
    """The dims of `y` before the last that are not 1, adjacent ones merged where every operand is
    full in both or broadcast in both (the dims of 1 between them move nothing)."""
    axes: list[_Axis] = []
    for i in range(len(y) - 1):
        if sy.as_int(y[i]) == 1:
            continue
        strides = [_bstride(s, i) for s in shapes]
        last = axes[-1] if axes else None
        if last and all((sy.as_int(a) == 0) == (sy.as_int(b) == 0) for a, b in zip(last.strides, strides)):
            axes[-1] = _Axis(last.dim, mul(last.size, y[i]), _stride(y, i), strides)
        else:
            axes.append(_Axis(i, y[i], _stride(y, i), strides))
    return axes


def _row_axis(axes: list[_Axis]) -> int:
    """The largest axis: a symbolic one before any static one, the innermost of equals."""
    return max(range(len(axes)), key=lambda i: (sy.as_int(axes[i].size) is None, sy.as_int(axes[i].size) or 0, i))


class Tile:
    """One grid step's geometry: the batch offsets, row and column extents."""

    def __init__(self, g: Geometry, t, b):
        self.g, self.b = g, b
        self.tm, self.tc = t.tiles["tm"], t.tiles["tc"]
        nb = len(g.batch)
        self.bdims = [b.d(i) for i in range(nb)]
        self.dr, self.dc = b.d(nb), b.d(nb + 1)
        self.rows = _extent(nb, self.tm, g.r)
        self.cols = _extent(nb + 1, self.tc, g.c)

    def batch_offset(self, strides):
        """The DRAM offset of this tile's batch indices under `strides` (zero strides skipped)."""
        out = sy.const(0)
        for d, s in zip(self.bdims, strides):
            if sy.as_int(s) != 0:
                out = out + d * s
        return out

    def load(self, buf: str, op: Operand, chain: int = 0, when=None) -> None:
        """LOAD operand `op` into `buf` ([rows, tc], or [rows, 1] for a broadcast column); `chain`: the LOAD
        continues the load queue's previous DMA (docs/isa.md, LOAD `chain`); `when`: its guard."""
        offset = self.batch_offset(op.batch_strides) + (self.dc * self.tc if op.col_full else sy.const(0))
        cols = self.cols if op.col_full else 1
        f = dict(sram_stride=self.tc if op.col_full else 1, **({"chain": chain} if chain else {}))
        f.update({"when": when} if when else {})
        if op.row_full:
            self.b.load_rows(buf, op.slot, row_start=self.dr * self.tm, rows=self.rows, row_bound=self.g.r,
                             cols=cols, dram_offset=offset, dram_stride=op.cols, **f)  # fmt: skip
        else:
            self.b.load(buf, op.slot, dram_offset=offset, dram_stride=op.cols, row_start=0, row_step=0, row_bound=1,
                        rows=self.rows, cols=cols, **f)  # fmt: skip

    def store(self, buf: str) -> None:
        offset = self.batch_offset(self.g.out_strides) + self.dc * self.tc
        self.b.store_rows(buf, row_start=self.dr * self.tm, rows=self.rows, row_bound=self.g.r, cols=self.cols,
                          dram_offset=offset, dram_stride=self.g.out_row, sram_stride=self.tc)  # fmt: skip

    def geo(self, **over) -> dict:
        g = dict(rows=self.rows, cols=self.cols, dst_stride=self.tc, a_stride=self.tc, b_stride=self.tc)
        return {**g, **over}

    def full(self, buf: str, op: Operand, tmp: str) -> str:
        """`buf` holds operand `op`; spread a broadcast column over a full tile in `tmp`."""
        if op.col_full:
            return buf
        self.b.vop("FILL", tmp, **self.geo(), imm=0.0)
        self.b.vop("ADD", tmp, tmp, buf, mode="COL", **self.geo(b_stride=1))
        return tmp

    def binary(self, fn: str, dst: str, a: str, b: str, op_b: Operand) -> None:
        if op_b.col_full:
            self.b.vop(fn, dst, a, b, **self.geo())
        else:
            self.b.vop(fn, dst, a, b, mode="COL", **self.geo(b_stride=1))


def _extent(dim: int, t: int, total):
    v = sy.as_int(total)
    if v is not None and (v % t == 0 or v <= t):
        return min(v, t)
    return tile_rows(dim, t, total)


# ------------------------------------------------------------------ function bodies


def math_body(tl: Tile, fn: str, dst: str, a: str, tmp: str) -> None:
    """dst = fn(a) on one tile, the steps of `MATH[fn]`; `tmp` is scratch. a may equal dst only for
    functions that read a before they write dst."""
    if fn not in MATH:
        raise ValueError(f"unknown math fn '{fn}'")
    tiles, geo = {"dst": dst, "a": a, "tmp": tmp}, tl.geo()
    for s in MATH[fn].body:
        operands = [tiles[t] for t in (s.a, s.b) if t is not None]
        extra = {k: v for k, v in (("mode", s.mode), ("imm", s.imm)) if v is not None}
        tl.b.vop(s.fn, tiles[s.dst], *operands, **geo, **extra)


def scalar_body(tl: Tile, fn: str, value: float, dst: str, a: str) -> None:
    if fn == "rsub":
        tl.b.vop("MUL", dst, a, mode="SCALAR", imm=-1.0, **tl.geo())
        tl.b.vop("ADD", dst, dst, mode="SCALAR", imm=value, **tl.geo())
    else:
        tl.b.vop(fn.upper(), dst, a, mode="SCALAR", imm=value, **tl.geo())


# ------------------------------------------------------------------ the kernel

_BINARY_FN = {"add": "ADD", "sub": "SUB", "mul": "MUL", "div": "DIV", "maximum": "MAX", "minimum": "MIN"}


def _kind(op) -> str:
    return op.operation.name.split(".", 1)[1]


class Pointwise:
    """Any pointwise op, any broadcasting, dynamic dims anywhere: see the module docstring.

    Buffers p0.. hold the operands, the next one scratch, the last the result (never loaded)."""

    def _slots(self, op) -> list[int]:
        return list(range(len(op.operands)))

    def tile(self, op, tv, target, options):
        g = Geometry(tv, self._slots(op))
        tm, tc, bufs = g.tiles(target, len(g.ops) + 3, options)
        return Tiling({"tm": tm, "tc": tc}, g.grid(tm, tc), bufs)

    def macro(self, op, tv, t, b):
        g = Geometry(tv, self._slots(op))
        tl = Tile(g, t, b)
        n = len(g.ops)
        ins = [f"p{i}" for i in range(n)]
        tmp, tmp2, out = f"p{n}", f"p{n + 1}", f"p{n + 2}"
        for buf, o in zip(ins, g.ops):
            tl.load(buf, o)
        kind = _kind(op)
        if kind == "where":
            c = tl.full(ins[0], g.ops[0], tmp)
            y = tl.full(ins[2], g.ops[2], tmp2)
            b.vop("COPY", out, y, **tl.geo())
            tl.binary("SEL", out, c, ins[1], g.ops[1])
        elif n == 2:
            a = tl.full(ins[0], g.ops[0], tmp)
            fn = op.attributes["fn"].value.upper() if kind == "compare" else _BINARY_FN[kind]
            tl.binary(fn, out, a, ins[1], g.ops[1])
        else:
            a = tl.full(ins[0], g.ops[0], tmp)
            self._unary(op, kind, tl, out, a, tmp2)
        tl.store(out)

    def _unary(self, op, kind, tl, out, a, tmp) -> None:
        if kind == "math":
            math_body(tl, op.attributes["fn"].value, out, a, tmp)
        elif kind == "scalar":
            scalar_body(tl, op.attributes["fn"].value, op.attributes["value"].value, out, a)
        elif kind in ("relu", "gelu"):
            from .elementwise import emit_act

            emit_act(tl.b, kind, a, tmp, tl.rows, tl.cols, tl.tc, out=out)
        elif kind == "broadcast":
            tl.b.vop("COPY", out, a, **tl.geo())
        else:
            raise ValueError(f"no pointwise body for novella.{kind}")


class Prefer:
    """The specialised kernel `first` where `applies(op, tv)` holds, else `fallback`."""

    def __init__(self, first, fallback, applies):
        self.first, self.fallback, self.applies = first, fallback, applies

    def pick(self, op, tv):
        try:
            ok = self.applies(op, tv)
        except (ValueError, IndexError):  # IndexError: a rank-0 result has no last dim
            ok = False
        return self.first if ok else self.fallback

    def tile(self, op, tv, target, options):
        return self.pick(op, tv).tile(op, tv, target, options)

    def macro(self, op, tv, t, b):
        return self.pick(op, tv).macro(op, tv, t, b)


def rows_apply(op, tv) -> bool:
    """The row kernels of elementwise.py need a static last dim (and, binary, row/column broadcasts)."""
    tv.cols(-1)
    kinds = getattr(ROW_KERNELS.get(_kind(op)), "kinds", None)
    if kinds is not None:
        kinds(op, tv)
    return True


ROW_KERNELS: dict = {}
