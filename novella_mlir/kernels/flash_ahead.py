"""The lookahead schedule of `novella.flash_attention` (`s_slots = 3`; `kernels/flash_attention.py`).

The pipelined key/value loop of a query block (`Steps`, one more step per block) starts with a step of only
the score MATMUL of its first tile and ends with a step of only the softmax of its last: at a block's edges
one unit idles for about a tile's work, which at a few key tiles per block (T of a few hundred) is most of
the block's time. The lookahead runs the blocks as one software pipeline: step j of block (bi, qi) (nk
steps a block) runs the softmax and P @ V of key tile j and the score MATMUL of the next tile in grid order:
tile j + 1, or at the block's last step tile 0 of the next block ((bi, qi + 1), or (bi + 1, 0) after a
batch's last block), whose query it loads (the query buffer alternates between consecutive blocks,
`q_blocks`) and scales before the softmax of tile j, so that the next block's first score MATMUL (in a slot
the softmax does not read) runs beside it rather than after it, ahead of P @ V on the matrix unit (on `large`
a [6, 256, 64] self-attention, tq = tk = 128, went from 79.5K to 71.1K cycles). Every block's tile 0 has
the third slot of the scores; tiles 1, 2, ... alternate in slots 1, 0, ... The op's first step also loads
the first block's query and K tile 0 (into `k0`, once, unless K is kept in the scratchpad) and runs its
MATMUL. Only without a mask, causal skip, window or paged cache (`flash_attention._ahead_ok`), with two key
tiles or more at every length, or one at every length where the query is kept in the scratchpad (`single`:
the scores alternate by block; no query LOAD, which would load the block after next into the slot the op's
first block, a step late, still reads)."""

from __future__ import annotations

from .. import symbolic as sy
from . import first
from .flash_decode import load_block, scale_block
from .flash_emit import load_kv, tile_extent
from .support import ceildiv


