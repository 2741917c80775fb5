"""The cost of a decode step over a paged cache whose loads chain (`flash_decode.chained_loads`): the macro the
kernel emits (`flash_steps.emit`, one head or `heads` a step) run into an `emit_trace.Trace` and its steps
timed in grid order (`Trace.run`: the simulator's compute units and scoreboard, DMA queues with their chained
LOADs, the DRAM channel and the token rule), as the lookahead is (`flash_cost.ahead_cycles`)."""

from __future__ import annotations

from dataclasses import dataclass

from .. import symbolic as sy
from ..machine.target import MAX_ROWS
from . import memoized
from .emit_trace import Trace, context
from .flash_steps import emit

TIMED = (
    6  # grid steps (of `heads` heads) timed from the op's start; then the last, the others at the pace of the last two
)


class _Paged:
    """The `flash_attention.Geometry` fields the emitters read, for a decode attention of `Dims` over a paged
    cache: heads one after another in DRAM (the query's and the output's rows contiguous where
    `Dims.contiguous`), K and V from pages of `Dims.page` rows, the mask one row per head (`Dims.mask_row`) or
    one for all, read by the `heads` heads of a step together where `shared`."""

    def __init__(self, dims, heads: int, shared: bool):
        self.d, self.dv, self.causal, self.safe = dims.d, dims.dv, False, dims.safe
        self.batch, self.lq, self.lk = sy.const(dims.batch), sy.const(dims.lq), sy.const(dims.lk)
        self.kept, self.contiguous = {i: f"r{i}" for i in dims.kept}, dims.contiguous
        self.paged = {i: _page(dims, w) for i, w in ((1, dims.d), (2, dims.dv))}
        self.window, self.group, self.packed, self.scale, self.minor = None, 1, False, 1.0, (0, 0, 0, 0)
        self.mask = True if dims.masked else None
        one = dims.mask_row or dims.mask_broadcast
        self.mask_rows, self.mask_stride = sy.const(1 if one else dims.lq), sy.const(dims.lq * dims.lk)
        self.mask_div = heads if shared else 1

    def row_stride(self, i: int) -> int:
        width = self.dv if i in (2, 3) else self.d
        return width if self.contiguous[i] else 2 * width

    def base(self, i: int, bi):
        return bi * ((self.lk if i in (1, 2) else self.lq) * self.row_stride(i))


def _page(dims, width: int) -> dict:
    """`kv_cache.paged_operand`'s fields of one sequence's K or V (the emitters read page size and head dim)."""
    return {"page_size": dims.page, "head_dim": width, "page_elems": dims.batch * dims.page * width}


@dataclass(frozen=True)
class _Buffer:
    name: str
    slots: int = 2
    alternate: bool = False


class _Tiling:
    """What `flash_steps.emit` reads of a Tiling: the tiles, the query's and V's buffers."""

    def __init__(self, tiles: dict):
        self.tiles, self.buffers = tiles, (_Buffer("q", 1), _Buffer("v"))


def held(dims, tq: int) -> int:
    """The query rows a decode step holds (`flash_decode.held_rows`): every head's, where one block takes them."""
    rows = dims.batch * dims.lq
    return rows if dims.lq <= tq and dims.contiguous[0] and rows <= MAX_ROWS else 0


@memoized
def chained_cycles(t, dims, tq: int, tk: int, sch) -> float:
    """Cycles of the plain schedule over a paged cache whose loads chain, as its emitted steps run
    (`Trace.run`): its first `TIMED` grid steps and its last (the held output's STORE), the others at the mean
    pace of the last two timed. Not of the last one alone: the loads of step k wait for step k - 2's compute,
    so steps alternate in length (at B = 32, 17 keys, one head a step: 296 and 375 cycles), and the first
    steps are not yet steady (the held query's LOAD: 249, then 422); pricing every step by step 2's (422)
    overrated one head a step by 13% (24,539 predicted, 21,629 timed whole, at B = 32)."""
    u, q_held = sch.heads, held(dims, tq)
    tiles = {"tq": tq, "tk": tk, "pipelined": 0, "ones": sch.ones, "s_slots": 1, "expsub": int(sch.expsub)}
    tiles |= ({"q_held": q_held} if q_held else {}) | ({"heads": u} if u > 1 else {})
    nq, nk, steps = -(-dims.lq // tq), -(-dims.lk // tk), dims.batch // u
    blocks = [(bi, qi) for bi in range(steps) for qi in range(nq)]
    timed = blocks if len(blocks) <= TIMED + 2 else blocks[:TIMED] + blocks[-1:]
    with context():
        b = Trace()
        emit(_Paged(dims, u, sch.shared), _Tiling(tiles), b, ())
        points = [{0: bi, 1: qi, 2: j} for bi, qi in timed for j in range(nk)]
        slotted = tuple(f"{n}{i or ''}" for n in ("k", "v", "mask") for i in range(u))
        ends = b.run(t, points, slotted=slotted)[nk - 1 :: nk]
    more = len(blocks) - len(timed)
    return ends[-1] + (more and more * (ends[-2] - ends[-4]) / 2)
