"""Transpose and slice kernels, and the legalize patterns that remove transposes.

`novella.reshape` needs no kernel (a DRAM alias). A transpose that keeps the
last dim moves whole rows with strided DMA (one dim is tiled, the static
others are unrolled into the macro); a transpose of the last two dims runs
through the MAC array against an identity matrix built in SRAM.
"""

from __future__ import annotations

import itertools
from math import prod

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects import shapes
from ..dialects.novella import TransposeOp
from ..machine.target import MAX_COLS
from . import BufferPlan, Tiling, module_symbols, tile_rows
from .indexing import slice_start
from .support import producer

MAX_UNROLL = 64


def perm_of(op) -> list[int]:
    return list(ir.DenseI64ArrayAttr(op.attributes["perm"]))


def typed(op_name: str, operands, attrs: dict, n_syms: int) -> ir.RankedTensorType:
    """The result type the shape rule gives `op_name` on `operands`."""
    exprs = shapes.infer(op_name, [sy.shape_of(ir.RankedTensorType(v.type)) for v in operands], attrs, None)
    return sy.tensor_type(exprs, ir.F32Type.get(), n_syms)


def make_transpose(x: ir.Value, perm: list[int], n_syms: int) -> ir.Value:
    """`x` permuted by `perm` (at the current insertion point), or `x` for the identity."""
    if perm == list(range(len(perm))):
        return x
    attr = ir.DenseI64ArrayAttr.get(perm)
    return TransposeOp(input=x, perm=attr, result=typed("novella.transpose", [x], {"perm": attr}, n_syms)).result


def _stride_exprs(shape) -> list[ir.AffineExpr]:
    """Row-major element strides of `shape`."""
    return [sy.numel(shape[i + 1 :]) for i in range(len(shape))]


# ------------------------------------------------------------------ transpose


class Transpose:
    """`novella.transpose`: row moves if the last dim stays, else a last-two-dims swap.

    Like every kernel here, it never stores from a buffer it loads into: a
    step's loads are ordered after the previous step's compute, not after its
    stores, so the compute copies each tile into a store-only buffer."""

    def tile(self, op, tv, target, options):
        perm = perm_of(op)
        r = len(perm)
        if perm[-1] == r - 1:
            return _RowMove(tv, perm).tile(op, target, options)
        if perm == list(range(r - 2)) + [r - 1, r - 2]:
            return _swap_tiling(op, tv, target)
        raise ValueError(f"transpose {perm} moves the last dim and also others; split it into two transposes")

    def macro(self, op, tv, t, b):
        perm = perm_of(op)
        if perm[-1] == len(perm) - 1:
            _RowMove(tv, perm).macro(t, b)
        else:
            _swap_macro(tv, t, b)


