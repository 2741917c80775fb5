"""Lowerings of the in-place KV-cache writes: `pad`, and `slice_scatter` / `index_put` (`index_copy`
decomposes to it) and `select_scatter` that write the new positions of a grown cache; `buf[:, :, P:P + 1] = k` is a
slice with a symbolic start (a `WriteTarget`, no tensor), a `copy` into it and a `slice_scatter`.

A static-cache style decoder grows its cache buffer and writes the new key at position P, the past
length: `pad(past, (0, 0, 0, 1)).index_copy(2, arange(P, P + 1), k)`, `slice_scatter(..., start=P,
end=P + 1)`, `select_scatter(..., dim=2, index=P)` or `buf[:, :, P:P + 1] = k`. This is `cat(past, k)`: the write lowers to the same
`novella.kv_append` onto the past (paged by `--novella-kv-cache`: one in-place DMA store at the
write address), and the padded buffer, left unused, is dropped. The write position must be
provably P (`symbolic.equal`); any other scatter is refused with what it would need."""

from __future__ import annotations

import numpy as np
from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import BroadcastOp, ConcatOp, KvAppendOp, SliceOp
from .indexing import is_function_input
from .shape_ops import Positions, WriteTarget, affine, reshape, rounded_up


def copy(cx):
    """`copy(dst, src)`: src, in dst's shape (no broadcast); dst may be a `WriteTarget`."""
    dst, src = cx.value(cx.op.operands[0]), cx.operand(1)
    shape = list(dst.shape) if isinstance(dst, WriteTarget) else cx.shape(cx.operand(0))
    if not sy.equal_shapes(shape, cx.shape(src)):
        raise cx.error(f"copy of {[str(e) for e in cx.shape(src)]} into {[str(e) for e in shape]}: no broadcast")
    return src


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))


def pad(cx):
    """Constant `pad` / `constant_pad_nd`: a concat with constant blocks. A block of a symbolic size (Mamba2's
    pad to a whole chunk) is a broadcast of the value; one that may be empty (0 at some lengths) is the
    largest block it can be, appended, and the result sliced to the padded size."""
    x, amounts = cx.operand(0), cx.const(1)
    mode = cx.const(2) if cx.op.name == "torch.aten.pad" and cx.num_operands > 2 else "constant"
    value = float(cx.const(cx.num_operands - 1) or 0.0) if cx.num_operands > 2 else 0.0
    box = sy.symbol_box(cx.symbols)
    if mode != "constant" or not all(sy.provably_ge(affine(a), 0, box) for a in amounts):
        raise cx.error(f"only a constant pad by non-negative amounts is supported, got {mode} {amounts}")
    out = x
    for i in range(0, len(amounts), 2):
        dim = len(cx.shape(x)) - 1 - i // 2
        for n, first in ((amounts[i], True), (amounts[i + 1], False)):
            if isinstance(n, int) or sy.provably_ge(affine(n), 1, box):
                out = _concat(cx, out, _block(cx, out, dim, affine(n), value), dim, first) if n else out
            elif not first:
                out = _pad_maybe_empty(cx, out, dim, affine(n), value)
            else:
                raise cx.error(f"pad by {n} before dim {dim} may be 0 at some length; only a pad after may")
    return out


def _pad_maybe_empty(cx, x, dim: int, n, value: float) -> ir.Value:
    most = _largest(cx, n)
    if most < 1:
        return x
    grown = _concat(cx, x, _block(cx, x, dim, sy.const(most), value), dim, False)
    shape = list(cx.shape(x))
    shape[dim] = rounded_up(cx, shape[dim], n)
    attrs = dict(dim=_i64(dim), start=_i64(0))
    return cx.emit(SliceOp, result_shape=shape, check=False, input=grown, **attrs)


def _largest(cx, n) -> int:
    """The largest value of the pad `n` (a remainder, not monotone in the length): at every length of a
    one-symbol range, else the divisor - 1 of a pad that is a remainder."""
    (s,) = cx.symbols if len(cx.symbols) == 1 else (None,)
    if s is not None and s.hi - s.lo <= 1 << 16:
        return max(sy.evaluate(n, [v]) for v in range(s.lo, s.hi + 1))
    e = sy.canon(n)
    if isinstance(e, ir.AffineModExpr) and sy.as_int(e.rhs) is not None:
        return sy.as_int(e.rhs) - 1
    raise cx.error(f"pad by {n}, which may be 0 at some length and has no known largest value")


