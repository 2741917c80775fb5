"""Lowerings of lookups (embedding, index_select, gather), constants with symbolic sizes
(arange, full, zeros, ones), cat, split, select, broadcasts, reductions and addmm.

A constant whose size depends on the length (`arange(T)`, `ones(T, T)`) is a table
built at the largest size the bounds allow, sliced to the length at run time: its
element i does not depend on the length, so the prefix is exact."""

from __future__ import annotations

import math

import numpy as np
from torch_mlir import ir

from ... import symbolic as sy
from ...dialects.novella import (
    AddOp,
    BroadcastOp,
    ConcatOp,
    DivOp,
    GatherRowsOp,
    KvAppendOp,
    LinearOp,
    MatmulOp,
    MulOp,
    ReduceOp,
    SliceOp,
    SubOp,
)
from ...symbolic import box as sb
from .. import dtypes
from .shape_ops import Positions, affine, any_transpose, from_last, reshape, slice_from_end, to_last


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))


# ------------------------------------------------------------------ lookups


def embedding(cx):
    table = cx.operand(0)
    if len(cx.shape(table)) != 2:
        raise cx.error("embedding needs a 2-D weight")
    return cx.emit(GatherRowsOp, table=table, indices=cx.operand(1))


def index_select(cx):
    return _select(cx, cx.operand(0), cx.const(1), cx.operand(2))


def _select(cx, x, dim, idx):
    """index_select: the rows of `x` along `dim` as table rows (one GATHER per row), or single elements
    (`_gather_elements`) when the other dims hold a symbolic size."""
    shape = cx.shape(x)
    dim %= len(shape)
    rest = [e for i, e in enumerate(shape) if i != dim]
    inner = sy.numel(rest) if rest else sy.const(1)
    if sy.as_int(inner) is None:
        out = list(shape)
        out[dim] = cx.shape(idx)[0]
        at = [sy.const(1) if i != dim else e for i, e in enumerate(out)]
        return _gather_elements(cx, x, dim, reshape(cx, idx, at, check=False), out)
    perm = [dim] + [i for i in range(len(shape)) if i != dim]
    moved = any_transpose(cx, x, perm, check=False) if dim else x
    table = reshape(cx, moved, [shape[dim], inner], check=False)
    rows = cx.emit(GatherRowsOp, check=False, table=table, indices=idx)
    out = reshape(cx, rows, [cx.shape(idx)[0]] + rest, check=not dim)
    return any_transpose(cx, out, [perm.index(i) for i in range(len(shape))]) if dim else out


_COPIES = ("torch.aten.repeat", "torch.aten.expand")


def _index_rows(cx, dim: int):
    """The index of `gather` as one index per position along `dim`, when the graph builds it by copying
    an index with 1 on every other dim across input-sized dims (ViTMAE's
    `ids.unsqueeze(-1).repeat(1, 1, hidden)`): then the gather takes whole slices along `dim`."""
    owner = cx.op.operands[2].owner
    name = owner.name if isinstance(owner, (ir.Operation, ir.OpView)) else ""
    if name not in _COPIES:
        return None
    src = cx.value(owner.operands[0])
    if not isinstance(src, ir.Value):
        return None
    ss, xs, ids = cx.shape(src), cx.shape(cx.operand(0)), cx.shape(cx.operand(2))
    same = len(ss) == len(xs) == len(ids) and all(
        sy.as_int(ss[d]) == 1 and sy.equal(ids[d], xs[d]) for d in range(len(xs)) if d != dim
    )
    return reshape(cx, src, [ss[dim]], check=False) if same else None


def gather(cx):
    """torch.gather along `dim`: a row lookup when every other dim of input and index is 1, an
    index_select when the index is one copied across the other dims (`_index_rows`), else one GATHER
    of single elements (`_gather_elements`)."""
    x, dim, idx = cx.operand(0), cx.const(1), cx.operand(2)
    xs, ids = cx.shape(x), cx.shape(idx)
    dim %= len(xs)
    rows = _index_rows(cx, dim)
    if rows is not None:
        return _select(cx, x, dim, rows)
    lookup = all(sy.as_int(e) == 1 for i, e in enumerate(xs) if i != dim) and all(
        sy.as_int(e) == 1 for i, e in enumerate(ids) if i != dim
    )
    if not lookup or sy.as_int(xs[dim]) is None:
        return _gather_elements(cx, x, dim, idx)
    table = reshape(cx, x, [xs[dim], sy.const(1)], check=False)
    rows = cx.emit(GatherRowsOp, check=False, table=table, indices=idx)
    return reshape(cx, rows, list(ids))


