"""The legalize patterns that form `novella.flash_attention` (`kernels/flash_attention.py`): the
eager matmul -> softmax -> matmul chain fuses into one op, which then absorbs the head transposes
around it and a scalar scale of its query."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.novella import FlashAttentionOp, ReshapeOp
from .attention import softmax_scale
from .flash_attention import CAUSAL_ATTR, _batch
from .support import producer


def _only_use(v: ir.Value) -> bool:
    return len(list(v.uses)) == 1


def _shape(v: ir.Value):
    return sy.shape_of(ir.RankedTensorType(v.type))


def _flag(op, name: str) -> bool:
    return name in op.attributes and bool(ir.IntegerAttr(op.attributes[name]).value)


def _split_mask(x: ir.Value, lq, lk):
    """(scores, mask, causal, add op) of a softmax input that is `scores + mask` (either order), or `x` itself."""
    add = producer(x, "novella.add")
    if add is None:
        return x, None, False, None
    for scores, mask in ((add.operands[0], add.operands[1]), (add.operands[1], add.operands[0])):
        mm = producer(scores, "novella.matmul")
        if mm is not None and sy.equal_shapes(_shape(scores), _shape(x)):
            return scores, mask, CAUSAL_ATTR in add.attributes and sy.equal(lq, lk), add
    return None, None, False, None


def _mask_ok(mask, batch, lq, lk) -> bool:
    m = _shape(mask)
    if len(m) < 2 or not sy.equal(m[-1], lk) or not (sy.as_int(m[-2]) == 1 or sy.equal(m[-2], lq)):
        return False
    nb = _batch(m)
    return sy.as_int(nb) == 1 or sy.equal(nb, batch)


def _per_lead(mask, y, lq, lk) -> bool:
    """A mask [n, 1.., Lq or 1, Lk] over a static result [n, h.., Lq, D]: one mask per leading index,
    broadcast over the other batch dims (a batched decode step's mask per sequence)."""
    m, s = _shape(mask), _shape(y)
    if len(m) != len(s) or len(m) < 3 or not _mask_ok(mask, _batch(m), lq, lk):
        return False
    static = all(sy.as_int(d) is not None for d in s[:-2])
    return static and sy.equal(m[0], s[0]) and all(sy.as_int(d) == 1 for d in m[1:-2])


def _operands_ok(q, k, v, y) -> bool:
    shapes_ = [_shape(t) for t in (q, k, v)]
    yb = _batch(_shape(y))
    if len({len(s) for s in shapes_}) != 1 or len(shapes_[0]) != len(_shape(y)):
        return False
    static = sy.as_int(shapes_[0][-1]) is not None and sy.as_int(shapes_[2][-1]) is not None
    return static and all(sy.as_int(_batch(s)) == 1 or sy.equal(_batch(s), yb) for s in shapes_)


def _erase_dead(rewriter, v: ir.Value) -> None:
    """Erase the producer of `v` and, recursively, of its operands, while nothing else uses them."""
    owner = v.owner
    if not isinstance(owner, ir.OpView) or list(owner.results[0].uses):
        return
    operands = list(owner.operands)
    rewriter.erase_op(owner)
    for o in operands:
        _erase_dead(rewriter, o)


def fuse_attention(op, rewriter):
    """matmul(softmax(scale * (matmul(q, k, transpose_rhs) [+ mask])), v) -> flash_attention.

    The scores, the softmax and a mask add must have no other use. A `scalar` mul of q folds into
    the scale. A mask tagged causal by the frontend (`novella.causal`) becomes `causal = 1`; any other
    additive mask [..., Lq or 1, Lk] whose batch is 1 or the result's becomes the `mask` operand.
    The softmax's `safe` (fully masked rows give 0) carries over."""
    sm = producer(op.operands[0], "novella.softmax")
    if _flag(op, "transpose_rhs") or sm is None or not _only_use(sm.results[0]):
        return True
    v, y = op.operands[1], op.results[0]
    lq, lk = _shape(sm.results[0])[-2], _shape(v)[-2]
    scores, mask, causal, add = _split_mask(sm.operands[0], lq, lk)
    qk = producer(scores, "novella.matmul") if scores is not None else None
    if qk is None or not _flag(qk, "transpose_rhs") or not _only_use(scores):
        return True
    scaled = softmax_scale(sm) != 1.0 and not (causal and softmax_scale(sm) > 0)  # scale * -inf = -inf
    if add is not None and (not _only_use(add.results[0]) or scaled):
        return True
    q, k = qk.operands
    if not _operands_ok(q, k, v, y) or (
        mask is not None
        and not causal
        and not (_mask_ok(mask, _batch(_shape(y)), lq, lk) or _per_lead(mask, y, lq, lk))
    ):
        return True
    scale = softmax_scale(sm)
    pre = producer(q, "novella.scalar")
    if pre is not None and ir.StringAttr(pre.attributes["fn"]).value == "mul" and _only_use(q):
        scale *= ir.FloatAttr(pre.attributes["value"]).value
        q = pre.operands[0]
    else:
        pre = None
    with rewriter.ip, op.location:
        new = FlashAttentionOp(query=q, key=k, value=v, mask=None if causal else mask, scale=ir.FloatAttr.get_f32(scale),
                               causal=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(causal)),
                               heads_minor=ir.DenseI64ArrayAttr.get([0, 0, 0, 0]), result=y.type,
                               safe=ir.BoolAttr.get(_flag(sm, "safe")))  # fmt: skip
    rewriter.replace_op(op, new.operation)
    for dead in (sm, add, qk, pre):
        if dead is not None:
            rewriter.erase_op(dead)
    if causal:
        _erase_dead(rewriter, mask)
    return False


