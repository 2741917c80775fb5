"""The kernel library: how each novella tensor op is tiled and turned into a macro.

A kernel is a class whose instance is listed in the op's entry of
`novella_mlir/optable.py`; it provides two steps, used by the passes of the
same name:

* `tile(op, tv, target, options) -> Tiling`: tile sizes, the tile grid (one
  extent expression per loop, outermost first) and the SRAM buffers
  (`--novella-tile`); every size, alignment and field limit comes from the
  `Target` (`novella_mlir/machine/target.py`), whose `budget` is the op's SRAM;
* optionally `predict(op, tv, target, options, plan, at) -> cycles`: the cost model's cycles at
  symbol values `at` of the tiling `tile` picks when planning for symbol values `plan`
  (`plan_lengths`); `--novella-buckets` compares them to decide on shape buckets;
* `macro(op, tv, tiling, b: MacroBuilder)`: the tile-level ops of one grid
  step, with addresses as affine expressions of the grid dims `d0, d1, ...`
  and the symbols `s0, ...` (`--novella-macro-gen`).

Tensors are seen as row-major 2-D views `[rows, cols]` where `cols` is the
(static) last dim and `rows` the product of the others (symbolic).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from torch_mlir import ir

from .. import symbolic as sy
from ..errors import TileFitError

_MEMOS: list = []


def memoized(fn):
    """`fn` remembering its results within one compile (a cost or tile search asked again for layers of
    equal shape, and by `--novella-buckets` then `--novella-tile`); `forget` drops them all."""
    memo = functools.lru_cache(maxsize=1 << 14)(fn)
    _MEMOS.append(memo)
    return memo


def forget() -> None:
    """Drops every kernel memo (`compile_torch` starts each compile without them, as `symbolic.forget`)."""
    for memo in _MEMOS:
        memo.cache_clear()


def module_symbols(op) -> list[sy.Symbol]:
    """The `novella.symbols` of the module that holds `op`."""
    from ..dialects.attrs import module_of

    return sy.read_symbols(module_of(op))


NOMINAL_LENGTH = 4096
PLAN_ATTR = "novella.plan_lengths"


def plan_lengths(op) -> list[int]:
    """The symbol values kernels plan tiles for: NOMINAL_LENGTH for each symbol (so that tiling does not
    change with max_len), or, in a shape bucket's program, the bucket's upper ends (`novella.plan_lengths`,
    written by `--novella-buckets`)."""
    from ..dialects.attrs import from_attr, module_of

    mod = module_of(op)
    n = max(len(sy.read_symbols(mod)), 1)
    if PLAN_ATTR in mod.attributes:
        return list(from_attr(mod.attributes[PLAN_ATTR]))
    return [NOMINAL_LENGTH] * n


@dataclass
class Buffer:
    """A named SRAM buffer of one kernel: `mem` is "spad" or "acc"; sizes in elements.

    `slots = n >= 2`: a ring of n slots, streamed one tile per grid step; slot i + 1 follows slot i
    (`size` is one slot). `--novella-schedule` cycles the slots by the step index mod n, unless `alternate`
    (two slots):
    the kernel picks the slot with an address expression of the grid (e.g. a block's parity), and a
    guarded LOAD into it writes a slot that no template of the step before addresses."""

    name: str
    mem: str
    offset: int
    size: int
    slots: int = 1
    alternate: bool = False


@dataclass
class Tiling:
    """The result of tiling one op."""

    tiles: dict[str, int]
    grid: list[ir.AffineExpr]
    buffers: list[Buffer] = field(default_factory=list)


class BufferPlan:
    """Packs named buffers into the SPAD and ACC budgets, or raises TileFitError."""

    def __init__(self, target):
        self.budget = target.budget
        self.slots = target.buffer_slots
        self.used = {"spad": 0, "acc": 0}
        self.buffers: list[Buffer] = []

    def add(self, name: str, mem: str, size: int, stream: bool = False, alternate: bool = False, ring: int = 0) -> None:
        """`stream`: a tile of it is loaded (or stored) every grid step; it gets the target's slots, or `ring`
        (a deeper ring the kernel's cost model chose) where the target streams at all.
        `alternate`: the target's slots, which the kernel alternates itself (`Buffer.alternate`)."""
        slots = (ring if ring and self.slots > 1 else self.slots) if stream or alternate else 1
        self.buffers.append(Buffer(name, mem, self.used[mem], size, slots, alternate and slots > 1))
        self.used[mem] += size * slots

    def fits(self) -> bool:
        return all(self.used[m] <= self.budget[m] for m in self.used)

    def check(self) -> list[Buffer]:
        if not self.fits():
            need = ", ".join(f"{m} {self.used[m]} of {self.budget[m]} elements" for m in self.used)
            raise TileFitError(
                f"the smallest tile does not fit the SRAM of this config ({need}). "
                "Use a config with a larger scratchpad/accumulator, or smaller model dims."
            )
        return self.buffers


class TensorView:
    """Symbolic 2-D view of the operands and result of one op."""

    def __init__(self, op):
        self.op = op
        self.types = [ir.RankedTensorType(v.type) for v in op.operands] + [ir.RankedTensorType(op.results[0].type)]
        self.shapes = [sy.shape_of(t) for t in self.types]

    def shape(self, i: int) -> list[ir.AffineExpr]:
        """Symbolic shape of operand `i` (-1: the result)."""
        return self.shapes[i]

    def rows(self, i: int) -> ir.AffineExpr:
        return sy.numel(self.shapes[i][:-1])

    def cols(self, i: int) -> int:
        """The static last dim of operand `i`; kernels that tile a dynamic last dim read `shape`."""
        c = sy.as_int(self.shapes[i][-1])
        if c is None:
            which = "the result" if i == -1 else f"operand #{i}"
            raise ValueError(
                f"{which} has a dynamic last dim ({self.shapes[i][-1]}); this kernel needs it static. "
                "Move the length to an outer dim (e.g. transpose before the op)."
            )
        return c

    def static(self, i: int, d: int) -> int | None:
        return sy.as_int(self.shapes[i][d])


class MacroBuilder:
    """Collects the tile ops of one macro step; the macro-gen pass materializes them."""

    def __init__(self, n_dims: int, n_syms: int):
        self.n_dims = n_dims
        self.n_syms = n_syms
        self.ops: list[tuple[str, dict]] = []

    def d(self, i: int) -> ir.AffineExpr:
        return sy.dim(i)

    def s(self, i: int = 0) -> ir.AffineExpr:
        return sy.sym(i)

    def load(self, buffer: str, tensor: int, **f) -> None:
        """DMA rows of `tensor` (operand index, -1 = result) into `buffer`; see LOAD in docs/isa.md."""
        self.ops.append(("novella.dma_load", dict(buffer=buffer, tensor=tensor, **f)))

    def gather(self, buffer: str, tensor: int, idx: str, **f) -> None:
        """GATHER rows of `tensor` picked by the index buffer `idx` into `buffer`; see GATHER in docs/isa.md."""
        self.ops.append(("novella.dma_gather", dict(buffer=buffer, tensor=tensor, idx=idx, **f)))

    def store(self, buffer: str, tensor: int = -1, **f) -> None:
        self.ops.append(("novella.dma_store", dict(buffer=buffer, tensor=tensor, **f)))

    def load_block(self, buffer: str, tensor: int, *, dram_offset, rows: int, cols: int, dram_stride=None, **f):
        """LOAD a static [rows, cols] block (e.g. a weight slab) at `dram_offset`, rows `dram_stride` apart."""
        self.load(
            buffer,
            tensor,
            dram_offset=dram_offset,
            dram_stride=dram_stride or cols,
            row_start=0,
            row_step=1,
            row_bound=rows,
            rows=rows,
            cols=cols,
            sram_stride=f.pop("sram_stride", cols),
            **f,
        )

    def load_rows(self, buffer: str, tensor: int, *, row_start, rows, row_bound, cols, dram_offset=0, **f):
        """LOAD `rows` consecutive rows from `row_start` of a [row_bound, ...] tensor view."""
        self.load(buffer, tensor, **_row_geometry(row_start, rows, row_bound, cols, dram_offset, f))

    def store_rows(self, buffer: str, *, row_start, rows, row_bound, cols, dram_offset=0, **f):
        """STORE `rows` consecutive rows from `row_start` into the result (the inverse of `load_rows`)."""
        self.store(buffer, -1, **_row_geometry(row_start, rows, row_bound, cols, dram_offset, f))

    def mma(self, acc: str, lhs: str, rhs: str, **f) -> None:
        self.ops.append(("novella.mma", dict(acc=acc, lhs=lhs, rhs=rhs, **f)))

    def vop(self, fn: str, dst: str, a: str | None = None, b: str | None = None, **f) -> None:
        f = dict(fn=fn, dst=dst, **f)
        if a is not None:
            f["a"] = a
        if b is not None:
            f["b"] = b
        self.ops.append(("novella.vop", f))


def _row_geometry(row_start, rows, row_bound, cols, dram_offset, f: dict) -> dict:
    geo = dict(dram_offset=dram_offset, dram_stride=f.pop("dram_stride", cols), row_start=row_start)
    geo.update(row_step=1, row_bound=row_bound, rows=rows, cols=cols, sram_stride=f.pop("sram_stride", cols))
    return {**geo, **f}


def first(dim: int) -> list:
    """`when` condition: grid dim `dim` is 0."""
    return [("eq", sy.dim(dim))]


def last(dim: int, extent: ir.AffineExpr) -> list:
    """`when` condition: grid dim `dim` is extent - 1."""
    return [("eq", extent - sy.const(1) - sy.dim(dim))]


def tile_rows(dim: int, tm: int, total: ir.AffineExpr) -> list[ir.AffineExpr]:
    """Rows of tile `d<dim>` of `tm`: min(tm, total - d*tm), the partial last tile."""
    return [sy.const(tm), total - sy.dim(dim) * tm]
