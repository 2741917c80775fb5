"""torch-mlir's 2-D convolutions (`linalg.conv_2d_nchw_fchw`, grouped `linalg.conv_2d_ngchw_gfchw`) on the
matrix unit: im2col by data movement, then one `novella.linear` over the patches.

A patch embedding (stride = kernel, no dilation) is a view of each patch row as [N, C, kh, Wo, kw] and one
transpose to [N, Wo, C, kh, kw]. Any other conv gathers one [N, C, Ho, Wo] view per kernel tap: the tap's rows and columns
`start, start + stride, ...` are a slice of `size * stride` (the input padded by `stride - 1` zeros so the
last one fits), viewed as [size, stride], column 0. The taps are concatenated along the channels and
the weight is reordered to match (folded at compile time when it is a constant). torch-mlir has already
padded the input (`tensor.pad`). A group is one conv on its channel slices, the groups concatenated.
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import AddOp, BroadcastOp, ConcatOp, LinearOp, MulOp, SliceOp
from ...kernels.data_movement import MAX_UNROLL
from ...machine.target import MAX_COLS

_I64 = ir.IntegerType.get_signless


def _ints(op, name: str) -> list[int]:
    return [int(v) for v in np.array(ir.DenseElementsAttr(op.attributes[name]))]


def _slice(cv, x, d: int, start: int, size):
    out = list(cv.cx.shape(x))
    out[d] = size
    attrs = dict(dim=ir.IntegerAttr.get(_I64(64), d), start=ir.IntegerAttr.get(_I64(64), start))
    return cv.emit(SliceOp, out, input=x, **attrs)


def _concat(cv, parts: list, d: int):
    out = parts[0]
    for p in parts[1:]:
        out = cv.emit(ConcatOp, lhs=out, rhs=p, dim=ir.IntegerAttr.get(_I64(64), d))
    return out


def _zeros_after(cv, x, d: int, n: int):
    """`x` with `n` zeros appended along dim `d`."""
    if n == 0:
        return x
    shape = list(cv.cx.shape(x))
    shape[d] = sy.const(n)
    return _concat(cv, [x, cv.emit(BroadcastOp, shape, input=cv.cx.scalar(0.0))], d)


def _every(cv, x, d: int, start: int, size, step: int):
    """x[..., start : start + size * step : step, ...] along dim `d` (padded by `step - 1` zeros)."""
    if step == 1:
        return x if start == 0 and sy.equal(size, cv.cx.shape(x)[d]) else _slice(cv, x, d, start, size)
    shape = list(cv.cx.shape(x))
    x = _slice(cv, x, d, start, sy.canon(size * step))
    x = cv.reshape(x, shape[:d] + [size, sy.const(step)] + shape[d + 1 :])
    x = _slice(cv, x, d + 1, 0, sy.const(1))
    return cv.reshape(x, shape[:d] + [size] + shape[d + 1 :])


def _weight_rows(cv, w, order: list, shape: list):
    """The weight permuted by `order` and viewed as `shape`: folded if it is a constant."""
    data = cv.cx.weight_data(w)
    if data is not None:
        return cv.cx.add_weight(
            "conv_w", np.ascontiguousarray(data.transpose(order)).reshape([sy.as_int(e) for e in shape])
        )
    return cv.reshape(cv.transpose(w, order), shape)


def _linear(cv, x, w, bias):
    """[N, Ho, Wo, K] x [F, K] + bias [F] -> [N, F, Ho, Wo] on the matrix unit."""
    if bias is None:
        bias = cv.cx.add_weight("conv_bias", np.zeros(sy.as_int(cv.cx.shape(w)[0])))
    y = cv.emit(LinearOp, input=x, weight=w, bias=bias, act=ir.StringAttr.get("none"))
    return cv.transpose(y, [0, 3, 1, 2])


def _patches(cv, x, kh: int, kw: int, ho, wo):
    """x [N, C, H, W] -> [N, Ho, Wo, C * kh * kw], the (c, a, b) of each patch in the weight's order: per patch
    row (Ho is static), its [N, C, kh, Wo, kw] view moved to [N, Wo, C, kh, kw] (row moves of kw elements
    that unroll C * kh blocks; per channel when that is too many), the rows concatenated."""
    n, c = cv.cx.shape(x)[:2]
    channels, rows = sy.as_int(c), sy.as_int(ho)
    if rows is None or kh > MAX_UNROLL:
        raise cv.refuse(f"its patch conv has {ho} patch rows of {kh} (a static count, kernel height <= {MAX_UNROLL})")
    x = _every(cv, _every(cv, x, 3, 0, wo * kw, 1), 2, 0, ho * kh, 1)
    per_channel = channels * kh > MAX_UNROLL or channels * kh * kw > MAX_COLS
    out = []
    for r in range(rows):
        band = _slice(cv, x, 2, r * kh, sy.const(kh))
        parts = [_slice(cv, band, 1, k, sy.const(1)) for k in range(channels)] if per_channel else [band]
        moved = []
        for p in parts:
            p = cv.reshape(p, [n, cv.cx.shape(p)[1], sy.const(kh), wo, sy.const(kw)])
            p = cv.transpose(p, [0, 3, 1, 2, 4])
            moved.append(cv.reshape(p, [n, sy.const(1), wo, cv.cx.shape(p)[2] * kh * kw]))
        out.append(_concat(cv, moved, 3))
    return _concat(cv, out, 1)


def _bias_of(cv, init):
    """The [F] vector the conv's init broadcasts (torch-mlir's bias: `linalg.broadcast` of it), or None."""
    v = cv.env[init]
    owner = v.owner if isinstance(v, ir.Value) else None
    if not isinstance(owner, ir.OpView) or owner.operation.name != "novella.broadcast":
        return None
    src = owner.operands[0]
    if isinstance(src.owner, ir.OpView) and src.owner.operation.name == "novella.reshape":
        src = src.owner.operands[0]
    shape = cv.cx.shape(src)
    return src if len(shape) == 1 and sy.equal(shape[0], cv.shape(init)[1]) else None


def _conv(cv, x, w, out_hw: list, strides: list, dilations: list, bias=None):
    n, c, hp, wp = cv.cx.shape(x)
    f, _, kh, kw = (sy.as_int(e) for e in cv.cx.shape(w))
    ho, wo = out_hw
    if strides == [kh, kw] and dilations == [1, 1]:
        return _linear(cv, _patches(cv, x, kh, kw, ho, wo), cv.reshape(w, [sy.const(f), c * kh * kw]), bias)
    taps = _taps(cv, x, kh, kw, out_hw, strides, dilations)
    cols = cv.transpose(_concat(cv, taps, 1), [0, 2, 3, 1])  # [N, Ho, Wo, (a, b, c)]
    return _linear(cv, cols, _weight_rows(cv, w, [0, 2, 3, 1], [sy.const(f), c * kh * kw]), bias)


def _taps(cv, x, kh: int, kw: int, out_hw: list, strides: list, dilations: list) -> list:
    """The [N, C, Ho, Wo] view of `x` each kernel tap reads, row-major over (kh, kw)."""
    ho, wo = out_hw
    x = _zeros_after(cv, _zeros_after(cv, x, 2, strides[0] - 1), 3, strides[1] - 1)
    taps = []
    for a in range(kh):
        rows = _every(cv, x, 2, a * dilations[0], ho, strides[0])
        for b in range(kw):
            taps.append(_every(cv, rows, 3, b * dilations[1], wo, strides[1]))
    return taps


def conv_2d_nchw_fchw(cv, op):
    """y = init + conv(x, w); an init that broadcasts the bias is the linear's bias."""
    x, w = cv.tensor(op.operands[0]), cv.tensor(op.operands[1])
    out_hw = cv.shape(op.operands[2])[2:]
    bias = _bias_of(cv, op.operands[2])
    y = _conv(cv, x, w, out_hw, _ints(op, "strides"), _ints(op, "dilations"), bias)
    return y if bias is not None else cv._accumulate(y, op.operands[2], "sum")


