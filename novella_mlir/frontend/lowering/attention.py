"""Lowerings of batched matmul, softmax and attention."""

from __future__ import annotations

import math

from torch_mlir import ir

from ... import symbolic as sy
from ...dialects import shapes
from ...dialects.novella import (
    AddOp,
    AttentionOp,
    BroadcastOp,
    CompareOp,
    MathOp,
    MatmulOp,
    ReduceOp,
    ReshapeOp,
    ScalarOp,
    SliceOp,
    SoftmaxOp,
    SubOp,
    WhereOp,
)
from ...kernels.flash_attention import CAUSAL_ATTR
from ...symbolic import box as sb
from .shape_ops import from_last, reshape, to_last


def _rank(v: ir.Value) -> int:
    return ir.RankedTensorType(v.type).rank


def matmul(cx):
    """`a @ b` for operands of rank 2 or more (batch dims equal or 1; a lower rank is broadcast with leading
    1s, more than 2 batch dims, equal, are merged into one); `x @ W` and `x @ W.T` with a static 2-D weight
    and x of rank 3 or more are a linear (the linear kernel)."""
    a, b = cx.operand(0), cx.operand(1)
    ra, rb = _rank(a), _rank(b)
    if rb == 2 and ra > 2:
        return _matmul_by_matrix(cx, a, b)
    if min(ra, rb) < 2:
        raise cx.error(f"matmul of rank {ra} by rank {rb} is not supported; use ranks 2 or more")
    a = reshape(cx, a, [sy.const(1)] * (rb - ra) + list(cx.shape(a)), check=False)
    b = reshape(cx, b, [sy.const(1)] * (ra - rb) + list(cx.shape(b)), check=False)
    if max(ra, rb) <= 4:
        return cx.emit(MatmulOp, lhs=a, rhs=b, transpose_rhs=ir.BoolAttr.get(False))
    (sa, sb), false = (cx.shape(a), cx.shape(b)), ir.BoolAttr.get(False)
    if not sy.equal_shapes(sa[:-2], sb[:-2]):
        raise cx.error(f"matmul with batch dims {[str(e) for e in sa[:-2]]} and {[str(e) for e in sb[:-2]]}: "
                       "more than 2 batch dims must be equal")  # fmt: skip
    n = sy.numel(sa[:-2])
    y = cx.emit(MatmulOp, check=False, lhs=reshape(cx, a, [n, *sa[-2:]], check=False),
                rhs=reshape(cx, b, [n, *sb[-2:]], check=False), transpose_rhs=false)  # fmt: skip
    return reshape(cx, y, [*sa[:-2], *cx.shape(y)[-2:]])


def _matmul_by_matrix(cx, a, b):
    """[..., K] @ [K, N]: `novella.linear` with the weight W^T when b is a weight or a transposed weight,
    else the rows flattened through a 2-D matmul."""
    from .linear import emit_linear, matmul_rows

    w = cx.weight_data(b)
    if w is None and isinstance(b.owner, ir.OpView) and b.owner.operation.name == "novella.transpose":
        src = cx.weight_data(b.owner.operands[0])
        w = None if src is None else src.T
    if w is not None and sy.as_int(cx.shape(a)[-1]) is not None:
        return emit_linear(cx, a, cx.add_weight("matmul_weight", w.T.copy()), None)
    return matmul_rows(cx, a, b, transpose_rhs=False)


def _softmax(cx, safe: bool = False):
    x = cx.operand(0)
    rank = _rank(x)
    dim = cx.const(1)
    if dim is None or rank == 0:
        raise cx.error(f"softmax over dim {dim} of a rank-{rank} tensor is not supported")
    dim %= rank
    flag = ir.BoolAttr.get(safe)
    if dim == rank - 1:
        return cx.emit(SoftmaxOp, input=x, safe=flag)
    y = cx.emit(SoftmaxOp, check=False, input=to_last(cx, x, dim), safe=flag)
    return from_last(cx, y, dim)


def _log_sum_exp_last(cx, x):
    """(max, log(sum(exp(x - max)))) over the last dim, both kept as size 1."""
    m = cx.emit(ReduceOp, check=False, input=x, fn=ir.StringAttr.get("max"))
    e = cx.emit(MathOp, check=False, input=cx.emit(SubOp, check=False, lhs=x, rhs=m), fn=ir.StringAttr.get("exp"))
    s = cx.emit(ReduceOp, check=False, input=e, fn=ir.StringAttr.get("sum"))
    return m, cx.emit(MathOp, check=False, input=s, fn=ir.StringAttr.get("log"))


