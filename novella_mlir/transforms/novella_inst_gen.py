"""--novella-inst-gen: lowers tile ops to `novella.inst` NPU instruction templates.

Buffer names become SRAM addresses, tensor references stay as an operand
index (`tensor`, -1 = the result) plus a DRAM offset relative to that
tensor's base, so one template serves every layer that has the same shape.
Fields that are constants are range-checked against the ISA now; the others
are affine maps that the JIT evaluates per grid point."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects import fields as lower_fields
from ..dialects.fields import INST_FIELDS, MEMS, ROLES, TILE_OPCODES
from .common import (
    PassError,
    attr_dict,
    body_ops,
    check_symbols,
    from_attr,
    functions,
    ir_memo,
    remember,
    require_stage,
    tensor_ops,
)
from .novella_macro_gen import tiling_of


def run(module_op, options, config) -> None:
    check_symbols(module_op)
    require_stage(module_op, "novella-inst-gen", None, "novella-macro-gen")
    for op in tensor_ops(module_op):
        if op.operation.name != "novella.reshape":
            raise PassError(
                op,
                "is not expanded into a novella.macro: --novella-inst-gen expects the output of "
                "--novella-macro-gen; run it first",
            )
    for fn in functions(module_op):
        for op in body_ops(fn):
            if op.operation.name == "novella.macro":
                _lower_macro(op)


_LOWERED = ir_memo()  # (tile op name, its attributes, the macro's buffers) -> the inst's attributes


def _lower_macro(macro) -> None:
    buffers = macro.attributes["buffers"]
    block = macro.regions[0].blocks[0]
    for tile_op in list(block.operations):
        name, items = tile_op.operation.name, tuple(tile_op.attributes.items())
        fields = remember(_LOWERED, (name, items, buffers), _lower, macro, name, items)
        ir.Operation.create(
            "novella.inst",
            operands=list(tile_op.operands),
            attributes=fields,
            loc=tile_op.location,
            ip=ir.InsertionPoint(tile_op),
        )
        tile_op.operation.erase()


def _lower(macro, name: str, items: tuple) -> dict:
    """The attributes of the `novella.inst` of one tile op of `macro`, from its (name, attribute) pairs
    (constants range-checked)."""
    attrs = dict(items)
    buffers = {b.name: b for b in tiling_of(macro).buffers}
    try:
        fields = _inst_fields(name, attrs, buffers)
    except KeyError as e:
        raise PassError(macro, f"{name} refers to unknown buffer or field {e}") from None
    except ValueError as e:
        raise PassError(macro, f"{name}: {e}") from None
    _check_constants(macro, fields)
    return fields


def _inst_fields(name: str, attrs: dict, buffers: dict) -> dict:
    """The tile op's buffer roles become address and memory fields (`ROLES`), `dram_offset` the
    `dram_base`; its ISA fields, `tensor` and `when` carry over (a gather's row walk does not)."""
    opcode = TILE_OPCODES[name]
    out = {"opcode": ir.StringAttr.get(opcode)}
    for role, (offset, addr, mem) in ROLES[opcode].items():
        if role not in attrs:
            continue
        buf = buffers[ir.StringAttr(attrs[role]).value]
        if mem in MEMS and buf.mem != mem:
            raise ValueError(f"{role} '{buf.name}' is in the {buf.mem} memory; {opcode} reads it from the {mem}")
        if mem not in MEMS:
            out[mem] = _i64(MEMS[buf.mem])
        out[addr] = _addr(buf, attrs.get(offset))
    if "dram_offset" in attrs:
        out["dram_base"] = attrs["dram_offset"]
    if opcode == "VEC":
        out["mode"] = attrs.get("mode", ir.StringAttr.get("TENSOR"))
    carried = INST_FIELDS[opcode].keys() | {"tensor", "when", "lane"}
    out.update((k, v) for k, v in attrs.items() if k in carried and k not in out)
    return out


def _addr(buf, offset_attr):
    """Buffer base + relative offset, as an int or an affine map attribute."""
    if offset_attr is None:
        return _i64(buf.offset)
    if isinstance(offset_attr, ir.IntegerAttr):
        return _i64(buf.offset + offset_attr.value)
    m = ir.AffineMapAttr(offset_attr).value
    shifted = [e + sy.const(buf.offset) for e in m.results]
    return ir.AffineMapAttr.get(ir.AffineMap.get(m.n_dims, m.n_symbols, shifted))


def _i64(v: int) -> ir.Attribute:
    return ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(v))


_UNCHECKED = frozenset(("opcode", "tensor", "when", "lane", "fn", "mode", "imm"))


def _check_constants(macro, fields) -> None:
    """Constant fields fit the ISA now (the `novella.inst` verifier checks them again after each stage)."""
    opcode = ir.StringAttr(fields["opcode"]).value
    for name, attr in fields.items():
        if name not in _UNCHECKED and isinstance(attr, ir.IntegerAttr):
            why = lower_fields.field_range(opcode, name, attr.value)
            if why:
                raise PassError(macro, f"{why} (kernel {macro.attributes['kernel']})")


def inst_fields(inst) -> dict:
    """The fields of a `novella.inst` as Python values / affine maps (for the artifact)."""
    return {k: from_attr(v) for k, v in attr_dict(inst).items()}
