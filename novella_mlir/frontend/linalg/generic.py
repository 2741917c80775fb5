"""`linalg.generic` -> `novella.generic` (parallel iterators) or a `novella.reduce` (reduction iterators)."""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith

from ... import symbolic as sy
from ...dialects.novella import GENERIC_INPUTS, BroadcastOp, GenericOp, ReduceOp, YieldOp
from ..lowering.elementwise import size_value
from . import body as bd
from .body import REDUCE as _REDUCE
from .body import Fill


class Space:
    """The iteration space of a linalg.generic: its loop sizes and, per operand, the loops it reads."""

    def __init__(self, cv, op):
        self.maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
        self.iters = [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(op.attributes["iterator_types"])]
        self.n = self.maps[0].n_dims
        self.sizes: list = [None] * self.n
        for v, m in zip(op.operands, self.maps):
            if _scalar(cv.env[v]):
                continue
            for e, size in zip(m.results, cv.shape(v)):
                if isinstance(e, ir.AffineDimExpr) and self.sizes[ir.AffineDimExpr(e).position] is None:
                    self.sizes[ir.AffineDimExpr(e).position] = size
        if any(s is None for s in self.sizes):
            raise cv.refuse("its linalg.generic has a loop no operand reads (it needs linalg.index)")

    def loops(self, k: int) -> list:
        """The loops operand `k` reads, one per dim (None: a constant index, a size-1 dim)."""
        out = []
        for e in self.maps[k].results:
            if isinstance(e, ir.AffineDimExpr):
                out.append(ir.AffineDimExpr(e).position)
            elif isinstance(e, ir.AffineConstantExpr) and ir.AffineConstantExpr(e).value == 0:
                out.append(None)
            else:
                raise ValueError(f"map {self.maps[k]}")
        return out


def generic(cv, op):
    try:
        space = Space(cv, op)
        for k in range(len(op.operands)):
            space.loops(k)
    except ValueError as e:
        raise cv.refuse(f"its linalg.generic reads an operand through the map {e}, not a projection") from None
    if any(op.operation.name == "linalg.index" for op in op.regions[0].blocks[0].operations):
        raise cv.refuse("its linalg.generic body reads loop indices (linalg.index)")
    if "reduction" in space.iters:
        return _reduction(cv, op, space)
    out_loops = space.loops(len(op.operands) - 1)
    if [d for d in out_loops if d is not None] != list(range(space.n)):
        raise cv.refuse("its linalg.generic writes its result through a permutation")
    copied = _copy_of(op)
    if copied is not None:  # a broadcast copy: no VEC, a reshape (DRAM alias) or a broadcast
        x, _ = _aligned(cv, cv.tensor(op.operands[copied]), space, copied)
        shape = cv.shape(op.operands[-1])
        return cv.reshape(x, shape) if sy.equal_shapes(cv.cx.shape(x), shape) else cv.emit(BroadcastOp, shape, input=x)
    return elementwise(cv, op, space, cv.shape(op.operands[-1]))


def _copy_of(op) -> int | None:
    """The input a body that only yields one of its inputs (a tensor) copies, or None."""
    block = op.regions[0].blocks[0]
    ops = list(block.operations)
    if len(ops) != 1 or not isinstance(ops[0].operands[0].owner, ir.Block):
        return None
    k = next(i for i, a in enumerate(block.arguments) if a == ops[0].operands[0])
    return k if k < len(op.operands) - 1 and isinstance(op.operands[k].type, ir.RankedTensorType) else None


