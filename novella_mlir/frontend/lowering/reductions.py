"""Lowerings of argmax / argmin, linalg.norm and matrix norms, flip / fliplr / flipud and `prim.NumToTensor`.

argmax over a dim (the dynamic one too) is the first index where the value equals the
maximum: the dim is swapped last, `m = max`, `mask = (x == m) | (x != x)` (a NaN counts as
the maximum, as in torch), then `min(where(mask, positions, 2**24))`. The index is an integer
held as f32 (exact below 2**24, `frontend/dtypes.py`)."""

from __future__ import annotations

import math

import numpy as np
from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import CompareOp, FlipOp, MaximumOp, MulOp, ReduceOp, WhereOp
from ...symbolic import box as sb
from .elementwise import size_value
from .indexing import sized_table
from .shape_ops import from_last, reshape, to_last

_NO_INDEX = float(2**24)  # larger than every index the NPU holds exactly


def _fn(v: str) -> ir.StringAttr:
    return ir.StringAttr.get(v)


def _positions(cx, n: ir.AffineExpr) -> ir.Value:
    """[0, 1, ..., n-1] as a [n] tensor (a table at n's upper bound, sliced to n)."""
    static = sy.as_int(n)
    if static is not None:
        return cx.add_weight("positions", np.arange(static, dtype=np.float64))
    hi = sb.value_range(n, cx.symbols)[1]
    return sized_table(cx, "positions", np.arange(hi, dtype=np.float64), [n])


def _arg_last(cx, x, fn: str):
    """Index of the first max (min) over the last dim, kept as size 1."""
    n = cx.shape(x)[-1]
    m = cx.emit(ReduceOp, check=False, input=x, fn=_fn(fn))
    hit = cx.emit(CompareOp, check=False, lhs=x, rhs=m, fn=_fn("eq"))
    nan = cx.emit(CompareOp, check=False, lhs=x, rhs=x, fn=_fn("ne"))
    mask = cx.emit(MaximumOp, check=False, lhs=hit, rhs=nan)
    idx = cx.emit(WhereOp, check=False, cond=mask, x=_positions(cx, n), y=cx.scalar(_NO_INDEX))
    return cx.emit(ReduceOp, check=False, input=idx, fn=_fn("min"))


def _arg(fn: str):
    def lower(cx):
        x = cx.operand(0)
        shape = list(cx.shape(x))
        dim = cx.const(1) if cx.num_operands > 1 else None
        keep = bool(cx.const(2)) if cx.num_operands > 2 else False
        if dim is None or not shape:
            flat = reshape(cx, x, [sy.const(1), sy.canon(sy.numel(shape)) if shape else sy.const(1)], check=False)
            out = _arg_last(cx, flat, fn)
            return reshape(cx, out, [sy.const(1)] * len(shape) if keep else [])
        d = dim % len(shape)
        out = from_last(cx, _arg_last(cx, to_last(cx, x, d), fn), d, check=False)
        return reshape(cx, out, shape[:d] + ([sy.const(1)] if keep else []) + shape[d + 1 :])

    lower.__name__ = f"lower_arg{fn}"
    return lower


argmax = _arg("max")
argmin = _arg("min")


def _matrix_norm(cx, x, ord_, dims: list[int], keep: bool):
    """'fro': sqrt(sum(x^2)) over the two dims; 1 / -1 (inf / -inf): the max / min over the second (first)
    dim of the abs sums over the other. 'nuc', 2 and -2 (singular values) need an SVD."""
    from .indexing import reduce_dims
    from .pointwise import math_op

    rank = len(cx.shape(x))
    dims = [d % rank for d in dims]
    if ord_ == "fro":
        sq = cx.emit(MulOp, check=False, lhs=x, rhs=x)
        return math_op(cx, "sqrt", reduce_dims(cx, "sum", sq, dims, keep, check=False))
    if ord_ not in (1, -1, math.inf, -math.inf):
        raise cx.error(
            f"matrix_norm with ord={ord_!r} needs a singular value decomposition, which the NPU does not run; "
            "use ord='fro', 1, -1, inf or -inf, or compute this norm outside the compiled model"
        )
    inner, outer = dims if abs(ord_) == 1 else dims[::-1]
    sums = reduce_dims(cx, "sum", math_op(cx, "abs", x, check=False), [inner], True, check=False)
    out = reduce_dims(cx, "max" if ord_ > 0 else "min", sums, [outer], True, check=False)
    return out if keep else reshape(cx, out, [e for i, e in enumerate(cx.shape(x)) if i not in dims], check=False)


