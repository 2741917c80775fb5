"""Batched matmul, softmax and attention kernels, and their legalize patterns.

Dynamic dims may appear anywhere in a matmul (M, N and the contraction K:
the K loop runs over a symbolic number of k-tiles, the last one partial)
and in the softmax's reduced last dim (tiled over column chunks with an
online max/sum when a row does not fit the scratchpad)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects import shapes
from ..dialects.novella import MatmulOp, ReshapeOp, ScalarOp, SoftmaxOp
from ..machine import costmodel as cm
from ..machine.target import MAX_COLS
from . import BufferPlan, Tiling, first, last, memoized, module_symbols
from . import kv_cache as kv
from .support import _candidates, _flag, _pieces, ceildiv, extent, mul, upper

# A row max floored at -FLT_MAX: an all -inf row gives exp(-inf - NEG_FLOOR) = 0, not NaN, and no finite score
# lies below it (a row masked with finfo(f32).min, as transformers' eager masks, keeps its own max).
NEG_FLOOR = -3.4028234663852886e38
SUM_FLOOR = 1.1754944e-38  # a safe softmax's row sum floored here (f32's least normal): 0 / SUM_FLOOR = 0


# ------------------------------------------------------------------ matmul


@dataclass
class MatmulDims:
    """A batched matmul as `batch` independent [M, K] @ [K, N] products."""

    batch: ir.AffineExpr
    m: ir.AffineExpr
    k: ir.AffineExpr
    n: ir.AffineExpr
    transpose: bool
    lhs_batch_stride: ir.AffineExpr
    rhs_batch_stride: ir.AffineExpr


def _static_numel(exprs) -> int | None:
    values = [sy.as_int(e) for e in exprs]
    return None if None in values else math.prod(values)


def matmul_dims(op, tv) -> MatmulDims:
    a, b, y = tv.shape(0), tv.shape(1), tv.shape(-1)
    batch = sy.canon(mul(*y[:-2])) if len(y) > 2 else sy.const(1)
    strides = []
    for name, s in (("lhs", a), ("rhs", b)):
        nb = sy.canon(mul(*s[:-2])) if len(s) > 2 else sy.const(1)
        if name == "rhs" and kv.paged_rhs(op) is not None:
            nb = sy.canon(nb * kv.group(op))
        broadcast = sy.as_int(nb) == 1 and sy.as_int(batch) != 1
        if not broadcast and not sy.equal(nb, batch):
            raise ValueError(f"matmul {name} batch dims {[str(e) for e in s[:-2]]} must equal the result's or be 1")
        strides.append(sy.const(0) if broadcast else mul(s[-1], s[-2]))
    return MatmulDims(batch, a[-2], a[-1], y[-1], _flag(op, "transpose_rhs"), *strides)


def _matmul_plan(op, target, tm, tn, tk, lhs_resident: bool) -> BufferPlan:
    plan = BufferPlan(target)
    plan.add("a", "spad", tm * tk, stream=not lhs_resident)
    plan.add("b", "spad", tk * tn, stream=True)
    plan.add("acc", "acc", tm * tn, stream=lhs_resident)  # across k steps it accumulates: one slot
    return plan


class Matmul:
    """`y[b] = lhs[b] @ rhs[b]` (rhs optionally stored transposed).

    Grid (batch, m, n, k): each step loads an lhs tile [tm, tk] and an rhs
    tile, accumulates into the accumulator, and the last k step stores the
    accumulator tile. With a single k step the lhs tile stays resident
    across the n loop. Every extent may be symbolic; edge tiles are partial."""

    def tile(self, op, tv, target, options):
        dims = matmul_dims(op, tv)
        syms = module_symbols(op)
        sizes, k_sizes = target.array_tiles(16), target.array_tiles(32)
        tms = [options["tile-m"]] if options.get("tile-m") else _candidates(dims.m, syms, sizes)
        tns = _candidates(dims.n, syms, sizes)
        tks = _candidates(dims.k, syms, k_sizes)
        info = kv.paged_rhs(op)
        if info is not None:  # a tile of cache positions must stay inside one page
            ps = info["page_size"]
            if dims.transpose:
                tns = [t for t in tns if ps % t == 0] or [ps]
            else:
                tks = [t for t in tks if ps % t == 0] or [ps]
        best, plan = None, None
        k_static = sy.as_int(dims.k)
        sizes = (*(upper(e, syms) for e in (dims.batch, dims.m, dims.k, dims.n)), dims.transpose, k_static is not None)
        for tm, tn, tk in itertools.product(tms, tns, tks):
            plan = _matmul_plan(op, target, tm, tn, tk, k_static is not None and k_static <= tk)
            if not plan.fits():
                continue
            key = (self.cost(target, sizes, (tm, tn, tk)), -min(tm, tn), -tk)
            if best is None or key < best[0]:
                best = (key, (tm, tn, tk), plan)
        if best is None:
            plan.check()
        (tm, tn, tk), plan = best[1], best[2]
        grid = [dims.batch, ceildiv(dims.m, tm), ceildiv(dims.n, tn), ceildiv(dims.k, tk)]
        return Tiling({"tm": tm, "tn": tn, "tk": tk}, grid, plan.buffers)

    @memoized
    def cost(self, target, dims, cand) -> float:
        """Predicted cycles (cost model) of tiles cand = (tm, tn, tk) over dims = (batch, M, K, N,
        transposed rhs, K static). With one k step the lhs tile stays resident across the n loop (its
        load waits one step) and the accumulator has two slots; else the accumulator has one, so the
        compute after a store waits for it."""
        batch, m, k, n, transpose, k_static = dims
        tm, tn, tk = cand
        resident = bool(k_static) and k <= tk
        ksteps = _pieces(k, tk)
        *plain, (k_last, n_last) = ksteps
        plain = plain + [(k_last, n_last - 1)] * (n_last > 1)
        groups = []

        def add(r, c, kk, count, store, lhs, first_k=False):
            b_move = (c, kk, kk == k) if transpose else (kk, c, c == n)
            moves = [(r, kk, kk == k), b_move] if lhs else [b_move]
            lq, ld = cm.dmas(target, moves)
            st, sd = cm.dma(target, r, c, c == n)
            if not resident:  # the store's data shares the DRAM with the next block's first loads
                ld += sd * first_k
                sd = 0.0
            st, sd = (st, sd) if store else (0.0, 0.0)
            mm = cm.matmul(target, r, kk, c)
            slots = (1 if resident and lhs else 2, 2 if resident else 1)
            groups.append(cm.Group(lq, mm, st, ld + sd, count, *slots, n_dma=len(moves)))

        for r, nr in _pieces(m, tm):
            for ni, (c, nc) in enumerate(_pieces(n, tn)):
                blocks = batch * nr * nc
                for j, (kk, cnt) in enumerate(plain):
                    add(r, c, kk, blocks, False, True, j == 0)
                    add(r, c, kk, blocks * (cnt - 1), False, True)
                if resident and ni == 0:  # the first n tile of each row block loads the lhs tile
                    add(r, c, k_last, batch * nr, True, True)
                    add(r, c, k_last, blocks - batch * nr, True, False)
                else:
                    add(r, c, k_last, blocks, True, not resident)
        return cm.pipeline(target, groups)

    def macro(self, op, tv, t, b):
        dims = matmul_dims(op, tv)
        tm, tn, tk = t.tiles["tm"], t.tiles["tn"], t.tiles["tk"]
        bi, mi, ni, ki = (b.d(i) for i in range(4))
        rows, cols, kk = extent(1, tm, dims.m), extent(2, tn, dims.n), extent(3, tk, dims.k)
        k_steps = ceildiv(dims.k, tk)
        k_static = sy.as_int(dims.k)
        reuse_lhs = first(2) if k_static is not None and k_static <= tk else None
        b.load_rows(
            "a",
            0,
            dram_offset=bi * dims.lhs_batch_stride + ki * tk,
            dram_stride=dims.k,
            row_start=mi * tm,
            row_bound=dims.m,
            rows=rows,
            cols=kk,
            sram_stride=tk,
            when=reuse_lhs,
        )
        info = kv.paged_rhs(op)
        if info is not None:
            head = sy.floordiv(bi, kv.group(op)) if kv.group(op) > 1 else bi
            if dims.transpose:
                kv.load_paged_rows(b, "b", 1, info, head=head, row0=ni * tn, n_rows=dims.n, rows=cols,
                                   col0=ki * tk, cols=kk, sram_stride=tk)  # fmt: skip
            else:
                kv.load_paged_rows(b, "b", 1, info, head=head, row0=ki * tk, n_rows=dims.k, rows=kk,
                                   col0=ni * tn, cols=cols, sram_stride=tn)  # fmt: skip
        elif dims.transpose:
            b.load_rows(
                "b",
                1,
                dram_offset=bi * dims.rhs_batch_stride + ki * tk,
                dram_stride=dims.k,
                row_start=ni * tn,
                row_bound=dims.n,
                rows=cols,
                cols=kk,
                sram_stride=tk,
            )
        else:
            b.load_rows(
                "b",
                1,
                dram_offset=bi * dims.rhs_batch_stride + ni * tn,
                dram_stride=dims.n,
                row_start=ki * tk,
                row_bound=dims.k,
                rows=kk,
                cols=cols,
                sram_stride=tn,
            )
        b.mma(
            "acc",
            "a",
            "b",
            a_stride=tk,
            b_stride=tk if dims.transpose else tn,
            acc_stride=tn,
            m=rows,
            k=kk,
            n=cols,
            accumulate=[ki, sy.const(1)],
            transpose_b=int(dims.transpose),
        )
        b.store(
            "acc",
            -1,
            dram_offset=bi * mul(dims.m, dims.n) + ni * tn,
            dram_stride=dims.n,
            row_start=mi * tm,
            row_step=1,
            row_bound=dims.m,
            rows=rows,
            cols=cols,
            sram_stride=tn,
            when=last(3, k_steps),
        )


# ------------------------------------------------------------------ softmax


def _softmax_plan(op, target, tm, tc, chunked) -> BufferPlan:
    plan = BufferPlan(target)
    plan.add("in", "spad", tm * tc, stream=True)
    plan.add("out", "spad", tm * tc, stream=True)
    for name in ("m", "l") + (("cm", "t") if chunked else ()):
        plan.add(name, "spad", tm)
    return plan


def _softmax_steps(target, r: int, w: int, cols: int, scaled: bool, chunked: bool, first: bool, safe: bool) -> list:
    """The groups of one row tile of r rows and a chunk of w columns (all of them unchunked)."""
    tile, col = (lambda fn: (fn, r, w)), (lambda fn: (fn, r, 1))
    exp = [tile("sub"), *[tile("mul")] * scaled, tile("exp")]
    floor = [("max", 1, r)] * safe  # a safe softmax floors the row max (and, before the divide, the row sum)
    load = cm.dma(target, r, w, contiguous=w == cols)
    store = cm.dma(target, r, w, contiguous=w == cols)
    if not chunked:
        ops = [tile("rowmax"), *floor, *exp, tile("rowsum"), *floor, tile("div")]
        return [(load, ops, store)]
    if first:
        pass0 = [tile("rowmax"), *floor, *exp, tile("rowsum")]
    else:
        rescale = [col("max"), col("sub"), *[col("mul")] * scaled, col("exp"), col("mul"), col("copy")]
        pass0 = [tile("rowmax"), *rescale, *exp, tile("rowsum"), col("add")]
    return [(load, pass0, None), (load, [*floor * first, *exp, tile("div")], store)]


SCALE_ATTR = "novella.scale"


def softmax_scale(op) -> float:
    """The factor of a softmax's fused input scaling, `softmax(scale * x)` (discardable attribute)."""
    return ir.FloatAttr(op.attributes[SCALE_ATTR]).value if SCALE_ATTR in op.attributes else 1.0


