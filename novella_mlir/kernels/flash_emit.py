"""The VECs and MATMULs of one grid step of `novella.flash_attention` (`kernels/flash_attention.py`) on its
[rows, cols] score tile and per-row vectors: the score MATMUL, the mask and staircase adds, the online
softmax (`part1`, `part2`), P @ V and the output's normalization. The cost model (`kernels/flash_cost.py`)
prices what these write (`emit_trace.Trace`)."""

from __future__ import annotations

from .. import symbolic as sy
from .attention import NEG_FLOOR, SUM_FLOOR


class Emit:
    """VEC and MATMUL ops of one step on the [rows, cols] score tile and the per-row vectors."""

    def __init__(self, b, rows, cols, tq, tk, dv, ones: bool, expsub: bool):
        self.b, self.rows, self.cols, self.tq, self.tk, self.dv, self.ones = b, rows, cols, tq, tk, dv, ones
        self.expsub, self.s_off = expsub, None  # s_off: the softmax tile's score slot
        self.out_off = None  # the rows of `out` the block's output goes to (held: several heads)
        self.width = dv + ones  # row stride of V and O (with the ones column, O's last column is l)

    def qk(self, d: int, cols, when, acc_offset=None, lhs_offset=None) -> None:
        """S = Q @ K^T of a key tile of `cols` rows (K rows of d) into the score slot at `acc_offset`."""
        self.b.mma("s", "q", "k", a_stride=d, b_stride=d, acc_stride=self.tk, m=self.rows, k=d, n=cols,
                   accumulate=0, transpose_b=1, acc_offset=acc_offset, lhs_offset=lhs_offset, when=when)  # fmt: skip

    def adds(self, mask_mode: str | None, causal: bool, on, final) -> None:
        """The mask tile added to the scores (`mask_mode`: the ADD's mode; None: no mask) and, causal, the
        staircase on the diagonal tile (`final`)."""
        if mask_mode:
            self.tile("ADD", "s", "s", "mask", mode=mask_mode, when=on)
        if causal:
            self.tile("ADD", "s", "s", "tri", when=final)

    def tile(self, fn, dst, a, other=None, mode="TENSOR", when=None):
        s = self.tk
        f = dict(rows=self.rows, cols=self.cols, dst_stride=s, a_stride=s, b_stride=1 if mode == "COL" else s)
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
        self.reduce("ROWMAX", "m", "s", opening)
        if floor:
            self.row("MAX", "m", "m", mode="SCALAR", imm=NEG_FLOOR, when=opening)
        shift = "EXPSUB" if self.expsub else "SUB"  # EXPSUB: p = exp(s - m) in one pass
        self.tile(shift, "p", "s", "m", mode="COL", when=opening)
        self.reduce("ROWMAX", "cm", "s", rest)
        self.row("MAX", "cm", "cm", "m", when=rest)
        self.tile(shift, "p", "s", "cm", mode="COL", when=rest)

    def part2(self, on, opening, rest) -> None:
        """p = exp(p), the running sum l and the output O (+)= P @ V, rescaled by exp(m_old - m)."""
        if not self.expsub:
            self.tile("EXP", "p", "p", when=on)
        if not self.ones:
            self.reduce("ROWSUM", "l", "p", opening)
        self.pv(0, opening)
        self.row("SUB", "t", "m", "cm", when=rest)
        self.row("EXP", "t", "t", when=rest)
        self.row("COPY", "m", "cm", when=rest)
        if not self.ones:
            self.reduce("ROWSUM", "cm", "p", rest)
            self.row("MUL", "l", "l", "t", when=rest)
            self.row("ADD", "l", "l", "cm", when=rest)
        w = self.width
        self.b.vop("MUL", "o", "o", "t", mode="COL", rows=self.rows, cols=w, dst_stride=w, a_stride=w,
                   b_stride=1, when=rest)  # fmt: skip
        self.pv(1, rest)

    def pv(self, accumulate: int, when):
        w = self.width
        self.b.mma("o", "p", "v", a_stride=self.tk, b_stride=w, acc_stride=w, m=self.rows, k=self.cols, n=w,
                   accumulate=accumulate, transpose_b=0, when=when)  # fmt: skip

    def normalize(self, when, safe: bool) -> None:
        """out = O / l (l: O's last column with the ones column of V). `safe`: l = max(l, SUM_FLOOR) first,
        so a row with every key masked (P = 0: O = 0, l = 0) gives 0, not 0 / 0; any other row has l >= 1."""
        dv, w = self.dv, self.width
        sums, off = ("o", sy.const(dv)) if self.ones else ("l", None)
        if safe and self.ones:
            self.b.vop("MAX", "o", "o", mode="SCALAR", imm=SUM_FLOOR, rows=self.rows, cols=1, dst_stride=w, a_stride=w,
                       dst_offset=off, a_offset=off, when=when)  # fmt: skip
        elif safe:
            self.row("MAX", "l", "l", mode="SCALAR", imm=SUM_FLOOR, when=when)
        self.b.vop("DIV", "out", "o", sums, mode="COL", rows=self.rows, cols=dv, dst_stride=dv, a_stride=w,
                   b_stride=w if self.ones else 1, b_offset=off, dst_offset=self.out_off, when=when)  # fmt: skip
