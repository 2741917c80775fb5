"""An analytic cost model (CoSA-style: closed-form, no search by simulation at compile time).

Scores a candidate tiling from the Target's numbers with the timing model of
docs/isa.md: per grid step, the cycles of its DMA transfers (issue +
latency + whole bursts over the DRAM bandwidth) and of its compute
(MATMUL passes, VEC beats times the function's cost), each instruction
priced by the simulator's own formulas (`simulator.timing.matmul_cycles`,
`vec_cycles`, `charged_bytes`, `data_cycles`). With two buffer
slots a step's loads run under the previous step's compute and its stores
under the next one's, so a steady step costs max(load, compute, store);
with one slot they add up. A step's compute runs on the matrix and the
vector unit; when the next step's MATMULs do not wait for this step's VEC
epilogue (`Group.overlap`), the units overlap and a steady step costs the
busier one. The DRAM channel is shared: the total can not beat all
transfers back to back. Kernels enumerate their candidates (tile
sizes, loop orders) and keep the cheapest.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from simulator import timing

from .target import Target


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class StepCost:
    """Cycles of one grid step on each queue, and its DRAM data cycles."""

    load: float
    compute: float
    store: float
    dram: float


def dma(t: Target, rows: int, cols: int, contiguous: bool = False) -> tuple[float, float]:
    """(queue cycles, DRAM data cycles) of one LOAD/STORE of [rows, cols] fp32, as the simulator times it
    (`timing.Timing.finish`): its issue, the DMA latency, then its bursts' data (`charged_bytes`,
    `data_cycles`); a DMA with no rows in bounds moves nothing and still pays its issue and latency."""
    rows, cols = max(rows, 0), max(cols, 0)
    charged = int(timing.charged_bytes(cols * 4, rows * cols * 4, t.dram_burst_bytes, contiguous))
    data = float(timing.data_cycles(charged, t.dram_bytes_per_cycle))
    return t.issue_cycles + t.dma_latency + data, data


def matmul(t: Target, m: int, k: int, n: int) -> float:
    return t.issue_cycles + timing.matmul_cycles(m, k, n, t.array_rows, t.array_cols, t.matmul_latency)


def vec(t: Target, rows: int, cols: int, fn: str = "add") -> float:
    per_beat = t.fn_cycles.get(fn.lower(), 1)
    return t.issue_cycles + timing.vec_cycles(rows, cols, t.vector_lanes, per_beat, t.vector_latency)


def total(steps: list[tuple[StepCost, int]], slots: int) -> float:
    """Cycles of a macro whose steps are (cost, count) groups: pipelined with two slots."""
    dram = sum(c.dram * n for c, n in steps)
    if slots >= 2:
        body = sum(max(c.load, c.compute, c.store) * n for c, n in steps)
        fill = max((c.load + c.store for c, _ in steps), default=0)
        return max(body + fill, dram)
    return max(sum((c.load + c.compute + c.store) * n for c, n in steps), dram)


def least_by_bound(bounds, key, exhaustive: bool = False, best: tuple | None = None) -> tuple:
    """The least of key(i) over candidates i, each key a tuple whose first item is the candidate's cost
    and `bounds[i]` at most that cost: scored in the order of their bounds (ties in index order) until a
    bound exceeds the least cost so far (`exhaustive`: every candidate). An exact shortcut of the tile
    searches: a candidate not scored costs more than the least. `best`: a key already known, which a
    candidate replaces only where its key is less."""
    for i in np.argsort(np.asarray(bounds), kind="stable").tolist():
        if best is not None and bounds[i] > best[0] * (1 + 1e-9) and not exhaustive:
            break
        k = key(i)
        if best is None or k < best:
            best = k
    return best


@dataclass(frozen=True)
class Bucket:
    """Lengths 1 to `hi` of symbol `symbol` get tiles planned as if the symbols were `plan`."""

    symbol: int
    hi: int
    plan: tuple[int, ...]
    gains: tuple[float, ...]  # predicted generic / bucket cycles at 1, hi // 2, hi


def bucket(predict, nominal: list[int], edges: list[int], min_gain: float, at_one: bool = True) -> Bucket | None:
    """The shape bucket of a program, if one pays: for the first symbol where one does, the largest
    of `edges` (below its nominal length) at which the cost model predicts at least `min_gain` (a
    fraction) fewer cycles, at T = edge, for tiles planned for the edge than for the nominal
    length, and no more cycles at T = 1 (unless not `at_one`: a nested bucket is to serve T = 1) and
    edge // 2. `predict(plan, at)` is the model's cycles at
    symbol values `at` of the program planned for symbol values `plan` (None: unknown). The decision
    depends on the model and the Target, not on the symbols' bounds, so a static compile at T tiles
    as the bucket holding T does."""
    for j, nom in enumerate(nominal):
        best = None
        for edge in sorted(e for e in edges if 1 <= e < nom):
            plan = tuple(edge if i == j else v for i, v in enumerate(nominal))
            gains = []
            for length in sorted({1, max(edge // 2, 1), edge}):
                at = [length if i == j else v for i, v in enumerate(nominal)]
                generic, planned = predict(list(nominal), at), predict(list(plan), at)
                if not (generic and planned):  # a cost the model cannot predict: no bucket on a guess
                    gains = []
                    break
                gains.append(generic / planned)
            checked = gains if at_one or len(gains) < 2 else gains[1:]
            if gains and min(checked) >= 1.0 and gains[-1] >= 1.0 + min_gain:
                best = Bucket(j, edge, plan, tuple(gains))
        if best is not None:
            return best
    return None


# ------------------------------------------------------------------ step groups under the token rule


@dataclass(frozen=True)
class Group:
    """`count` identical grid steps: their queue cycles, DRAM data cycles, and the token step distances
    `--novella-schedule` gives them (2: the loads / stores of the step are in ping-pong slots).

    `compute` is a step's serial compute chain (matrix + vector unit cycles); `vector` the part of it on
    the vector unit. `overlap`: the next step's MATMULs do not wait for this step's VEC work (their
    buffers are in other slots), so the two units run concurrently and a steady step's compute takes
    the busier unit, or the compute queue's issue of its `issues` instructions."""

    load: float
    compute: float
    store: float
    dram: float
    count: int
    load_slots: int = 2
    store_slots: int = 2
    n_dma: int = 1  # most LOADs or STOREs one queue issues per step
    vector: float = 0.0
    overlap: bool = False
    vector_wait: float = 0.0  # the part of `vector` the next step's MATMULs still wait for (e.g. the VEC
    # reading a one-slot accumulator they overwrite): in series with the matrix unit's work
    issues: int = 0  # compute instructions per step (the issue floor under overlap; 0: not counted)
    floor: float = 0.0  # a least period the kernel derives from its step structure (e.g. `retire_floor`)
    chain: float = 0.0  # under `overlap`, a step's first compute to its tokens' push, where less than `compute`

    def compute_period(self, t: Target) -> float:
        """Compute-queue cycles per steady step: the chain, or with `overlap` the busier unit (the matrix
        unit's work plus the VEC work it waits for, or the vector unit's), at least the issue of the step's
        instructions."""
        if not self.overlap:
            return self.compute
        matrix = self.compute - self.vector
        return max(matrix + self.vector_wait, self.vector, self.issues * t.issue_cycles)

    def period(self, t: Target) -> float:
        """Cycles between consecutive such steps in steady state: the busiest queue, or the DRAM channel.
        The channel idles while every queue is in a DMA's issue and latency phase: with one DMA per queue
        and step, each queue's latency runs under the other's data; back-to-back DMAs on one queue expose
        a latency each. With one slot, compute is in series with the loads it waits for (the next loads
        wait for this compute) or the stores; those start together, so their latencies coincide."""
        lat = t.issue_cycles + t.dma_latency
        channel = self.dram + lat * max(_cdiv(self.n_dma, t.load_dma_engines) - 1, 0) if self.dram else 0.0
        serial = 0.0
        if (self.load_slots < 2 and self.load) or (self.store_slots < 2 and self.store):
            waits = max(self.load * (self.load_slots < 2), self.store * (self.store_slots < 2), self.dram + lat)
            serial = self.compute + waits
        return max(self.load, self.compute_period(t), self.store, channel, serial, self._ring(t), self.floor)

    def terms(self, t: Target) -> tuple[float, float]:
        """(period, fill): a step's period and how far its queues exceed it (`pipeline`); not the count's."""
        period = self.period(t)
        return period, self.load + self.compute + self.store - period

    def _ring(self, t: Target) -> float:
        """Under `overlap`, the token ring through the slots: a step's loads into a slot and its store
        start when the step that used the slot `slots` steps earlier pushed its tokens at the end of its
        compute chain, and the step's first compute waits for them: `slots` periods hold one chain, a
        DMA latency and the step's DRAM data. (Without overlap this is within half a latency of the
        chain or the channel, which bound the period already.)"""
        slots = [s for s, q in ((self.load_slots, self.load), (self.store_slots, self.store)) if q]
        if not self.overlap or not slots or min(slots) < 2:
            return 0.0
        return ((self.chain or self.compute) + t.issue_cycles + t.dma_latency + self.dram) / min(slots)