def _swaps_heads(op, minor_side) -> bool:
    """A `novella.transpose` of dims -3 and -2 whose `minor_side` value ([..., L, H, D]) has a static H."""
    if not isinstance(op, ir.OpView) or op.operation.name != "novella.transpose":
        return False
    perm, r = list(ir.DenseI64ArrayAttr(op.attributes["perm"])), len(ir.DenseI64ArrayAttr(op.attributes["perm"]))
    dims = _shape(minor_side(op))
    return r >= 3 and perm == list(range(r - 3)) + [r - 2, r - 3, r - 1] and sy.as_int(dims[-2]) is not None


def _only_user(v: ir.Value):
    uses = list(v.uses)
    if len(uses) != 1:
        return None
    user = uses[0].owner
    return user.opview if hasattr(user, "opview") else user


def _unscaled_query(q: ir.Value):
    """(query without a single-use `scalar` mul, possibly behind one single-use reshape, its factor, dead ops)."""
    reshape = producer(q, "novella.reshape") if _only_use(q) else None
    inner = reshape.operands[0] if reshape is not None else q
    pre = producer(inner, "novella.scalar")
    if pre is None or ir.StringAttr(pre.attributes["fn"]).value != "mul" or not _only_use(inner):
        return q, 1.0, []
    factor = ir.FloatAttr(pre.attributes["value"]).value
    if reshape is None:
        return pre.operands[0], factor, [pre]
    new = ReshapeOp(input=pre.operands[0], result=q.type, loc=reshape.location).result
    return new, factor, [reshape, pre]


def absorb_head_transposes(op, rewriter):
    """flash_attention reads a head transpose's input and writes through its result's head
    transpose in place (`heads_minor`: [..., L, H, D] rows, as the projections store them), and
    folds a `scalar` mul of the query (behind at most one reshape) into its scale."""
    minor = list(ir.DenseI64ArrayAttr(op.attributes["heads_minor"]))
    operands, dead = list(op.operands), []
    for i in range(3):
        t = operands[i].owner
        if not minor[i] and _swaps_heads(t, lambda t: t.operands[0]):
            operands[i], minor[i] = t.operands[0], 1
            if not any(t.operation == d.operation for d in dead):  # q, k, v may share one transpose
                dead.append(t)
    out_t = _only_user(op.results[0])
    out_t = out_t if not minor[3] and _swaps_heads(out_t, lambda t: t.results[0]) else None
    with rewriter.ip, op.location:
        operands[0], factor, scaled = _unscaled_query(operands[0])
    if not dead and out_t is None and not scaled:
        return True
    minor[3] = minor[3] or int(out_t is not None)
    result = (out_t or op).results[0].type
    scale = ir.FloatAttr(op.attributes["scale"]).value * factor
    with rewriter.ip, op.location:
        new = FlashAttentionOp(*operands[:3], ir.FloatAttr.get_f32(scale), op.attributes["causal"],
                               ir.DenseI64ArrayAttr.get(minor), result,
                               mask=operands[3] if len(operands) == 4 else None,
                               safe=ir.BoolAttr.get(_flag(op, "safe")))  # fmt: skip
    if out_t is not None:
        rewriter.replace_op(out_t, new.operation)
        rewriter.erase_op(op)
    else:
        rewriter.replace_op(op, new.operation)
    for d in dead + scaled:
        if not list(d.results[0].uses):
            rewriter.erase_op(d)
    return False
