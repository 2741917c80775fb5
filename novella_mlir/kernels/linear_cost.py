"""The cost model's pieces of `Linear.cost` (`kernels/linear.py`) and its search's lower bound: the step
groups of an op remembered across its plan lengths, the candidates' classes, the bound of every candidate."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..dialects.novella import linear_epilogue
from ..dialects.verify import norm_on_input
from ..machine import costmodel as cm
from . import memoized
from .elementwise import ACT_FNS as _ACT_FNS
from .normalization import NORM_OPS

SPREAD = 3  # a candidate's acc_slots field: two accumulator halves, the deferred epilogue spread (`spread_steps`)


@dataclass(frozen=True)
class Epilogue:
    """What the output tile goes through before its STORE: + bias, `act`, + `residual` (a tile loaded
    per output block), a layer norm over the (whole) row (`norm`: the output tile holds full rows); and
    `pre_norm`, a layer norm of the input rows before the MATMULs (`norm_input`: the A tile holds whole rows)."""

    act: str = "none"
    residual: bool = False
    norm: bool = False
    pre_norm: bool = False

    @classmethod
    def of(cls, op) -> Epilogue:
        residual, norm = linear_epilogue(op)
        pre = norm and norm_on_input(op.attributes)
        return cls(op.attributes["act"].value, residual, norm and not pre, pre)

    @staticmethod
    def pre_ops(rows: int, k: int, chunk: int) -> list[tuple[str, int, int]]:
        """The prologue's VEC ops on [rows, k] input rows, the squares summed `chunk` columns at a time."""
        n = k // chunk
        ops = [("rowsum", rows, k), ("div", rows, 1), ("sub", rows, k)] + [
            ("mul", rows, chunk),
            ("rowsum", rows, chunk),
        ] * n
        return (
            ops
            + [("add", rows, 1)] * (n - 1)
            + [(f, rows, 1) for f in ("div", "add", "rsqrt")]
            + [(f, rows, k) for f in ("mul", "mul", "add")]
        )

    def vec_ops(self, rows: int, cols: int) -> list[tuple[str, int, int]]:
        """The epilogue's VEC ops of one [rows, cols] output tile, as (fn, rows, cols)."""
        ops = [(f, rows, cols) for f in ("add", *_ACT_FNS[self.act])] + [("add", rows, cols)] * self.residual
        return ops + [(fn, rows, cols if whole else 1) for fn, whole in NORM_OPS] * self.norm

    @property
    def scratch(self) -> bool:
        return self.act == "gelu" or self.norm

    def spreads(self, k_steps: int, in_acc: bool) -> bool:
        """With two accumulator halves the deferred epilogue of a block may run over the next block's k steps
        (`spread_steps`, the candidates' acc_slots = SPREAD), not all on its first: each step's VECs beside its
        MATMUL. Where the k loop has two steps and the epilogue (its residual in the accumulator left out)
        two VECs, without a norm."""
        ops = replace(self, residual=self.residual and not in_acc).vec_ops(1, 1)
        return k_steps > 1 and not self.norm and len(ops) > 1

    def res_in_acc(self, k_steps: int) -> bool:
        """The residual tile is loaded into the accumulator on the block's first k step and the MATMULs add
        onto it (x @ W^T + b + r = (r + x @ W^T) + b when no activation comes between): no residual buffer
        in the scratchpad and one VEC less. That LOAD waits for the previous step's compute (the
        accumulator has one slot): the cost model takes it where the k loop has more than one step."""
        return self.residual and self.act == "none" and k_steps > 1


