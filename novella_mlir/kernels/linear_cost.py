"""The cost model's pieces of `Linear.cost` (`kernels/linear.py`) and its search's lower bound: the step
groups of an op remembered across its plan lengths, the candidates' classes, the bound of every candidate."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from torch_mlir import ir

from ..dialects.novella import GATED, linear_epilogue, norm_is_rms
from ..dialects.verify import norm_on_input
from ..machine import costmodel as cm
from . import linear_emit, memoized, resident
from .emit_trace import LOAD, MMA, STORE, VEC, Dim
from .linear_emit import TraceGeometry, emit_epilogue, emit_prologue, emit_prologue_tail, emit_spread_epilogue, trace

SPREAD = 3  # a candidate's acc_slots field: two accumulator halves, the deferred epilogue spread (`spread_steps`)


@dataclass(frozen=True)
class Epilogue:
    """What the output tile goes through before its STORE: + bias, `act`, + `residual` (a tile loaded
    per output block), a layer norm over the (whole) row (`norm`: the output tile holds full rows); and
    `pre_norm`, a layer norm of the input rows before the MATMULs (`norm_input`: the A tile holds whole rows),
    or with `rms` an RMSNorm: the rows times the norm's weight before the MATMULs, each output row times its
    rsqrt(mean(x * x) + eps) in the epilogue (computed on the vector unit beside the MATMULs). `direct`: x is
    kept in the scratchpad (`--novella-resident`) and the MATMULs read it there: no x LOADs, no `a` buffer (an
    RMSNorm prologue reads it there, its MATMULs `pa`: `a` holds its squares). `bias`: the bias is not a
    splat of zero (a model without biases gets one): where it is, the epilogue adds none."""

    act: str = "none"
    residual: bool = False
    norm: bool = False
    pre_norm: bool = False
    rms: bool = False
    direct: bool = False
    bias: bool = True

    @classmethod
    def of(cls, op) -> Epilogue:
        residual, norm = linear_epilogue(op)
        pre = norm and norm_on_input(op.attributes)
        direct = "x" in resident.regions(op) and (not pre or norm_is_rms(op))  # an RMSNorm prologue reads x there
        rms, bias = pre and norm_is_rms(op), not zero_splat(op.operands[2])
        return cls(op.attributes["act"].value, residual, norm and not pre, pre, rms, direct, bias)

    @property
    def scratch(self) -> bool:
        return self.act in ("gelu", GATED) or self.norm

    def spreads(self, k_steps: int, in_acc: bool) -> bool:
        """With two accumulator halves the deferred epilogue of a block may run over the next block's k steps
        (`spread_steps`, the candidates' acc_slots = SPREAD), not all on its first: each step's VECs beside its
        MATMUL. Where the k loop has two steps and the epilogue (its residual in the accumulator left out)
        two VECs, without a norm."""
        ops = [op for op in emitted(self, 1, 1, 1, 0, (in_acc, False)) if op.kind == VEC]
        return k_steps > 1 and not self.norm and len(ops) > 1 and self.act != GATED

    def res_in_acc(self, k_steps: int) -> bool:
        """The residual tile is loaded into the accumulator on the block's first k step and the MATMULs add
        onto it (x @ W^T + b + r = (r + x @ W^T) + b when no activation comes between): no residual buffer
        in the scratchpad and one VEC less. That LOAD waits for the previous step's compute (the
        accumulator has one slot): the cost model takes it where the k loop has more than one step."""
        return self.residual and self.act == "none" and k_steps > 1 and not self.rms  # r * (res + x w) differs


def zero_splat(value) -> bool:
    """`value` is a weight every element of which is 0 (`novella.splat`)."""
    owner = value.owner
    attrs = owner.attributes if hasattr(owner, "attributes") else {}
    return "novella.splat" in attrs and ir.FloatAttr(attrs["novella.splat"]).value == 0.0


@memoized
def steps_of(target, k, n, epi) -> dict:
    """`step`'s results for (tiles, r, j, head, deferred) of an op (a dict per compile)."""
    return {}