class _RowMove:
    """A transpose that keeps the last dim: every [1, C] row moves as a whole.

    One outer dim `g` (the dynamic one) is tiled by the grid; the other
    outer dims (`units`, static) are unrolled. A side (input or output) on
    which the units all follow `g` holds one tile as contiguous rows of
    P*C elements and moves it with a single DMA. A dynamic last dim C is
    tiled too (a second grid dim of column chunks of `tc`, the last one
    partial); `g` is then the dynamic outer dim if there is one (a relative-position
    bias [q, heads, k] -> [heads, q, k]: two dynamic dims, unit strides q * k), else the largest."""

    def __init__(self, tv, perm):
        self.c = tv.shape(0)[-1]
        self.dynamic_cols = sy.as_int(self.c) is None
        self.ishape = tv.shape(0)[:-1]
        self.perm = perm[:-1]
        self.oshape = [self.ishape[p] for p in self.perm]
        dyn = [i for i, e in enumerate(self.ishape) if sy.as_int(e) is None]
        if len(dyn) > 1:
            raise ValueError(f"transpose of {[str(e) for e in tv.shape(0)]}: more than one dynamic dim")
        sizes = [sy.as_int(e) or 0 for e in self.ishape]
        self.g = dyn[0] if dyn else max(range(len(sizes)), key=lambda i: sizes[i])
        self.units = [i for i in range(len(self.ishape)) if i != self.g and sy.as_int(self.ishape[i]) != 1]
        self.split = self._split() if not self.dynamic_cols else []
        self.units = [i for i in self.units if i not in self.split]
        self.count = prod(sy.as_int(self.ishape[i]) for i in self.units)
        self.tc = min(MAX_COLS // max(self.count, 1), 256) if self.dynamic_cols else sy.as_int(self.c)
        if self.count > MAX_UNROLL or self.count * self.tc > MAX_COLS or self.tc < 1:
            raise ValueError(f"transpose moves {self.count} blocks of {self.c} per row; too many to unroll")
        in_strides = _stride_exprs(self.ishape)
        out_strides = _stride_exprs(self.oshape)
        self.strides = {
            "in": [s * self.c for s in in_strides],
            "out": [out_strides[self.perm.index(i)] * self.c for i in range(len(self.ishape))],
        }
        whole = not self.dynamic_cols
        self.packed = {
            "in": self._packed(list(range(len(self.ishape)))) if whole else None,
            "out": self._packed(self.perm) if whole else None,
        }
        self.order = next((o for o in self.packed.values() if o is not None), self.units)

    def _split(self) -> list[int]:
        """Unit dims (largest first) moved to grid dims until the unrolled blocks fit one macro."""
        units, split = sorted(self.units, key=lambda i: -sy.as_int(self.ishape[i])), []
        c = sy.as_int(self.c)
        while units and (prod(sy.as_int(self.ishape[i]) for i in units) > MAX_UNROLL or
                         prod(sy.as_int(self.ishape[i]) for i in units) * c > MAX_COLS):  # fmt: skip
            split.append(units.pop(0))
        return split

    def _packed(self, dims) -> list[int] | None:
        """The unit order if every unit follows `g` in this dim order, else None."""
        dims = [d for d in dims if d == self.g or d in self.units or d in self.split]
        after = dims[dims.index(self.g) + 1 :]
        return after if sorted(after) == sorted(self.units) else None

    def tile(self, op, target, options):
        width = self.count * self.tc
        grid = [sy.ceildiv(self.c, self.tc)] if self.dynamic_cols else []
        for tm in [options["tile-m"]] if options.get("tile-m") else target.row_tiles(32):
            plan = BufferPlan(target)
            plan.add("t", "spad", tm * width)
            plan.add("o", "spad", tm * width)
            if plan.fits() or options.get("tile-m"):
                tiles = {"tm": tm, "tc": self.tc} if self.dynamic_cols else {"tm": tm}
                grid += [self.ishape[d] for d in self.split]
                return Tiling(tiles, [sy.ceildiv(self.ishape[self.g], tm), *grid], plan.check())
        raise ValueError("unreachable")

    def _blocks(self):
        """(sram column, {dim: index}) per unit block, in SRAM order."""
        ranges = [range(sy.as_int(self.ishape[d])) for d in self.order]
        for k, idx in enumerate(itertools.product(*ranges)):
            yield k * self.tc, dict(zip(self.order, idx))

    def _dma(self, b, side, tm, rows):
        width = self.count * self.tc
        total = self.ishape[self.g]
        geo = dict(
            dram_stride=self.strides[side][self.g],
            row_start=b.d(0) * tm,
            row_step=1,
            row_bound=total,
            rows=rows,
            sram_stride=width,
        )
        move, tensor, buf = (b.load, 0, "t") if side == "in" else (b.store, -1, "o")
        base = sum((self.strides[side][d] * b.d(1 + k) for k, d in enumerate(self.split)), sy.const(0))
        if self.packed[side] is not None and self.packed[side] == self.order:
            move(buf, tensor, dram_offset=base, cols=width, **geo)
            return
        chunk = b.d(1) * self.tc if self.dynamic_cols else base
        cols = tile_rows(1, self.tc, self.c) if self.dynamic_cols else self.tc
        for col, idx in self._blocks():
            offset = sum((self.strides[side][d] * i for d, i in idx.items()), chunk)
            move(buf, tensor, dram_offset=offset, cols=cols, buf_offset=col, **geo)

    def macro(self, t, b):
        tm = t.tiles["tm"]
        rows = tile_rows(0, tm, self.ishape[self.g])
        width = self.count * self.tc
        self._dma(b, "in", tm, rows)
        b.vop("COPY", "o", "t", rows=rows, cols=width, dst_stride=width, a_stride=width)
        self._dma(b, "out", tm, rows)


def _swap_dims(tv):
    shape = tv.shape(0)
    return sy.canon(sy.numel(shape[:-2])) if len(shape) > 2 else sy.const(1), shape[-2], shape[-1]


def _swap_tiling(op, tv, target):
    if "transpose" not in target.vector_functions:
        raise ValueError(
            "a transpose of the last two dims needs the VEC fn TRANSPOSE: add 'transpose' to the config's vector.functions"
        )
    batch, r, c = _swap_dims(tv)
    top = 8 * target.array_rows
    tr = min(sy.as_int(r) or top, top)
    tcs = target.pow2(top, target.array_rows)
    for tc in tcs:
        plan = BufferPlan(target)
        plan.add("x", "spad", tr * tc)
        plan.add("xt", "spad", tc * tr)
        if plan.fits() or tc == tcs[-1]:
            grid = [batch, sy.ceildiv(c, tc), sy.ceildiv(r, tr)]
            return Tiling({"tr": tr, "tc": tc}, grid, plan.check())
    raise ValueError("unreachable")


def _swap_macro(tv, t, b):
    """out[b, j, i] = in[b, i, j] for a [tr, tc] block: one VEC TRANSPOSE, exact for inf, NaN and -0.0."""
    _, r, c = _swap_dims(tv)
    tr, tc = t.tiles["tr"], t.tiles["tc"]
    rows = tile_rows(2, tr, r)
    cols = tile_rows(1, tc, c)
    base = b.d(0) * (r * c)
    b.load(
        "x",
        0,
        dram_offset=base + b.d(1) * tc,
        dram_stride=c,
        row_start=b.d(2) * tr,
        row_step=1,
        row_bound=r,
        rows=rows,
        cols=cols,
        sram_stride=tc,
    )
    b.vop("TRANSPOSE", "xt", "x", rows=rows, cols=cols, dst_stride=tr, a_stride=tc)
    b.store(
        "xt",
        -1,
        dram_offset=base + b.d(2) * tr,
        dram_stride=r,
        row_start=b.d(1) * tc,
        row_step=1,
        row_bound=c,
        rows=cols,
        cols=rows,
        sram_stride=tr,
    )


# ------------------------------------------------------------------ slice


class Slice:
    """`novella.slice` along an outer dim whose leading dims are all 1: a row-range copy. Rows wider than
    a LOAD takes (or than two of them fit on chip) are copied as `split` narrower rows each."""

    def _geometry(self, op, tv, split: int = 1):
        """(dim, start, rows of the input, rows of the result, row width), in rows of 1/split of a row."""
        dim = op.attributes["dim"].value
        shape = tv.shape(0)
        if dim == len(shape) - 1 or any(sy.as_int(e) != 1 for e in shape[:dim]):
            raise ValueError(f"slice along dim {dim} of {[str(e) for e in shape]}: only row ranges are supported")
        inner = _static_numel(shape[dim + 1 :])
        start = slice_start(op, shape[dim])
        return dim, start * split, shape[dim] * split, tv.shape(-1)[dim] * split, inner // split

    def tile(self, op, tv, target, options):
        inner = self._geometry(op, tv)[-1]
        split = next(k for k in range(1, inner + 1) if inner % k == 0 and _fits_row(target, inner // k))
        dim, start, have, size, inner = self._geometry(op, tv, split)
        box = sy.symbol_box(module_symbols(op))
        if not (sy.provably_ge(have, size + start, box) and sy.provably_ge(start, sy.const(0), box)):
            raise ValueError(f"slice [{start}, {start} + {size}) exceeds dim {dim} of size {have} for some lengths")
        for tm in [options["tile-m"]] if options.get("tile-m") else target.row_tiles(32):
            plan = BufferPlan(target)
            plan.add("t", "spad", tm * inner)
            plan.add("o", "spad", tm * inner)
            if plan.fits() or options.get("tile-m"):
                tiles = {"tm": tm} if split == 1 else {"tm": tm, "split": split}
                return Tiling(tiles, [sy.ceildiv(size, tm)], plan.check())
        raise ValueError("unreachable")

    def macro(self, op, tv, t, b):
        _, start, _, total, inner = self._geometry(op, tv, t.tiles.get("split", 1))
        tm = t.tiles["tm"]
        rows = tile_rows(0, tm, total)
        geo = dict(
            dram_stride=inner,
            row_start=b.d(0) * tm,
            row_step=1,
            row_bound=total,
            rows=rows,
            cols=inner,
            sram_stride=inner,
        )
        b.load("t", 0, dram_offset=start * inner, **geo)
        b.vop("COPY", "o", "t", rows=rows, cols=inner, dst_stride=inner, a_stride=inner)
        b.store("o", -1, dram_offset=0, **geo)


def _fits_row(target, width: int) -> bool:
    plan = BufferPlan(target)
    plan.add("t", "spad", width)
    plan.add("o", "spad", width)
    return width <= MAX_COLS and plan.fits()


def _static_numel(exprs) -> int:
    v = 1
    for e in exprs:
        if sy.as_int(e) is None:
            raise ValueError(f"slice rows must have a static size, got {[str(x) for x in exprs]}")
        v *= sy.as_int(e)
    return v


# ------------------------------------------------------------------ legalize patterns


def compose_transposes(op, rewriter):
    """transpose(transpose(x, p), q) -> transpose(x, p o q); the identity permutation folds away."""
    perm = perm_of(op)
    inner = producer(op.operands[0], "novella.transpose")
    if inner is None:
        if perm != list(range(len(perm))):
            return True
        rewriter.replace_op(op, [op.operands[0]])
        return False
    p = perm_of(inner)
    composed = [p[q] for q in perm]
    unit_rows = sy.as_int(sy.shape_of(ir.RankedTensorType(inner.operands[0].type))[-1]) == 1
    if not _direct(composed) or (unit_rows and composed != sorted(composed)):  # rows of one element: keep two
        return True
    with rewriter.ip, op.location:
        new = make_transpose(inner.operands[0], composed, len(module_symbols(op)))
    rewriter.replace_op(op, [new])
    if not list(inner.results[0].uses):
        rewriter.erase_op(inner)
    return False


def _direct(perm: list[int]) -> bool:
    """The transpose kernel runs `perm` in one op: it keeps the last dim, or swaps only the last two."""
    r = len(perm)
    return perm[-1] == r - 1 or perm == list(range(r - 2)) + [r - 1, r - 2]


def sink_below_unary(op, rewriter):
    """unary(transpose(x)) -> transpose(unary(x)), so transposes meet and cancel (conv stem)."""
    inner = producer(op.operands[0], "novella.transpose")
    if inner is None or len(list(inner.results[0].uses)) != 1:
        return True
    x = inner.operands[0]
    attrs = {op.attributes[i].name: op.attributes[i].attr for i in range(len(op.attributes))}
    with rewriter.ip, op.location:
        moved = ir.Operation.create(op.operation.name, results=[x.type], operands=[x], attributes=attrs)
        new = make_transpose(moved.results[0], perm_of(inner), len(module_symbols(op)))
    rewriter.replace_op(op, [new])
    rewriter.erase_op(inner)
    return False
