"""Fused attention (flash-attention style); its legalize patterns are in `kernels/flash_fusion.py`.

For one batch/head and one block of `tq` query rows the grid walks the key/value
tiles of `tk` rows: S = (scale * Q) @ K^T lands in the accumulator, the running
row max `m` and rescaled row sum `l` live in the scratchpad (online softmax), and
O = O * exp(m_old - m) + exp(S - m) @ V accumulates in the accumulator. The last
visited tile writes O / l; the score matrix never reaches DRAM. A causal op uses
square tiles: tiles above the diagonal are skipped, the diagonal tile adds a
staircase of NEG_FLOOR (-FLT_MAX: exp gives exactly 0, as for -inf, and an artifact stores only
finite immediates) built once in the scratchpad.

**Schedule.** The compute queue feeds a matrix and a vector unit that run concurrently, each in
order, ordered only by an SRAM range scoreboard (docs/isa.md). The softmax of a tile costs about as
many vector cycles as its two MATMULs cost matrix cycles, so in program order QK(j), softmax(j),
PV(j) the array idles during the softmax and the vector unit during the MATMULs. The kernel
software-pipelines the key/value loop (`pipelined`, one more grid step per query block): step d2
runs the softmax and P @ V of tile d2 - 1 beside the score MATMUL of tile d2, with K of tile d2
and V (and the mask) of tile d2 - 1 loaded in that step. The other option, two interleaved halves
of the query block, is not built: within one step it can only hide one half's MATMULs under the
other half's softmax (the next QK needs the next K tile), i.e. at most half the matrix time, while
the pipelined loop measures max(matrix, vector) per tile (bench/costmodel.py, bench/cycles.py). What a younger MATMUL writes while an older VEC still reads sits in another range:
`p` has two slots (softmax(d2) fills one while PV(d2 - 1) reads the other) and the scores either
two slots by tile parity (`s_slots = 2`, the QK first) or one (the QK issued after the softmax's
last read of `s`, p = s - max, so it waits only for that). Steps past either end of the key loop
load rows out of bounds (zero-filled, no DRAM traffic), so the K/V loads stay unguarded and keep
their two slots; causal K/V loads are guarded (one slot), as the tiles above the diagonal are.

Vector work per score is a row max, exp(s - max) and a row sum, plus the output rescale per row:
EXPSUB (when the config lists it) does exp(s - max) in one pass where the scores have two slots
(with one, the subtract stays a pass of its own so the next QK need not wait for the exp), and
`ones` moves the row sums to the matrix unit (worth it where the array has spare cycles, e.g. `large`):
`COLUMN` gives V a column of ones so that P @ V also yields them (O one column wider: its rescale reads
dv + 1 columns, a beat more per row where dv is a multiple of the lanes), `SUMS` a MATMUL of its own,
l (+)= P @ u with u a row of ones and l a column of the accumulator (the rescale of O keeps dv columns, l
is rescaled as one row; on `large` a [6, T, 64] self-attention at T = 1500 went from 3.00M to 2.67M
cycles, with the cost model's token ring fixed: `flash_cost._group`). `FUSED` (no mask, causal skip or paged
cache; with EXPSUB) takes neither unit's extra pass: the score MATMUL writes the row maxima as it drains
(MATMUL `rowmax`, into `mx`, a column per score slot) and EXPSUB the row sums of p as it writes p (VEC
`rowsum`, docs/isa.md), so a tile's vector work is one EXPSUB pass and its matrix work QK and P @ V of dv
columns (on `large` the encoder body's attention at T = 256 went from 375K to 301K cycles, and the body at
T = 1500 from 1.28x to 1.18x its compulsory roofline). Candidates (tiles, schedule, slots, ones) are
scored by the cost model (`kernels/flash_cost.py`); the plain schedule remains a candidate and is
the only one for a paged key/value cache without a causal skip (a step past the end would map a
page the sequence does not have).

A key or value read from the paged KV cache (`novella.paged_key` / `novella.paged_value`, set by
`--novella-kv-cache`) is loaded a tile at a time from its pages (`kernels/kv_cache.py`: `tk`
divides the page size, or is whole pages, one chained LOAD each, so one DMA latency per tile; the
runtime maps every page per step; the cost model picks tk), for
query head `bi` the cache head `bi floordiv novella.kv_group`. A one-row query over a GQA cache
(decode) is packed: grid dim 0 walks the cache heads, and the `kv_group` query heads sharing one
are the rows of its query block, so each key/value page is loaded once per cache head; a decode
step loads every head's query rows once and a per-sequence mask as one row, and a grid step takes a few
heads (`heads`, `FlashAttention.heads`; `_heads_macro`), so that one step's loads run under the compute
of the step before and its heads' MATMULs and softmaxes interleave (`flash_decode.py`). With a
sliding window (`novella.kv_window = W`: the op's own mask keeps the last W positions) the key/value
grid walks only the tiles from the one holding position lk - W (at most W / tk + 1 steps, whatever
the past; `flash_emit._window_guards`), so the pages before the window are never read (the runtime frees them)
and the step's guards are evaluated over those few grid points only. A batched decode step's lanes
each walk only their own key tiles, guarded by the lane's field (`flash_decode.Lanes`)."""

