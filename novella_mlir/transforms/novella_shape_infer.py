"""--novella-shape-infer: gives every `?` dim of every tensor its symbolic size (the shape mutator).

The size is an affine expression over the model's symbols, carried as the
tensor encoding, propagated from the function arguments through each op's
shape rule; static dims are checked against it.

Plain MLIR is accepted too: a function argument written `tensor<?x64xf32>`
(no encoding) gets one new symbol per `?` dim, with bounds
[min-len, max-len] from the pass options; symbols that an op requires to be
equal (the two operands of an add, the contraction dims of a matmul, the
key and value lengths of attention) are unified into one."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects import shapes
from ..symbolic import box as sb
from .common import MAX_SYMBOL_VALUE, PassError, body_ops, check_symbols, functions, require_stage

OPTIONS = {
    "min-len": (int, 1, "lower bound of the symbols made for plain `?` argument dims", (0, MAX_SYMBOL_VALUE)),
    "max-len": (int, 2048, "upper bound of the symbols made for plain `?` argument dims", (0, MAX_SYMBOL_VALUE)),
}


def run(module_op, options, config) -> None:
    symbols = check_symbols(module_op)
    require_stage(module_op, "novella-shape-infer", None, "")
    plain = _plain_dims(module_op)
    if plain:
        lo, hi = options.get("min-len", 1), options.get("max-len", 2048)
        if lo > hi:
            raise PassError(module_op, f"min-len {lo} is greater than max-len {hi}")
        symbols = _unify(module_op, symbols, plain, lo, hi)
    n = len(symbols)
    for fn in functions(module_op):
        block = fn.regions[0].blocks[0]
        for i, arg in enumerate(block.arguments):
            if isinstance(arg.type, ir.RankedTensorType) and sy.shape_of(arg.type) is None:
                raise PassError(fn, f"argument #{i} ({arg.type}) has a '?' dim whose encoding is not an affine map")
        for op in body_ops(fn):
            _infer_op(op, n, symbols)
        _update_signature(fn)


def _plain_dims(module_op) -> list[tuple]:
    """(argument, dim) of every `?` of a function argument without an encoding."""
    out = []
    for fn in functions(module_op):
        for i, arg in enumerate(fn.regions[0].blocks[0].arguments):
            t = arg.type
            if not isinstance(t, ir.RankedTensorType):
                raise PassError(fn, f"argument #{i} has type {t}; the novella dialect needs ranked tensors")
            if t.encoding is None:
                out += [(arg, d) for d in range(t.rank) if t.is_dynamic_dim(d)]
    return out


def _unify(module_op, symbols, plain, lo: int, hi: int) -> list[sy.Symbol]:
    """New symbols for the plain `?` dims, merged until no op asks two of them to be equal."""
    first = len(symbols)
    parent = list(range(len(plain)))

    def find(i):
        while parent[i] != i:
            i = parent[i]
        return i

    while True:
        roots = sorted({find(i) for i in range(len(plain))})
        pos = {r: first + k for k, r in enumerate(roots)}
        _type_args(plain, [pos[find(i)] for i in range(len(plain))], first + len(roots))
        merged = _first_equality(module_op, first + len(roots))
        if merged is None:
            break
        a, b = (roots[p - first] for p in merged)
        parent[max(a, b)] = min(a, b)
    taken = {s.name for s in symbols}
    names = [f"T{p}" if p or "T" in taken else "T" for p in range(first, first + len(roots))]
    new = symbols + [sy.Symbol(first + k, names[k], lo, hi) for k in range(len(roots))]
    sy.write_symbols(module_op, new)
    return new


def _type_args(plain, positions, n_syms) -> None:
    by_arg: dict = {}
    for (arg, d), p in zip(plain, positions):
        by_arg.setdefault(arg, {})[d] = p
    for arg, dims in by_arg.items():
        t = ir.RankedTensorType(arg.type)
        exprs = [sy.sym(dims[d]) if d in dims else sy.const(t.get_dim_size(d)) for d in range(t.rank)]
        arg.set_type(sy.tensor_type(exprs, t.element_type, n_syms))


def _first_equality(module_op, n_syms: int):
    """Runs the shape rules; the first pair of distinct new symbols an op needs equal, else None."""
    for fn in functions(module_op):
        for op in body_ops(fn):
            ins = [sy.shape_of(ir.RankedTensorType(v.type)) for v in op.operands if _ranked(v)]
            for a, b in _equal_dims(op, ins):
                ea, eb = sy.canon(a), sy.canon(b)
                if isinstance(ea, ir.AffineSymbolExpr) and isinstance(eb, ir.AffineSymbolExpr):
                    if ea.position != eb.position:
                        return ea.position, eb.position
            if None not in ins and shapes.has_rule(op.operation.name) and len(op.results) == 1:
                try:
                    _infer_op(op, n_syms)
                except PassError:
                    return None
    return None


def _ranked(v) -> bool:
    return isinstance(v.type, ir.RankedTensorType)


def _bcast_pairs(a, b) -> list:
    return [(x, y) for x, y in zip(reversed(a), reversed(b)) if sy.as_int(x) != 1 and sy.as_int(y) != 1]


def _equal_dims(op, ins) -> list:
    """Pairs of operand sizes the op's verifier requires to be equal."""
    if None in ins or not ins:
        return []
    name = op.operation.name.removeprefix("novella.")
    if name in ("add", "sub", "mul", "div") and len(ins) == 2:
        return _bcast_pairs(*ins)
    if name == "matmul" and len(ins) == 2 and len(ins[0]) >= 2 and len(ins[1]) >= 2:
        a, b = ins
        tr = "transpose_rhs" in op.attributes and bool(ir.IntegerAttr(op.attributes["transpose_rhs"]).value)
        return [(a[-1], b[-1] if tr else b[-2])] + _bcast_pairs(a[:-2], b[:-2])
    if name == "attention" and len(ins) == 3 and min(len(s) for s in ins) >= 2:
        q, k, v = ins
        return [(q[-1], k[-1]), (k[-2], v[-2])] + _bcast_pairs(q[:-2], k[:-2]) + _bcast_pairs(k[:-2], v[:-2])
    if name == "linear" and len(ins) == 3 and len(ins[1]) == 2:
        return [(ins[0][-1], ins[1][1])]
    return []


