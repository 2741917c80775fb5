"""Row-tiled elementwise kernels: binary ops with broadcasting, scalar ops, activations."""

from __future__ import annotations

import math

from .. import symbolic as sy
from ..machine import costmodel as cm
from . import BufferPlan, Tiling, first, memoized, module_symbols, tile_rows

ACT_FNS = {"none": (), "relu": ("relu",), "gelu": ("mul", "erf", "add", "mul", "mul")}


def emit_act(b, act: str, buf: str, tmp: str, rows, cols: int, stride: int, when=None, out=None,
             out_offset=None, buf_offset=None) -> None:  # fmt: skip
    """Applies `act` to `buf` ([rows, cols], row stride `stride`; at `buf_offset` in it if given) into `out`
    (default: in place; at `out_offset` in it if given); gelu uses `tmp`, which may be `out`."""
    out = out or buf
    geo = dict(rows=rows, cols=cols, dst_stride=stride, a_stride=stride, b_stride=stride, when=when)
    src = {} if buf_offset is None else {"a_offset": buf_offset}
    at = src | ({} if out_offset is None else {"dst_offset": out_offset})
    if act == "relu":
        b.vop("RELU", out, buf, **at, **geo)
    elif act == "gelu":
        b.vop("MUL", tmp, buf, mode="SCALAR", imm=1.0 / math.sqrt(2.0), **src, **geo)
        b.vop("ERF", tmp, tmp, **geo)
        b.vop("ADD", tmp, tmp, mode="SCALAR", imm=1.0, **geo)
        b.vop("MUL", tmp, tmp, mode="SCALAR", imm=0.5, **geo)
        b.vop("MUL", out, buf, tmp, **at, **geo)
    elif act != "none":
        raise ValueError(f"unknown activation {act}")
    elif out != buf:
        b.vop("COPY", out, buf, **at, **geo)


def row_tiling(rows, cols: int, target, n_buffers: int, options, extra=(), cost=None) -> Tiling:
    """The row tile, of those whose `n_buffers` [tm, cols] SPAD buffers (+ `extra`: (name, size or
    size(tm))) fit, that `cost(tm)` (the cost model's cycles) finds cheapest; without `cost`, the largest."""
    first = options.get("tile-m")
    best = None
    for tm in [first] if first else target.row_tiles(4):
        plan = BufferPlan(target)
        for i in range(n_buffers):
            plan.add(f"t{i}", "spad", tm * cols, stream=True)
        for name, size in extra:
            plan.add(name, "spad", size(tm) if callable(size) else size, stream=callable(size))
        if plan.fits() or first or (tm == 1 and best is None):
            key = (cost(tm) if cost and not first else 0.0, -tm)
            if best is None or key < best[0]:
                best = (key, tm, plan)
    _, tm, plan = best
    return Tiling({"tm": tm}, [sy.ceildiv(rows, tm)], plan.check())


def nominal_rows(op, tv) -> int:
    from .support import upper

    return upper(tv.rows(-1), module_symbols(op))


def row_kernel_cost(target, rows: int, cols: int, tm: int, loads, fns, once=(), chained=False) -> float:
    """Cycles of a row-tiled kernel: per step the LOADs `loads(r)` ((rows, cols, contiguous) for r tile
    rows), the VEC fns `fns(r)` ((fn, rows, cols)), one contiguous STORE of [r, cols]; `once`: LOADs of
    the first step only (a broadcast row or scalar, resident: that step's loads wait one step); `chained`:
    a step's LOADs are one DMA chain (one exposed latency)."""

    def group(r, n, extra=()):
        moves = [*loads(r), *extra]
        lq, ld = cm.dmas(target, moves)
        if chained and moves:
            lq = min(lq, sum(cm.dma(target, *m)[0] for m in moves) - target.dma_latency * (len(moves) - 1))
        sq, sd = cm.dma(target, r, cols, contiguous=True)
        return cm.Group(lq, cm.vecs(target, fns(r)), sq, ld + sd, n, 1 if extra else 2, n_dma=len(moves))

    groups = cm.row_groups(rows, tm, group)
    return cm.pipeline(target, cm.with_first(group(min(tm, rows), 1, once), groups) if once else groups)