from __future__ import annotations

import dataclasses
import itertools

from torch_mlir import ir

from .. import symbolic as sy
from ..dialects.novella import heads_major
from ..machine import costmodel as cm
from . import BufferPlan, Tiling, first, memoized, module_symbols, plan_lengths, resident
from . import flash_cost as fc
from . import flash_decode as fd
from . import kv_cache as kv
from .attention import NEG_FLOOR
from .flash_ahead import Ahead
from .flash_decode import PER_HEAD, SubHead, chained_loads, held_rows, load_query, mask_row, plan_samples
from .flash_emit import (
    COLUMN,
    FUSED,
    SUMS,
    Emit,
    Steps,
    kept,
    lagged,
    mask_broadcast,
    query,
    store,
    tile_extent,
)
from .support import _candidates, _flag, ceildiv, extent, mul, upper

CAUSAL_ATTR = "novella.causal"  # on an `add` of scores and a top-left causal mask (set by the frontend)


def _batch(shape) -> ir.AffineExpr:
    return sy.canon(mul(*shape[:-2])) if len(shape) > 2 else sy.const(1)


class Geometry:
    """The op's logical sizes (batch = the result's leading dims, lengths, head dims) and where each
    of q, k, v and the result keeps row 0 of batch `bi` and how far apart its rows are."""

    def __init__(self, op, tv):
        self.minor = list(ir.DenseI64ArrayAttr(op.attributes["heads_minor"]))
        stored = [tv.shape(0), tv.shape(1), tv.shape(2), tv.shape(-1)]
        q, k, v, y = (heads_major(list(s), f) for s, f in zip(stored, self.minor))
        self.batch, self.lq, self.lk = _batch(y), q[-2], k[-2]
        self.d, self.dv = sy.as_int(q[-1]), sy.as_int(v[-1])
        self.causal = bool(ir.IntegerAttr(op.attributes["causal"]).value)
        self.safe = _flag(op, "safe")
        self.scale = ir.FloatAttr(op.attributes["scale"]).value
        self.places = [self._place(s, f) for s, f in zip((q, k, v, y), self.minor)]
        self.paged = {i: kv.paged_operand(op, i) for i in (1, 2) if kv.paged_operand(op, i) is not None}
        self.group = kv.group(op)
        self.window = kv.window(op) if self.paged else None
        if any(self.minor[i] for i in self.paged):
            raise ValueError("flash_attention: a paged KV cache is [1, heads, positions, head_dim], not heads-minor")
        self.kept = kept(resident.regions(op))  # operand (3: the result) -> its region (`--novella-resident`)
        if set(self.kept) - {0, 3} and self.paged:
            raise ValueError(
                "flash_attention: a paged KV cache is not kept in the scratchpad (its query and result may be)"
            )
        self.mask = tv.shape(3) if len(op.operands) == 4 else None
        self.mask_div = 1  # batch bi reads mask bi floordiv mask_div (a mask per leading index: `_per_lead`)
        if self.mask is not None:
            self.mask_rows = self.mask[-2]
            self.mask_stride = mul(self.mask[-2], self.mask[-1]) if sy.as_int(_batch(self.mask)) != 1 else sy.const(0)
            nb, mb = sy.as_int(self.batch), sy.as_int(_batch(self.mask))
            if mb != 1 and nb is not None and mb is not None and nb != mb:
                self.mask_div = nb // mb
        self.packed = self._packs()
        if self.packed:  # one query row per head: the group's heads are the rows of one cache head's block
            gr, d, dv = self.group, self.d, self.dv
            self.mask_div //= gr
            self.batch, self.lq = sy.const(sy.as_int(self.batch) // gr), sy.const(gr)
            self.places[0] = (lambda bi: bi * (gr * d)), d
            self.places[3] = (lambda bi: bi * (gr * dv)), dv

    def _packs(self) -> bool:
        """Decode over a GQA cache: one query row, heads-major q and result, batch-broadcast mask."""
        per_lead = self.mask_div > 1 and self.mask_div % self.group == 0
        mask_ok = self.mask is None or sy.as_int(_batch(self.mask)) == 1 or per_lead
        plain = not (self.minor[0] or self.minor[3] or self.causal) and sy.as_int(self.batch) is not None
        return bool(self.paged) and self.group > 1 and sy.as_int(self.lq) == 1 and plain and mask_ok

    def _place(self, s, minor: int):
        """(fn(bi) -> DRAM offset of row 0 of batch bi, row stride) of a tensor of logical shape s."""
        width = sy.as_int(s[-1])
        if minor:  # stored [..., L, H, D]: batch bi is head bi mod H of position block bi floordiv H
            h = sy.as_int(s[-3])
            block = mul(s[-2], sy.const(h * width))
            return (lambda bi: sy.floordiv(bi, h) * block + ir.AffineExpr.get_mod(bi, sy.const(h)) * width), h * width
        nb = _batch(s)
        stride = sy.const(0) if sy.as_int(nb) == 1 and sy.as_int(self.batch) != 1 else mul(s[-2], s[-1])
        return (lambda bi: bi * stride), width

    def base(self, i: int, bi):
        return self.places[i][0](bi)

    def row_stride(self, i: int) -> int:
        return self.places[i][1]


def _sizes(g: Geometry, rows: int = 0, held: int = 0, heads: int = 1) -> tuple:
    """What the buffer plan reads of the op: (d, dv, masked, causal, rows: `_halves_rows`, held: `held_rows`,
    heads: a grid step's heads (`flash_decode.SubHead`), the buffers they share: with several, the output
    of every head is held and stored once, at the last step)."""
    shared = fd.shared(g, heads)
    return g.d, g.dv, g.mask is not None, g.causal, rows, held, heads, shared, tuple(sorted(g.kept))


def _halves_rows(g: Geometry, syms, plan) -> int:
    """The query rows at the plan lengths, which a query block holding them all alternates between batches
    (two slots, `Buffer.alternate`), so that a batch's loads run under the previous batch's compute; 0 where
    none may: causal (its K/V loads wait anyway), a sliding window, or where the program's bounds exceed the
    plan (a shape bucket's program never does: its lengths end at its plan). A decode step over a paged
    cache alternates: its query block is one row per head (or the kv group's rows), and the next head's
    query, K, V and mask load under this head's compute."""
    if g.causal or g.window is not None:
        return 0
    rows = sy.evaluate(g.lq, plan)
    return 0 if sy.evaluate(g.lq, [s.hi for s in syms] or plan) > rows else rows


@memoized
def _fitting(target, sizes: tuple, cands: tuple) -> tuple:
    """The candidates whose buffers fit (memoized: a model's equal layers ask alike)."""
    return tuple(c for c in cands if _plan(target, sizes, *c).fits())


def _plan(
    target, sizes: tuple, tq: int, tk: int, pipelined: bool, ones: int, s_slots: int, expsub: bool, blocks=False
) -> BufferPlan:
    d, dv, masked, causal, rows, held, heads, shared, kept_ = sizes
    width = dv + (ones == COLUMN)  # `COLUMN`: V carries a column of ones, so P @ V also gives the row sums of P
    plan = BufferPlan(target)
    plan.add("q", "spad", held * d or tq * d, alternate=blocks or (not held and 0 < rows <= tq))
    if 1 not in kept_:  # K, V and the output kept in the scratchpad are used where they are
        plan.add("k", "spad", tk * d, stream=True)
    if 2 not in kept_:
        plan.add("v", "spad", tk * width, stream=True)
    if masked:
        plan.add("mask", "spad", tq * tk, stream=True)
    if causal:
        plan.add("tri", "spad", tk * tk)
    plan.add("p", "spad", tq * tk, stream=pipelined)  # pipelined: PV(j - 1) reads one slot, softmax(j) fills one
    for name in ("m", "cm", "t"):
        plan.add(name, "spad", tq)
    plan.add("l", "acc" if ones == SUMS else "spad", tq)  # `SUMS`: l (+)= P @ u on the array
    if ones == SUMS:
        plan.add("u", "spad", tk)
    if 3 not in kept_:  # several heads: all held
        plan.add("out", "spad", held * dv if heads > 1 else tq * dv, stream=heads == 1)
    if s_slots == 3 and 1 not in kept_:  # the lookahead's first K tile (`flash_ahead`)
        plan.add("k0", "spad", tk * d)
    if ones == FUSED:  # the row maxima of each score slot (the score MATMUL's `rowmax`), a tile's row sums
        plan.add("mx", "spad", tq * s_slots)
        plan.add("ls", "spad", tq)
    plan.add("s", "acc", tq * tk * s_slots)  # two: tile j's scores by d2 parity (macro-addressed, not streamed)
    plan.add("o", "acc", tq * width)
    for sub in range(1, heads):  # the step's other heads' own copies (`flash_decode.SubHead`)
        for buf in [x for x in list(plan.buffers) if x.name in PER_HEAD and x.name not in shared]:
            plan.add(f"{buf.name}{sub}", buf.mem, buf.size, stream=buf.slots > 1)
    return plan


def dims_of(g: Geometry, syms, lengths=None) -> fc.Dims:
    """The cost model's view of the op at symbol values `lengths` (default: the nominal length)."""
    at = (lambda e: upper(e, syms)) if lengths is None else (lambda e: sy.evaluate(e, lengths))  # noqa: E731
    contiguous = tuple(not m for m in g.minor)
    masked = g.mask is not None
    page = min((info["page_size"] for info in g.paged.values()), default=0)
    return fc.Dims(at(g.batch), at(g.lq), at(g.lk), g.d, g.dv, g.causal, masked, contiguous, g.safe and masked,
                   page, mask_row(g), mask_broadcast(g), tuple(sorted(g.kept)))  # fmt: skip


class FlashAttention:
    """`novella.flash_attention`: grid (batch, query block, key/value step); see the module docstring.

    Candidates are (tq, tk, pipelined, ones, s_slots, expsub[, blocks]): tile sizes from the Target's row
    tiles (multiples of the array height; a causal op uses square tiles), the schedule, the row sums' unit
    and the score buffer's slots; EXPSUB (when the config has it) wherever it does not lengthen the
    last read of a single score buffer; `blocks` (`q_blocks`), pipelined where the plan has several query
    blocks (not causal, no window, not paged): the query buffer alternates between consecutive blocks, so a
    block's query loads under the previous block's last steps; with it, `s_slots = 3` is the lookahead
    (`kernels/flash_ahead.py`: the blocks, or the heads of one block each, as one pipeline, where every length
    has two key tiles or more, or one and the query is kept: `_ahead_tiles`; on `large` a [6, T, 64]
    self-attention at T = 256 went from 119K to 93K cycles, then 71K with the next block's score MATMUL before
    the softmax). The cost model (`kernels/flash_cost.py`) takes the cheapest that fits the SRAM at the
    nominal length."""

    exhaustive = False  # bench/costmodel.py's protocol: every fitting candidate is scored

    def candidates(self, g: Geometry, syms, target, options) -> list[tuple]:
        sizes = target.array_tiles(16)
        tqs = [options["tile-m"]] if options.get("tile-m") else _candidates(g.lq, syms, sizes)
        tks = _candidates(g.lk, syms, sizes)
        for info in g.paged.values():  # part of one page, or whole pages (chained LOADs; not under a window)
            ps = info["page_size"]
            tks = [t for t in tks if ps % t == 0 or (t % ps == 0 and g.window is None)] or [ps]
        pairs = [(t, t) for t in tqs if t in tks] if g.causal else list(itertools.product(tqs, tks))
        schedules = (False,) if g.paged and not g.causal else (True, False)
        pairs = pairs or [(min(tqs), min(tqs))]
        has_expsub = "expsub" in target.vector_functions
        onesv = (0, SUMS) if 2 in g.kept else (0, COLUMN, SUMS)  # a resident V has no column of ones
        onesv += (FUSED,) * (has_expsub and g.mask is None and not g.causal and not g.paged)
        variants = [(p, ones, n) for p in schedules for ones in onesv for n in ((1, 2) if p else (1,))]
        variants = [(p, ones, n) for p, ones, n in variants if ones != FUSED or not p or n == 2]  # on EXPSUB
        return [(tq, tk, p, ones, n, has_expsub and (not p or n == 2)) for tq, tk in pairs for p, ones, n in variants]

    def cost(self, target, dims: fc.Dims, cand) -> float:
        return fc.cost(target, dims, *cand)

    def choose(self, g: Geometry, syms, target, options, plan, rows: int = 0, held: int = 0) -> tuple:
        """The cheapest fitting candidate at the plan lengths `plan` (`rows`: `_halves_rows`, `held`:
        `held_rows`, kept only where a candidate with one query block fits)."""
        cands = self.candidates(g, syms, target, options)
        if rows and not held:  # several query blocks: each may load under the previous one's compute
            pipes = [c for c in cands if c[2] and c[4] == 2]
            cands += [(*c, True) for c in cands if rows > c[0] and c[2] and not g.paged]
            if _ahead_ok(g):  # the lookahead (`flash_ahead`, never paged): three score slots
                cands += [(*c[:4], 3, c[5], True) for c in pipes if _ahead_tiles(g, syms, c[1]) is not None]
        lq = sy.as_int(g.lq) or 0
        fitting = held and tuple(c for c in _fitting(target, _sizes(g, rows, held), tuple(cands)) if c[0] >= lq)
        dims = tuple(dims_of(g, syms, at) for at in plan_samples(g, plan))
        if fitting:
            return _cheapest(self, target, dims, fitting), held
        fitting = _fitting(target, _sizes(g, rows), tuple(cands))
        if not fitting:
            _plan(target, _sizes(g, rows), *cands[-1]).check()
        return _cheapest(self, target, dims, fitting), 0

    def tile(self, op, tv, target, options):
        g = Geometry(op, tv)
        syms = module_symbols(op)
        rows = _halves_rows(g, syms, plan_lengths(op))
        cand, held = self.choose(g, syms, target, options, plan_lengths(op), rows, held_rows(g))
        tq, tk, pipelined, ones, s_slots, expsub, *blocks = cand
        heads = self.heads(g, syms, target, plan_lengths(op), cand, rows, held)
        plan = _plan(target, _sizes(g, rows, held, heads), *cand)
        steps = ceildiv(g.lk, tk) + int(lagged(pipelined, s_slots))  # the lookahead: nk steps a block
        if g.window is not None and not pipelined:  # the tiles from the one holding position lk - W
            steps = ceildiv(g.lk, tk) - sy.floordiv(g.lk - g.window, tk)
        grid = [g.batch if heads == 1 else sy.const(sy.as_int(g.batch) // heads), ceildiv(g.lq, tq), steps]
        tiles = {"tq": tq, "tk": tk, "pipelined": int(pipelined), "ones": ones, "s_slots": s_slots,
                 "expsub": int(expsub), **({"q_held": held} if held else {}),
                 **({"q_blocks": 1} if blocks else {}), **({"heads": heads} if heads > 1 else {})}  # fmt: skip
        return Tiling(tiles, grid, plan.buffers + resident.buffers(op))

    def predicted(self, op, tv, target) -> float:
        """Cycles at the plan lengths of the candidate `tile` chooses under `target` (`--novella-resident`
        prices a lowered SRAM budget with it)."""
        g, syms, plan = Geometry(op, tv), module_symbols(op), plan_lengths(op)
        cand, _ = self.choose(g, syms, target, {}, plan, _halves_rows(g, syms, plan), held_rows(g))
        return sum(self.cost(target, dims_of(g, syms, at), cand) for at in plan_samples(g, plan))

    def heads(self, g: Geometry, syms, target, plan, cand: tuple, rows: int, held: int) -> int:
        """A grid step's heads (`flash_decode.SubHead`) where a decode step's loads chain (held query rows,
        the plain schedule): of 1, 2, 4 and 8, those that divide the batch, fit, and cost no more than one
        head per step at a past of one page (a decode step serves every past, and a step of all the heads
        cannot overlap its loads with any compute); the cheapest of them at the plan's lengths."""
        tq, tk, pipelined = cand[:3]
        if not held or pipelined or not chained_loads(g, tk) or not fd.rows_out(g):
            return 1
        nb, page = sy.as_int(g.batch), min(info["page_size"] for info in g.paged.values())
        dims = [dims_of(g, syms, at) for at in plan_samples(g, plan)]
        short = dataclasses.replace(dims[0], lk=page + 1)
        best, alone = None, None
        for h in (1, 2, 4, 8):
            if nb % h or not _plan(target, _sizes(g, rows, held, h), *cand).fits():
                continue
            c = [self.cost(target, d, (*cand[:6], False, h, fd.shared_mask(g, h))) for d in (*dims, short)]
            alone = alone or c[-1]
            if c[-1] <= alone:
                best = min(best or (sum(c[:-1]), h), (sum(c[:-1]), h))
        return best[1]

    def macro(self, op, tv, t, b):
        g = Geometry(op, tv)
        if t.tiles.get("heads", 1) > 1:
            return _heads_macro(g, t, b, t.tiles["heads"], len(module_symbols(op)))
        tq, tk = t.tiles["tq"], t.tiles["tk"]
        ones, two = t.tiles.get("ones", 0), t.tiles.get("s_slots", 1) == 2
        ahead = None
        if t.tiles.get("s_slots", 1) == 3:
            syms = module_symbols(op)
            ahead = Ahead(g, b, tq, tk, single=_ahead_tiles(g, syms, tk), one=_one_block(g, syms, tq))
        pipelined = lagged(t.tiles.get("pipelined", 0), t.tiles.get("s_slots", 1))
        b = fd.Lanes(b, g, len(module_symbols(op))) if fd.lanes(g) and not pipelined else b
        s = Steps(g, b, tq, tk, pipelined, ones)
        rows = extent(1, tq, g.lq)
        e = Emit(b, rows, s.cols, tq, tk, g.dv, ones, bool(t.tiles.get("expsub", 0)))
        if two:  # tile i's scores in slot i mod 2: the score MATMUL of tile d2 and the softmax of d2 - 1 never meet
            s.s_off = ir.AffineExpr.get_mod(b.d(2), sy.const(2)) * (tq * tk)
            e.s_off = ir.AffineExpr.get_mod(s.i, sy.const(2)) * (tq * tk)
        if ones in (COLUMN, SUMS):
            _fill_ones(b, g, t, tk)
        if g.causal:
            _staircase(b, tk, when=first(0) + first(1) + first(2))
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


def _ahead_ok(g: Geometry) -> bool:
    """Whether the lookahead (`flash_ahead.Ahead`) may run: no mask, causal skip, window or paged cache (and
    `_ahead_tiles`)."""
    return g.mask is None and not g.causal and g.window is None and not g.paged


def _ahead_tiles(g: Geometry, syms, tk: int) -> bool | None:
    """Whether the lookahead's blocks have one key tile (`Ahead.single`) at every length, which it takes only
    where the query is kept in the scratchpad (a block's query LOAD would write the slot the op's first block,
    a step late, still reads) and the op's last output fits the slot of `p` it goes through where the output
    is stored (`Ahead.output_last`), or else two or more at every length (False); None: neither."""
    lo, hi = (sy.evaluate(g.lk, [getattr(s, end) for s in syms]) for end in ("lo", "hi"))
    if lo > tk:
        return False
    return True if hi <= tk and 0 in g.kept and (3 in g.kept or g.dv <= tk) else None


def _one_block(g: Geometry, syms, tq: int) -> bool:
    """Whether the query has one block of `tq` rows at every length (`Ahead`'s `one`)."""
    return sy.evaluate(g.lq, [s.hi for s in syms] or [0]) <= tq


def _fill_ones(b, g: Geometry, t, tk: int) -> None:
    """The ones column of every slot of V (its rows a tile may hold), once; the loads write the others.
    `SUMS`: the row of ones `u`, once."""
    if t.tiles.get("ones") == SUMS:
        b.vop("FILL", "u", imm=1.0, rows=1, cols=tk, dst_stride=tk, when=first(0) + first(1) + first(2))
        return
    slots = next(buf.slots for buf in t.buffers if buf.name == "v")
    for slot in range(slots):
        b.vop("FILL", "v", imm=1.0, rows=tile_extent(tk, g.lk, sy.const(0)), cols=1, dst_stride=g.dv + 1,
              dst_offset=sy.const(slot * tk * (g.dv + 1) + g.dv), when=first(0) + first(1) + first(2))  # fmt: skip


def _heads_macro(g: Geometry, t, b, heads: int, n_syms: int) -> None:
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
            _fill_ones(sb, g, t, tk)
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


@memoized
def _cheapest(kernel, target, dims, cands: tuple) -> tuple:
    """The first of the fitting candidates with the least (cost, -tq, -tk, plain, ones, s_slots), scored in
    the order of a lower bound of their cost (`flash_cost.lower_bound`) until it exceeds the best cost
    (memoized: a model's equal layers ask alike). `dims`: the op at one length, or a tuple of them
    (`plan_samples`), whose costs add up."""
    at = dims if isinstance(dims, tuple) else (dims,)

    def key(i):
        c = cands[i]
        return sum(kernel.cost(target, d, c) for d in at), -c[0], -c[1], not c[2], c[3], c[4], i

    bounds = [sum(fc.lower_bound(target, d, *c) for d in at) for c in cands]
    return cands[cm.least_by_bound(bounds, key, kernel.exhaustive)[-1]]


def _staircase(b, t: int, when) -> None:
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