def step(target, k, n, epi, tiles, r, j, head, deferred, memo=None, lead=False) -> tuple[float, float]:
    """`Group.terms` of the grid steps of `Linear.cost` over r rows at k step j (`head`: a column block's
    or row slab's first step, loading what stays resident; `deferred`: two accumulator halves, the epilogue
    in the next block's first k step), whatever their count and tm (tiles: tn, tk, ws, acc, res_acc,
    bias_tile, ring: the streamed loads' slots, 0 for two; the same at every M and every tm >= r: remembered across the searches in `steps_of`). Its
    tile LOADs and MATMUL (`emitted_body`), the epilogue's and the prologue's LOADs, VECs and STORE
    (`emitted`, `emitted_prologue`) are what the emitter writes at this step's grid point (`memo`:
    `steps_of`'s dict, which also holds them by kind and size; `lead`: a later k step of the row's first
    block, input-stationary); the op's first step's own LOADs are `first_loads`."""
    tn, tk, ws, acc, in_acc, bias_tile, ring = tiles
    k_steps, ring = k // tk, ring or 2
    spread = deferred and acc == SPREAD
    at = j == (0 if deferred and not spread else k_steps - 1)  # the step with the STORE (and the epilogue)
    work = _memo(memo, epilogue_work, target, epi, r, tn, n, k_steps if spread else 0, (in_acc, bias_tile))
    work = work[j] if spread else work if at else ((), 0.0, 0.0, 0, work[4])  # off its step: the STORE's size
    pre = (
        _memo(memo, prologue_work, target, r, k, tk, ws, head, j, epi.rms, lead)
        if epi.pre_norm
        else ((), 0.0, 0.0, 0, 0.0, 0)
    )
    loads, mm = _memo(memo, body_work, target, epi, r, k, n, tiles, head, j)
    moves = (*loads, *pre[0], *work[0])
    _, ld = _memo(memo, cm.dmas, target, moves)
    lq = ld + target.issue_cycles * len(moves)  # one DMA chain (`linear._chain_loads`): latency in the fill
    st, sd = _memo(memo, cm.dma, target, *work[4])
    if k_steps > 1 and acc == 1:  # the store's data shares the DRAM with the next block's first loads
        ld += sd * (j == 0)
        sd = 0.0
    v, head_vec, n_vecs = work[1], work[2] * (not deferred), work[3]
    beside = pre[4]  # an RMSNorm's row scales, on the vector unit beside the MATMUL, before the epilogue
    if deferred and ws != 2 and not head and not epi.rms:  # x in two slots: normalized beside the last MATMUL
        beside += pre[1]
    else:
        mm += pre[1]  # the rows' layer norm before this step's MATMUL, in series
    c, vector = (max(mm, v + beside), 0.0) if deferred else (max(mm, beside) + v, v)  # deferred: the longer
    floor = cm.retire_floor(c, lq, mm, ring) if (at or n_vecs) and k_steps > 1 else 0.0
    if spread and at:  # the compute two steps on waits for this STORE, whose data shares the DRAM with loads
        floor = max(floor, cm.retire_floor(c, st + ld, mm))
    single = head or (in_acc and j == 0)  # a LOAD into a one-slot buffer: after the previous step's compute
    group = cm.Group(lq, c, st * at, ld + sd * at, 1, 1 if single else ring, 2, vector=vector, overlap=True,
                     vector_wait=head_vec, issues=1 + n_vecs + pre[3] + pre[5], floor=floor)  # fmt: skip
    period, fill = group.terms(target)
    return period, fill + target.issue_cycles + target.dma_latency


OP_FIRST, BLOCK_FIRST = {0: 0, 1: 0, 2: 0}, {1: 0, 2: 0}  # grid points: the op's first step, a block's


def _point(head, j: int) -> dict:
    """The grid point (`Op.on`) of a step at k step j: `head`, a block's first (weight-stationary a column
    block's, input-stationary a row slab's); else not the first along dims 0 and 1."""
    return BLOCK_FIRST if head else {2: j}


@memoized
def body_work(target, epi, r, k, n, tiles, head, j) -> tuple:
    """(LOADs as (rows, cols, contiguous), MATMUL cycles) of what `emitted_body` writes on the step (`_point`),
    read from the ops of its class (`body_at`) with r rows."""
    loads, mms = body_at(epi, k, n, _geometry(tiles), head, j)
    return (
        tuple((r if by_rows else op.rows, op.cols, op.contiguous) for op, by_rows in loads),
        sum(cm.matmul(target, r if by_rows else op.rows, op.k, op.cols) for op, by_rows in mms),
    )


@memoized
def body_at(epi, k, n, geometry, head, j) -> tuple:
    """(LOADs, MATMULs) of `body_class` that run on the step (`_point`; a MATMUL also at `cycles`' point {}),
    each as (op, whether its rows are the step's)."""
    ops = [(op, by_rows) for op, by_rows in body_class(epi, k, n, geometry) if op.on(_point(head, j))]
    return [o for o in ops if o[0].kind == LOAD], [o for o in ops if o[0].kind == MMA and o[0].on({})]


@memoized
def first_loads(target, k, n, epi, tiles) -> float:
    """Load-queue cycles of the LOADs only the op's first step makes (the bias row, a norm's weight and bias):
    once per op, their data and issue in the DMA chain."""
    ops = emitted_body(epi, 1, k, n, tiles)
    if epi.pre_norm:
        ops += emitted_prologue(1, k, tiles[1], tiles[2], epi.rms)[0]
    moves = [(op.rows, op.cols, op.contiguous) for op in ops if op.on(OP_FIRST) and not op.on(BLOCK_FIRST)]
    return cm.dmas(target, moves)[1] + target.issue_cycles * len(moves)