def _gather_elements(cx, x, dim: int, idx, out_shape=None):
    """out[p] = x[p with dim replaced by idx[p]] over `out_shape` (default: the index's; the index
    broadcasts to it): x[i0, ..., idx, ..., ir] where every other index is the position along its dim (an
    arange shaped to broadcast), so each output element is one table row of one element."""
    from .advanced_index import _gather_leading

    xs, ids = cx.shape(x), out_shape or cx.shape(idx)
    if len(ids) != len(xs):
        raise cx.error(f"gather needs an index of the input's rank {len(xs)}, got rank {len(ids)}")
    most = _upper(cx, sy.numel(xs))
    if most > dtypes.EXACT_INT:
        raise cx.error(
            f"gather picks single elements of an input of up to {most} elements, more than the 2**24 positions "
            "an fp32 index holds exactly: gather from a smaller tensor (slice it first)"
        )
    indices = [idx if d == dim else _positions(cx, d, len(ids), ids[d]) for d in range(len(ids))]
    return _gather_leading(cx, x, indices)


def _positions(cx, d: int, rank: int, size):
    """0, 1, ..., size - 1 along dim d of a rank-`rank` tensor whose other dims are 1."""
    shape = [1] * rank
    shape[d] = _upper(cx, size)
    sizes = [1] * rank
    sizes[d] = size if sy.as_int(size) is None else sy.as_int(size)
    return sized_table(cx, "positions", np.arange(shape[d], dtype=np.float64).reshape(shape), sizes)


# ------------------------------------------------------------------ constants with symbolic sizes


def _upper(cx, e) -> int:
    return sb.value_range(affine(e), cx.symbols)[1]


def sized_table(cx, hint: str, values: np.ndarray, sizes: list):
    """`values` (built at each dim's maximum) sliced to `sizes` (ints or symbolic sizes)."""
    out = cx.add_weight(hint, values)
    for d, s in enumerate(sizes):
        if isinstance(s, int):
            continue
        shape = list(cx.shape(out))
        shape[d] = sy.canon(s)
        out = cx.emit(SliceOp, result_shape=shape, check=False, input=out, dim=_i64(d), start=_i64(0))
    return out


def arange(cx):
    """arange(end), arange(start, end) or arange(start, end, step): positions, a table sliced to the length."""
    n = {"torch.aten.arange": 1, "torch.aten.arange.start": 2}.get(cx.op.name, 3)
    nums = [cx.value(v) for v in cx.op.operands[:n]]
    start, end, step = (0, nums[0], 1) if n == 1 else (nums + [1])[:3]
    if not all(isinstance(v, (int, float)) for v in (start, step)):
        if step == 1 and not isinstance(start, float) and not isinstance(end, float):
            return Positions(start, end)  # positions an index op writes (a KV-cache append), no tensor
        raise cx.error("arange with a symbolic start or step is not supported")
    if isinstance(end, (int, float)):
        return cx.add_weight("arange", np.arange(start, end, step, dtype=np.float64))
    if step != 1:
        raise cx.error("arange with a symbolic end needs step 1")
    first = math.floor(start)  # arange(0.5, n) (patch centers): ceil(n - start) = n - floor(start) positions
    hi = _upper(cx, end)
    return sized_table(cx, "arange", np.arange(start, hi, dtype=np.float64), [sy.canon(affine(end) - sy.const(first))])


def _sizes(cx, sizes) -> tuple[list, list[int]]:
    sizes = [s if isinstance(s, int) else sy.canon(s) for s in sizes]
    sizes = [sy.as_int(s) if not isinstance(s, int) and sy.as_int(s) is not None else s for s in sizes]
    return sizes, [s if isinstance(s, int) else _upper(cx, s) for s in sizes]


def _full(cx, sizes, value):
    sizes, upper = _sizes(cx, sizes)
    return sized_table(cx, "full", np.full(upper, float(value)), sizes)