def spread_steps(n_ops: int, k_steps: int) -> list[int]:
    """The k step of each of a spread epilogue's `n_ops` VECs (in order, the last one on the last step,
    with the residual load and the STORE): op i on step i * k_steps // n_ops."""
    return [i * k_steps // n_ops for i in range(n_ops - 1)] + [k_steps - 1]


@memoized
def steps_of(target, k, n, epi) -> dict:
    """`step`'s results for (tiles, r, j, head, deferred) of an op (a dict per compile)."""
    return {}


def step(target, k, n, epi, tiles, r, j, head, deferred) -> tuple[float, float]:
    """`Group.terms` of the grid steps of `Linear.cost` over r rows at k step j (`head`: a column block's
    first step, loading what stays resident; `deferred`: two accumulator halves, the epilogue in the next
    block's first k step), whatever their count and tm (tiles: tn, tk, ws, acc, res_acc, bias_tile; the same at
    every M and every tm >= r: remembered across the searches in `steps_of`)."""
    tn, tk, ws, acc, in_acc, bias_tile = tiles
    k_steps = k // tk
    spread = deferred and acc == SPREAD
    at = j == (0 if deferred and not spread else k_steps - 1)  # the step with the STORE (and the epilogue)
    moves = [(r, tk, tk == k)] * (ws != 2) + [(r, k, True)] * (ws == 2 and head)  # ws = 2: the row slab
    moves += [(tn, tk, tk == k)] * (ws != 1) + [(tn, k, True)] * (ws == 1 and head)  # the weight tile / slab
    residual_at = j == 0 if in_acc else at  # into the accumulator on the first k step, else with the epilogue
    moves += [(1, n, True)] * 2 * epi.norm * head + [(r, tn, tn == n)] * (epi.residual and residual_at)
    moves += [(1, k, True)] * 2 * epi.pre_norm * head
    moves += [(1, tn, True)] * (bias_tile and (j == 0 if spread else at))  # the block's bias, for its first VEC
    _, ld = cm.dmas(target, moves)
    lq = ld + target.issue_cycles * len(moves)  # one DMA chain (`linear._chain_loads`): latency in the fill
    st, sd = cm.dma(target, r, tn, contiguous=tn == n)
    if k_steps > 1 and acc == 1:  # the store's data shares the DRAM with the next block's first loads
        ld += sd * (j == 0)
        sd = 0.0
    vecs, head_vec, n_ops = 0, 0.0, 0
    if spread:  # this step's share of the previous block's epilogue
        ops = (replace(epi, residual=False) if in_acc else epi).vec_ops(r, tn)
        mine = [op for op, at_j in zip(ops, spread_steps(len(ops), k_steps)) if at_j == j]
        vecs, n_ops = cm.vecs(target, mine), len(mine)
    elif at:  # the bias add reads the accumulator the next MATMUL writes
        vecs, head_vec, n_ops = epilogue_cycles(target, replace(epi, residual=False) if in_acc else epi, r, tn)
        head_vec *= not deferred
    mm = cm.matmul(target, r, tk, tn)
    if epi.pre_norm and (head or ws != 2):  # the rows' layer norm before this step's MATMUL, in series with it
        pre = Epilogue.pre_ops(r, k, tk)  # (conservative where x streams: it may run under the previous MATMUL)
        mm, n_ops = mm + cm.vecs(target, pre), n_ops + len(pre)
    if deferred:  # the previous block's VECs beside this block's MATMUL: the step's chain is the longer
        c, vector = max(mm, vecs), 0.0
    else:
        c, vector = mm + vecs, vecs
    floor = cm.retire_floor(c, lq, mm) if (at or vecs) and k_steps > 1 else 0.0
    if spread and at:  # the compute two steps on waits for this STORE, whose data shares the DRAM with loads
        floor = max(floor, cm.retire_floor(c, st + ld, mm))
    single = head or (in_acc and j == 0)  # a LOAD into a one-slot buffer: after the previous step's compute
    group = cm.Group(lq, c, st * at, ld + sd * at, 1, 1 if single else 2, 2, vector=vector, overlap=True,
                     vector_wait=head_vec, issues=1 + n_ops, floor=floor)  # fmt: skip
    period, fill = group.terms(target)
    return period, fill + target.issue_cycles + target.dma_latency


@memoized
def epilogue_cycles(target, epi, r, tn) -> tuple[float, float, int]:
    """(cycles of the epilogue's VECs on an [r, tn] output tile, of its first (the bias add), how many)."""
    ops = epi.vec_ops(r, tn)
    return cm.vecs(target, ops), cm.vec(target, *ops[0][1:], ops[0][0]), len(ops)


def classes(cands, m: int) -> tuple[list, list, list]:
    """The candidates by class, classes in the order of their first member: candidates that differ only in
    a tm >= m (one row tile of m rows) are one class, with the same cost and bound. (first member's index,
    index of the member of the largest tm, the class as a candidate with tm = m: a row of an array) of
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
    by_tm = np.lexsort((-arr[:, 0], inverse))  # by class, the largest tm first
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
    tm, tn, tk, ws, acc, _, _ = np.asarray(cands, dtype=np.int64).reshape(-1, 7).T
    blocks, k_steps = -(-n // tn), k // tk
    full, rem = m // tm, m % tm
    w_reads = np.where(ws == 1, 1, full + (rem > 0))
    elems = np.where(ws == 2, 1, blocks) * m * k + w_reads * n * k + m * n * (1 + epi.residual)
    lat, bw = target.issue_cycles + target.dma_latency, target.dram_bytes_per_cycle / 4
    streamed = np.where(ws == 1, 0, tn * tk)
    fixed = target.issue_cycles * ((ws != 2) + (ws != 1))  # the step's LOADs chained: no latency each
    x_tile = np.where(ws == 2, 0, tk)
    passes = -(-tk // target.array_rows) * -(-tn // target.array_cols)

    def tile(r):  # (a step's floor, the floor of the one with the epilogue, of the head) of r rows
        mm = target.issue_cycles + target.array_rows + passes * np.maximum(r, target.array_rows)
        mm = mm + target.matmul_latency
        step = np.maximum(mm, fixed + (r * x_tile + streamed) / bw)
        return step, np.maximum(step, lat + r * tn / bw), mm + lat + (r * tk + tn * k) / bw

    step, last, _ = tile(tm)
    steps = full * blocks * ((k_steps - 1) * step + last)
    step, last, _ = tile(rem)
    steps = steps + (rem > 0) * blocks * ((k_steps - 1) * step + last)
    _, last, head = tile(np.where(full > 0, tm, rem))
    steps = steps + (ws == 1) * blocks * (np.maximum(head, last) - last)
    return np.maximum(elems / bw, steps)
