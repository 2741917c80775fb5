"""--novella-shape-infer: gives every `?` dim of every tensor its symbolic size (the shape mutator).

The size is an affine expression over the model's symbols, carried as the
tensor encoding, propagated from the function arguments through each op's
shape rule; static dims are checked against it."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects import shapes
from .common import PassError, body_ops, functions


def run(module_op, options, config) -> None:
    symbols = sy.read_symbols(module_op)
    n = len(symbols)
    for fn in functions(module_op):
        block = fn.regions[0].blocks[0]
        for i, arg in enumerate(block.arguments):
            if sy.shape_of(ir.RankedTensorType(arg.type)) is None:
                raise PassError(
                    fn,
                    f"argument #{i} ({arg.type}) has a '?' dim without a symbolic size: write it as "
                    "tensor<...xf32, affine_map<()[s0] -> (...)>> and declare the symbol's bounds in "
                    'the module attribute novella.symbols = {s0 = ["T", min, max]}',
                )
        for op in body_ops(fn):
            _infer_op(op, n)
        _update_signature(fn)


def _infer_op(op, n_syms: int) -> None:
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