def eye(cx):
    """`torch.eye(n)` / `torch.eye(n, m)` of static sizes (a chunked scan's `attn + eye(chunk)`): a constant."""
    n = cx.const(0)
    m = cx.const(1) if cx.op.operation.name.endswith(".m") else n
    if not isinstance(n, int) or not isinstance(m, int):
        raise cx.error(f"eye of the size {n} x {m}, which is not static: make the identity's size a constant")
    return cx.add_weight("eye", np.eye(n, m, dtype=np.float32))


def full(cx):
    return _full(cx, cx.const(0), cx.const(1))


def zeros(cx):
    return _full(cx, cx.const(0), 0.0)


def ones(cx):
    return _full(cx, cx.const(0), 1.0)


def full_like(cx):
    return _full(cx, cx.shape(cx.operand(0)), cx.const(1))


def zeros_like(cx):
    return _full(cx, cx.shape(cx.operand(0)), 0.0)


def ones_like(cx):
    return _full(cx, cx.shape(cx.operand(0)), 1.0)


def new_full(cx):
    return _full(cx, cx.const(1), cx.const(2))


def new_zeros(cx):
    return _full(cx, cx.const(1), 0.0)


def new_ones(cx):
    return _full(cx, cx.const(1), 1.0)


def scalar_tensor(cx):
    return cx.scalar(float(cx.const(0)))


# ------------------------------------------------------------------ cat, split, select, expand


def _is_empty(cx, v) -> bool:
    return any(sy.as_int(e) == 0 for e in cx.shape(v))


def cat(cx):
    """torch.cat; empty inputs (e.g. an empty KV cache, legacy 1-D `[0]`) drop out."""
    items = [v for v in cx.const(0) if not _is_empty(cx, v)]
    if not items:
        raise cx.error("cat of only empty tensors")
    if len(items) == 1:
        return items[0]
    rank = len(cx.shape(items[0]))
    dim = cx.const(1) % rank if cx.num_operands > 1 else 0
    if len(items) == 2 and is_function_input(items[0]):
        return cx.emit(KvAppendOp, past=items[0], new=items[1], dim=_i64(dim))
    out = items[0]
    for i, v in enumerate(items[1:]):
        out = cx.emit(ConcatOp, check=i == len(items) - 2, lhs=out, rhs=v, dim=_i64(dim))
    return out


def is_function_input(v) -> bool:
    """`v` is an argument of the function (e.g. a KV cache passed in), not computed in it."""
    return isinstance(v.owner, ir.Block)


def _slice(cx, x, dim: int, start: int, length):
    shape = list(cx.shape(x))
    if sy.as_int(affine(length)) == 0:
        raise cx.empty_error(f"the slice along dim {dim} has length 0")
    if sy.equal(affine(length), shape[dim]) and start == 0:
        return x
    shape[dim] = sy.canon(affine(length))
    return cx.emit(SliceOp, result_shape=shape, check=False, input=x, dim=_i64(dim), start=_i64(start))


def _split_at(cx, x, dim: int, sizes: list):
    outs, start = [], 0
    for s in sizes:
        if not isinstance(start, int):
            raise cx.error("split after a symbolic-size piece is not supported")
        outs.append(_slice(cx, x, dim, start, s))
        start = start + s if isinstance(s, int) else None
    return outs


def split_with_sizes(cx):
    x = cx.operand(0)
    dim = cx.const(2) % len(cx.shape(x)) if cx.num_operands > 2 else 0
    return [_split_at(cx, x, dim, list(cx.const(1)))]


def split(cx):
    x = cx.operand(0)
    shape = cx.shape(x)
    dim = cx.const(2) % len(shape) if cx.num_operands > 2 else 0
    size, total = cx.const(1), sy.as_int(shape[dim])
    if not isinstance(size, int) or total is None:
        raise cx.error("split of a symbolic-size dim is not supported; split a static dim")
    sizes = [min(size, total - i) for i in range(0, total, size)]
    return [_split_at(cx, x, dim, sizes)]