def _load_rows(b, buf, tensor, tm, rows_total, cols, rows):
    b.load_rows(buf, tensor, row_start=b.d(0) * tm, row_bound=rows_total, rows=rows, cols=cols)


def _store_rows(b, buf, tm, rows_total, cols, rows):
    b.store_rows(buf, row_start=b.d(0) * tm, row_bound=rows_total, rows=rows, cols=cols)


def broadcast_kind(shape, out) -> str | None:
    """How an operand of `shape` broadcasts to the 2-D view of `out`: "full" (same rows and
    cols), "row" (one row), "col" (one column, same rows), "scalar", or None (unsupported)."""
    shape = [sy.const(1)] * (len(out) - len(shape)) + list(shape)
    lead = shape[:-1]
    same_rows = sy.equal_shapes(lead, out[:-1])
    one_row = all(sy.as_int(x) == 1 for x in lead)
    last = sy.as_int(shape[-1])
    wide = sy.equal(shape[-1], out[-1])
    if same_rows and wide:
        return "full"
    if one_row and wide:
        return "row"
    if last == 1 and same_rows:
        return "col"
    if last == 1 and one_row:
        return "scalar"
    return None


_COMMUTES = ("add", "mul")


class Binary:
    """`out = a op b` over row tiles, with NumPy broadcasting of rows (ROW), columns
    (COL) or a scalar (COL with stride 0) on either side. The right operand is read
    by the VEC broadcast mode; a broadcast left operand is materialized first (a
    repeated-row LOAD, or FILL 0 + ADD COL), unless the op commutes. The result
    goes to `t2`, which no LOAD writes (the next step's loads are ordered after
    this step's compute, not its stores)."""

    def kinds(self, op, tv):
        out = tv.shape(-1)
        ka, kb = broadcast_kind(tv.shape(0), out), broadcast_kind(tv.shape(1), out)
        if ka is None or kb is None:
            raise ValueError(
                f"broadcast of {[str(e) for e in tv.shape(0)]} and {[str(e) for e in tv.shape(1)]} is not "
                "supported; only equal shapes, a row, a column or a scalar"
            )
        swap = ka != "full" and kb == "full" and op.name.split(".")[1] in _COMMUTES
        return (kb, ka, (1, 0)) if swap else (ka, kb, (0, 1))

    def tile(self, op, tv, target, options):
        ka, kb, _ = self.kinds(op, tv)
        dims = (nominal_rows(op, tv), tv.cols(-1), ka, kb, op.name.split(".")[1])
        cost = lambda tm: self.cost(target, dims, tm)  # noqa: E731
        return row_tiling(tv.rows(-1), tv.cols(-1), target, 3, options, extra=(("acol", lambda tm: tm),), cost=cost)

    @memoized
    def cost(self, target, dims, tm) -> float:
        """Predicted cycles (cost model) of row tile `tm` over dims = (rows, cols, kind of a, kind of b, fn)."""
        rows, cols, ka, kb, fn = dims
        once = [(1, cols, True)] * (kb == "row") + [(1, 1, True)] * (ka == "scalar") + [(1, 1, True)] * (kb == "scalar")
        moves = {
            "full": lambda r: [(r, cols, True)],
            "row": lambda r: [(r, cols, False)],
            "col": lambda r: [(r, 1, True)],
        }
        a_moves, b_moves = moves.get(ka, lambda r: []), moves.get(kb, lambda r: [])
        if kb == "row":
            b_moves = lambda r: []  # noqa: E731

        def fns(r):
            spread = [("fill", r, cols), ("add", r, cols)] if ka != "full" and ka != "row" else []
            return [*spread, (fn, r, cols)]

        return row_kernel_cost(target, rows, cols, tm, lambda r: [*a_moves(r), *b_moves(r)], fns, once)

    def macro(self, op, tv, t, b):
        ka, kb, (ia, ib) = self.kinds(op, tv)
        tm, cols, total = t.tiles["tm"], tv.cols(-1), tv.rows(-1)
        rows = tile_rows(0, tm, total)
        geo = dict(rows=rows, cols=cols, dst_stride=cols, a_stride=cols, b_stride=cols)
        _operand_a(b, ka, ia, tm, total, cols, rows, geo)
        fn = op.name.split(".")[1].upper()
        if kb == "full":
            _load_rows(b, "t1", ib, tm, total, cols, rows)
            b.vop(fn, "t2", "t0", "t1", **geo)
        elif kb == "row":
            _load_one(b, "t1", ib, 1, cols, cols, when=first(0))
            b.vop(fn, "t2", "t0", "t1", mode="ROW", **geo)
        else:
            stride = 1 if kb == "col" else 0
            _load_col(b, "t1", ib, kb, tm, total, rows)
            b.vop(fn, "t2", "t0", "t1", mode="COL", **{**geo, "b_stride": stride})
        _store_rows(b, "t2", tm, total, cols, rows)


