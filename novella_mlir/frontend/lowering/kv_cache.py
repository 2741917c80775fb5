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
from ...dialects.novella import ConcatOp, KvAppendOp, SliceOp
from .indexing import is_function_input, sized_table
from .shape_ops import Positions, WriteTarget, affine, reshape


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
    """Constant `pad` / `constant_pad_nd` by static amounts: a concat with constant blocks (static shape)."""
    x, amounts = cx.operand(0), cx.const(1)
    mode = cx.const(2) if cx.op.name == "torch.aten.pad" and cx.num_operands > 2 else "constant"
    value = cx.const(cx.num_operands - 1) if cx.num_operands > 2 else 0.0
    static = all(isinstance(a, int) and a >= 0 for a in amounts[1::2])
    if mode != "constant" or not static and not all(isinstance(a, int) and a >= 0 for a in amounts[::2]):
        raise cx.error(
            f"only a constant pad by static non-negative amounts (or a size of the length after the end) is "
            f"supported, got {mode} {[str(a) for a in amounts]}"
        )
    out = x
    for i in range(0, len(amounts), 2):
        dim = len(cx.shape(x)) - 1 - i // 2
        before, after = amounts[i], amounts[i + 1]
        if before:
            out = _concat(cx, out, _block(cx, out, dim, before, value), dim, True)
        if isinstance(after, int):
            out = _concat(cx, out, _block(cx, out, dim, after, value), dim, False) if after else out
        else:
            out = _pad_after(cx, out, dim, after, value)
    return out


def _pad_after(cx, x, dim: int, n, value) -> ir.Value:
    """`n` (a size of the length, >= 0) positions of `value` after the end of `dim`: the most it is, cut to `n`
    (a window partition's padding to a multiple of the window, 0 at some lengths)."""
    lo, hi = sy.value_range(n, cx.symbols)
    if lo < 0:
        raise cx.error(f"a pad by {n}, negative at some length, is a crop")
    if hi == 0:
        return x
    full = _concat(cx, x, _block(cx, x, dim, hi, value), dim, False)
    shape = list(cx.shape(x))
    shape[dim] = sy.canon(shape[dim] + n)
    return cx.emit(SliceOp, result_shape=shape, check=False, input=full, dim=_i64(dim), start=_i64(0))


def _block(cx, x, dim: int, n: int, value) -> ir.Value:
    """`n` positions of `value` along `dim`, x's sizes elsewhere (a table at their maxima, sliced to them)."""
    shape = [sy.as_int(e) for e in cx.shape(x)]
    shape[dim] = n
    if all(s is not None for s in shape):
        return cx.add_weight("pad", np.full(shape, float(value or 0.0)))
    sizes = [s if s is not None else e for s, e in zip(shape, cx.shape(x))]
    upper = [s if s is not None else sy.value_range(e, cx.symbols)[1] for s, e in zip(shape, cx.shape(x))]
    return sized_table(cx, "pad", np.full(upper, float(value or 0.0)), sizes)


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
