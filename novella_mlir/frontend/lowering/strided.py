"""`x[..., a:b:k]` with a step k > 1 on a static dim, as data movement the NPU has: a window of n k
positions viewed as [n, k] and one column of it taken (n = ceil((b - a) / k)): [a, a + n k), column 0,
or where that runs past the dim's end, the window shifted back by c < k and column c (`x[..., 1::2]`
of an even dim: the whole dim, column 1, one kernel); when no shift fits, the last element is a slice
of its own, concatenated."""

from __future__ import annotations

from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import ConcatOp, ReshapeOp, SliceOp


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))


def strided_slice(cx, x, dim: int, start: int, end, step: int):
    what = "slice; slice the length first, or reshape it to [n, step] and select"
    start, end, n, whole = _static_range(cx, what, cx.shape(x)[dim], dim, start, end, step)
    if n == 0:
        raise cx.empty_error(f"the slice [{start}:{end}:{step}] along dim {dim} has length 0")
    shift = max(0, start + n * step - sy.as_int(cx.shape(x)[dim]))
    if whole < n and shift <= min(step - 1, start):
        return _columns(cx, x, dim, start, n, step, shift)
    parts = [_columns(cx, x, dim, start, whole, step)] if whole else []
    if whole < n:
        parts.append(_piece(cx, x, dim, start + whole * step, 1))
    out = parts[0]
    if len(parts) > 1:
        out = cx.emit(ConcatOp, check=False, lhs=parts[0], rhs=parts[1], dim=_i64(dim))
    return out


def _static_range(cx, what: str, size, dim: int, start, end, step: int):
    """(start, end, n, whole) of `[start:end:step]` over a static dim of `size`, bounds clamped as Python
    does: n positions, the first `whole` of them with a full step inside the dim."""
    full = sy.as_int(size)
    if full is None or not isinstance(start, int) or not (end is None or isinstance(end, int)) or step < 1:
        kind, _, hint = what.partition("; ")
        raise cx.error(
            f"{kind} with step {step} along dim {dim} of size {size}: a step is supported on a static dim "
            f"with constant bounds only{'; ' + hint if hint else ''}"
        )
    start = min(max(start + full if start < 0 else start, 0), full)
    end = full if end is None else min(max(end + full if end < 0 else end, 0), full)
    n = max(0, -(-(end - start) // step))
    return start, end, n, (n if start + n * step <= full else n - 1)


def _piece(cx, x, dim: int, start: int, length: int):
    shape = list(cx.shape(x))
    if start == 0 and sy.as_int(shape[dim]) == length:
        return x
    shape[dim] = sy.const(length)
    return cx.emit(SliceOp, result_shape=shape, check=False, input=x, dim=_i64(dim), start=_i64(start))


def _columns(cx, x, dim: int, start: int, n: int, step: int, shift: int = 0):
    """x[..., start : start + n * step : step] along `dim`: the slice from start - shift, a view as
    [n, step], column `shift`."""
    y = _piece(cx, x, dim, start - shift, n * step)
    shape = list(cx.shape(y))
    grid = shape[:dim] + [sy.const(n), sy.const(step)] + shape[dim + 1 :]
    y = cx.emit(ReshapeOp, result_shape=grid, check=False, input=y)
    first = grid[: dim + 1] + [sy.const(1)] + grid[dim + 2 :]
    y = cx.emit(SliceOp, result_shape=first, check=False, input=y, dim=_i64(dim + 1), start=_i64(shift))
    return cx.emit(ReshapeOp, result_shape=shape[:dim] + [sy.const(n)] + shape[dim + 1 :], check=False, input=y)


def strided_scatter(cx, base, new, dim: int, start: int, end, step: int):
    """`slice_scatter(base, new, dim, start, end, step)` with a step > 1 on a static dim (Qwen3-VL's
    `freqs[..., 1:length:3] = ...`): base before the range, the range viewed as [n, step] with column 0
    replaced by `new`, the last element on its own when the last step runs past the end, base after."""
    shape = list(cx.shape(base))
    dim %= len(shape)
    start, end, n, whole = _static_range(cx, "slice_scatter", shape[dim], dim, start, end, step)
    if sy.as_int(cx.shape(new)[dim]) != n:
        raise cx.error(f"slice_scatter writes {cx.shape(new)[dim]} positions into a strided range of {n}")
    if n == 0:
        return base
    full = sy.as_int(shape[dim])
    parts = [_piece(cx, base, dim, 0, start)] if start else []
    if whole:
        block = _piece(cx, base, dim, start, whole * step)
        parts.append(_with_column(cx, block, _piece(cx, new, dim, 0, whole), dim, whole, step))
    after = start + whole * step
    if whole < n:
        parts.append(_piece(cx, new, dim, n - 1, 1))
        after += 1
    if after < full:
        parts.append(_piece(cx, base, dim, after, full - after))
    out = parts[0]
    for p in parts[1:]:
        out = cx.emit(ConcatOp, check=False, lhs=out, rhs=p, dim=_i64(dim))
    return out


def _with_column(cx, block, col, dim: int, n: int, step: int):
    """`block` (n * step long along `dim`) viewed as [n, step], column 0 replaced by `col` (n long)."""
    shape = list(cx.shape(block))
    grid = shape[:dim] + [sy.const(n), sy.const(step)] + shape[dim + 1 :]
    y = cx.emit(ReshapeOp, result_shape=grid, check=False, input=block)
    col = cx.emit(ReshapeOp, result_shape=grid[: dim + 1] + [sy.const(1)] + grid[dim + 2 :], check=False, input=col)
    rest = _piece(cx, y, dim + 1, 1, step - 1)
    y = cx.emit(ConcatOp, check=False, lhs=col, rhs=rest, dim=_i64(dim + 1))
    return cx.emit(ReshapeOp, result_shape=shape, check=False, input=y)
