"""The cost model of `novella.flash_attention` (`kernels/flash_attention.py`): its grid steps as
`costmodel.Group`s, for either schedule.

Per query block of r rows the key/value tiles have widths w_0 .. w_{n-1} (the last one partial).
A step's vector work is the online softmax of one tile (`part1`: reads the scores, ends with
p = s - max; `part2`: the rest), its matrix work the score MATMUL of one tile and the P @ V of one:
the VECs and MATMULs `flash_emit.Emit` writes, run into an `emit_trace.Trace` and priced with the
simulator's formulas (`emitted`, `step_cycles`). Its LOADs and STORE are the kernel's too (`query`,
`flash_emit.Steps.loads`, `flash_emit.store`), read at the step's grid point with the rows the simulator
moves (`emitted_dmas`), except over a paged cache (`_hand_dmas`, `_page_chain`, `chained_ring`); how they
chain, overlap and floor the step (`_parts`, `_group`) is the schedule's rule, here.
Pipelined, step j runs part1(j-1), QK(j), part2(j-1), PV(j-1): the next step's MATMULs never wait
for this step's VECs, so the units overlap (`Group.overlap`) and a steady step costs the busier
unit. The plain schedule runs QK(j), part1(j), part2(j), PV(j) in series. A step that loads a
single-slot buffer (the query at j = 0, every causal K/V load, which is guarded) waits for the
previous step's compute, so its loads and its compute chain (part1, then QK beside part2, then
PV) add up. (Where the query block alternates between batches, `Buffer.alternate`, those loads
wait only for the step before last; the model does not credit that overlap: modelling the step as
two-slot overrated it by up to 16% on `large`, bench/costmodel.py's decode case. Between the query
blocks of a prefill, `Schedule.blocks`, it does: the next block's query and first K/V tiles load
under the last steps of the previous one.) The next step's
loads, queued behind the query's, are that step's own period: counting them in the query's step too
overrated a DMA-bound block (a decode query) by one step's loads.

The lookahead (`flash_ahead`, `s_slots = 3`) runs its query blocks as one pipeline, whose edges follow no
step rule: its cost is its emitted steps timed one by one in grid order (`ahead_cycles`, `Trace.run`: the
simulator's compute units and scoreboard, DMA queues, DRAM channel and token rule). A fixed allowance for
the edges (half a steady step a block) overrated it by 10% on `large` at T = 256 (tq = tk = 128: 87.9K
predicted, 79.5K simulated; now 80.2K)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass

from .. import symbolic as sy
from ..machine import costmodel as cm
from . import memoized
from .emit_trace import LOAD, MMA, VEC, Dim, Trace, context, cycles
from .flash_ahead import Ahead
from .flash_emit import Emit, Steps, lagged, query, store
from .support import extent


@dataclass(frozen=True)
class Dims:
    """An op's sizes at the planned lengths, as the cost model sees them."""

    batch: int
    lq: int
    lk: int
    d: int
    dv: int
    causal: bool
    masked: bool
    contiguous: tuple  # q, k, v, out: rows contiguous in DRAM
    safe: bool = False  # masked and safe: the row sums are floored before the divide (one more VEC MAX)
    page: int = 0  # K/V in a paged cache: rows per page (a tile of several pages is a chain of LOADs); 0: not
    mask_row: bool = False  # the mask is one row per block, added to each of its rows (`flash_decode.mask_row`)
    mask_broadcast: bool = False  # the mask has one row, which the DMA reads for every query row (row_step 0)
    kept: tuple = ()  # q, k, v (0 .. 2) and the output (3) kept in the scratchpad: never loaded or stored


def widths(total: int, t: int) -> list[int]:
    full, rem = divmod(total, t)
    return [t] * full + [rem] * (rem > 0)