def repeat(cx):
    """x.repeat(reps): each dim d of x (padded to len(reps)) becomes [reps[d], d], a broadcast copy, then merged."""
    x, reps = cx.operand(0), list(cx.const(1))
    if 0 in reps:
        raise cx.empty_error(f"repeat({', '.join(map(str, reps))}) has a 0 count")
    shape = [sy.const(1)] * (len(reps) - len(cx.shape(x))) + list(cx.shape(x))
    reps = [r if isinstance(r, ir.AffineExpr) else sy.const(r) for r in reps]  # a count may be a size of the length
    if any(sy.as_int(r) is None and sy.as_int(s) is None for r, s in zip(reps, shape)):
        raise cx.error(
            f"repeat of {[str(e) for e in shape]} by {[str(r) for r in reps]}: a dynamic dim times a count of the length"
        )
    spread = [e for s in shape for e in (sy.const(1), s)]
    wide = [e for r, s in zip(reps, shape) for e in (r, s)]
    out = reshape(cx, x, spread, check=False)
    if any(sy.as_int(r) != 1 for r in reps):
        out = cx.emit(BroadcastOp, result_shape=wide, check=False, input=out)
    return reshape(cx, out, [sy.canon(r * s) for r, s in zip(reps, shape)])


def chunk(cx):
    x = cx.operand(0)
    shape = cx.shape(x)
    dim = cx.const(2) % len(shape) if cx.num_operands > 2 else 0
    total = sy.as_int(shape[dim])
    if total is None:
        raise cx.error("chunk of a symbolic-size dim is not supported; chunk a static dim")
    size = -(-total // cx.const(1))
    return [_split_at(cx, x, dim, [min(size, total - i) for i in range(0, total, size)])]


def narrow(cx):
    x, dim, start, length = cx.operand(0), cx.const(1), cx.const(2), cx.const(3)
    dim %= len(cx.shape(x))
    if not isinstance(start, int) or start < 0:
        raise cx.error("narrow with a symbolic or negative start is not supported")
    return _slice(cx, x, dim, start, length)


def select(cx):
    x, dim, index = cx.operand(0), cx.const(1), cx.const(2)
    shape = list(cx.shape(x))
    dim %= len(shape)
    if index < 0 and sy.as_int(shape[dim]) is None:
        part = slice_from_end(cx, x, dim, -index, sy.const(1), f"select({dim}, {index})")
    else:
        part = _slice(cx, x, dim, index + (sy.as_int(shape[dim]) if index < 0 else 0), 1)
    return reshape(cx, part, shape[:dim] + shape[dim + 1 :])


def expand(cx):
    """expand: the identity when no dim grows, else a broadcast copy."""
    x = cx.operand(0)
    have = list(cx.shape(x))
    want = [affine(s) for s in cx.const(1)]
    have = [sy.const(1)] * (len(want) - len(have)) + have
    out = [h if sy.as_int(w) == -1 else sy.canon(w) for w, h in zip(want, have)]
    if sy.equal_shapes(out, have):
        return reshape(cx, x, have)
    return cx.emit(BroadcastOp, result_shape=out, input=reshape(cx, x, have, check=False))


# ------------------------------------------------------------------ reductions


def _reduce(fn: str):
    def lower(cx):
        x = cx.operand(0)
        rank = len(cx.shape(x))
        dims = cx.const(1) if cx.num_operands > 1 else None
        dims = list(range(rank)) if not dims and dims != 0 else [dims] if isinstance(dims, int) else list(dims)
        keep = bool(cx.const(2)) if cx.num_operands > 2 and isinstance(cx.const(2), bool) else False
        return reduce_dims(cx, fn, x, dims, keep)

    lower.__name__ = f"lower_{fn}"
    return lower


def reduce_dims(cx, fn: str, x, dims: list[int], keep: bool, check: bool = True):
    """`fn` over each of `dims` in turn; the reduced dims are dropped unless `keep`."""
    rank = len(cx.shape(x))
    dims = sorted({d % rank for d in dims}, reverse=True)
    for d in dims:
        x = _reduce_dim(cx, fn, x, d)
    if not keep:
        x = reshape(cx, x, [e for i, e in enumerate(cx.shape(x)) if i not in dims], check=check)
    return x


def _reduce_dim(cx, fn: str, x, d: int):
    """`fn` over dim `d`, kept as size 1: the dim is swapped last, reduces, and is swapped back (the swaps
    reorder the other dims of a rank > 3 tensor, so the way back is a transpose, of the reduced data)."""
    shape = list(cx.shape(x))
    x = to_last(cx, x, d)
    n = shape[d]
    dynamic_mean = fn == "mean" and sy.as_int(n) is None
    out = cx.emit(ReduceOp, check=False, input=x, fn=ir.StringAttr.get("sum" if dynamic_mean else fn))
    if dynamic_mean:
        from .elementwise import size_value

        out = cx.emit(DivOp, check=False, lhs=out, rhs=size_value(cx, n))
    return from_last(cx, out, d, check=False)


def _var(cx, root: bool):
    """var/std over dims: mean((x - mean)^2) * N / (N - correction), N the reduced element count."""
    x = cx.operand(0)
    shape = list(cx.shape(x))
    rank = len(shape)
    dims = cx.const(1) if cx.num_operands > 1 else None
    dims = list(range(rank)) if not dims and dims != 0 else [dims] if isinstance(dims, int) else list(dims)
    dims = sorted({d % rank for d in dims}, reverse=True)
    corr = cx.const(2) if cx.num_operands > 2 and not isinstance(cx.const(2), bool) else None
    if cx.op.name.endswith(".dim"):  # var.dim(x, dims, unbiased, keepdim)
        corr, keep = (1 if cx.const(2) else 0), bool(cx.const(3))
    else:  # var.correction(x, dims, correction, keepdim)
        corr, keep = (1 if corr is None else corr), bool(cx.const(3)) if cx.num_operands > 3 else False
    mean_ = x
    for d in dims:
        mean_ = _reduce_dim(cx, "mean", mean_, d)
    dev = cx.emit(SubOp, check=False, lhs=x, rhs=mean_)
    sq = cx.emit(MulOp, check=False, lhs=dev, rhs=dev)
    for d in dims:
        sq = _reduce_dim(cx, "sum", sq, d)
    n = sy.canon(sy.numel([shape[d] for d in dims]))
    if sy.as_int(n) is not None:  # torch divides by max(N - correction, 0): 0 gives inf / nan, as eager does
        out = _scale(cx, sq, 1.0 / (sy.as_int(n) - corr)) if sy.as_int(n) > corr else _divide(cx, sq, 0.0)
    else:
        from .elementwise import size_value
        from .pointwise import scalar_op

        count = scalar_op(cx, "sub", size_value(cx, n), float(corr), check=False)
        if sb.value_range(n, cx.symbols)[0] <= corr:  # N - correction can reach 0 or less: clamp as torch does
            count = scalar_op(cx, "max", count, 0.0, check=False)
        out = cx.emit(DivOp, check=False, lhs=sq, rhs=count)
    if root:
        from .pointwise import math_op

        out = math_op(cx, "sqrt", out, check=False)
    if not keep:
        out = reshape(cx, out, [e for i, e in enumerate(shape) if i not in dims])
    return out


def _scale(cx, x, value: float):
    from .pointwise import scalar_op

    return scalar_op(cx, "mul", x, value, check=False)


def _divide(cx, x, value: float):
    from .pointwise import scalar_op

    return scalar_op(cx, "div", x, value, check=False)


def var(cx):
    return _var(cx, root=False)


def std(cx):
    return _var(cx, root=True)


sum_ = _reduce("sum")
mean = _reduce("mean")
amax = _reduce("max")
amin = _reduce("min")


# ------------------------------------------------------------------ addmm


def addmm(cx):
    """beta * bias + alpha * (x @ w): a linear with w transposed at compile time when w is a weight
    and beta = alpha = 1; else a matmul, scaled, plus the scaled bias."""
    bias, x, w = cx.operand(0), cx.operand(1), cx.operand(2)
    beta, alpha = (cx.const(i) if i < cx.num_operands else 1 for i in (3, 4))
    if not all(isinstance(v, (int, float)) for v in (beta, alpha)):
        raise cx.error(f"addmm with beta={beta}, alpha={alpha}: only constant numbers are supported")
    if (beta, alpha) != (1, 1):
        prod = cx.emit(MatmulOp, check=False, lhs=x, rhs=w, transpose_rhs=ir.BoolAttr.get(False))
        scaled = [v if k == 1 else _scale(cx, v, k) for v, k in ((prod, alpha), (bias, beta))]
        return cx.emit(AddOp, lhs=scaled[0], rhs=scaled[1])
    data = cx.weight_data(w)
    if data is not None and len(cx.shape(bias)) == 1:
        wt = cx.add_weight("addmm_wT", np.ascontiguousarray(data.T))
        return cx.emit(LinearOp, input=x, weight=wt, bias=bias)
    prod = cx.emit(MatmulOp, check=False, lhs=x, rhs=w, transpose_rhs=ir.BoolAttr.get(False))
    return cx.emit(AddOp, lhs=prod, rhs=bias)