def _vector_norm(cx, x, ord_, dims: list[int], keep: bool):
    """sum(|x|^p)^(1/p) over `dims` (inf / -inf: max / min of |x|, 0: the count of non-zeros)."""
    from .indexing import reduce_dims
    from .pointwise import math_op, scalar_op

    if ord_ in (math.inf, -math.inf):
        return reduce_dims(cx, "max" if ord_ > 0 else "min", math_op(cx, "abs", x, check=False), dims, keep, False)
    if ord_ == 0:
        nonzero = scalar_op(cx, "ne", x, 0.0, check=False)
        return reduce_dims(cx, "sum", nonzero, dims, keep, check=False)
    if ord_ == 2:
        sq = cx.emit(MulOp, check=False, lhs=x, rhs=x)
        return math_op(cx, "sqrt", reduce_dims(cx, "sum", sq, dims, keep, check=False), check=False)
    a = math_op(cx, "abs", x, check=False)
    if ord_ != 1:
        a = math_op(cx, "exp", scalar_op(cx, "mul", math_op(cx, "log", a, check=False), ord_, check=False), check=False)
    total = reduce_dims(cx, "sum", a, dims, keep, check=False)
    if ord_ == 1:
        return total
    root = scalar_op(cx, "mul", math_op(cx, "log", total, check=False), 1.0 / ord_, check=False)
    return math_op(cx, "exp", root, check=False)


def matrix_norm(cx):
    """linalg.matrix_norm(x, ord, dim, keepdim) as torch.export leaves it (any ord: `frontend/traceable.py`
    keeps the length symbolic while torch traces ord 1, -1, inf and -inf)."""
    dims = list(cx.const(2)) if cx.num_operands > 2 and cx.const(2) is not None else [-2, -1]
    keep = bool(cx.const(3)) if cx.num_operands > 3 else False
    return _matrix_norm(cx, cx.operand(0), cx.const(1), dims, keep)


def linalg_norm(cx):
    """linalg.norm(x, ord, dim, keepdim): a vector norm over one dim (or all, when ord and dim are None),
    a matrix norm over two (or a 2-D input with an ord), as torch defines it."""
    x = cx.operand(0)
    rank = len(cx.shape(x))
    ord_ = cx.const(1) if cx.num_operands > 1 else None
    dim = cx.const(2) if cx.num_operands > 2 else None
    keep = bool(cx.const(3)) if cx.num_operands > 3 else False
    dims = [dim] if isinstance(dim, int) else list(dim) if dim is not None else None
    if dims is None and ord_ is not None:
        dims = list(range(rank))
    if dims is not None and len(dims) == 2:
        return _matrix_norm(cx, x, "fro" if ord_ is None else ord_, dims, keep)
    if dims is None:
        flat = reshape(cx, x, [sy.canon(sy.numel(cx.shape(x)))] if rank else [sy.const(1)], check=False)
        out = _vector_norm(cx, flat, 2, [0], False)
        return reshape(cx, out, [sy.const(1)] * rank) if keep else out
    return _vector_norm(cx, x, 2 if ord_ is None else ord_, dims, keep)


def fliplr(cx):
    return _flip_dim(cx, cx.operand(0), 1, True)


def flipud(cx):
    return _flip_dim(cx, cx.operand(0), 0, True)


def num_to_tensor(cx):
    """prim.NumToTensor: a number as a 0-d constant, a symbolic size as its value computed on the NPU."""
    v = cx.const(0)
    if isinstance(v, ir.AffineExpr):
        return size_value(cx, v)
    return cx.scalar(float(v))


def flip(cx):
    """flip over each listed dim in turn (`novella.flip` reverses one dim)."""
    x = cx.operand(0)
    rank = len(cx.shape(x))
    dims = sorted({d % rank for d in cx.const(1)})
    for i, d in enumerate(dims):
        x = _flip_dim(cx, x, d, check=i == len(dims) - 1)
    return x


def _flip_dim(cx, x, d: int, check: bool):
    """`novella.flip` needs the dims after the flipped one static: else the dim is swapped last first."""
    if any(sy.as_int(e) is None for e in cx.shape(x)[d + 1 :]):
        y = _flip(cx, to_last(cx, x, d), len(cx.shape(x)) - 1, check=False)
        return from_last(cx, y, d, check=check)
    return _flip(cx, x, d, check)


def _flip(cx, x, d: int, check: bool):
    return cx.emit(FlipOp, check=check, input=x, dim=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d))