class _Step:
    """Cycles of the parts of one tile's work for a block of r rows: the VECs and MATMULs `flash_emit.Emit`
    writes on an [r, w] score tile (`emitted`), priced where they run (`step_cycles`)."""

    def __init__(self, t, dims: Dims, r: int, ones: bool, expsub: bool):
        self.t, self.dims, self.r, self.ones, self.expsub = t, dims, r, ones, expsub
        self._by_w: dict = {}

    def _at(self, w: int) -> tuple:
        got = self._by_w.get(w)
        if got is None:
            d = self.dims
            key = (d.d, d.dv, d.masked, d.mask_row, d.causal, d.safe)
            got = self._by_w[w] = step_cycles(self.t, key, self.r, w, self.ones, self.expsub)
        return got

    def part1(self, w: int, opening: bool, diag: bool) -> float:
        """The mask and staircase adds and the softmax up to p = s - max (`Emit.adds`, `Emit.part1`)."""
        return self._at(w)[0][opening, diag]

    def part2(self, w: int, opening: bool) -> float:
        """The rest of the softmax and the output's rescale (`Emit.part2`'s VECs)."""
        return self._at(w)[1][opening]

    def qk(self, w: int) -> float:
        return self._at(w)[2]

    def pv(self, w: int) -> float:
        return self._at(w)[3]

    def out(self, w: int) -> float:
        """O / l on the last tile (`Emit.normalize`)."""
        return self._at(w)[4]

    def kv(self, rows: int) -> tuple[tuple[float, float], tuple[float, float]]:
        c, page = self.dims.contiguous, self.dims.page
        if page and rows > page:  # V continues K's chain (`flash_decode.chained_loads`): no latency of its own
            k, (vq, vd) = _page_chain(self.t, rows, self.dims.d, page), _page_chain(self.t, rows, self.dims.dv, page)
            return k, (vq - self.t.dma_latency * (not self.dims.causal), vd)
        return cm.dma(self.t, rows, self.dims.d, c[1]), cm.dma(self.t, rows, self.dims.dv, c[2])

    def mask(self, rows: int, w: int):
        return cm.dma(self.t, min(rows, 1) if self.dims.mask_row else rows, w) if self.dims.masked else None


# the trace's guards: dim 0 is the softmax's tile (0: the opening one), dim 1 the tiles after it (0: the last,
# causal: the diagonal)
_OPENING, _REST, _FINAL = [("eq", Dim(0))], [("ge", Dim(0) - 1)], [("eq", Dim(1))]


@memoized
def emitted(key: tuple, r: int, w: int, ones: bool, expsub: bool) -> dict[str, tuple]:
    """The ops `flash_emit.Emit` writes for one step on an [r, w] score tile, by part ("qk", "part1" with the
    adds, "part2" with P @ V, "out"); key: Dims' (d, dv, masked, mask_row, causal, safe)."""
    d, dv, masked, mask_row, causal, safe = key
    parts = {
        "qk": lambda e: e.qk(d, w, None),
        "part1": lambda e: (
            e.adds("ROW" if mask_row else "TENSOR" if masked else None, causal, None, _FINAL),
            e.part1(floor=masked, opening=_OPENING, rest=_REST),
        ),
        "part2": lambda e: e.part2(None, _OPENING, _REST),
        "out": lambda e: e.normalize(when=_FINAL, safe=safe),
    }
    out = {}
    with context():
        for name, emit in parts.items():
            b = Trace()
            emit(Emit(b, r, w, r, w, dv, ones, expsub))
            out[name] = b.priced()
    return out


@memoized
def step_cycles(t, key: tuple, r: int, w: int, ones: bool, expsub: bool) -> tuple:
    """(part1 by (opening, diagonal), part2's VECs by opening, QK, PV, out) of `emitted`, priced."""
    ops = emitted(key, r, w, ones, expsub)

    def at(opening, last):
        return {0: 1 - opening, 1: 1 - last}

    both = (True, False)
    part1 = {(o, diag): cycles(t, ops["part1"], at(o, diag)) for o in both for diag in both}
    part2 = {o: cycles(t, ops["part2"], at(o, False), VEC) for o in both}
    pv = cycles(t, ops["part2"], at(True, False), MMA)
    return part1, part2, cycles(t, ops["qk"], {}, MMA), pv, cycles(t, ops["out"], at(False, True))


class _Geometry:
    """The `flash_attention.Geometry` fields the loads' emitters read (`query`, `Steps.loads`, `store`),
    for an op without a paged cache at lengths lq, lk: one batch of rows `width` apart where contiguous
    (`Dims.contiguous`), else further; a mask of lq rows, or one (`Dims.mask_broadcast`); the operands kept
    in the scratchpad (`Dims.kept`)."""

    def __init__(self, key: tuple, lq: int, lk: int, batch: int = 1):
        self.d, self.dv, masked, self.causal, self.contiguous, broadcast, kept = key
        self.batch = sy.const(batch)
        self.kept = {i: f"r{i}" for i in kept}
        self.lq, self.lk, self.mask = sy.const(lq), sy.const(lk), True if masked else None
        self.mask_rows, self.mask_stride, self.mask_div = sy.const(1) if broadcast else self.lq, sy.const(lq * lk), 1
        self.paged, self.window, self.group, self.packed, self.scale = {}, None, 1, False, 1.0

    def row_stride(self, i: int) -> int:
        width = self.dv if i in (2, 3) else self.d
        return width if self.contiguous[i] else 2 * width

    def base(self, i: int, bi):
        return bi * ((self.lk if i in (1, 2) else self.lq) * self.row_stride(i))