def _safe(op) -> bool:
    return _flag(op, "safe")


class Softmax:
    """Softmax over the last dim of a [rows, cols] view; cols may be symbolic.

    A static row length whose row tile fits the scratchpad is done in one
    step (max, exp, sum, normalize). Otherwise, and always for a dynamic
    row length (so that every length in bounds fits the 12-bit fields and
    the tiling does not depend on the bounds), the grid is (row tile, pass,
    column chunk): pass 0 keeps a running max `m` and a rescaled running
    sum `l` per row (online softmax), pass 1 writes exp(x - m) / l.

    `safe`: the row max is floored at NEG_FLOOR (an all -inf row gives exp(-inf) = 0, not
    exp(-inf + inf) = NaN) and the row sum at SUM_FLOOR before the divide (0 / SUM_FLOOR = 0; a row
    with a finite input has a sum >= 1, which the floor leaves as it is)."""

    def tile(self, op, tv, target, options):
        syms = module_symbols(op)
        rows, cols = mul(*tv.shape(0)[:-1]), tv.shape(0)[-1]
        rows_max, cols_max = upper(rows, syms), upper(cols, syms)
        tms = [options["tile-m"]] if options.get("tile-m") else target.array_tiles(16, 1)
        tms = sorted({min(tm, rows_max) for tm in tms}, reverse=True)
        static_cols = sy.as_int(cols) is not None
        tcs = [cols_max] if static_cols and cols_max <= MAX_COLS else []
        chunks = target.pow2(128 * target.vector_lanes, target.vector_lanes)
        tcs += [c for c in chunks if c < cols_max or not static_cols]
        best, plan = None, None
        dims = (rows_max, cols_max, static_cols, softmax_scale(op) != 1.0, _safe(op))
        for tm, tc in itertools.product(tms, tcs):
            plan = _softmax_plan(op, target, tm, tc, tc < cols_max or not static_cols)
            if plan.fits():
                key = (self.cost(target, dims, (tm, tc)), -tm)
                if best is None or key < best[0]:
                    best = (key, tm, tc, plan)
        if best is None:
            plan.check()
        _, tm, tc, plan = best
        chunked = tc < cols_max or not static_cols
        grid = [ceildiv(rows, tm)]
        if chunked:
            grid += [sy.const(2), ceildiv(cols, tc)]
        return Tiling({"tm": tm, "tc": tc, "chunked": int(chunked)}, grid, plan.buffers)

    @memoized
    def cost(self, target, dims, cand) -> float:
        """Predicted cycles (cost model) of cand = (tm, tc) over dims = (rows, cols, cols static, scaled, safe):
        per row tile one pass over its row (unchunked), or two over its column chunks."""
        rows, cols, static_cols, scaled, safe = dims
        tm, tc = cand
        chunked = tc < cols or not static_cols
        groups = []
        for r, nr in _pieces(rows, tm):
            chunks = _pieces(cols, tc) if chunked else [(cols, 1)]
            first_w = chunks[0][0]
            per_tile = [(first_w, 1, True)] + [(w, n - (i == 0), False) for i, (w, n) in enumerate(chunks)]
            for w, n, head in per_tile:
                for (lq, ld), ops, store in _softmax_steps(target, r, w, cols, scaled, chunked, head, safe):
                    sq, sd = store or (0.0, 0.0)
                    groups.append(cm.Group(lq, cm.vecs(target, ops), sq, ld + sd, nr * n))
        return cm.pipeline(target, groups)

    def macro(self, op, tv, t, b):
        tm, tc = t.tiles["tm"], t.tiles["tc"]
        rows_total, cols_total = mul(*tv.shape(0)[:-1]), tv.shape(0)[-1]
        rows = extent(0, tm, rows_total)
        chunk = 2 if t.tiles["chunked"] else None
        cols = extent(chunk, tc, cols_total) if chunk else cols_total
        col0 = b.d(2) * tc if chunk else sy.const(0)
        io = dict(
            dram_offset=col0,
            dram_stride=cols_total,
            row_start=b.d(0) * tm,
            row_step=1,
            row_bound=rows_total,
            rows=rows,
            cols=cols,
            sram_stride=tc,
        )
        b.load("in", 0, **io)
        g = _Geo(b, rows, cols, tc, softmax_scale(op), _safe(op))
        if chunk:
            second = [("eq", b.d(1) - 1)]
            _online_pass(g, start=first(1) + first(2), rest=first(1) + [("ge", b.d(2) - 1)])
            g.floor("l", SUM_FLOOR, when=second + first(2))
            g.normalize(when=second)
            b.store("out", -1, when=second, **io)
        else:
            g.rowop("ROWMAX", "m", "in", when=None)
            g.floor("m", NEG_FLOOR, when=None)
            g.exp_shifted(when=None)
            g.rowop("ROWSUM", "l", "out", when=None)
            g.floor("l", SUM_FLOOR, when=None)
            g.col("DIV", "out", "out", "l", when=None)
            b.store("out", -1, **io)