def elementwise(cv, op, space: Space, shape: list, yield_value=None, skip=()) -> ir.Value:
    """A novella.generic over the whole iteration space (result `shape`, one dim per loop) computing
    the body of `op` (or its value `yield_value`, without the ops `skip`)."""
    block = op.regions[0].blocks[0]
    n_in = len(op.operands) - 1
    uses_out = bool(list(block.arguments[n_in].uses)) and yield_value is None
    env = {k: v for k, v in cv.env.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    tensors, maps, slots = [], [], {}
    for k, v in enumerate(op.operands if uses_out else op.operands[:n_in]):
        x = cv.env[v]
        if _scalar(x) or isinstance(x, Fill) and x.value is not None:
            env[block.arguments[k]] = x if _scalar(x) else x.value
            continue
        aligned, m = _aligned(cv, cv.tensor(v), space, k)
        slots[block.arguments[k]] = len(tensors)
        tensors.append(aligned)
        maps.append(m)
    for v in _captured_sizes(cv, block):
        slots[v] = len(tensors)
        tensors.append(cv.reshape(size_value(cv.cx, cv.env[v]), [sy.const(1)] * space.n))
        maps.append(_map(space.n, []))
    if not tensors:
        raise cv.refuse("its linalg.generic reads no tensor (it computes a constant)")
    if len(tensors) > GENERIC_INPUTS:
        raise cv.refuse(f"its linalg.generic reads {len(tensors)} tensors (novella.generic takes {GENERIC_INPUTS})")
    rtype = sy.tensor_type(shape, ir.F32Type.get(), cv.cx.n_syms)
    extra = {f"x{i}": t for i, t in enumerate(tensors[1:], 1)}
    g = GenericOp(tensors[0], ir.ArrayAttr.get(maps), result=rtype, loc=cv.cx.op.location, **extra)
    new = g.regions[0].blocks.append(*[ir.F32Type.get()] * len(tensors))
    env.update({arg: new.arguments[i] for arg, i in slots.items()})
    b = bd.Builder(env)
    with ir.InsertionPoint(new), cv.cx.op.location:
        b.block(block, yield_value, skip)
    if b.demoted:
        g.attributes["demoted"] = ir.StringAttr.get("f64")
    return g.result


def _captured_sizes(cv, block) -> list:
    """The values defined above the body that are symbolic sizes (a mean's divisor over the length): each
    is read as a 0-d tensor computed on the NPU (`size_value`)."""
    out = []
    for o in block.operations:
        for v in o.operands:
            if isinstance(cv.env.get(v), ir.AffineExpr) and v not in out:
                out.append(v)
    return out


def _scalar(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _aligned(cv, x: ir.Value, space: Space, k: int):
    """Operand `k` transposed so the loops it reads increase and reshaped to one dim per loop (1 where it
    broadcasts), with its map `(d0, ..., dn) -> (d_i or 0)`."""
    loops = space.loops(k)
    dims = [i for i, d in enumerate(loops) if d is not None]
    ds = [loops[i] for i in dims]
    if not ds:
        return cv.reshape(x, [sy.const(1)] * space.n), _map(space.n, [])
    x = cv.reshape(x, [cv.cx.shape(x)[i] for i in dims])
    x = cv.transpose(x, sorted(range(len(ds)), key=lambda j: ds[j]))
    src = iter(cv.cx.shape(x))
    shape = [next(src) if d in ds else sy.const(1) for d in range(space.n)]
    return cv.reshape(x, shape), _map(space.n, ds)


def _map(n: int, read) -> ir.AffineMapAttr:
    exprs = [ir.AffineDimExpr.get(d) if d in read else ir.AffineConstantExpr.get(0) for d in range(n)]
    return ir.AffineMapAttr.get(ir.AffineMap.get(n, 0, exprs))


def _reduction(cv, op, space: Space) -> ir.Value:
    block = op.regions[0].blocks[0]
    n_in = len(op.operands) - 1
    out_arg = block.arguments[n_in]
    y = next(o for o in block.operations if o.operation.name == "linalg.yield").operands[0]
    comb = y.owner
    name = comb.operation.name if isinstance(comb, ir.OpView) else ""
    uses = list(out_arg.uses)
    if name not in _REDUCE or len(uses) != 1 or out_arg not in list(comb.operands):
        raise cv.refuse(f"its linalg.generic is a reduction the NPU has no combiner for (yield of '{name or y}')")
    fn = _REDUCE[name][0]
    item = next(v for v in comb.operands if v != out_arg)
    full = [sy.const(1) if s is None else s for s in space.sizes]
    x = elementwise(cv, op, space, full, yield_value=item, skip=[comb.operation])
    red = [d for d in range(space.n) if space.iters[d] == "reduction"]
    kept = [d for d in space.loops(n_in) if d is not None]
    x = cv.transpose(x, kept + red)
    ks = [full[d] for d in kept]
    x = cv.reshape(x, (ks or [sy.const(1)]) + [sy.numel([full[d] for d in red])])
    r = cv.emit(ReduceOp, fn=ir.StringAttr.get(fn), input=x)
    r = cv.reshape(r, cv.shape(op.operands[-1]))
    return cv._accumulate(r, op.operands[-1], fn)


_COMBINE = {"sum": "arith.addf", "max": "arith.maximumf", "min": "arith.minimumf"}


def combine(cv, v: ir.Value, init, fn: str) -> ir.Value:
    """`fn`(v, init) elementwise: a reduction's or matmul's result with a non-identity initial value."""
    shape = cv.cx.shape(v)
    n = len(shape)
    ident = ir.AffineMapAttr.get(ir.AffineMap.get_identity(n))
    x = cv.env[init]
    rtype = sy.tensor_type(shape, ir.F32Type.get(), cv.cx.n_syms)
    f32 = ir.F32Type.get()
    if isinstance(x, Fill):
        g = GenericOp(v, ir.ArrayAttr.get([ident]), result=rtype, loc=cv.cx.op.location)
        blk = g.regions[0].blocks.append(f32)
        with ir.InsertionPoint(blk), cv.cx.op.location:
            c = arith.ConstantOp(f32, ir.FloatAttr.get(f32, x.value)).result
            YieldOp(ir.Operation.create(_COMBINE[fn], results=[f32], operands=[blk.arguments[0], c]).result)
        return g.result
    g = GenericOp(v, ir.ArrayAttr.get([ident, ident]), result=rtype, loc=cv.cx.op.location, x1=cv.tensor(init))
    blk = g.regions[0].blocks.append(f32, f32)
    with ir.InsertionPoint(blk), cv.cx.op.location:
        YieldOp(ir.Operation.create(_COMBINE[fn], results=[f32], operands=list(blk.arguments)).result)
    return g.result