def _memo(memo, fn, target, *key):
    """fn(target, *key), remembered in `memo` (an op's dict: no Target to hash on every step) or fn's memo."""
    if memo is None:
        return fn(target, *key)
    key = (fn, *key)
    got = memo.get(key)
    if got is None:
        got = memo[key] = fn(target, *key[1:])
    return got


@memoized
def epilogue_work(target, epi, r, tn, n, spread_k, flags) -> tuple:
    """(LOADs as (rows, cols, contiguous), VEC cycles, the first VEC's, how many VECs, the STORE as (rows,
    cols, contiguous)) of what the emitter writes for the epilogue of one [r, tn] output block on its step,
    or (a tuple by k step) spread over `spread_k` k steps; flags: (res_acc, bias_tile)."""
    ops = emitted(epi, r, tn, n, spread_k, flags)
    store = next((op.rows, op.cols, op.contiguous) for op in ops if op.kind == STORE)
    if spread_k:
        return tuple((*_work(target, [op for op in ops if op.on({2: j})]), store) for j in range(spread_k))
    return (*_work(target, ops), store)


@memoized
def prologue_work(target, r, k, tk, ws, head, j, rms, lead=False) -> tuple:
    """`epilogue_work`'s first four of the prologue's ops on a step (`head`: a block's first step; `lead`:
    k step j of the row's first block), then the VEC cycles and count of its ops after the MATMUL (an
    RMSNorm's row scales)."""
    point = BLOCK_FIRST if head else {1: 0, 2: j} if lead else {2: j}
    before, after = emitted_prologue(r, k, tk, ws, rms)
    tail = _work(target, [op for op in after if op.on(point)])
    return (*_work(target, [op for op in before if op.on(point)]), tail[1], tail[3])


def _work(target, ops) -> tuple:
    loads = tuple((op.rows, op.cols, op.contiguous) for op in ops if op.kind == LOAD)
    vecs = [(op.fn, op.rows, op.cols) for op in ops if op.kind == VEC]
    return loads, cm.vecs(target, vecs), cm.vec(target, *vecs[0][1:], vecs[0][0]) if vecs else 0.0, len(vecs)


@memoized
def emitted_body(epi, r, k, n, tiles) -> tuple:
    """The tile LOADs and the MATMUL the emitter writes for a step of r rows (`linear_emit.emit_loads`,
    `emit_matmul`); tiles: `step`'s. Traced once per class (`body_class`), its row-sized ops given r rows."""
    by_class = body_class(epi, k, n, _geometry(tiles))
    return tuple(replace(op, rows=r) if by_rows else op for op, by_rows in by_class)


def _geometry(tiles) -> tuple:
    """What of `step`'s tiles the body's `TraceGeometry` holds: (tn, tk, ws, res_acc, bias_tile), not the
    accumulator slots nor the ring."""
    tn, tk, ws, _, in_acc, bias_tile, _ = tiles
    return tn, tk, ws, in_acc, bias_tile


@memoized
def body_class(epi, k, n, geometry) -> tuple:
    """`emitted_body`'s ops for any number of rows r (each tm of the search's candidates, the last partial
    tile), as (op at one row, whether its rows are r): traced at one row and at two, an op whose rows go
    1 -> 2, nothing else different, is sized by the step's rows (the x tile, the residual block, the
    MATMUL's m). The emitters write the same ops whatever the rows: an op that differs otherwise is an
    error, not a guess."""
    one, two = _body_trace(epi, 1, k, n, geometry), _body_trace(epi, 2, k, n, geometry)
    sized = [(a.rows, b.rows) == (1, 2) for a, b in zip(one, two)]
    if len(one) != len(two) or any(a != replace(b, rows=a.rows) or (a.rows != b.rows and not s)
                                   for a, b, s in zip(one, two, sized)):  # fmt: skip
        raise ValueError(f"linear cost: the traced step's ops change with its rows other than in size: {one} {two}")
    return tuple(zip(one, sized))


def _body_trace(epi, r, k, n, geometry) -> tuple:
    tn, tk, ws, in_acc, bias_tile = geometry
    g = TraceGeometry(epi, k, n, tk, tn, r, bool(in_acc), bool(bias_tile), epi.residual, ws=ws, tm=r, direct=epi.direct)
    return trace(linear_emit.emit_loads, g) + trace(linear_emit.emit_matmul, g, None)