def retire_floor(chain: float, next_load: float, next_compute: float, slots: int = 2) -> float:
    """The least period of an overlapped step whose compute chain (first MATMUL to last VEC) takes `chain`
    cycles when the next steps are different ones taking `next_compute` (e.g. a linear's last k step, with
    its epilogue, then the next block's first): compute retires in order, and the loads of step k + slots
    (the slot step k read) wait for step k's retirement, then take `next_load` before that step computes, so
    P(k) + ... + P(k + slots - 1) >= chain + next_load (`_ring` splits that evenly between equal steps)."""
    return chain + next_load - (slots - 1) * next_compute


def pipeline(t: Target, groups: list[Group]) -> float:
    """Predicted cycles of one macro: every step at its period, plus the pipeline fill and drain (the
    queues a step's period does not cover, e.g. the first loads and the last stores)."""
    return pipelined([(g.terms(t), g.count) for g in groups if g.count > 0])


def pipelined(steps) -> float:
    """`pipeline` of ((period, fill), count) pairs (`Group.terms`), counts above 0."""
    body = sum(period * count for (period, _), count in steps)
    fill = max((f for (_, f), _ in steps), default=0.0)
    return body + max(fill, 0.0)


def vecs(t: Target, ops) -> float:
    """Compute-queue cycles of VEC ops given as (fn, rows, cols)."""
    return sum(vec(t, r, c, fn) for fn, r, c in ops)


def dmas(t: Target, moves) -> tuple[float, float]:
    """(queue cycles, DRAM data cycles) of a step's loads given as (rows, cols, contiguous): with several
    load engines, `load_dma_engines` of them are in flight at once and only one latency per such group
    is exposed."""
    q = d = 0.0
    for rows, cols, contiguous in moves:
        a, b = dma(t, rows, cols, contiguous)
        q, d = q + a, d + b
    n = len(moves)
    return q - t.dma_latency * (n - _cdiv(n, t.load_dma_engines)), d


def row_groups(rows: int, tm: int, make) -> list[Group]:
    """Groups of the full row tiles and the partial last one: make(tile rows, count) -> Group."""
    full, rem = divmod(rows, tm)
    return [make(tm, full)] * (full > 0) + [make(rem, 1)] * (rem > 0)


def with_first(first: Group, groups: list[Group]) -> list[Group]:
    """`first` (the first step, e.g. with the loads of resident buffers) replaces one step of groups[0]."""
    return [first, dataclasses.replace(groups[0], count=groups[0].count - 1), *groups[1:]]