def _load_one(b, buf, tensor, rows, cols, stride, **f):
    b.load(
        buf,
        tensor,
        dram_offset=0,
        dram_stride=stride,
        row_start=0,
        row_step=0,
        row_bound=1,
        rows=rows,
        cols=cols,
        sram_stride=stride,
        **f,
    )


def _load_col(b, buf, tensor, kind, tm, total, rows):
    if kind == "col":
        b.load(
            buf,
            tensor,
            dram_offset=0,
            dram_stride=1,
            row_start=b.d(0) * tm,
            row_step=1,
            row_bound=total,
            rows=rows,
            cols=1,
            sram_stride=1,
        )
    else:
        _load_one(b, buf, tensor, 1, 1, 1, when=first(0))


def _operand_a(b, kind, tensor, tm, total, cols, rows, geo):
    """The left operand as a full [rows, cols] tile in `t0`."""
    if kind == "full":
        _load_rows(b, "t0", tensor, tm, total, cols, rows)
    elif kind == "row":
        _load_one(b, "t0", tensor, rows, cols, cols)
    else:
        _load_col(b, "acol", tensor, kind, tm, total, rows)
        b.vop("FILL", "t0", rows=rows, cols=cols, dst_stride=cols, imm=0.0)
        b.vop("ADD", "t0", "t0", "acol", mode="COL", **{**geo, "b_stride": 1 if kind == "col" else 0})


class Unary:
    """Activations and ops with a compile-time scalar: row tile `t0` in, result in `t1`."""

    def tile(self, op, tv, target, options):
        dims = (nominal_rows(op, tv), tv.cols(-1), self.fns(op))
        cost = lambda tm: self.cost(target, dims, tm)  # noqa: E731
        return row_tiling(tv.rows(-1), tv.cols(-1), target, 2, options, cost=cost)

    def fns(self, op) -> tuple[str, ...]:
        kind = op.name.split(".")[1]
        if kind == "scalar":
            fn = op.attributes["fn"].value
            return ("mul", "add") if fn == "rsub" else (fn,)
        return ACT_FNS[kind]

    @memoized
    def cost(self, target, dims, tm) -> float:
        """Predicted cycles (cost model) of row tile `tm` over dims = (rows, cols, VEC fns per tile)."""
        rows, cols, fns = dims
        return row_kernel_cost(
            target, rows, cols, tm, lambda r: [(r, cols, True)], lambda r: [(f, r, cols) for f in fns]
        )

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
                b.vop("MUL", "t1", "t0", mode="SCALAR", imm=-1.0, **geo)
                b.vop("ADD", "t1", "t1", mode="SCALAR", imm=value, **geo)
            else:
                b.vop(fn.upper(), "t1", "t0", mode="SCALAR", imm=value, **geo)
        else:
            emit_act(b, kind, "t0", "t1", rows, cols, cols, out="t1")
        _store_rows(b, "t1", tm, total, cols, rows)
