"""`tensor.extract_slice` -> one `novella.slice` per sliced dim (then a reshape when rank-reducing);
`tensor.insert_slice` -> the destination's parts around the inserted block, concatenated per dim;
`tensor.pad` by a constant -> blocks of the value concatenated."""

from __future__ import annotations

from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import BroadcastOp, ConcatOp, SliceOp
from ..lowering.shape_ops import affine

_DYN = -(2**63)


def _mixed(cv, op, name: str, dynamic) -> list:
    out, it = [], iter(dynamic)
    for v in ir.DenseI64ArrayAttr(op.attributes[name]):
        out.append(sy.const(v) if v != _DYN else affine(cv.env[next(it)]))
    return out


def _slice(cv, x, d: int, off, size):
    """`novella.slice` of dim `d` from `off` (a constant, or the dim's size minus one: from the end)."""
    full = cv.cx.shape(x)[d]
    start = sy.as_int(off)
    if start is None:
        back = sy.as_int(sy.canon(full - off))
        if back is None or back <= 0:
            raise cv.refuse(f"its tensor.extract_slice starts at {off}, neither constant nor from the end")
        start = -back
    out = list(cv.cx.shape(x))
    out[d] = size
    i64 = ir.IntegerType.get_signless(64)
    return cv.emit(SliceOp, out, input=x, dim=ir.IntegerAttr.get(i64, d), start=ir.IntegerAttr.get(i64, start))


def _strided(cv, x, d: int, off, size, step):
    """Every `step`-th element of a static dim: the dim viewed as [D / step, step] (a DRAM alias), its
    rows from off // step and its column off % step, so a step slice is data movement by the DMA."""
    shape = list(cv.cx.shape(x))
    full, start, n = sy.as_int(shape[d]), sy.as_int(off), sy.as_int(size)
    if step is None or full is None or start is None or n is None or full % step:
        raise cv.refuse(
            f"its tensor.extract_slice steps by {step} over dim {d} of size {shape[d]} (a step slice needs a "
            "static dim the step divides)"
        )
    x = cv.reshape(x, shape[:d] + [sy.const(full // step), sy.const(step)] + shape[d + 1 :])
    if n != full // step:
        x = _slice(cv, x, d, sy.const(start // step), sy.const(n))
    x = _slice(cv, x, d + 1, sy.const(start % step), sy.const(1))
    return cv.reshape(x, shape[:d] + [sy.const(n)] + shape[d + 1 :])


def extract_slice(cv, op):
    sizes_seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    rest = list(op.operands[1:])
    n_off, n_size = sizes_seg[1], sizes_seg[2]
    offsets = _mixed(cv, op, "static_offsets", rest[:n_off])
    sizes = _mixed(cv, op, "static_sizes", rest[n_off : n_off + n_size])
    strides = _mixed(cv, op, "static_strides", rest[n_off + n_size :])
    x = cv.tensor(op.operands[0])
    for d, (off, size, step) in enumerate(zip(offsets, sizes, strides)):
        full = cv.cx.shape(x)[d]
        if sy.as_int(step) == 1:
            x = _slice(cv, x, d, off, size) if not sy.equal(size, full) else x
        else:
            x = _strided(cv, x, d, off, size, sy.as_int(step))
    rtype = ir.RankedTensorType(op.results[0].type)
    if rtype.rank != len(sizes):  # rank-reducing: the dropped dims are 1, the `?` ones keep their order
        it = iter([s for s in sizes if sy.as_int(s) is None])
        x = cv.reshape(x, [sy.const(d) if d != ir.ShapedType.get_dynamic_size() else next(it) for d in rtype.shape])
    return x


def pad(cv, op):
    """`tensor.pad` by a constant: per padded dim, blocks of the value (a broadcast 0-d constant, any
    dims symbolic) concatenated before and after."""
    block = op.regions[0].blocks[0]
    value = cv.env.get(list(block.operations)[-1].operands[0])
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise cv.refuse("its tensor.pad pads with a value computed per position")
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    rest = list(op.operands[1:])
    low = _mixed(cv, op, "static_low", rest[: seg[1]])
    high = _mixed(cv, op, "static_high", rest[seg[1] :])
    x = cv.tensor(op.operands[0])
    i64 = ir.IntegerType.get_signless(64)
    for d, (lo, hi) in enumerate(zip(low, high)):
        for n, first in ((lo, True), (hi, False)):
            if sy.as_int(n) == 0:
                continue
            shape = list(cv.cx.shape(x))
            shape[d] = n
            fill = cv.emit(BroadcastOp, shape, input=cv.cx.scalar(float(value)))
            lhs, rhs = (fill, x) if first else (x, fill)
            x = cv.emit(ConcatOp, lhs=lhs, rhs=rhs, dim=ir.IntegerAttr.get(i64, d))
    return x


def _operands(cv, op, first: int, names=("static_offsets", "static_sizes", "static_strides")) -> list:
    seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    rest, out, at = list(op.operands[first:]), [], 0
    for name, n in zip(names, seg[first:]):
        out.append(_mixed(cv, op, name, rest[at : at + n]))
        at += n
    return out


def insert_slice(cv, op):
    """`dest` with the block [off, off + size) of each dim replaced by `src` (unit strides): per dim the
    block does not cover, the part of `dest` before it, the block, and the part after it, concatenated."""
    offsets, sizes, strides = _operands(cv, op, 2)
    if any(sy.as_int(s) != 1 for s in strides):
        raise cv.refuse("its tensor.insert_slice writes with a step (only unit strides are data movement here)")
    src = cv.reshape(cv.tensor(op.operands[0]), sizes)
    full = cv.shape(op.operands[1])
    if all(sy.as_int(o) == 0 and sy.equal(s, f) for o, s, f in zip(offsets, sizes, full)):
        return src  # the whole destination (perhaps an uninitialized tensor.empty) is overwritten
    return _insert(cv, cv.tensor(op.operands[1]), src, offsets, sizes, 0)


def _insert(cv, dest, src, offsets, sizes, d: int):
    shape = cv.cx.shape(dest)
    while d < len(shape) and sy.as_int(offsets[d]) == 0 and sy.equal(sizes[d], shape[d]):
        d += 1
    if d == len(shape):
        return src
    off, size, full = offsets[d], sizes[d], shape[d]
    mid = _insert(cv, _slice(cv, dest, d, off, size), src, offsets, sizes, d + 1)
    parts = [_slice(cv, dest, d, sy.const(0), off)] if sy.as_int(off) != 0 else []
    parts.append(mid)
    after = sy.canon(full - off - size)
    if sy.as_int(after) != 0:
        parts.append(_slice(cv, dest, d, sy.canon(off + size), after))
    i64 = ir.IntegerType.get_signless(64)
    out = parts[0]
    for p in parts[1:]:
        out = cv.emit(ConcatOp, lhs=out, rhs=p, dim=ir.IntegerAttr.get(i64, d))
    return out