@dataclass(frozen=True)
class _Query:
    name: str = "q"
    alternate: bool = False


class _Tiling:
    """What `query` reads of a Tiling: q_blocks (`Schedule.blocks`), the query's buffer."""

    def __init__(self, blocks: bool):
        self.tiles, self.buffers = {"q_blocks": 1} if blocks else {}, (_Query(),)


def _step_key(ws: list[int], j: int, pipelined: bool) -> tuple:
    """What a step's prices depend on: the first step, its K tile, the softmax's tile, the opening, the last."""
    n, i = len(ws), j - pipelined
    return j == 0, ws[j] if j < n else None, ws[i] if i >= 0 else None, i == 0, i == n - 1


@memoized
def emitted_dmas(dims: Dims, tq: int, tk: int, sch: Schedule) -> dict:
    """{(rows, step key): (LOADs as (rows, cols, contiguous), the STORE's or None)} of the steps of every
    query block (`_step_key`), as the kernel emits them (`query`, `Steps.loads`, `store`, run into a
    `Trace`, read at the first grid point with that key) and the simulator charges them (rows in bounds)."""
    points, blocks, lag = {}, set(), lagged(sch.pipelined, sch.s_slots)
    for qi, (r, keys) in enumerate(_blocks(dims, tq, tk)):
        if (r, keys) in blocks:
            continue
        blocks.add((r, keys))
        ws = widths(keys, tk)
        for j in range(len(ws) + lag):
            if (r, _step_key(ws, j, lag)) not in points:
                points[r, _step_key(ws, j, lag)] = (qi, j)
    key = (dims.d, dims.dv, dims.masked, dims.causal, dims.contiguous, dims.mask_broadcast, dims.kept)
    with context():
        g, b = _Geometry(key, dims.lq, dims.lk, dims.batch), Trace()
        rows = extent(1, tq, g.lq)
        s = Steps(g, b, tq, tk, lag, sch.ones)
        query(b, g, _Tiling(sch.blocks), tq, rows)
        s.loads(rows)
        store(b, g, tq, rows, s.final)
        out = {}
        for step, (qi, j) in points.items():
            dmas = b.dmas({0: 0, 1: qi, 2: j})
            st = [x[1:] for x in dmas if x[0] != LOAD]
            out[step] = tuple(x[1:] for x in dmas if x[0] == LOAD), st[0] if st else None
        return out


def _page_chain(t, rows: int, cols: int, page: int) -> tuple[float, float]:
    """A tile of `rows` rows from pages of `page` rows, one LOAD per page, all but the first chained: one
    latency, then the pages' data back to back (each page contiguous), one issue per later page."""
    full, rem = divmod(rows, page)
    data = full * cm.dma(t, page, cols, True)[1] + (cm.dma(t, rem, cols, True)[1] if rem else 0.0)
    return t.issue_cycles * (full + (rem > 0)) + t.dma_latency + data, data


def _group(t, loads, vector: float, matrix: float, chain: float, floor: float, store=None, resident=False):
    """A step: its DMAs, VEC and MATMUL cycles; `chain` its compute when it cannot overlap the next, `floor`
    the least compute period its own dependences allow when it does. Overlapped, the token ring holds the
    chain (`Group.chain`), not both units' sum: that overrated 128 x 128 tiles on `large` by 11% (a [6, 1500,
    64] self-attention: 3.06M predicted, 2.76M simulated)."""
    loads = [x for x in loads if x is not None]
    ld, dram = sum(x[0] for x in loads), sum(x[1] for x in loads)
    sq, sd = store or (0.0, 0.0)
    overlap = not resident and chain < vector + matrix and floor <= max(vector, matrix)
    if overlap:
        compute = vector + matrix
    else:
        compute = max(floor, max(vector, matrix)) if floor > max(vector, matrix) and not resident else chain
    return cm.Group(ld, compute, sq, dram + sd, 1, load_slots=1 if resident else 2, n_dma=max(len(loads), 1),
                    vector=vector, overlap=overlap, chain=chain if overlap else 0.0)  # fmt: skip


