"""The macro `novella.flash_attention` emits (`emit`), one function for the kernel (`flash_attention`) and its
cost model (`flash_cost`, which runs it into an `emit_trace.Trace` where the steps' rule does not hold)."""

from __future__ import annotations

from torch_mlir import ir

from .. import symbolic as sy
from . import first
from . import flash_decode as fd
from .attention import NEG_FLOOR
from .flash_ahead import Ahead
from .flash_decode import SubHead, load_query, mask_row
from .flash_emit import COLUMN, SUMS, Emit, Steps, lagged, query, store, tile_extent
from .support import extent


def emit(g, t, b, syms) -> None:
    """The macro of `novella.flash_attention` on Tiling t (`t.tiles`, `t.buffers`), into builder b: the
    kernel's, and the cost model's `emit_trace.Trace` (`flash_cost`). `syms`: the module's symbols (a
    batched decode step's lanes read the fields after them)."""
    if t.tiles.get("heads", 1) > 1:
        return heads_macro(g, t, b, t.tiles["heads"], len(syms))
    tq, tk = t.tiles["tq"], t.tiles["tk"]
    ones, two = t.tiles.get("ones", 0), t.tiles.get("s_slots", 1) == 2
    ahead = None
    if t.tiles.get("s_slots", 1) == 3:
        ahead = Ahead(g, b, tq, tk, single=ahead_tiles(g, syms, tk), one=one_block(g, syms, tq))
    pipelined = lagged(t.tiles.get("pipelined", 0), t.tiles.get("s_slots", 1))
    b = fd.Lanes(b, g, len(syms)) if fd.lanes(g) and not pipelined else b
    s = Steps(g, b, tq, tk, pipelined, ones)
    rows = extent(1, tq, g.lq)
    e = Emit(b, rows, s.cols, tq, tk, g.dv, ones, bool(t.tiles.get("expsub", 0)))
    if two:  # tile i's scores in slot i mod 2: the score MATMUL of tile d2 and the softmax of d2 - 1 never meet
        s.s_off = ir.AffineExpr.get_mod(b.d(2), sy.const(2)) * (tq * tk)
        e.s_off = ir.AffineExpr.get_mod(s.i, sy.const(2)) * (tq * tk)
    if ones in (COLUMN, SUMS):
        fill_ones(b, g, t, tk)
    if g.causal:
        staircase(b, tk, when=first(0) + first(1) + first(2))
    s.place(e)
    if ahead:
        ahead.step(e, s)
        return
    s.q_off = query(b, g, t, tq, rows, None if s.pipelined else s.opening)
    s.loads(rows)
    if not s.pipelined or two:
        s.qk(e)
    e.adds(None if g.mask is None else "ROW" if mask_row(g) else "TENSOR", g.causal, s.on, s.final)
    e.part1(floor=g.mask is not None, opening=s.opening, rest=s.rest)
    if s.pipelined and not two:  # after the last read of the one score buffer
        s.qk(e)
    e.part2(s.on, s.opening, s.rest)
    e.normalize(when=s.final, safe=g.safe and g.mask is not None)  # causal alone keeps the diagonal
    store(b, g, tq, rows, s.final)


def ahead_tiles(g, syms, tk: int) -> bool | None:
    """Whether the lookahead's blocks have one key tile (`Ahead.single`) at every length, which it takes only
    where the query is kept in the scratchpad (a block's query LOAD would write the slot the op's first block,
    a step late, still reads) and the op's last output fits the slot of `p` it goes through where the output
    is stored (`Ahead.output_last`), or else two or more at every length (False); None: neither."""
    lo, hi = (sy.evaluate(g.lk, [getattr(s, end) for s in syms]) for end in ("lo", "hi"))
    if lo > tk:
        return False
    return True if hi <= tk and 0 in g.kept and (3 in g.kept or g.dv <= tk) else None


def one_block(g, syms, tq: int) -> bool:
    """Whether the query has one block of `tq` rows at every length (`Ahead`'s `one`)."""
    return sy.evaluate(g.lq, [s.hi for s in syms] or [0]) <= tq


def fill_ones(b, g, t, tk: int) -> None:
    """The ones column of every slot of V (its rows a tile may hold), once; the loads write the others.
    `SUMS`: the row of ones `u`, once."""
    if t.tiles.get("ones") == SUMS:
        b.vop("FILL", "u", imm=1.0, rows=1, cols=tk, dst_stride=tk, when=first(0) + first(1) + first(2))
        return
    slots = next(buf.slots for buf in t.buffers if buf.name == "v")
    for slot in range(slots):
        b.vop("FILL", "v", imm=1.0, rows=tile_extent(tk, g.lk, sy.const(0)), cols=1, dst_stride=g.dv + 1,
              dst_offset=sy.const(slot * tk * (g.dv + 1) + g.dv), when=first(0) + first(1) + first(2))  # fmt: skip


def heads_macro(g, t, b, heads: int, n_syms: int) -> None:
    """A decode step of `heads` heads (`flash_decode.SubHead`, the plain schedule) in phases, so that their
    work interleaves: every head's loads, every score MATMUL (the next head's beside this one's softmax),
    every softmax with its P @ V, every output. A batched step's heads each follow their lane
    (`flash_decode.Lanes`)."""
    tq, tk, ones = t.tiles["tq"], t.tiles["tk"], t.tiles.get("ones", 0)
    rows = extent(1, tq, g.lq)
    shared = fd.shared(g, heads)
    parts = []
    for i in range(heads):
        sb = SubHead(b, heads, i, shared)
        sb = fd.Lanes(sb, g, n_syms) if fd.lanes(g) else sb
        s = Steps(g, sb, tq, tk, False, ones)
        if ones in (COLUMN, SUMS):
            fill_ones(sb, g, t, tk)
        s.q_off = load_query(sb, g, t, tq, rows, emit=i == 0, opening=s.opening)
        parts.append((sb, s, Emit(sb, rows, s.cols, tq, tk, g.dv, ones, bool(t.tiles.get("expsub", 0)))))
        fd.hold_output(g, parts[-1][2], sb)
    for i, (_, s, _) in enumerate(parts):
        s.loads(rows, mask=i == 0 or "mask" not in shared)
    for _, s, e in parts:
        s.qk(e)
    for _, s, e in parts:
        e.adds(None if g.mask is None else "ROW" if mask_row(g) else "TENSOR", False, s.on, s.final)
        e.part1(floor=g.mask is not None, opening=s.opening, rest=s.rest)
        e.part2(s.on, s.opening, s.rest)
    for _, s, e in parts:
        e.normalize(when=s.final, safe=g.safe and g.mask is not None)
    fd.store_held(b, g, t, heads, parts[0][1].final)


def staircase(b, t: int, when) -> None:
    """tri[r, c] = 0 for c <= r, NEG_FLOOR above: FILL NEG_FLOOR, then doubling (S_2n = [[S_n, NEG_FLOOR], [0, S_n]])."""
    f = dict(dst_stride=t, a_stride=t, when=when)
    b.vop("FILL", "tri", imm=NEG_FLOOR, rows=t, cols=t, **f)
    b.vop("FILL", "tri", imm=0.0, rows=1, cols=1, **f)
    n = 1
    while n < t:
        h = min(n, t - n)
        b.vop("FILL", "tri", imm=0.0, rows=h, cols=n, dst_offset=sy.const(n * t), **f)
        b.vop("COPY", "tri", "tri", rows=h, cols=h, dst_offset=sy.const(n * t + n), **f)
        n *= 2