class Ahead:
    """The lookahead's expressions and ops on grid point (bi, qi, j) of a [tq, tk] tiling; `one`: one query
    block a batch at every length, whose blocks before and after are written without nq (at the grid's and the
    lengths' zero point, which `--novella-schedule`'s `_movable` reads, qi - 1 + nq would be -1: the previous
    block's output a whole tq rows below its resident region, a tq larger than the region there, so the pass
    took it for a buffer of the macro and moved it)."""

    def __init__(self, g, b, tq: int, tk: int, single: bool = False, one: bool = False):
        bi, qi, j = b.d(0), b.d(1), b.d(2)
        self.g, self.b, self.tq, self.tk, self.single = g, b, tq, tk, single
        nk, nq = ceildiv(g.lk, tk), ceildiv(g.lq, tq)
        self.nk = nk
        wrap = sy.const(1) - sy.step(nq - 1 - qi)  # [qi == nq - 1]: the next block is batch bi + 1's first
        self.next_bi, self.next_qi = bi + wrap, qi + 1 - wrap * nq
        left = (g.batch - 1 - bi) + (nq - 1 - qi)  # 0 on the op's last block
        back = sy.const(1) - sy.step(qi)  # [qi == 0]: the block before is batch bi - 1's last
        self.prev_bi, self.prev_qi = bi - back, qi - 1 + back * nq
        if one:  # one block a batch at every length (`one_block`): the block before is block 0 of batch bi - 1
            self.next_bi, self.next_qi, self.prev_bi, self.prev_qi = bi + 1, sy.const(0), bi - 1, sy.const(0)
        self.after_first = [("eq", j), ("ge", bi + qi - 1)]  # a block's first step, but the op's
        self.op_last = [("eq", nk - 1 - j), ("eq", left)]
        self.last, self.more = [("eq", nk - 1 - j)], [("ge", left - 1)]
        self.start = first(0) + first(1) + first(2)
        linear = bi * nq + qi  # the query's slot, as `load_query` with `q_blocks`
        self.parity = sy.mod(linear, 2), sy.mod(linear + 1, 2)  # this block's and the next one's
        self.q_off, self.q_next = (p * (tq * g.d) for p in self.parity)
        self.k_tile = j + 1 - nk * sy.step(j + 2 - nk)  # the K LOAD's tile: j + 1, 0 at the block's last step
        self.k_batch = bi + sy.step(j + qi + 3 - nk - nq)  # the next batch's at the batch's last step
        self.k_rows = [sy.const(tk), g.lk - self.k_tile * tk, sy.gate(left + nk - 1 - j)]  # none at the op's end

    def step(self, e, s) -> None:
        """A grid step's ops in program order (`Steps` s, `Emit` e, its scores in `slot(j)`): the op's first
        block at its first step, this step's loads and score MATMUL of the next tile, the next block's query and
        first score MATMUL, the softmax of tile j, the block before's output, P @ V, the op's last output."""
        e.s_off = self.slot(self.b.d(2))
        s.q_off = self.q_off
        self.first_block(e)
        self.loads(load_kv, s.cols, s.width)
        self.qk(e)
        self.next_block(e)
        e.part1(floor=False, opening=s.opening, rest=s.rest)
        self.output_before(e)
        e.part2(s.on, s.opening, s.rest)
        self.output_last(e)

    def slot(self, tile, after: bool = False):
        """Offset in `s` of the scores of key tile `tile` (>= 0): tile 0 in slot 2, tile t in slot t mod 2; with
        one key tile (`single`), the block's parity (`after`: the next block's), so that the next block's score
        MATMUL does not write the scores the softmax of this one reads."""
        if self.single:
            return self.parity[after] * (self.tq * self.tk)
        return (sy.mod(tile, 2) + (sy.const(1) - sy.step(tile)) * 2) * (self.tq * self.tk)

    def key(self, bi, tile) -> tuple:
        """K of key tile `tile` of batch `bi` for the score MATMUL (`Emit.qk`'s k): the slot loaded, or the
        region where K is kept in the scratchpad."""
        if 1 not in self.g.kept:
            return "k", None, None
        stride = self.g.row_stride(1)
        return self.g.kept[1], self.g.base(1, bi) + tile * (self.tk * stride), stride

    def first_block(self, e) -> None:
        """At the op's first step: the first block's query (loaded and scaled, or scaled from its region),
        K tile 0 into `k0` and its score MATMUL into slot 2."""
        zero = sy.const(0)
        self._query(zero, zero, zero, self.start, load=True)
        g, k = self.g, self.key(zero, zero)
        if 1 not in g.kept:
            k = "k0", None, None
            self.b.load_rows("k0", 1, dram_offset=g.base(1, zero), dram_stride=g.row_stride(1), row_start=zero,
                             row_bound=g.lk, rows=tile_extent(self.tk, g.lk, zero), cols=g.d, sram_stride=g.d,
                             when=self.start)  # fmt: skip
        e.qk(g.d, tile_extent(self.tk, g.lk, zero), self.start, self.slot(zero), zero, k=k)

    def loads(self, load_kv, v_rows, width: int) -> None:
        """The step's K tile (`k_tile` of batch `k_batch`), V tile j and the next block's query."""
        g, j, tk = self.g, self.b.d(2), self.tk
        if 1 not in g.kept:
            load_kv(self.b, g, "k", 1, g.d, self.k_rows, self.k_tile * tk, g.d, tk, when=None, bi=self.k_batch)
        if 2 not in g.kept:
            load_kv(self.b, g, "v", 2, g.dv, v_rows, j * tk, width, tk, when=None)
        if 0 not in g.kept:
            self._query(self.next_bi, self.next_qi, self.q_next, self.last + self.more, load=True, scale=False)

    def qk(self, e) -> None:
        """The score MATMUL of tile j + 1, before the softmax of tile j (another slot)."""
        j, tile = self.b.d(2), self.b.d(2) + 1
        e.qk(self.g.d, tile_extent(self.tk, self.g.lk, tile), [("ge", self.nk - 2 - j)], self.slot(tile), self.q_off,
             k=self.key(self.b.d(0), tile))  # fmt: skip

    def next_block(self, e) -> None:
        """At a block's last step, before its softmax (tile 0's slot is not the last tile's): the next block's
        query scaled, and its first score MATMUL into slot 2."""
        when = self.last + self.more
        self._query(self.next_bi, self.next_qi, self.q_next, when, load=False)
        zero = sy.const(0)
        e.qk(self.g.d, tile_extent(self.tk, self.g.lk, zero), when, self.slot(zero, after=True), self.q_next,
             m=tile_extent(self.tq, self.g.lq, self.next_qi), k=self.key(self.next_bi, zero))  # fmt: skip

    def _query(self, bi, qi, off, when, load: bool, scale: bool = True) -> None:
        g, tq, b = self.g, self.tq, self.b
        rows = tile_extent(tq, g.lq, qi)
        region = g.kept.get(0)
        if load and region is None:
            load_block(b, g, tq, rows, bi, qi, off, when)
        if scale:
            scale_block(b, g, tq, rows, bi, qi, off, when, region)

    def output_before(self, e) -> None:
        """The previous block's output (O * 1 / l, stored) at a block's first step, after the softmax's first
        part: so the vector unit starts the block while the previous one's last P @ V runs."""
        self._output(e, self.prev_bi, self.prev_qi, self.after_first)

    def output_last(self, e) -> None:
        """The op's last block's output, at its last step. With one key tile (`single`) that step also writes the
        block before's output (`output_before`) into `out`, whose STORE runs after all of the step's compute
        (`runtime/tokens.py`: a step's stores wait for its last compute): this one goes through the slot of `p`
        that the step's P @ V has just read (`staging`; dv <= tk, `flash_attention._ahead_tiles`)."""
        staging = "p" if self.single and 3 not in self.g.kept else "out"
        self._output(e, self.b.d(0), self.b.d(1), self.op_last, staging)

    def _output(self, e, bi, qi, when, staging: str = "out") -> None:
        g, tq = self.g, self.tq
        rows = tile_extent(tq, g.lq, qi)
        keep = e.rows, e.out_off, e.out, e.out_stride
        e.rows = rows
        if 3 in g.kept:
            e.out_off = g.base(3, bi) + qi * (tq * g.row_stride(3))
        else:
            e.out, e.out_stride = staging, g.dv
        e.normalize(when=when, safe=False)
        e.rows, e.out_off, e.out, e.out_stride = keep
        if 3 not in g.kept:
            self.b.store_rows(staging, dram_offset=g.base(3, bi), dram_stride=g.row_stride(3), row_start=qi * tq,
                              row_bound=g.lq, rows=rows, cols=g.dv, when=when)  # fmt: skip