class _Geo:
    """VEC ops on a [rows, cols] tile (`in`/`out`, row stride `stride`) and its per-row columns."""

    def __init__(self, b, rows, cols, stride, scale, safe: bool):
        self.b, self.rows, self.cols, self.stride, self.scale, self.safe = b, rows, cols, stride, scale, safe

    def rowop(self, fn, dst, src, when):
        self.b.vop(fn, dst, src, rows=self.rows, cols=self.cols, dst_stride=1, a_stride=self.stride, when=when)

    def col(self, fn, dst, a, column, when):
        s = self.stride
        self.b.vop(
            fn,
            dst,
            a,
            column,
            mode="COL",
            rows=self.rows,
            cols=self.cols,
            dst_stride=s,
            a_stride=s,
            b_stride=1,
            when=when,
        )

    def vec(self, fn, dst, a, other=None, when=None, **f):
        """Elementwise on per-row columns ([rows, 1], stride 1)."""
        self.b.vop(fn, dst, a, other, rows=self.rows, cols=1, dst_stride=1, a_stride=1, b_stride=1, when=when, **f)

    def floor(self, column, value: float, when):
        """column = max(column, value), for a safe softmax only (issued as one [1, rows] row: the column is contiguous)."""
        if self.safe:
            self.b.vop("MAX", column, column, mode="SCALAR", imm=value, rows=1, cols=self.rows, dst_stride=self.stride,
                       a_stride=self.stride, when=when)  # fmt: skip

    def scaled_exp(self, when):
        """out = exp(scale * out)."""
        geo = dict(rows=self.rows, cols=self.cols, dst_stride=self.stride, a_stride=self.stride, when=when)
        if self.scale != 1.0:
            self.b.vop("MUL", "out", "out", mode="SCALAR", imm=self.scale, **geo)
        self.b.vop("EXP", "out", "out", **geo)

    def exp_shifted(self, when):
        """out = exp(scale * (in - m))."""
        self.col("SUB", "out", "in", "m", when)
        self.scaled_exp(when)

    def normalize(self, when):
        """out = exp(scale * (in - m)) / l."""
        self.exp_shifted(when)
        self.col("DIV", "out", "out", "l", when)