@memoized
def emitted(epi, r, tn, n, spread_k, flags) -> tuple:
    """The LOADs, VECs and STORE the emitter writes for the epilogue of one [r, tn] output block
    (`linear_emit.emit_epilogue`), or spread over `spread_k` k steps (`emit_spread_epilogue`); flags:
    (res_acc, bias_tile)."""
    g = TraceGeometry(epi, spread_k, n, 1, tn, r, *flags, has_residual=epi.residual)
    if spread_k:
        return trace(emit_spread_epilogue, g, (0, r, 0, 0))
    return trace(emit_epilogue, g, (0, r, 0, None), ("res", "out", "bias"), None)


@memoized
def emitted_prologue(r, k, tk, ws, rms=False) -> tuple:
    """The LOADs and VECs the emitter writes for the norm of r input rows before the MATMUL
    (`linear_emit.emit_prologue`) and after it (`emit_prologue_tail`)."""
    g = TraceGeometry(Epilogue(pre_norm=True, rms=rms), k, 0, tk, 0, r, False, False, False)
    first = [("eq", Dim(0)), ("eq", Dim(1)), ("eq", Dim(2))]
    when = first[1:] if ws == 2 else []
    return trace(emit_prologue, g, first, when), trace(emit_prologue_tail, g, when)


def classes(cands, m: int) -> tuple[list, list, list]:
    """The candidates by class, classes in the order of their first member: candidates that differ only in
    a tm >= m (one row tile of m rows) are one class, with the same cost and bound. (first member's index,
    index of the member of the smallest tm, the class as a candidate with tm = m: a row of an array) of
    each class."""
    arr = as_array(cands)
    if m >= arr[:, 0].max():  # every class one candidate
        every = list(range(len(cands)))
        return every, every, arr
    keys = arr.copy()
    keys[:, 0] = np.minimum(arr[:, 0], m)
    code = np.zeros(len(keys), np.int64)
    for col, radix in zip(keys.T, keys.max(axis=0) + 1):  # one integer per class (mixed radix)
        code = code * radix + col
    _, first, inverse = np.unique(code, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    by_tm = np.lexsort((arr[:, 0], inverse))  # by class, the smallest tm first
    heads = by_tm[np.searchsorted(inverse[by_tm], order)]
    return first[order].tolist(), heads.tolist(), keys[first[order]]


@memoized
def as_array(cands: tuple) -> np.ndarray:
    return np.array(cands, dtype=np.int64)


def lower_bounds(target, m, k, n, cands, epi: Epilogue) -> np.ndarray:
    """At most `Linear.cost` of each candidate: the larger of its DRAM data cycles without burst rounding
    and the sum over steps of a floor of each step's period: its MATMUL, its load queue (the DMAs every
    step issues: the x tile; streamed, the weight tile), on the
    one step of each output tile with the epilogue its STORE, and weight-stationary, on the first step of
    each column block (one slot), its MATMUL after the weight slab's load; input-stationary (ws = 2), the
    row slab loads on no step's floor. The fill is not negative."""
    tm, tn, tk, ws, acc, _, _, _ = np.asarray(cands, dtype=np.int64).reshape(-1, 8).T
    blocks, k_steps = -(-n // tn), k // tk
    full, rem = m // tm, m % tm
    w_reads = np.where(ws == 1, 1, full + (rem > 0))
    elems = np.where(ws == 2, 1, blocks) * m * k * (not epi.direct) + w_reads * n * k + m * n * (1 + epi.residual)
    lat, bw = target.issue_cycles + target.dma_latency, target.dram_bytes_per_cycle / 4
    streamed = np.where(ws == 1, 0, tn * tk)
    x_loads = (ws != 2) * (not epi.direct)
    fixed = target.issue_cycles * (x_loads + (ws != 1))  # the step's LOADs chained: no latency each
    x_tile = np.where(ws == 2, 0, tk) * (not epi.direct)
    passes = -(-tk // target.array_rows) * -(-tn // target.array_cols)

    def tile(r):  # (a step's floor, the floor of the one with the epilogue, of the head) of r rows
        mm = target.issue_cycles + target.array_rows + passes * np.maximum(r, target.array_rows)
        mm = mm + target.matmul_latency
        step = np.maximum(mm, fixed + (r * x_tile + streamed) / bw)
        return step, np.maximum(step, lat + r * tn / bw), mm + lat + (r * tk * (not epi.direct) + tn * k) / bw

    step, last, _ = tile(tm)
    steps = full * blocks * ((k_steps - 1) * step + last)
    step, last, _ = tile(rem)
    steps = steps + (rem > 0) * blocks * ((k_steps - 1) * step + last)
    _, last, head = tile(np.where(full > 0, tm, rem))
    steps = steps + (ws == 1) * blocks * (np.maximum(head, last) - last)
    return np.maximum(elems / bw, steps)
