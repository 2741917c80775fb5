"""--novella-inst-gen: lowers tile ops to `novella.inst` NPU instruction templates.

Buffer names become SRAM addresses, tensor references stay as an operand
index (`tensor`, -1 = the result) plus a DRAM offset relative to that
tensor's base, so one template serves every layer that has the same shape.
Fields that are constants are range-checked against the ISA now; the others
are affine maps that the JIT evaluates per grid point."""

from __future__ import annotations

from torch_mlir import ir

from simulator import isa

from .. import symbolic as sy
from ..dialects import fields as lower_fields
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

_DMA = ("sram_stride", "dram_stride", "row_start", "row_step", "row_bound", "rows", "cols")
_MMA = ("a_stride", "b_stride", "acc_stride", "m", "k", "n", "accumulate", "transpose_b")
_VEC = ("dst_stride", "a_stride", "b_stride", "rows", "cols")


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
        fields = _LOWER[name](attrs, buffers)
    except KeyError as e:
        raise PassError(macro, f"{name} refers to unknown buffer or field {e}") from None
    if "when" in attrs:
        fields["when"] = attrs["when"]
    _check_constants(macro, fields)
    return fields


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


def _copy(attrs, names, out):
    for n in names:
        if n in attrs:
            out[n] = attrs[n]
    return out


def _mem(buf) -> ir.Attribute:
    return _i64(isa.Mem.SPAD if buf.mem == "spad" else isa.Mem.ACC)


def _dma(opcode):
    def lower(attrs, buffers):
        buf = buffers[ir.StringAttr(attrs["buffer"]).value]
        out = {"opcode": ir.StringAttr.get(opcode), "mem": _mem(buf)}
        if "tensor" in attrs:
            out["tensor"] = attrs["tensor"]
        out["sram_addr"] = _addr(buf, attrs.get("buf_offset"))
        out["dram_base"] = attrs["dram_offset"]
        return _copy(attrs, _DMA, out)

    return lower


def _gather(attrs, buffers):
    out = _dma("GATHER")(attrs, buffers)
    idx = buffers[ir.StringAttr(attrs["idx"]).value]
    out["idx_mem"] = _mem(idx)
    out["idx_addr"] = _addr(idx, attrs.get("idx_offset"))
    out.pop("row_start", None)
    out.pop("row_step", None)
    return out


def _mma(attrs, buffers):
    bufs = {k: buffers[ir.StringAttr(attrs[k]).value] for k in ("acc", "lhs", "rhs")}
    if bufs["acc"].mem != "acc" or bufs["lhs"].mem != "spad" or bufs["rhs"].mem != "spad":
        raise KeyError("mma needs acc in the accumulator and lhs/rhs in the scratchpad")
    out = {"opcode": ir.StringAttr.get("MATMUL")}
    out["acc_addr"] = _addr(bufs["acc"], attrs.get("acc_offset"))
    out["a_addr"] = _addr(bufs["lhs"], attrs.get("lhs_offset"))
    out["b_addr"] = _addr(bufs["rhs"], attrs.get("rhs_offset"))
    return _copy(attrs, _MMA, out)


def _vop(attrs, buffers):
    out = {"opcode": ir.StringAttr.get("VEC"), "fn": attrs["fn"]}
    out["mode"] = attrs.get("mode", ir.StringAttr.get("TENSOR"))
    for role in ("dst", "a", "b"):
        if role in attrs:
            buf = buffers[ir.StringAttr(attrs[role]).value]
            out[f"{role}_mem"] = _mem(buf)
            out[f"{role}_addr"] = _addr(buf, attrs.get(f"{role}_offset"))
    if "imm" in attrs:
        out["imm"] = attrs["imm"]
    return _copy(attrs, _VEC, out)


_LOWER = {
    "novella.dma_load": _dma("LOAD"),
    "novella.dma_store": _dma("STORE"),
    "novella.dma_gather": _gather,
    "novella.mma": _mma,
    "novella.vop": _vop,
}


_UNCHECKED = frozenset(("opcode", "tensor", "when", "fn", "mode", "imm"))


def _check_constants(macro, fields) -> None:
    """Constant fields fit the ISA now (the `novella.inst` verifier checks them again after each stage)."""
    opcode = ir.StringAttr(fields["opcode"]).value
    for name, attr in fields.items():
        if name not in _UNCHECKED and isinstance(attr, ir.IntegerAttr):
            why = lower_fields.field_range(opcode, name, attr.value)
            if why:
                raise PassError(macro, why)


def inst_fields(inst) -> dict:
    """The fields of a `novella.inst` as Python values / affine maps (for the artifact)."""
    return {k: from_attr(v) for k, v in attr_dict(inst).items()}
