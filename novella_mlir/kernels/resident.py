"""Tensors kept in the scratchpad between macros (`--novella-resident`, docs/design.md "Resident
activations"): a kernel's side of the decision.

An op's `novella.resident` names, per role, the SPAD region that holds a whole tensor row-major (its
DRAM layout, so a tile's DRAM offset relative to the tensor is its offset in the region): `out` (the
result, written there by the producer, never to DRAM), `x`, `res` and `new` (the input, residual
and, of a `kv_append`, new-rows operands, read from there by a consumer), `k` and `v` (an attention's key
and value; its query is its `x`). Sizes are the tensor's at the lengths its tiles are
planned for, which bound its symbols (the pass keeps nothing else).

`Resident(b, op)` wraps a kernel's `MacroBuilder`: a LOAD of a resident operand becomes a VEC COPY
from its region into the same SRAM tile, and a STORE of the result a COPY into its region. Each region is a buffer of the tiling (`buffers` of the macro), named in
`fields.RESIDENT` so that `--novella-schedule` never moves it."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.attrs import from_attr
from ..dialects.fields import RESIDENT
from . import Buffer

ATTR = "novella.resident"
# role in `novella.resident` -> (operand index of the LOAD it replaces, or -1 for the result's STORE)
OPERANDS = {"x": 0, "res": 3, "k": 1, "v": 2, "new": 1, "out": -1}


def regions(op) -> dict[str, tuple[int, int]]:
    """{role: (SPAD offset, size)} of the op's resident tensors (empty when it has none)."""
    if ATTR not in op.attributes:
        return {}
    d = from_attr(op.attributes[ATTR])
    return {r: (d[r], d[f"{r}_size"]) for r in OPERANDS if r in d}


def buffers(op) -> list[Buffer]:
    """The regions as buffers of the op's tiling (outside its budget: `novella.sram_budget` ends below)."""
    return [Buffer(RESIDENT[role], "spad", off, size) for role, (off, size) in regions(op).items()]


def x_rows(b, dim: int, tm: int, k: int) -> tuple[str, ir.AffineExpr]:
    """Where a reader of a resident x (rows of k) reads its row block `b.d(dim)` of tm rows in place: the
    region's buffer and the block's first element in it."""
    return RESIDENT["x"], b.d(dim) * (tm * k)


def wrap(b, op):
    """`b`, or a `Resident` over it where the op keeps tensors in the scratchpad."""
    return Resident(b, op) if regions(op) else b


class Resident:
    """A `MacroBuilder` whose LOADs of resident operands and STORE of a resident result are VEC COPYs."""

    def __init__(self, b, op):
        self._b, self._tensors = b, {OPERANDS[r]: RESIDENT[r] for r in regions(op)}

    def __getattr__(self, name):
        return getattr(self._b, name)

    def load_rows(self, buffer, tensor, *, row_start, rows, row_bound, cols, dram_offset=0, **f):
        region = self._tensors.get(tensor)
        if region is None:
            return self._b.load_rows(buffer, tensor, row_start=row_start, rows=rows, row_bound=row_bound, cols=cols,
                                     dram_offset=dram_offset, **f)  # fmt: skip
        _plain(f)
        stride = f.pop("dram_stride", cols)
        self._copy(buffer, region, f.pop("buf_offset", None), _e(dram_offset) + _e(row_start) * stride,
                   f.pop("sram_stride", _first(cols)), stride, _rows(rows, _e(row_bound) - _e(row_start)), cols, f)  # fmt: skip

    def load_block(self, buffer, tensor, *, dram_offset, rows: int, cols: int, dram_stride=None, **f):
        if tensor not in self._tensors:
            return self._b.load_block(buffer, tensor, dram_offset=dram_offset, rows=rows, cols=cols,
                                      dram_stride=dram_stride, **f)  # fmt: skip
        return self.load_rows(buffer, tensor, row_start=sy.const(0), rows=rows, row_bound=sy.const(rows), cols=cols,
                              dram_offset=dram_offset, **({"dram_stride": dram_stride} if dram_stride else {}), **f)  # fmt: skip

    def load(self, buffer, tensor, **f):
        if tensor in self._tensors:
            raise ValueError(f"a resident tensor's tile moves as a VEC COPY of whole rows, not by this LOAD ({f})")
        return self._b.load(buffer, tensor, **f)

    def store_rows(self, buffer, *, row_start, rows, row_bound, cols, dram_offset=0, **f):
        region = self._tensors.get(-1)
        if region is None:
            return self._b.store_rows(buffer, row_start=row_start, rows=rows, row_bound=row_bound, cols=cols,
                                      dram_offset=dram_offset, **f)  # fmt: skip
        _plain(f)
        stride = f.pop("dram_stride", cols)
        self._copy(region, buffer, _e(dram_offset) + _e(row_start) * stride, f.pop("buf_offset", None), stride,
                   f.pop("sram_stride", _first(cols)), _rows(rows, _e(row_bound) - _e(row_start)), cols, f)  # fmt: skip

    def _copy(self, dst, src, dst_offset, src_offset, dst_stride, src_stride, rows, cols, f) -> None:
        at = {k: v for k, v in (("dst_offset", dst_offset), ("a_offset", src_offset)) if v is not None}
        extra = {k: f[k] for k in ("when",) if k in f}
        self._b.vop("COPY", dst, src, rows=rows, cols=cols, dst_stride=dst_stride, a_stride=src_stride, **at, **extra)


_COPIED = frozenset(("dram_stride", "sram_stride", "buf_offset", "when", "chain", "row_step"))


def region_at(b, tensor, dram_offset, row_start, stride):
    """(region, offset, row stride) of a tile of operand `tensor` (-1: the result) whose first row is
    `row_start` at column `dram_offset` in the tensor's row-major layout, where builder `b` keeps it in the
    scratchpad; None if it does not (not resident, or `b` is not a `Resident`: the cost model's)."""
    region = b._tensors.get(tensor) if isinstance(b, Resident) else None
    return None if region is None else (region, _e(dram_offset) + _e(row_start) * stride, stride)


def clipped(rows, tile: dict) -> list:
    """The rows of a tile (`rows` a size or a list whose minimum it is) at `tile`'s row_start below its
    row_bound: what a COPY standing for its LOAD or STORE moves."""
    return _rows(rows, _e(tile["row_bound"]) - _e(tile["row_start"]))


def _plain(f: dict) -> None:
    """A LOAD or STORE a COPY can stand for: consecutive rows, no other field."""
    odd = sorted(set(f) - _COPIED) + (["row_step"] if f.get("row_step", 1) != 1 else [])
    if odd:
        raise ValueError(f"a resident tensor's tile moves as a VEC COPY, which has no {', '.join(odd)}")


def _e(x) -> ir.AffineExpr:
    return sy.const(x) if isinstance(x, int) else x


def _first(cols):
    return cols[0] if isinstance(cols, list) else cols


def _rows(rows, bound: ir.AffineExpr) -> list:
    """The rows a LOAD of `rows` (a size or a list whose minimum it is) below `bound` moves."""
    rows = rows if isinstance(rows, list) else [rows]
    rows = [sy.const(r) if isinstance(r, int) else r for r in rows]
    return (
        rows
        if sy.as_int(bound) is not None
        and all(sy.as_int(r) is not None and sy.as_int(r) <= sy.as_int(bound) for r in rows)
        else rows + [bound]
    )
