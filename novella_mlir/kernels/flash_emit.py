"""The VECs and MATMULs of one grid step of `novella.flash_attention` (`kernels/flash_attention.py`) on its
[rows, cols] score tile and per-row vectors: the score MATMUL, the mask and staircase adds, the online
softmax (`part1`, `part2`), P @ V and the output's normalization (`Emit`); and which key/value tile each
part of a step works on, with its K, V and mask LOADs (`Steps`), the query's (`query`) and the output's STORE
(`store`). The cost model (`kernels/flash_cost.py`) prices what these write (`emit_trace.Trace`).

A tensor kept in the scratchpad (`--novella-resident`; `Geometry.kept`: operand index, 3 the result -> its
region's buffer) is used where it is, rows as in DRAM (a head of a heads-minor tensor is a strided view of
the region): the query's scaling MUL reads it there, the score MATMUL reads K and P @ V reads V there (V
without the ones column), the normalizing DIV writes the output there; none of them is LOADed or STOREd."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.fields import RESIDENT
from . import first
from . import kv_cache as kv
from .attention import NEG_FLOOR, SUM_FLOOR
from .flash_decode import Lanes, chained_loads, load_query, mask_row, scale_block
from .resident import OPERANDS
from .support import ceildiv

RECIP_ROWS = 16  # blocks of fewer rows divide O by l: 1 / l costs two more VECs than the DIV's beats it saves
COLUMN, SUMS = 1, 2  # `ones`: V carries a column of ones (O's last column is l), or l (+)= P @ u on its own
FUSED = 3  # `ones`: the row maxima from the score MATMUL (`rowmax`), the row sums from EXPSUB (`rowsum`)


def lagged(pipelined: bool, s_slots: int) -> bool:
    """Whether step j's softmax is tile j - 1 (the pipelined loop, one more step a block) rather than tile j
    (the plain loop, or the lookahead's, `s_slots = 3`): the kernel's grid and steps and the cost model's."""
    return bool(pipelined) and s_slots != 3


def kept(roles) -> dict[int, str]:
    """{operand index (3: the result): its region's buffer} of the resident `roles` (`resident.regions`; an
    attention's are q as `x`, `k`, `v` and `out`, at the operands `resident.OPERANDS` names)."""
    return {(3 if r == "out" else OPERANDS[r]): RESIDENT[r] for r in roles}


class Emit:
    """VEC and MATMUL ops of one step on the [rows, cols] score tile and the per-row vectors."""

    def __init__(self, b, rows, cols, tq, tk, dv, ones: int, expsub: bool):
        self.b, self.rows, self.cols, self.tq, self.tk, self.dv = b, rows, cols, tq, tk, dv
        self.ones, self.sums = ones == COLUMN, ones == SUMS  # the row sums' MATMUL (`COLUMN`, `SUMS`)
        self.fused = ones == FUSED
        self.expsub, self.s_off = expsub, None  # s_off: the softmax tile's score slot
        self.out_off = None  # the rows of `out` the block's output goes to (held: several heads)
        self.out, self.out_stride = "out", dv  # the output's buffer and row stride (a resident region's: wider)
        self.width = dv + self.ones  # row stride of V and O (with the ones column, O's last column is l)
        self.v = ("v", None, self.width)  # V's (buffer, offset, row stride) for P @ V

    def qk(self, d: int, cols, when, acc_offset=None, lhs_offset=None, k=("k", None, None), m=None) -> None:
        """S = Q @ K^T of a key tile of `cols` rows (K rows of d) into the score slot at `acc_offset`; `k`: K's
        (buffer, offset, row stride or None: d); `m`: the query rows (default the block's)."""
        m = self.rows if m is None else m
        drain = dict(max="mx", max_offset=self._maxima(acc_offset), rowmax=1) if self.fused else {}
        self.b.mma("s", "q", k[0], a_stride=d, b_stride=k[2] or d, acc_stride=self.tk, m=m, k=d, n=cols,
                   accumulate=0, transpose_b=1, acc_offset=acc_offset, lhs_offset=lhs_offset, rhs_offset=k[1],
                   when=when, **drain)  # fmt: skip

    def _maxima(self, s_off):
        """`FUSED`: the offset in `mx` of the row maxima of the scores at `s_off` (a slot of tq * tk)."""
        return None if s_off is None else sy.floordiv(s_off, self.tk)

    def adds(self, mask_mode: str | None, causal: bool, on, final) -> None:
        """The mask tile added to the scores (`mask_mode`: the ADD's mode; None: no mask) and, causal, the
        staircase on the diagonal tile (`final`)."""
        if mask_mode:
            self.tile("ADD", "s", "s", "mask", mode=mask_mode, when=on)
        if causal:
            self.tile("ADD", "s", "s", "tri", when=final)

    def tile(self, fn, dst, a, other=None, mode="TENSOR", when=None, **extra):
        s = self.tk
        f = dict(rows=self.rows, cols=self.cols, dst_stride=s, a_stride=s, b_stride=1 if mode == "COL" else s, **extra)
        f.update(dst_offset=self.s_off if dst == "s" else None, a_offset=self.s_off if a == "s" else None)
        self.b.vop(fn, dst, a, other, mode=mode, when=when, **f)

    def reduce(self, fn, dst, src, when):
        off = self.s_off if src == "s" else None
        self.b.vop(fn, dst, src, rows=self.rows, cols=self.cols, dst_stride=1, a_stride=self.tk, a_offset=off,
                   when=when)  # fmt: skip

    def row(self, fn, dst, a, other=None, when=None, **f):
        """Elementwise on per-row vectors, issued as one [1, rows] row (they are contiguous)."""
        tq = self.tq
        self.b.vop(fn, dst, a, other, rows=1, cols=self.rows, dst_stride=tq, a_stride=tq, b_stride=tq, when=when, **f)

    def part1(self, floor: bool, opening, rest) -> None:
        """Up to p = s - (new running max): the last reads of the scores."""
        if self.fused:
            self._part1_fused(opening, rest)
            return
        self.reduce("ROWMAX", "m", "s", opening)
        if floor:
            self.row("MAX", "m", "m", mode="SCALAR", imm=NEG_FLOOR, when=opening)
        shift = "EXPSUB" if self.expsub else "SUB"  # EXPSUB: p = exp(s - m) in one pass
        self.tile(shift, "p", "s", "m", mode="COL", when=opening)
        self.reduce("ROWMAX", "cm", "s", rest)
        self.row("MAX", "cm", "cm", "m", when=rest)
        self.tile(shift, "p", "s", "cm", mode="COL", when=rest)

    def _part1_fused(self, opening, rest) -> None:
        """`FUSED`: the row maxima came with the scores (`mx`); p = exp(s - max) and its row sums (into `ls`:
        l may still hold the previous block's sums, which the lookahead's output reads after this) in one
        EXPSUB."""
        at = self._maxima(self.s_off)
        self.row("COPY", "m", "mx", when=opening, a_offset=at)
        self.tile("EXPSUB", "p", "s", "m", mode="COL", when=opening, sum="ls", rowsum=1)
        self.row("MAX", "cm", "mx", "m", when=rest, a_offset=at)
        self.tile("EXPSUB", "p", "s", "cm", mode="COL", when=rest, sum="ls", rowsum=1)

    def part2(self, on, opening, rest) -> None:
        """p = exp(p), the running sum l and the output O (+)= P @ V, rescaled by exp(m_old - m)."""
        if not self.expsub:
            self.tile("EXP", "p", "p", when=on)
        vector_sums = not (self.ones or self.sums or self.fused)
        if vector_sums:
            self.reduce("ROWSUM", "l", "p", opening)
        elif self.fused:
            self.row("COPY", "l", "ls", when=opening)
        self.pv(0, opening)
        if self.expsub:  # t = exp(m_old - m) in one pass
            self.row("EXPSUB", "t", "m", "cm", when=rest)
        else:
            self.row("SUB", "t", "m", "cm", when=rest)
            self.row("EXP", "t", "t", when=rest)
        self.row("COPY", "m", "cm", when=rest)
        if vector_sums:
            self.reduce("ROWSUM", "cm", "p", rest)
        if not self.ones:
            self.row("MUL", "l", "l", "t", when=rest)
        if vector_sums or self.fused:
            self.row("ADD", "l", "l", "ls" if self.fused else "cm", when=rest)
        w = self.width
        self.b.vop("MUL", "o", "o", "t", mode="COL", rows=self.rows, cols=w, dst_stride=w, a_stride=w,
                   b_stride=1, when=rest)  # fmt: skip
        self.pv(1, rest)

    def row_sums(self, accumulate: int, when) -> None:
        """`SUMS`: l (+)= P @ u, u a row of ones, on the array; l a column of the accumulator."""
        self.b.mma("l", "p", "u", a_stride=self.tk, b_stride=self.tk, acc_stride=1, m=self.rows, k=self.cols, n=1,
                   accumulate=accumulate, transpose_b=1, when=when)  # fmt: skip

    def pv(self, accumulate: int, when):
        w, (v, at, stride) = self.width, self.v
        self.b.mma("o", "p", v, a_stride=self.tk, b_stride=stride, acc_stride=w, m=self.rows, k=self.cols, n=w,
                   accumulate=accumulate, transpose_b=0, rhs_offset=at, when=when)  # fmt: skip
        if self.sums:
            self.row_sums(accumulate, when)

    def normalize(self, when, safe: bool) -> None:
        """out = O / l (l: O's last column with the ones column of V; else O * (1 / l), 1 / l as one row: a
        DIV costs four beats, so on `large` this was a quarter of a query block's output time). `safe`: l = max(l, SUM_FLOOR) first,
        so a row with every key masked (P = 0: O = 0, l = 0) gives 0, not 0 / 0; any other row has l >= 1."""
        dv, w = self.dv, self.width
        sums, off = ("o", sy.const(dv)) if self.ones else ("l", None)
        if safe and self.ones:
            self.b.vop("MAX", "o", "o", mode="SCALAR", imm=SUM_FLOOR, rows=self.rows, cols=1, dst_stride=w, a_stride=w,
                       dst_offset=off, a_offset=off, when=when)  # fmt: skip
        elif safe:
            self.row("MAX", "l", "l", mode="SCALAR", imm=SUM_FLOOR, when=when)
        if not self.ones and self.tq >= RECIP_ROWS:  # 1 / l as one row (into `t`, read last by the rescale)
            self.row("FILL", "t", None, imm=1.0, when=when)
            self.row("DIV", "t", "t", "l", when=when)
            sums, fn = "t", "MUL"
        else:
            fn = "DIV"
        self.b.vop(fn, self.out, "o", sums, mode="COL", rows=self.rows, cols=dv, dst_stride=self.out_stride, a_stride=w,
                   b_stride=w if self.ones else 1, b_offset=off, dst_offset=self.out_off, when=when)  # fmt: skip


def query(b, g, t, tq: int, rows, opening=None):
    """`flash_decode.load_query`, or with the query resident its scaling MUL from the region into `q` (no
    LOAD). Returns the block's offset in `q`."""
    region = g.kept.get(0)
    if region is None or t.tiles.get("q_held"):
        return load_query(b, g, t, tq, rows, opening=opening)
    bi, qi, off = b.d(0), b.d(1), None
    if t.tiles.get("q_blocks"):  # as load_query's slots
        off = sy.mod(bi * sy.ceildiv(g.lq, tq) + qi, 2) * (tq * g.d)
    elif next(buf for buf in t.buffers if buf.name == "q").alternate:
        off = sy.mod(bi, 2) * (tq * g.d)
    scale_block(b, g, tq, rows, bi, qi, off, first(2), region)
    return off


def store(b, g, tq: int, rows, when) -> None:
    if 3 in g.kept:  # the normalizing DIV wrote the output into its region
        return
    b.store_rows("out", dram_offset=g.base(3, b.d(0)), dram_stride=g.row_stride(3), row_start=b.d(1) * tq,
                 row_bound=g.lq, rows=rows, cols=g.dv, when=when)  # fmt: skip


def _prev(j: ir.AffineExpr) -> ir.AffineExpr:
    """max(j - 1, 0) on the grid."""
    return j - sy.step(j)


def _edge_rows(lk: ir.AffineExpr, tk: int, j: ir.AffineExpr) -> tuple[list, list]:
    """Rows of the unguarded pipelined loads at step j: K of tile j (none at j = nk), V of tile j - 1
    (none at j = 0); min(tk, lk - tile * tk) between. [j == nk] is step(j + 1 - nk)."""
    nk = ceildiv(lk, tk)
    k = [sy.const(tk), lk - j * tk + sy.step(j + 1 - nk) * tk, sy.gate(nk - j)]
    v = [sy.const(tk), lk - (j - 1) * tk, sy.gate(j)]
    return k, v


def tile_extent(t: int, total: ir.AffineExpr, index: ir.AffineExpr):
    """Width of tile `index` of `t` along `total` (min(t, total - index * t), or t if every tile is full)."""
    v = sy.as_int(total)
    if v is not None and (v % t == 0 or v < t):
        return min(v, t)
    return [sy.const(t), total - index * t]


class Steps:
    """Which key/value tile each part of step j works on, and when.

    Plain: QK, softmax and PV of tile j. Pipelined (one more step per query block): QK of tile j and
    the softmax and PV of tile j - 1. Loads follow: K of the QK's tile, V and the mask of the
    softmax's. Without a causal skip they are unguarded (two slots): a step past either end loads
    rows out of bounds (zero-filled, no DRAM traffic)."""

    def __init__(self, g, b, tq: int, tk: int, pipelined: bool, ones: bool):
        self.g, self.b, self.tq, self.tk, self.pipelined = g, b, tq, tk, pipelined
        self.width = g.dv + (ones == COLUMN)
        self.s_off = self.q_off = None  # the score slot of the QK; the query's slot (`Buffer.alternate`)
        qi, j = b.d(1), b.d(2)
        windowed = g.window is not None and not pipelined
        self.i = j - 1 if pipelined else j  # the softmax's tile
        if windowed:  # step j works on tile j + first, first = floor((lk - W) / tk) (negative: none yet)
            self.i = j + sy.floordiv(g.lk - g.window, tk)
        self.k_tile = j if pipelined else self.i  # the score MATMUL's tile
        nk = ceildiv(g.lk, tk)
        self.cols_qk, self.cols = tile_extent(tk, g.lk, self.k_tile), tile_extent(tk, g.lk, self.i)
        below = [("ge", qi - self.i)] if g.causal else []  # causal: tiles above the diagonal are skipped
        self.on = (below + [("ge", self.i)] * pipelined) or None
        self.opening, self.rest = [("eq", self.i)], [("ge", self.i - 1)] + below
        self.final = [("eq", qi - self.i)] if g.causal else [("eq", nk - 1 - self.i)]
        if windowed:
            self.on, self.opening, self.rest = _window_guards(self.i, j)
        if isinstance(b, Lanes):  # a batched decode step: the tiles from the lane's first
            self.on, self.opening, self.rest = b.guards(self.i, tk)
        if not pipelined:
            self.qk_on = self.on
        else:
            self.qk_on = [("ge", qi - j)] if g.causal else [("ge", nk - 1 - j)]

    def qk(self, e: Emit) -> None:
        g, j = self.g, self.b.d(2)
        k = ("k", None, None)
        if 1 in g.kept:  # the pipelined loop's step past the end: tile nk - 1's address (it does not run)
            k = self._region(1, j - sy.step(j + 1 - ceildiv(g.lk, self.tk)) if self.pipelined else self.k_tile)
        e.qk(g.d, self.cols_qk, self.qk_on, self.s_off, self.q_off, k)

    def place(self, e: Emit) -> None:
        """Points `e` at the resident V and output (`Geometry.kept`) of this step."""
        g, b = self.g, self.b
        if 2 in g.kept:  # the pipelined loop's first step: tile 0's address (its P @ V does not run)
            e.v = self._region(2, _prev(b.d(2)) if self.pipelined else self.i)
        if 3 in g.kept:
            stride = g.row_stride(3)
            e.out, e.out_stride, e.out_off = g.kept[3], stride, g.base(3, b.d(0)) + b.d(1) * (self.tq * stride)

    def _region(self, i: int, tile) -> tuple:
        """(buffer, offset, row stride) of key/value tile `tile` of resident operand `i`, batch d(0)."""
        stride = self.g.row_stride(i)
        return self.g.kept[i], self.g.base(i, self.b.d(0)) + tile * (self.tk * stride), stride

    def loads(self, rows, mask: bool = True) -> None:
        g, b, tk = self.g, self.b, self.tk
        j = b.d(2)
        guarded = g.causal or not self.pipelined
        k_rows, v_rows = (self.cols_qk, self.cols) if guarded else _edge_rows(g.lk, tk, j)
        skip = g.causal or g.window is not None or isinstance(b, Lanes)  # tiles skipped: their loads too
        chained = chained_loads(g, tk)
        if 1 not in g.kept:
            load_kv(b, g, "k", 1, g.d, k_rows, self.k_tile * tk, g.d, tk, when=self.qk_on if skip else None,
                    chained=chained)  # fmt: skip
        if 2 not in g.kept:
            load_kv(b, g, "v", 2, g.dv, v_rows, self.i * tk, self.width, tk, when=self.on if skip else None,
                     chained=chained)  # fmt: skip
        if g.mask is not None and mask:
            _load_mask(b, g, rows, self.tq, tk, self.pipelined, self.i, when=self.on if skip and not g.causal else None,
                       chained=chained)  # fmt: skip


def load_kv(b, g, name: str, tensor: int, width: int, rows, row0, stride: int, tk: int, when,
             chained: bool = False, bi=None) -> None:  # fmt: skip
    """LOAD `rows` key/value rows from row `row0` (rows out of [0, lk) are zero-filled) of batch `bi` (default
    the step's); a paged tile of several pages is a chain of LOADs, one per page."""
    bi = b.d(0) if bi is None else bi
    info = g.paged.get(tensor)
    if info is None:
        b.load_rows(name, tensor, dram_offset=g.base(tensor, bi), dram_stride=g.row_stride(tensor), row_start=row0,
                    row_bound=g.lk, rows=rows, cols=width, sram_stride=stride, when=when)  # fmt: skip
        return
    head = sy.floordiv(bi, g.group) if g.group > 1 and not g.packed else bi
    if tk > info["page_size"]:
        kv.load_page_chain(b, name, tensor, info, head=head, row0=row0, n_rows=g.lk, pages=tk // info["page_size"],
                           cols=width, sram_stride=stride, when=when, chained=chained)  # fmt: skip
        return
    kv.load_paged_rows(b, name, tensor, info, head=head, row0=row0, n_rows=g.lk, rows=rows, col0=0, cols=width,
                       sram_stride=stride, when=when)  # fmt: skip


def _window_guards(i, j) -> tuple[list, list, list]:
    """(on, opening, rest) of a sliding window whose step j works on tile i = j + first: a tile exists
    when i >= 0 (first < 0 while the sequence is shorter than the window); the opening tile is the
    first that exists: step 0, or tile 0. With i, j >= 0, [i == 0 or j == 0] is 1 - step(i) - step(j) >= 0."""
    on = ("ge", i)
    opening = sy.const(1) - sy.step(i) - sy.step(j)
    return [on], [on, ("ge", opening)], [on, ("ge", opening * -1 - 1)]


def mask_broadcast(g) -> bool:
    """The mask has one row, which the mask LOAD reads for every query row of the block (row_step 0)."""
    return g.mask is not None and sy.as_int(g.mask_rows) == 1 and sy.as_int(g.lq) != 1


def _load_mask(b, g, rows, tq: int, tk: int, pipelined: bool, tile, when=None, chained=False) -> None:
    """The mask tile of the softmax's key tile; pipelined, step 0 (no softmax) loads tile 0's columns with
    every row out of bounds (no DRAM read, no negative column offset)."""
    j = b.d(2)
    col = _prev(j) if pipelined else tile
    broadcast_rows = mask_broadcast(g)
    rows = 1 if mask_row(g) else rows
    if pipelined:
        rows = (rows if isinstance(rows, list) else [sy.const(rows)]) + [sy.gate(j)]  # none at step 0
    lead = sy.floordiv(b.d(0), g.mask_div) if g.mask_div > 1 else b.d(0)
    b.load("mask", 3, dram_offset=lead * g.mask_stride + col * tk, dram_stride=g.lk,
           row_start=sy.const(0) if broadcast_rows else b.d(1) * tq, row_step=0 if broadcast_rows else 1,
           row_bound=g.mask_rows, rows=rows, cols=tile_extent(tk, g.lk, col), sram_stride=tk, when=when,
           chain=int(chained))  # fmt: skip