def _online_pass(g: _Geo, start, rest) -> None:
    """Pass 0 of the chunked softmax: running max `m` and running sum `l` of exp(scale * (x - m))."""
    g.rowop("ROWMAX", "m", "in", when=start)
    g.floor("m", NEG_FLOOR, when=start)
    g.exp_shifted(when=start)
    g.rowop("ROWSUM", "l", "out", when=start)
    g.rowop("ROWMAX", "cm", "in", when=rest)
    g.vec("MAX", "cm", "cm", "m", when=rest)
    g.vec("SUB", "t", "m", "cm", when=rest)
    if g.scale != 1.0:
        g.vec("MUL", "t", "t", mode="SCALAR", imm=g.scale, when=rest)
    g.vec("EXP", "t", "t", when=rest)
    g.vec("MUL", "l", "l", "t", when=rest)
    g.vec("COPY", "m", "cm", when=rest)
    g.exp_shifted(when=rest)
    g.rowop("ROWSUM", "t", "out", when=rest)
    g.vec("ADD", "l", "l", "t", when=rest)


# ------------------------------------------------------------------ legalize patterns


def _n_syms(op) -> int:
    return len(module_symbols(op))


def _typed(op_name: str, operands, attrs: dict, n_syms: int) -> ir.RankedTensorType:
    exprs = shapes.infer(op_name, [sy.shape_of(ir.RankedTensorType(v.type)) for v in operands], attrs, None)
    return sy.tensor_type(exprs, ir.F32Type.get(), n_syms)


