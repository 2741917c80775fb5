"""Lowering of `x[i0, i1, ...]` (`aten.index.Tensor`) with integer index tensors on the leading dims.

The indexed dims are flattened into the rows of a table `[d0 * ... * d(k-1), rest]`; the row of each
result position is `i0 * (d1 * ... * d(k-1)) + ... + i(k-1)` (the indices broadcast together, a negative
one counting from the end as in torch), computed in fp32, exact while the table has at most 2**24 rows
(`frontend/dtypes.py`), and one `novella.gather_rows` (GATHER) picks them: an index out of range faults
on the NPU, naming the row. transformers' padding masks (`padding_mask[batch_idx, kv_idx]`) are this."""

from __future__ import annotations

from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import AddOp, CompareOp, GatherRowsOp, MulOp
from .. import dtypes
from .elementwise import size_value
from .shape_ops import reshape


def _scaled(cx, v, e: ir.AffineExpr):
    """v * e for a size expression e (a Python constant when static)."""
    n = sy.as_int(e)
    if n == 1:
        return v
    from .pointwise import scalar_op

    return (
        scalar_op(cx, "mul", v, n, check=False)
        if n is not None
        else cx.emit(MulOp, check=False, lhs=v, rhs=size_value(cx, e))
    )


def _wrapped(cx, i, n: ir.AffineExpr):
    """i + n where i < 0 (torch's negative indices), else i."""
    neg = cx.emit(CompareOp, check=False, lhs=i, rhs=cx.scalar(0.0), fn=ir.StringAttr.get("lt"))
    return cx.emit(AddOp, check=False, lhs=i, rhs=_scaled(cx, neg, n))


def index_tensor(cx):
    x, indices = cx.operand(0), cx.const(1)
    shape = list(cx.shape(x))
    lead = next((j for j, i in enumerate(indices) if i is not None), len(indices))
    k = len(indices)
    if 0 < lead < k <= len(shape) and all(isinstance(i, ir.Value) for i in indices[lead:]):
        return _index_after_slices(cx, x, lead, indices[lead:])
    if k <= len(shape) and lead < k and any(i is None for i in indices[lead:]):
        return _index_apart(cx, x, indices)
    if not indices or any(not isinstance(i, ir.Value) for i in indices) or k > len(shape):
        raise cx.error(
            "indexing with tensors is supported on the leading dims (x[i], x[i, j]), on consecutive dims "
            "after full slices (x[:, i, j]) and on dims apart (x[i, :, j]) when the dims left are static: "
            "index the dims one at a time, or index_select / gather them instead"
        )
    listed = cx.op.operands[1].owner
    if any(dtypes.kind(v.type) == "bool" for v in listed.operands):
        raise cx.error("indexing with a bool mask (x[mask]) gives a data-dependent shape; use torch.where instead")
    return _gather_leading(cx, x, indices)


def _gather_leading(cx, x, indices, check: bool = True):
    """x[i0, ..., i(k-1)] for index tensors on the k leading dims: one GATHER of table rows."""
    shape = list(cx.shape(x))
    k = len(indices)
    rest = shape[k:]
    width = sy.canon(sy.numel(rest)) if rest else sy.const(1)
    if sy.as_int(width) is None:
        raise cx.error(f"indexing leaves the dims {[str(e) for e in rest]}, which must be static")
    row = None
    for j, i in enumerate(indices):
        stride = sy.canon(sy.numel(shape[j + 1 : k])) if j + 1 < k else sy.const(1)
        term = _scaled(cx, _wrapped(cx, i, shape[j]), stride)
        row = term if row is None else cx.emit(AddOp, check=False, lhs=row, rhs=term)
    rows = sy.canon(sy.numel(shape[:k]))
    table = reshape(cx, x, [rows, width], check=False)
    picked = cx.emit(GatherRowsOp, check=False, table=table, indices=row)
    return reshape(cx, picked, list(cx.shape(row)) + rest, check=check)


def _index_after_slices(cx, x, d: int, idx: list):
    """`x[:, ..., :, i, j]`: index tensors on the consecutive dims from d, after full slices. One constant
    index (`qkv[..., [-2]]`) is slices of dim d concatenated; otherwise the indexed dims move first, their
    rows are gathered, and the result dims move back to d."""
    from .shape_ops import any_transpose

    shape = list(cx.shape(x))
    size = sy.as_int(shape[d])
    data = cx.weight_data(idx[0]) if len(idx) == 1 else None
    if data is not None and size is not None and 0 < data.size <= 64:
        return _constant_columns(cx, x, d, [int(v) for v in data.ravel()], list(data.shape), size)
    rank, k = len(shape), len(idx)
    perm = list(range(d, d + k)) + [j for j in range(rank) if not d <= j < d + k]
    moved = any_transpose(cx, x, perm, check=False)
    picked = _gather_leading(cx, moved, idx, check=False)
    r = len(cx.shape(picked)) - (rank - k)
    back = list(range(r, r + d)) + list(range(r)) + list(range(r + d, r + rank - k))
    return any_transpose(cx, picked, back)


def _constant_columns(cx, x, d: int, values: list[int], idx_shape: list[int], size: int):
    from ...dialects.novella import ConcatOp, SliceOp

    if any(not -size <= v < size for v in values):
        raise cx.error(f"index {values} out of range for dim {d} of size {size}")
    shape = list(cx.shape(x))
    out = None
    for v in values:
        piece_shape = shape[:d] + [sy.const(1)] + shape[d + 1 :]
        at = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), v % size)
        dim = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), d)
        piece = x if size == 1 else cx.emit(SliceOp, result_shape=piece_shape, check=False, input=x, dim=dim, start=at)
        out = piece if out is None else cx.emit(ConcatOp, check=False, lhs=out, rhs=piece, dim=dim)
    return reshape(cx, out, shape[:d] + [sy.const(n) for n in idx_shape] + shape[d + 1 :])


def _index_apart(cx, x, indices):
    """`x[i, :, j]`: index tensors on dims apart. As in torch, the broadcast index dims come first, then
    the dims left: the indexed dims move to the front and their rows are gathered."""
    from .shape_ops import any_transpose

    rank = len(cx.shape(x))
    dims = [d for d, i in enumerate(indices) if i is not None]
    perm = dims + [d for d in range(rank) if d not in dims]
    moved = any_transpose(cx, x, perm, check=False)
    return _gather_leading(cx, moved, [indices[d] for d in dims])
