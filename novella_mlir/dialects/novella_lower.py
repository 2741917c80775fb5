"""The tile, macro and instruction levels of the `novella` dialect (one dialect, `dialect.Novella`,
registered by `novella.load`).

Split from `novella.py` (the graph level: the tensor ops of the frontend and legalize) because these
ops carry what the backend passes decide (tiles, buffers, grid, schedule, DRAM placement, ISA
fields) and their verifiers check those decisions, not tensor shapes."""

from collections.abc import Sequence

from torch_mlir import ir
from torch_mlir.dialects import ext

from .dialect import Novella

Tensor = ir.RankedTensorType


class DmaGatherOp(Novella.Operation, name="dma_gather"):
    """Tile gather: rows of tensor `src` picked by the index buffer `idx` into SRAM `buffer` (GATHER)."""

    src: ext.Operand[Tensor]
    buffer: ir.StringAttr
    idx: ir.StringAttr
    tensor: ir.IntegerAttr


class MacroOp(Novella.Operation, name="macro", traits=[ir.NoTerminatorTrait]):
    """One tiled kernel: its region runs once per point of the tile `grid`.

    `grid` maps the symbols to the loop extents (one result per loop dim,
    outermost first). Tile ops in the region read tensors through their SSA
    operand (captured from above), write the macro's result, and address
    SRAM by buffer name; `novella-inst-gen` turns them into `novella.inst`."""

    kernel: ir.StringAttr
    grid: ir.AffineMapAttr
    result: ext.Result[Tensor]
    body: ext.Region


class DmaLoadOp(Novella.Operation, name="dma_load"):
    """Tile load: rows of tensor `src` into SRAM `buffer`; `tensor` is its operand slot in the kernel.

    Address attributes are affine maps over (grid dims)[symbols]."""

    src: ext.Operand[Tensor]
    buffer: ir.StringAttr
    tensor: ir.IntegerAttr


class DmaStoreOp(Novella.Operation, name="dma_store"):
    """Tile store: rows of SRAM `buffer` into the enclosing macro's result tensor."""

    buffer: ir.StringAttr


class MmaOp(Novella.Operation, name="mma"):
    """Tile matmul on the MAC array: `acc (+)= lhs @ rhs`, buffers named by attribute."""

    acc: ir.StringAttr
    lhs: ir.StringAttr
    rhs: ir.StringAttr


class VopOp(Novella.Operation, name="vop"):
    """Tile vector op `fn` on SRAM buffers (`dst`, `a`, optional `b` or `imm`)."""

    fn: ir.StringAttr
    dst: ir.StringAttr


class InstOp(Novella.Operation, name="inst"):
    """One NPU instruction template. Each ISA field is an integer (constant),
    or an affine map over (grid dims)[symbols] whose results are combined
    with `min`. `when` (an integer set over the same dims) guards it. A LOAD
    has the tensor it reads as operand; `dram_base` is relative to it."""

    src: Sequence[ext.Operand[Tensor]]
    opcode: ir.StringAttr