def _swaps_last_two(op) -> bool:
    if op.operation.name != "novella.transpose":
        return False
    perm = list(ir.DenseI64ArrayAttr(op.attributes["perm"]))
    r = len(perm)
    return r >= 2 and perm == list(range(r - 2)) + [r - 1, r - 2]


def _untransposed_rhs(rhs: ir.Value, n_syms: int):
    """(value, dead ops) if `rhs` is a last-two-dims transpose, possibly followed by a reshape of batch dims."""
    owner = rhs.owner
    if not isinstance(owner, ir.OpView):
        return None
    if _swaps_last_two(owner):
        return owner.operands[0], [owner]
    if owner.operation.name != "novella.reshape":
        return None
    inner = owner.operands[0].owner
    if not isinstance(inner, ir.OpView) or not _swaps_last_two(inner):
        return None
    src, out = sy.shape_of(ir.RankedTensorType(inner.operands[0].type)), sy.shape_of(ir.RankedTensorType(rhs.type))
    if len(out) < 2 or not sy.equal_shapes(out[-2:], sy.shape_of(ir.RankedTensorType(inner.results[0].type))[-2:]):
        return None
    new_type = sy.tensor_type(out[:-2] + src[-2:], ir.F32Type.get(), n_syms)
    reshaped = ReshapeOp(input=inner.operands[0], result=new_type, loc=owner.location).result
    return reshaped, [owner, inner]


