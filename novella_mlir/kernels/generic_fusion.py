"""Elementwise fusion (--novella-fuse-elementwise): a pointwise producer inlined into its pointwise consumer,
as one `novella.generic` whose body holds both, so the intermediate never leaves the scratchpad.

`Pointwise ops` are `novella.generic` and the typed ones a body can express (`add`, `sub`, `mul`, `div`,
`maximum`, `minimum`, `compare`, `where`, `scalar`, and the `math` functions of `_MATH`). A consumer reads
its producer at an indexing map (the identity, or with 0 where it broadcasts the producer: a row's
`rsqrt` read by every column); the producer's inputs are read at its maps composed with that one, and its
body is cloned once per distinct map. The cost model (`predicted`, the generic kernel's row-kernel cost at
the planned length) decides: the fusion is made when the fused op is predicted cheaper than the two alone.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith
from torch_mlir.dialects import math as mmath

from .. import symbolic as sy
from ..dialects.novella import GENERIC_INPUTS, GenericOp, ReshapeOp, YieldOp
from . import TensorView, module_symbols, plan_lengths
from .generic import Generic, _cost, _inline
from .pointwise import Geometry
from .support import ceildiv

_BINARY = {"add": arith.AddFOp, "sub": arith.SubFOp, "mul": arith.MulFOp, "div": arith.DivFOp,
           "maximum": arith.MaximumFOp, "minimum": arith.MinimumFOp}  # fmt: skip
_SCALAR = {"add": arith.AddFOp, "sub": arith.SubFOp, "mul": arith.MulFOp, "div": arith.DivFOp,
           "max": arith.MaximumFOp, "min": arith.MinimumFOp}  # fmt: skip
_PREDICATE = {"eq": 1, "gt": 2, "ge": 3, "lt": 4, "le": 5, "ne": 13}  # arith.cmpf's ordered predicates (une: 13)
_UNARY = {"exp": mmath.ExpOp, "log": mmath.LogOp, "tanh": mmath.TanhOp, "rsqrt": mmath.RsqrtOp, "sqrt": mmath.SqrtOp,
          "abs": mmath.AbsFOp, "sin": mmath.SinOp, "cos": mmath.CosOp, "erf": mmath.ErfOp, "expm1": mmath.ExpM1Op,
          "log1p": mmath.Log1pOp}  # fmt: skip
_COMPOSED = ("neg", "sigmoid", "silu", "reciprocal", "square")


def _kind(op) -> str:
    return op.operation.name.split(".", 1)[1]


def _f32(x: float):
    return arith.ConstantOp(ir.F32Type.get(), ir.FloatAttr.get(ir.F32Type.get(), x)).result


def _math(fn: str, x):
    if fn in _UNARY:
        return _UNARY[fn](x).result
    if fn == "neg":
        return arith.NegFOp(x).result
    if fn == "square":
        return arith.MulFOp(x, x).result
    if fn == "reciprocal":
        return arith.DivFOp(_f32(1.0), x).result
    denom = arith.AddFOp(mmath.ExpOp(arith.NegFOp(x).result).result, _f32(1.0)).result  # sigmoid, silu
    return arith.DivFOp(x if fn == "silu" else _f32(1.0), denom).result


def _as_float(b):
    return arith.UIToFPOp(ir.F32Type.get(), b).result


def pointwise(op) -> bool:
    """Whether `op` is a pointwise op this fusion can put in a body (f32 operands and result)."""
    if not isinstance(op, ir.OpView) or op.operation.name.split(".", 1)[0] != "novella" or len(op.results) != 1:
        return False
    kind = _kind(op)
    if kind == "math":
        return ir.StringAttr(op.attributes["fn"]).value in (*_UNARY, *_COMPOSED)
    if kind == "scalar":
        return ir.StringAttr(op.attributes["fn"]).value in (*_SCALAR, "rsub", *_PREDICATE)
    return kind in (*_BINARY, "compare", "where", "generic")


def _emit(op, args: list):
    """The body ops of pointwise `op` on the scalar values `args` (one per operand), at the insertion point;
    its value."""
    kind = _kind(op)
    if kind == "generic":
        src = op.regions[0].blocks[0]
        env = dict(zip(src.arguments, args))
        return _inline(src, ir.InsertionPoint.current.block, env, keep_yield=False)
    if kind in _BINARY:
        return _BINARY[kind](*args).result
    if kind == "compare":
        return _as_float(arith.CmpFOp(_PREDICATE[ir.StringAttr(op.attributes["fn"]).value], *args).result)
    if kind == "where":
        cond = arith.CmpFOp(13, args[0], _f32(0.0)).result
        return arith.SelectOp(cond, args[1], args[2]).result
    if kind == "math":
        return _math(ir.StringAttr(op.attributes["fn"]).value, args[0])
    fn, c = ir.StringAttr(op.attributes["fn"]).value, _f32(ir.FloatAttr(op.attributes["value"]).value)
    if fn == "rsub":
        return arith.SubFOp(c, args[0]).result
    if fn in _PREDICATE:
        return _as_float(arith.CmpFOp(_PREDICATE[fn], args[0], c).result)
    return _SCALAR[fn](args[0], c).result


def _reads(op, made: list) -> list:
    """[(value, map, scalar type)] of `op`'s operands over its result's dims (d<i>, or 0 where it broadcasts);
    an operand of lower rank is reshaped with leading 1s (a view: the same DRAM), appended to `made`."""
    if _kind(op) == "generic":
        args = op.regions[0].blocks[0].arguments
        return [(v, m, a.type) for v, m, a in zip(op.operands, ir.ArrayAttr(op.attributes["indexing_maps"]), args)]
    out = sy.shape_of(ir.RankedTensorType(op.results[0].type))
    n, out_reads = len(out), []
    for v in op.operands:
        shape = sy.shape_of(ir.RankedTensorType(v.type))
        if len(shape) < n:
            shape = [sy.const(1)] * (n - len(shape)) + list(shape)
            rtype = sy.tensor_type(shape, ir.F32Type.get(), len(module_symbols(op)))
            with ir.InsertionPoint(op), op.location:
                made.append(ReshapeOp(v, rtype))
            v = made[-1].result
        dims = [ir.AffineConstantExpr.get(0) if sy.as_int(s) == 1 and sy.as_int(o) != 1 else ir.AffineDimExpr.get(i)
                for i, (s, o) in enumerate(zip(shape, out))]  # fmt: skip
        out_reads.append((v, ir.AffineMapAttr.get(ir.AffineMap.get(n, 0, dims)), ir.F32Type.get()))
    return out_reads


def _compose(inner, outer):
    """The map reading `inner`'s operand over the consumer's dims: `inner` (over the producer's dims)
    after `outer` (the consumer's read of the producer)."""
    o = ir.AffineMapAttr(outer).value
    results = [o.results[ir.AffineDimExpr(e).position] if isinstance(e, ir.AffineDimExpr) else e
               for e in ir.AffineMapAttr(inner).value.results]  # fmt: skip
    return ir.AffineMapAttr.get(ir.AffineMap.get(o.n_dims, 0, results))


def fuse(consumer, producer, pv, made: list):
    """One `novella.generic` computing generic `consumer` with generic `producer`'s body in place of every
    read of `pv` (the value `producer` stands for), inserted before `consumer`, not yet used; None when it
    would read more than GENERIC_INPUTS tensors. The fused op is appended to `made`."""
    if ir.RankedTensorType(pv.type).rank != ir.RankedTensorType(consumer.results[0].type).rank:
        return None
    creads, preads = _reads(consumer, made), _reads(producer, made)
    outers: list = []  # the distinct maps the consumer reads `pv` at (attributes are uniqued: == compares)
    for v, m, _ in creads:
        if v == pv and m not in outers:
            outers.append(m)
    slots = [(v, m, t) for v, m, t in creads if v != pv]
    for outer in outers:
        slots += [(w, _compose(m, outer), t) for w, m, t in preads]
    unique: list = []
    for v, m, t in slots:
        same = [u for u in unique if u[0] == v and u[1] == m]
        if same and same[0][2] != t:
            return None
        if not same:
            unique.append((v, m, t))
    if len(unique) > GENERIC_INPUTS:
        return None
    index = [next(j for j, u in enumerate(unique) if u[0] == v and u[1] == m) for v, m, _ in slots]
    with ir.InsertionPoint(consumer), consumer.location:
        extra = {f"x{i}": u[0] for i, u in enumerate(unique[1:], 1)}
        fused = GenericOp(unique[0][0], ir.ArrayAttr.get([u[1] for u in unique]), result=consumer.results[0].type,
                          **extra)  # fmt: skip
    made.append(fused)
    for o in (consumer, producer):
        if "demoted" in o.attributes:
            fused.attributes["demoted"] = o.attributes["demoted"]
    block = fused.regions[0].blocks.append(*[u[2] for u in unique])
    own = iter(index)
    with ir.InsertionPoint(block), consumer.location:
        args = [block.arguments[next(own)] for v, _, _ in creads if v != pv]
        inlined = [_emit(producer, [block.arguments[next(own)] for _ in preads]) for _ in outers]
        rest = iter(args)
        YieldOp(_emit(consumer, [inlined[outers.index(m)] if v == pv else next(rest) for v, m, _ in creads]))
    return fused


def predicted(target, op) -> float:
    """Predicted cycles of `op` run as a `novella.generic` (`op` is one, or a temporary one standing for a
    typed pointwise op), by the generic kernel's cost at the planned length."""
    tv = TensorView(op)
    g = Geometry(tv, list(range(len(op.operands))))
    kernel = Generic()
    tiling = kernel.tile(op, tv, target, {})
    lengths = plan_lengths(op)
    rows = sy.evaluate(g.r, lengths)
    outer = 1
    for e in (*g.batch_sizes, ceildiv(g.c, tiling.tiles["tc"])):
        outer *= sy.evaluate(e, lengths)
    return outer * _cost(target, g, kernel._plan(op, g), rows, tiling.tiles["tc"], tiling.tiles["tm"])


def as_generic(op, made: list):
    """A temporary `novella.generic` equal to pointwise `op` (itself if it is one)."""
    if _kind(op) == "generic":
        return op
    reads = _reads(op, made)
    with ir.InsertionPoint(op), op.location:
        extra = {f"x{i}": r[0] for i, r in enumerate(reads[1:], 1)}
        g = GenericOp(reads[0][0], ir.ArrayAttr.get([r[1] for r in reads]), result=op.results[0].type, **extra)
    made.append(g)
    block = g.regions[0].blocks.append(*[ir.F32Type.get()] * len(reads))
    with ir.InsertionPoint(block), op.location:
        YieldOp(_emit(op, list(block.arguments)))
    return g


def erase(ops: list) -> None:
    """Erases `ops` (created by this module, unused), the last made first."""
    for o in reversed(ops):
        o.operation.erase()