def log_softmax(cx):
    """x - max - log(sum(exp(x - max))) over `dim`."""
    x, rank = cx.operand(0), _rank(cx.operand(0))
    dim = cx.const(1) % rank
    y = to_last(cx, x, dim)
    m, lse = _log_sum_exp_last(cx, y)
    out = cx.emit(SubOp, check=False, lhs=cx.emit(SubOp, check=False, lhs=y, rhs=m), rhs=lse)
    return from_last(cx, out, dim)


def logsumexp(cx):
    """max + log(sum(exp(x - max))) over each listed dim in turn (kept as size 1, then dropped unless keepdim)."""
    x = cx.operand(0)
    rank = _rank(x)
    dims = sorted({d % rank for d in cx.const(1)}, reverse=True)
    keep = bool(cx.const(2)) if cx.num_operands > 2 else False
    for d in dims:
        m, lse = _log_sum_exp_last(cx, to_last(cx, x, d))
        x = from_last(cx, cx.emit(AddOp, check=False, lhs=m, rhs=lse), d, check=False)
    if not keep:
        shape = [e for i, e in enumerate(cx.shape(x)) if i not in dims]
        x = cx.emit(ReshapeOp, result_shape=shape, input=x)
    return x


def softmax_internal(cx):
    if cx.const(2):
        raise cx.error("softmax with half_to_float is not supported; the NPU computes in f32")
    return _softmax(cx)


def softmax(cx):
    return _softmax(cx)


def safe_softmax(cx):
    """torch's `_safe_softmax` (SDPA's): a row of all -inf gives 0, not NaN."""
    if cx.num_operands > 2 and cx.const(2) is not None:
        raise cx.error("_safe_softmax with a dtype is not supported; the NPU computes in f32")
    return _softmax(cx, safe=True)


_SDPA_ARGS = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _sdpa_options(cx) -> dict:
    opts = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
    for i, name in enumerate(_SDPA_ARGS, start=3):
        if i < cx.num_operands:
            v = cx.value(cx.op.operands[i])
            opts[name] = "a tensor" if isinstance(v, ir.Value) else v
    return opts


def scaled_dot_product_attention(cx):
    """SDPA, `scale` defaulting to 1/sqrt(head dim). Unmasked it is one `novella.attention`;
    with `attn_mask` (bool: keep where True; float: added) or `is_causal` (keep key j <= query i)
    it is scale * q @ k^T + additive mask, softmax, @ v. `enable_gqa` repeats the key/value heads.
    Its softmax is the safe one: a query row whose keys are all masked gives 0, as in torch."""
    q, k, v = cx.operand(0), cx.operand(1), cx.operand(2)
    opts = _sdpa_options(cx)
    if opts["dropout_p"]:
        raise cx.error(f"scaled_dot_product_attention with dropout_p={opts['dropout_p']} is not supported")
    ranks = {_rank(q), _rank(k), _rank(v)}
    if len(ranks) != 1 or not 2 <= min(ranks) <= 4:
        raise cx.error(f"scaled_dot_product_attention needs query, key, value of equal rank 2 to 4, got {ranks}")
    head_dim = sy.as_int(cx.shape(q)[-1])
    if head_dim is None:
        raise cx.error("scaled_dot_product_attention needs a static head dim")
    if opts["enable_gqa"]:
        k, v = (_repeat_heads(cx, t, cx.shape(q)) for t in (k, v))
    scale = opts["scale"] if opts["scale"] is not None else 1.0 / math.sqrt(head_dim)
    try:
        shapes.infer("novella.attention", [cx.shape(t) for t in (q, k, v)], {}, None)
    except shapes.ShapeError as e:
        raise cx.error(
            f"{e}; derive query, key and value from one input so their lengths are the same symbol"
        ) from None
    mask = cx.operand(3) if cx.is_tensor(3) else None
    if mask is None and not opts["is_causal"]:
        return cx.emit(AttentionOp, query=q, key=k, value=v, scale=ir.FloatAttr.get_f32(float(scale)))
    if mask is not None and opts["is_causal"]:
        raise cx.error("scaled_dot_product_attention with both attn_mask and is_causal=True is not supported")
    additive = _causal(cx, cx.shape(q)[-2], cx.shape(k)[-2]) if mask is None else _additive(cx, mask, cx.kind(3))
    qs = cx.emit(ScalarOp, check=False, input=q, fn=ir.StringAttr.get("mul"), value=ir.FloatAttr.get_f32(scale))
    tr = ir.BoolAttr.get(True)
    scores = cx.emit(MatmulOp, check=False, lhs=qs, rhs=k, transpose_rhs=tr)
    scores = cx.emit(AddOp, check=False, lhs=scores, rhs=additive)
    lq, lk = cx.shape(q)[-2], cx.shape(k)[-2]
    if mask is None or cx.kind(3) == "bool" and _is_causal_mask(cx, mask, lq, lk):
        scores.owner.attributes[CAUSAL_ATTR] = ir.UnitAttr.get()  # legalize: flash_attention causal = 1
    probs = cx.emit(SoftmaxOp, check=False, input=scores, safe=ir.BoolAttr.get(True))
    return cx.emit(MatmulOp, lhs=probs, rhs=v, transpose_rhs=ir.BoolAttr.get(False))