@dataclass(frozen=True)
class Schedule:
    """A candidate's schedule (see FlashAttention.candidates)."""

    pipelined: bool
    ones: bool = False
    s_slots: int = 1
    expsub: bool = False
    blocks: bool = False  # the query alternates between consecutive query blocks (`q_blocks`)
    heads: int = 1  # heads per grid step (`flash_decode.SubHead`; `chained_ring` only)
    shared: bool = True  # the step's heads read one mask


def block(t, dims: Dims, r: int, ws: list[int], sch: Schedule, dmas=None) -> list[tuple[cm.Group, int]]:
    """The steps of one query block of r rows over key tiles of widths ws (causal: the last is the diagonal),
    as (group, how many steps) in step order of first appearance: steps with the same tiles are alike
    (`_step_key`). `dmas`: `emitted_dmas`, the steps' LOADs and STORE (None: a paged cache's, `_hand_dmas`)."""
    s, n, pipelined = _Step(t, dims, r, sch.ones, sch.expsub), len(ws), lagged(sch.pipelined, sch.s_slots)
    steps: dict = {}
    for j in range(n + pipelined):
        key = _step_key(ws, j, pipelined)
        if key in steps:
            steps[key][1] += 1
        else:
            moves = _priced(t, dmas[r, key]) if dmas is not None else _hand_dmas(t, dims, s, r, ws, sch, j)
            steps[key] = [_parts(t, dims, s, r, ws, sch, j, moves), 1]
    return [(_group(t, *step), count) for step, count in steps.values()]


def _hand_dmas(t, dims: Dims, s: _Step, r: int, ws: list[int], sch: Schedule, j: int) -> tuple:
    """Step j's (LOADs, STORE) over a paged cache, as `_parts` takes them: priced (queue, data) here."""
    n, i = len(ws), j - sch.pipelined
    loads = [cm.dma(t, r, dims.d, dims.contiguous[0])] if j == 0 and 0 not in dims.kept else []
    k, v = s.kv(ws[j] if j < n else 0)[0], s.kv(ws[i] if i >= 0 else 0)[1]
    loads += [k if j < n or not dims.causal else None, v if i >= 0 or not dims.causal else None]
    loads.append(s.mask(r if i >= 0 else 0, ws[max(i, 0)]))
    return loads, cm.dma(t, r, dims.dv, dims.contiguous[3]) if i == n - 1 and 3 not in dims.kept else None


def _priced(t, moves) -> tuple:
    """`emitted_dmas`' (LOADs, STORE) of a step as (queue, data) cycles."""
    loads, out = moves
    return [cm.dma(t, *x) for x in loads], out and cm.dma(t, *out)


def _parts(t, dims: Dims, s: _Step, r: int, ws: list[int], sch: Schedule, j: int, moves) -> list:
    """Step j's [loads, vector, matrix, chain, floor, store, resident] (see _group); `moves`: its LOADs' and
    STORE's (queue, data) cycles."""
    n, pipelined = len(ws), sch.pipelined
    i = j - pipelined
    first, last = i == 0, i == n - 1
    loads, out = moves
    qk = s.qk(ws[j]) if j < n else 0.0
    vec = mat = floor = 0.0
    div = s.out(ws[i]) if last else 0.0
    scale = cm.vec(t, r, dims.d, "mul")
    if i >= 0:
        p1, p2 = s.part1(ws[i], first, dims.causal and last), s.part2(ws[i], first)
        vec, mat = p1 + p2 + div, s.pv(ws[i])
        if not pipelined:
            chain = p1 + p2 + qk + mat + div
        elif sch.s_slots >= 2:  # QK(j) beside the whole softmax of j - 1
            chain = max(qk, p1 + p2) + mat + div
        else:  # QK(j) after the last read of the scores; the next softmax after QK(j)
            chain, floor = p1 + max(qk, p2) + mat + div, p1 + qk
        mat += qk
    else:
        chain = mat = qk
    if j == 0:
        vec, chain = vec + scale, chain + scale
    return [loads, vec, mat, chain, floor, out, (j == 0 and not sch.blocks) or dims.causal]


