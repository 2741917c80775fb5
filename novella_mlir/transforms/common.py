"""Helpers shared by the novella passes."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy


class PassError(Exception):
    """Raised inside a pass; reported as an MLIR error at `op`'s location."""

    def __init__(self, op, message: str):
        super().__init__(message)
        self.op = op
        self.message = message


def functions(module_op) -> list:
    return [op for op in module_op.regions[0].blocks[0].operations if op.operation.name == "func.func"]


def body_ops(fn) -> list:
    return list(fn.regions[0].blocks[0].operations)


def n_symbols(module_op) -> int:
    return len(sy.read_symbols(module_op))


def module_of(op):
    while op.operation.name != "builtin.module":
        op = op.operation.parent
    return op


def set_attr(op, name: str, value) -> None:
    op.operation.attributes[name] = to_attr(value)


def to_attr(value) -> ir.Attribute:
    """Python value -> attribute: int, float, str, list, dict, or an affine map already built."""
    if isinstance(value, ir.Attribute):
        return value
    if isinstance(value, bool):
        return ir.BoolAttr.get(value)
    if isinstance(value, int):
        return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), value)
    if isinstance(value, float):
        return ir.FloatAttr.get_f32(value)
    if isinstance(value, str):
        return ir.StringAttr.get(value)
    if isinstance(value, (list, tuple)):
        return ir.ArrayAttr.get([to_attr(v) for v in value])
    if isinstance(value, dict):
        return ir.DictAttr.get({k: to_attr(v) for k, v in value.items()})
    raise TypeError(f"cannot make an attribute from {value!r}")


def from_attr(attr):
    """Attribute -> Python value (inverse of `to_attr` for plain data)."""
    if isinstance(attr, ir.BoolAttr):
        return attr.value
    if isinstance(attr, (ir.IntegerAttr, ir.FloatAttr, ir.StringAttr)):
        return attr.value
    if isinstance(attr, ir.ArrayAttr):
        return [from_attr(a) for a in attr]
    if isinstance(attr, ir.DictAttr):
        return {attr[i].name: from_attr(attr[i].attr) for i in range(len(attr))}
    return attr


def is_tensor_op(op) -> bool:
    return op.operation.name.startswith("novella.") and op.operation.name not in ("novella.weight",)


def attr_dict(op) -> dict:
    """All attributes of `op` by name."""
    attrs = op.operation.attributes
    return {attrs[i].name: attrs[i].attr for i in range(len(attrs))}
