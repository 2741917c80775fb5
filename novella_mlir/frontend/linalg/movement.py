"""`tensor.extract_slice` -> one `novella.slice` per sliced dim (then a reshape when rank-reducing)."""

from __future__ import annotations

from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import SliceOp
from ..lowering.shape_ops import affine

_DYN = -(2**63)


def _mixed(cv, op, name: str, dynamic) -> list:
    out, it = [], iter(dynamic)
    for v in ir.DenseI64ArrayAttr(op.attributes[name]):
        out.append(sy.const(v) if v != _DYN else affine(cv.env[next(it)]))
    return out


def extract_slice(cv, op):
    sizes_seg = list(ir.DenseI32ArrayAttr(op.attributes["operandSegmentSizes"]))
    rest = list(op.operands[1:])
    n_off, n_size = sizes_seg[1], sizes_seg[2]
    offsets = _mixed(cv, op, "static_offsets", rest[:n_off])
    sizes = _mixed(cv, op, "static_sizes", rest[n_off : n_off + n_size])
    strides = _mixed(cv, op, "static_strides", rest[n_off + n_size :])
    if any(sy.as_int(s) != 1 for s in strides):
        raise cv.refuse(f"its tensor.extract_slice has strides {[str(s) for s in strides]} (a step slice)")
    x = cv.tensor(op.operands[0])
    shape = cv.cx.shape(x)
    for d, (off, size, full) in enumerate(zip(offsets, sizes, shape)):
        if sy.equal(size, full):
            continue
        start = sy.as_int(off)
        if start is None:
            back = sy.as_int(sy.canon(full - off))
            if back is None or back <= 0:
                raise cv.refuse(f"its tensor.extract_slice starts at {off}, neither constant nor from the end")
            start = -back
        out = list(cv.cx.shape(x))
        out[d] = size
        i64 = ir.IntegerType.get_signless(64)
        x = cv.emit(SliceOp, out, input=x, dim=ir.IntegerAttr.get(i64, d), start=ir.IntegerAttr.get(i64, start))
    rtype = ir.RankedTensorType(op.results[0].type)
    if rtype.rank != len(sizes):
        kept = [s for s in sizes if sy.as_int(s) != 1] if rtype.rank < len(sizes) else sizes
        it = iter(kept)
        x = cv.reshape(x, [sy.const(d) if d != ir.ShapedType.get_dynamic_size() else next(it) for d in rtype.shape])
    return x
