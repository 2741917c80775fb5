"""The tile, macro and instruction levels of the `novella` dialect (one dialect, `dialect.Novella`,
registered by `novella.load`).

Split from `novella.py` (the graph level: the tensor ops of the frontend and legalize) because these
ops carry what the backend passes decide and their verifiers check those decisions, not tensor
shapes. Each decision is a declared field (an IRDL attribute the verifier requires), or a field of
a table generated from the ISA (`fields.py`): the printed IR after each pass is the whole contract
between the passes."""

from collections.abc import Sequence

from torch_mlir import ir
from torch_mlir.dialects import ext

from . import fields
from .dialect import Novella
from .verify import Invalid, fail, verified

Tensor = ir.RankedTensorType
Field = ir.IntegerAttr | ir.AffineMapAttr


def _checked(check):
    """A verifier running `check(op)` (which raises fields.FieldError) on an op of any operand count."""

    @verified(None)
    def verify(op) -> bool:
        try:
            check(op)
        except fields.FieldError as e:
            raise Invalid(str(e)) from None
        return True

    return verify


@verified(None)
def _verify_macro(op) -> bool:
    """The macro's declared fields, then its body's (each bad one reported at its own op)."""
    try:
        fields.check_macro(op)
    except fields.FieldError as e:
        raise Invalid(str(e)) from None
    bad = fields.check_body(op)
    for child, problem in bad:
        fail(child, problem)
    return not bad


class MacroOp(Novella.Operation, name="macro", traits=[ir.NoTerminatorTrait]):
    """One tiled kernel: its region runs once per point of the tile `grid`.

    Declared fields, written by `--novella-macro-gen` from the tiled op's annotations:
    `kernel` (the op it implements), `grid` (the symbols -> the loop extents, outermost first),
    `tiles` (tile sizes by name), `buffers` (SRAM buffer name -> [mem, offset, size], plus the slot
    count 2 of a double-buffered one), `dram` (the result's DRAM offset, from `--novella-allocate`)
    and `schedule` (`load_slots`, `store_slots`: the step distances of the dependency tokens; 1 and
    1 until `--novella-schedule` decides them; optionally `early`, one tier per template: how early a
    leading load may start before the barrier that precedes the macro). Tile ops in the region read tensors through their SSA
    operand (captured from above), write the macro's result, and address SRAM by buffer name;
    `--novella-inst-gen` turns them into `novella.inst`."""

    kernel: ir.StringAttr
    grid: ir.AffineMapAttr
    tiles: ir.DictAttr
    buffers: ir.DictAttr
    dram: ir.AffineMapAttr
    schedule: ir.DictAttr
    result: ext.Result[Tensor]
    body: ext.Region
    verify_invariants = _verify_macro


class DmaLoadOp(Novella.Operation, name="dma_load"):
    """Tile load: rows of tensor `src` into SRAM `buffer` (at `buf_offset`) from `dram_offset` of the
    tensor; `tensor` is its operand slot in the kernel. The other fields are LOAD's ISA fields but
    addresses (`fields.TILE_FIELDS`), each an integer or an affine map over (grid dims)[symbols]."""

    src: ext.Operand[Tensor]
    buffer: ir.StringAttr
    tensor: ir.IntegerAttr
    dram_offset: Field
    verify_invariants = _checked(fields.in_macro)


class DmaGatherOp(Novella.Operation, name="dma_gather"):
    """Tile gather: rows of tensor `src` picked by the index buffer `idx` into SRAM `buffer` (GATHER)."""

    src: ext.Operand[Tensor]
    buffer: ir.StringAttr
    idx: ir.StringAttr
    tensor: ir.IntegerAttr
    dram_offset: Field
    verify_invariants = _checked(fields.in_macro)


class DmaStoreOp(Novella.Operation, name="dma_store"):
    """Tile store: rows of SRAM `buffer` into the enclosing macro's result tensor at `dram_offset`."""

    buffer: ir.StringAttr
    dram_offset: Field
    verify_invariants = _checked(fields.in_macro)


class MmaOp(Novella.Operation, name="mma"):
    """Tile matmul on the MAC array: `acc (+)= lhs @ rhs`, buffers named by attribute (MATMUL's fields)."""

    acc: ir.StringAttr
    lhs: ir.StringAttr
    rhs: ir.StringAttr
    verify_invariants = _checked(fields.in_macro)


class VopOp(Novella.Operation, name="vop"):
    """Tile vector op `fn` on SRAM buffers (`dst`, `a`, optional `b` or `imm`; VEC's fields)."""

    fn: ir.StringAttr
    dst: ir.StringAttr
    verify_invariants = _checked(fields.in_macro)


class InstOp(Novella.Operation, name="inst"):
    """One NPU instruction template: the fields of its `opcode`'s ISA layout but the token bits
    (`fields.INST_FIELDS`, generated from `simulator.isa.LAYOUT`), each an integer (range-checked)
    or an affine map over (grid dims)[symbols] whose results are combined with `min`. `when` (an
    integer set over the same dims) guards it; `slot` (from `--novella-schedule`) gives the stride
    the JIT adds to an address field at odd steps. A LOAD has the tensor it reads as operand
    (`tensor` its slot); `dram_base` is relative to it."""

    src: Sequence[ext.Operand[Tensor]]
    opcode: ir.StringAttr
    verify_invariants = _checked(fields.in_macro)