def cost(t, dims: Dims, tq: int, tk: int, *schedule) -> float:
    """Predicted cycles of the whole op (`costmodel.pipeline` over its steps, or `chained_ring` where its
    loads chain); `schedule`: Schedule's fields. The lookahead (`flash_ahead`): its emitted steps timed one by
    one (`ahead_cycles`), as its blocks' edges do not follow the steps' rule."""
    sch = Schedule(*schedule)
    if sch.s_slots == 3:
        return ahead_cycles(t, dims, tq, tk, sch)
    return _cost(t, dims, tq, tk, sch)


AHEAD_BLOCKS = 6  # query blocks the lookahead's compute is timed over; the rest repeat the last three's


@memoized
def ahead_cycles(t, dims: Dims, tq: int, tk: int, sch: Schedule) -> float:
    """Cycles of the lookahead as its emitted steps run (`Trace.run` over the ops `Ahead.step` emits, step by
    step in grid order): of its first `AHEAD_BLOCKS` query blocks, the others at the last three's pace."""
    key = (dims.d, dims.dv, dims.masked, dims.causal, dims.contiguous, dims.mask_broadcast, dims.kept)
    nq, nk = -(-dims.lq // tq), -(-dims.lk // tk)
    blocks = [(bi, qi) for bi in range(dims.batch) for qi in range(nq)]
    timed = blocks[:AHEAD_BLOCKS]
    with context():
        g, b = _Geometry(key, dims.lq, dims.lk, dims.batch), Trace()
        s = Steps(g, b, tq, tk, False, sch.ones)
        ahead = Ahead(g, b, tq, tk, single=dims.lk <= tk, one=dims.lq <= tq)
        ahead.step(Emit(b, extent(1, tq, g.lq), s.cols, tq, tk, g.dv, sch.ones, sch.expsub), s)
        points = [{0: bi, 1: qi, 2: j} for bi, qi in timed for j in range(nk)]
        ends = b.run(t, points, slotted=("k", "v", "p", "out"))[nk - 1 :: nk]
    more = len(blocks) - len(timed)
    return ends[-1] + (more and more * (ends[-1] - ends[-4]) / 3)


def _cost(t, dims: Dims, tq: int, tk: int, sch: Schedule) -> float:
    if dims.page and tk > dims.page and not dims.causal and not sch.pipelined:
        return chained_ring(t, dims, tq, tk, sch)
    counts: Counter = Counter()
    dmas = None if dims.page else emitted_dmas(dims, tq, tk, sch)
    for (r, keys), n_blocks in _query_blocks(dims, tq, tk).items():
        for g, n_steps in block(t, dims, r, widths(keys, tk), sch, dmas):
            counts[g] += dims.batch * n_blocks * n_steps
    groups = [dataclasses.replace(g, count=n) for g, n in counts.items()]
    return cm.pipeline(t, groups)


def _blocks(dims: Dims, tq: int, tk: int) -> list[tuple[int, int]]:
    """(rows, keys visited) of each query block (causal: the keys up to its diagonal tile)."""
    return [(r, min(dims.lk, (qi + 1) * tk) if dims.causal else dims.lk) for qi, r in enumerate(widths(dims.lq, tq))]


def _query_blocks(dims: Dims, tq: int, tk: int) -> Counter:
    """How many query blocks have (rows, keys visited): outside causal, all but a partial last are alike;
    causal, block qi visits the keys up to its diagonal tile (`_blocks`)."""
    return Counter(_blocks(dims, tq, tk))


def lower_bound(t, dims: Dims, tq: int, tk: int, *schedule) -> float:
    """At most `cost` of the candidate: the largest, summed over the op, of its MATMUL cycles and of the
    VEC cycles every tile's softmax has whatever its place (a step's period is at least the work of each
    unit), and of its DRAM data without burst rounding (q, the K/V tiles of every query block, the mask
    tiles and the output, but those kept in the scratchpad)."""
    sch = Schedule(*schedule)
    q, k, v, out = (0 if i in dims.kept else 1 for i in range(4))
    mat = vec = elems = 0
    for (r, lk), n in _query_blocks(dims, tq, tk).items():
        s = _Step(t, dims, r, sch.ones, sch.expsub)
        for w, count in Counter(widths(lk, tk)).items():
            mat += n * count * (s.qk(w) + s.pv(w))
            vec += n * count * (s.part1(w, True, False) + s.part2(w, True))
        mask = (1 if dims.mask_row else r) * lk * dims.masked
        elems += n * (q * r * dims.d + lk * (k * dims.d + v * dims.dv) + mask + out * r * dims.dv)
    return dims.batch * max(mat, vec, elems * 4 / t.dram_bytes_per_cycle)


def chained_ring(t, dims: Dims, tq: int, tk: int, sch: Schedule) -> float:
    """Cycles of a plain schedule whose loads all continue the load queue's DMA chain
    (`flash_decode.chained_loads`), step by step in order: the loads of step k go into the slots step
    k - 2 used, so they start when its compute pushed its token, and their data follows one DMA latency
    later unless the queue is still moving the data of step k - 1; step k computes when its loads are in
    and step k - 1 is done. A query block's last tile is partial: a short one holds little data, so the
    next block's first loads wait for the whole compute of the tile before it (its own slot's). Blocks
    are alike: three are stepped, the rest repeat the last one's period."""
    u = sch.heads
    blocks = [(r, keys, n * dims.batch // u) for (r, keys), n in _query_blocks(dims, tq, tk).items()]
    load = done = 0.0  # the load queue's end, the compute's end
    tokens, total = [0.0, 0.0], 0.0  # the compute's end after each step; the blocks not stepped
    for r, keys, n in blocks:
        s, ws = _Step(t, dims, r, sch.ones, sch.expsub), widths(keys, tk)
        steps = [_ring_step(t, dims, s, r, tk, ws, sch, j) for j in range(len(ws))]
        steps = [(u * data - (u - 1) * mask * sch.shared - (u > 1) * u * out, interleaved(u, *parts))
                 for data, mask, out, parts in steps]  # fmt: skip
        ends = [done]
        for _ in range(min(n, 3)):
            for data, chain in steps:
                load = max(load, tokens[-2] + t.issue_cycles + t.dma_latency) + data
                done = max(load, done) + chain
                tokens.append(done)
            ends.append(done)
        total += (ends[-1] - ends[-2]) * (n - min(n, 3))
    held = dims.batch * blocks[-1][0] if u > 1 else blocks[-1][0]  # several heads a step: every output at the end
    return done + total + (cm.dma(t, held, dims.dv, dims.contiguous[3])[0] if 3 not in dims.kept else 0.0)


def _ring_step(t, dims: Dims, s: _Step, r: int, tk: int, ws: list[int], sch: Schedule, j: int) -> tuple:
    """(load queue cycles but latencies, of them the mask's and the output's, (QK, VECs before P @ V, P @ V, VECs after)) of
    step j of one head of the plain schedule: K and V as tk / page LOADs each (the pages past the sequence
    move nothing), the mask tile, the query at 0; the last step's output STORE holds the DRAM channel
    for its data too (a query or output kept in the scratchpad, `Dims.kept`, moves nothing)."""
    w, first, last = ws[j], j == 0, j == len(ws) - 1
    chains = [_page_chain(t, w, c, dims.page) for c in (dims.d, dims.dv)]
    queue = sum(q - t.dma_latency for q, _ in chains) + 2 * t.issue_cycles * (tk // dims.page - -(-w // dims.page))
    mask = s.mask(r, w)[0] - t.dma_latency if dims.masked else 0.0
    queue += mask + (
        cm.dma(t, r, dims.d, dims.contiguous[0])[0] - t.dma_latency if first and 0 not in dims.kept else 0.0
    )
    out = cm.dma(t, r, dims.dv, dims.contiguous[3])[1] if last and 3 not in dims.kept else 0.0
    queue += out
    before = s.part1(w, first, False) + s.part2(w, first) + (cm.vec(t, r, dims.d, "mul") if first else 0.0)
    return queue, mask, out, (s.qk(w), before, s.pv(w), s.out(w) if last else 0.0)


def interleaved(u: int, qk: float, before: float, pv: float, after: float) -> float:
    """The compute of a step of u heads (`flash_attention._heads_macro`): the score MATMULs back to back on
    the matrix unit, each head's softmax on the vector unit once its scores are in, its P @ V once the
    softmax and the P @ V before it are done, the outputs' VECs last. One head: their sum."""
    mat, vec, ends = u * qk, 0.0, []
    for h in range(u):
        vec = max(vec, (h + 1) * qk) + before
        mat = max(mat, vec) + pv
        ends.append(mat)
    for end in ends:
        vec = max(vec, end) + after
    return max(mat, vec)