def fold_transpose_into_matmul(op, rewriter):
    """matmul(a, transpose(b, last two dims)) -> matmul(a, b, transpose_rhs = !transpose_rhs)."""
    owner = op.operands[1].owner
    if not isinstance(owner, ir.OpView) or owner.operation.name not in ("novella.transpose", "novella.reshape"):
        return True
    with rewriter.ip, op.location:
        found = _untransposed_rhs(op.operands[1], _n_syms(op))
        if found is None:
            return True
        rhs, dead = found
        tr = ir.BoolAttr.get(not _flag(op, "transpose_rhs"))
        new = MatmulOp(lhs=op.operands[0], rhs=rhs, result=op.results[0].type, transpose_rhs=tr)
    rewriter.replace_op(op, new.operation)
    for d in dead:
        if not list(d.results[0].uses):
            rewriter.erase_op(d)
    return False


def decompose_attention(op, rewriter):
    """attention(q, k, v) -> matmul(softmax(scale * matmul(q, k, transpose_rhs)), v).

    A positive scale is fused into the softmax (`novella.scale`); max(scale * x) = scale * max(x)."""
    q, k, v = op.operands
    scale = ir.FloatAttr(op.attributes["scale"]).value
    n = _n_syms(op)
    with rewriter.ip, op.location:
        if scale <= 0.0:
            q = ScalarOp(input=q, fn=ir.StringAttr.get("mul"), value=ir.FloatAttr.get_f32(scale), result=q.type).result
        tr = {"transpose_rhs": ir.BoolAttr.get(True)}
        s = MatmulOp(lhs=q, rhs=k, result=_typed("novella.matmul", [q, k], tr, n), **tr).result
        softmax = SoftmaxOp(input=s, result=s.type)
        if scale > 0.0 and scale != 1.0:
            softmax.operation.attributes[SCALE_ATTR] = ir.FloatAttr.get_f32(scale)
        p = softmax.result
        out = MatmulOp(lhs=p, rhs=v, result=op.results[0].type, transpose_rhs=ir.BoolAttr.get(False))
    rewriter.replace_op(op, out.operation)
    return False