def _infer_op(op, n_syms: int, symbols=()) -> None:
    """The op's result typed by its shape rule; each size the symbols' bounds fix is a constant (`sb.fixed`)."""
    name = op.operation.name
    if not shapes.has_rule(name) or len(op.results) != 1:
        return
    in_shapes = []
    for v in op.operands:
        s = sy.shape_of(ir.RankedTensorType(v.type))
        if s is None:
            raise PassError(op, f"operand {v.get_name()} has no symbolic shape")
        in_shapes.append(s)
    result = op.results[0]
    rt = ir.RankedTensorType(result.type)
    try:
        exprs = shapes.infer(name, in_shapes, op.attributes, rt)
    except shapes.ShapeError as e:
        raise PassError(op, str(e)) from None
    exprs = [sb.fixed(e, symbols) for e in exprs]
    _check_static(op, rt, exprs)
    result.set_type(sy.tensor_type(exprs, rt.element_type, n_syms))


def _check_static(op, rt, exprs) -> None:
    if len(exprs) != rt.rank:
        raise PassError(op, f"result rank {rt.rank} differs from the inferred shape {[str(e) for e in exprs]}")
    for i, e in enumerate(exprs):
        v = sy.as_int(e)
        if not rt.is_dynamic_dim(i) and v != rt.get_dim_size(i):
            raise PassError(op, f"result dim {i} is {rt.get_dim_size(i)} but the shape rule gives {e}")


def _update_signature(fn) -> None:
    block = fn.regions[0].blocks[0]
    ret = list(block.operations)[-1]
    ftype = ir.FunctionType(ir.TypeAttr(fn.attributes["function_type"]).value)
    new = ir.FunctionType.get([a.type for a in block.arguments], [v.type for v in ret.operands])
    if str(new) != str(ftype):
        fn.attributes["function_type"] = ir.TypeAttr.get(new)