def _block(cx, x, dim: int, n, value: float) -> ir.Value:
    shape = list(cx.shape(x))
    shape[dim] = n
    if all(sy.as_int(e) is not None for e in shape):
        return cx.add_weight("pad", np.full([sy.as_int(e) for e in shape], value))
    return cx.emit(BroadcastOp, result_shape=shape, check=False, input=cx.scalar(value))


def _concat(cx, x, block, dim: int, first: bool) -> ir.Value:
    if not first and is_function_input(x):
        return cx.emit(KvAppendOp, check=False, past=x, new=block, dim=_i64(dim))
    lhs, rhs = (block, x) if first else (x, block)
    return cx.emit(ConcatOp, check=False, lhs=lhs, rhs=rhs, dim=_i64(dim))


def _append(cx, base, new, dim: int, start, length, what: str) -> ir.Value:
    """`base` with positions [start, start + length) along `dim` replaced by `new`, where base is the
    past grown by `length` positions and `start` is the past's length: the append of `new`."""
    dim %= len(cx.shape(base))
    grown = base.owner if isinstance(base.owner, ir.OpView) else None
    ok = grown is not None and grown.operation.name == "novella.kv_append"
    if ok:
        past = grown.operands[0]
        p_len, n_new = cx.shape(past)[dim], cx.shape(new)[dim]
        ok = (
            ir.IntegerAttr(grown.attributes["dim"]).value % len(cx.shape(base)) == dim
            and sy.equal(affine(start), p_len)
            and sy.equal(affine(length), n_new)
            and sy.equal(cx.shape(grown.operands[1])[dim], n_new)
            and sy.equal_shapes([e for i, e in enumerate(cx.shape(new)) if i != dim],
                                [e for i, e in enumerate(cx.shape(past)) if i != dim])
        )  # fmt: skip
    if not ok:
        raise cx.error(
            f"{what} is supported as a KV-cache append only: writing positions [P, P + n) along dim {dim} of "
            "a past grown by n positions (pad or cat onto a function input), P being the past's length"
        )
    return cx.emit(KvAppendOp, past=past, new=new, dim=_i64(dim))


def slice_scatter(cx):
    base, new = cx.operand(0), cx.operand(1)
    dim, start, end = (cx.const(i) for i in (2, 3, 4))
    step = cx.const(5) if cx.num_operands > 5 else 1
    if isinstance(step, int) and step > 1:
        from .strided import strided_scatter

        return strided_scatter(cx, base, new, dim, 0 if start is None else start, end, step)
    if step != 1 or start is None or end is None:
        raise cx.error("slice_scatter needs a start, an end and step 1 (a KV-cache append)")
    return _append(cx, base, new, dim, start, affine(end) - affine(start), "slice_scatter")


def select_scatter(cx):
    """`select_scatter(buf, new, dim, P)`: `new` (without the dim) written at position P: the append of
    `new.unsqueeze(dim)`."""
    base, new = cx.operand(0), cx.operand(1)
    dim, index = cx.const(2) % len(cx.shape(base)), cx.const(3)
    if index is None:
        raise cx.error("select_scatter needs an index (the past length P, for a KV-cache append)")
    shape = list(cx.shape(new))
    shape.insert(dim, sy.const(1))
    new = reshape(cx, new, shape, check=False)
    return _append(cx, base, new, dim, index, sy.const(1), "select_scatter")


def index_put(cx):
    base, indices, new = cx.operand(0), cx.const(1), cx.operand(2)
    at = [i for i, v in enumerate(indices) if v is not None]
    if len(at) != 1 or not isinstance(indices[at[0]], Positions) or (cx.num_operands > 3 and cx.const(3)):
        raise cx.error("index_put needs one index, arange(P, P + n) of the past length P, without accumulate")
    p = indices[at[0]]
    extra = len(cx.shape(base)) - len(cx.shape(new))
    if extra > 0:  # values broadcast to the indexed shape: leading 1s
        new = reshape(cx, new, [sy.const(1)] * extra + list(cx.shape(new)), check=False)
    return _append(cx, base, new, at[0], p.start, affine(p.stop) - affine(p.start), "index_put")