def _additive(cx, mask, kind: str):
    """A bool mask as 0 where kept and -inf elsewhere; a float mask as it is."""
    if kind != "bool":
        return mask
    return cx.emit(WhereOp, check=False, cond=mask, x=cx.scalar(0.0), y=cx.scalar(-math.inf))


def _is_causal_mask(cx, mask, lq, lk) -> bool:
    """`mask` is compare(le, key positions [.., 1, Lk], query positions [.., Lq, 1]) (or ge, swapped) of
    position tables 0, 1, 2, ...: torch's top-left causal mask (as transformers builds it)."""
    owner = mask.owner
    if not isinstance(owner, ir.OpView) or owner.operation.name != "novella.compare" or not sy.equal(lq, lk):
        return False
    fn = ir.StringAttr(owner.attributes["fn"]).value
    if fn not in ("le", "ge"):
        return False
    row, col = owner.operands if fn == "le" else list(owner.operands)[::-1]
    return _positions_along(cx, row, lk, -1) and _positions_along(cx, col, lq, -2)


def _positions_along(cx, v, n, axis: int) -> bool:
    """`v` is 0, 1, ..., n - 1 along `axis`, size 1 elsewhere: reshapes of a slice from 0 of a table 0, 1, 2, ..."""
    shape = cx.shape(v)
    rank = len(shape)
    if (
        rank < 2
        or not sy.equal(shape[axis], n)
        or any(sy.as_int(e) != 1 for i, e in enumerate(shape) if i != rank + axis)
    ):
        return False
    while isinstance(v.owner, ir.OpView) and v.owner.operation.name in ("novella.reshape", "novella.slice"):
        op = v.owner
        start = op.attributes["start"] if op.operation.name == "novella.slice" else None
        if start is not None and (not isinstance(start, ir.IntegerAttr) or start.value != 0):
            return False
        v = op.operands[0]
    data = cx.weight_data(v)
    return data is not None and sum(d != 1 for d in data.shape) <= 1 and (data.ravel() == range(data.size)).all()


def _positions(cx, n, shape_of):
    """arange(n) as a [n, 1] (`shape_of` "col") or [1, n] ("row") tensor: a table sliced to n."""
    import numpy as np

    hi = sb.value_range(n, cx.symbols)[1]
    table = cx.add_weight("positions", np.arange(hi, dtype=np.float64).reshape(-1, 1))
    pos = table
    if sy.as_int(n) != hi:
        pos = cx.emit(SliceOp, result_shape=[n, sy.const(1)], check=False, input=table,
                      dim=_i64(0), start=_i64(0))  # fmt: skip
    if shape_of == "row":
        pos = cx.emit(ReshapeOp, result_shape=[sy.const(1), n], check=False, input=pos)
    return pos


def _causal(cx, lq, lk):
    """The is_causal mask of torch (top-left aligned: key j is kept for query i when j <= i), additive."""
    keep = cx.emit(CompareOp, check=False, lhs=_positions(cx, lk, "row"), rhs=_positions(cx, lq, "col"),
                   fn=ir.StringAttr.get("le"))  # fmt: skip
    return _additive(cx, keep, "bool")


def _repeat_heads(cx, t, q_shape):
    """[B, Hkv, L, D] -> [B, Hq, L, D], each key/value head repeated Hq / Hkv times (GQA)."""
    shape = cx.shape(t)
    hq, hkv = sy.as_int(q_shape[-3]), sy.as_int(shape[-3])
    if hq is None or hkv is None or hq % hkv:
        raise cx.error(f"enable_gqa with {hq} query heads and {hkv} key/value heads is not supported")
    if hq == hkv:
        return t
    lead = list(shape[:-3])
    grouped = cx.emit(ReshapeOp, result_shape=lead + [shape[-3], sy.const(1)] + list(shape[-2:]), check=False, input=t)
    wide = lead + [shape[-3], sy.const(hq // hkv)] + list(shape[-2:])
    rep = cx.emit(BroadcastOp, result_shape=wide, check=False, input=grouped)
    return cx.emit(ReshapeOp, result_shape=lead + [sy.const(hq)] + list(shape[-2:]), check=False, input=rep)


def _i64(v: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))