def conv_2d_ngchw_gfchw(cv, op):
    """A grouped conv: x [N, G, C/G, H, W], w [G, F/G, C/G, kh, kw] -> [N, G, F/G, Ho, Wo], one conv per group."""
    x, w = cv.tensor(op.operands[0]), cv.tensor(op.operands[1])
    n, g, cg, h, wd = cv.cx.shape(x)
    out = cv.shape(op.operands[2])
    groups = sy.as_int(g)
    if groups is None or groups > 64:
        raise cv.refuse(f"its grouped conv has {g} groups (at most 64, static)")
    parts = []
    for i in range(groups):
        xi = cv.reshape(_slice(cv, x, 1, i, sy.const(1)), [n, cg, h, wd])
        data = cv.cx.weight_data(w)
        wi = (
            cv.cx.add_weight("conv_w", data[i])
            if data is not None
            else cv.reshape(_slice(cv, w, 0, i, sy.const(1)), cv.cx.shape(w)[1:])
        )
        yi = _conv(cv, xi, wi, out[3:], _ints(op, "strides"), _ints(op, "dilations"))
        parts.append(cv.reshape(yi, [out[0], sy.const(1), *out[2:]]))
    return cv._accumulate(_concat(cv, parts, 1), op.operands[2], "sum")


def depthwise_conv_2d_nchw_chw(cv, op):
    """A depthwise conv (one filter per channel): per tap, the tap's view times its weight per channel,
    summed (two VEC ops per tap over the output; a matmul of K = 1 would waste the matrix unit); the
    weight [C, kh, kw] is read through slices, a [C, 1, 1] column per tap."""
    x, w = cv.tensor(op.operands[0]), cv.tensor(op.operands[1])
    _, kh, kw = (sy.as_int(e) for e in cv.cx.shape(w))
    out_hw = cv.shape(op.operands[2])[2:]
    y = None
    for k, tap in enumerate(_taps(cv, x, kh, kw, out_hw, _ints(op, "strides"), _ints(op, "dilations"))):
        wk = _slice(cv, _slice(cv, w, 1, k // kw, sy.const(1)), 2, k % kw, sy.const(1))
        term = cv.emit(MulOp, lhs=tap, rhs=wk)
        y = term if y is None else cv.emit(AddOp, lhs=y, rhs=term)
    return cv._accumulate(y, op.operands[2], "sum")
