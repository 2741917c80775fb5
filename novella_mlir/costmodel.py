"""An analytic cost model (CoSA-style: closed-form, no search by simulation at compile time).

Scores a candidate tiling from the Target's numbers with the timing model of
docs/isa.md: per grid step, the cycles of its DMA transfers (issue +
latency + whole bursts over the DRAM bandwidth) and of its compute
(MATMUL passes, VEC beats times the function's cost). With two buffer
slots a step's loads run under the previous step's compute and its stores
under the next one's, so a steady step costs max(load, compute, store);
with one slot they add up. The DRAM channel is shared: the total can not
beat all transfers back to back. Kernels enumerate their candidates (tile
sizes, loop orders) and keep the cheapest.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    """(queue cycles, DRAM data cycles) of one LOAD/STORE of [rows, cols] fp32."""
    if rows <= 0 or cols <= 0:
        return t.issue_cycles, 0.0
    burst = t.dram_burst_bytes
    nbytes = _cdiv(rows * cols * 4, burst) * burst if contiguous else rows * _cdiv(cols * 4, burst) * burst
    data = nbytes / t.dram_bytes_per_cycle
    return t.issue_cycles + t.dma_latency + data, data


def matmul(t: Target, m: int, k: int, n: int) -> float:
    passes = _cdiv(k, t.array_rows) * _cdiv(n, t.array_cols)
    return t.issue_cycles + t.array_rows + passes * max(m, t.array_rows) + t.matmul_latency


def vec(t: Target, rows: int, cols: int, fn: str = "add") -> float:
    per_beat = t.fn_cycles.get(fn.lower(), 1)
    return t.issue_cycles + rows * _cdiv(cols, t.vector_lanes) * per_beat + t.vector_latency


def total(steps: list[tuple[StepCost, int]], slots: int) -> float:
    """Cycles of a macro whose steps are (cost, count) groups: pipelined with two slots."""
    dram = sum(c.dram * n for c, n in steps)
    if slots >= 2:
        body = sum(max(c.load, c.compute, c.store) * n for c, n in steps)
        fill = max((c.load + c.store for c, _ in steps), default=0)
        return max(body + fill, dram)
    return max(sum((c.load + c.compute + c.store) * n for c, n in steps), dram)


@dataclass(frozen=True)
class Bucket:
    """A program for symbol `symbol` in [lo, hi], tiled as if the symbols were `plan`."""

    symbol: int
    lo: int
    hi: int
    plan: tuple[int, ...]
    gains: tuple[float, ...] = ()  # predicted generic / bucket cycles at lo, (lo + hi) // 2, hi


def split(predict, bounds: list[tuple[int, int]], nominal: list[int], edges: list[int], min_gain: float):
    """Shape buckets: for the first symbol where it pays, the bucket [lo, B] planned for B, B the largest
    of `edges` below the symbol's max at which the cost model predicts, at the bucket's top B, at least
    `min_gain` (a fraction) fewer cycles than the generic program planned for `nominal`, and no more
    cycles at its bottom and middle. `predict(plan, at)` is the model's cycles at symbol values `at` of
    the program planned for `plan` (None: unknown). Returns [bucket, generic] or [] (no split)."""
    for j, (lo, hi) in enumerate(bounds):
        best = None
        for edge in sorted(e for e in edges if lo <= e < hi and e < nominal[j]):
            plan = tuple(edge if i == j else v for i, v in enumerate(nominal))
            points = sorted({lo, (lo + edge) // 2, edge})
            gains = []
            for length in points:
                at = [length if i == j else v for i, v in enumerate(nominal)]
                generic, bucket = predict(list(nominal), at), predict(list(plan), at)
                gains.append(generic / bucket if generic and bucket else 1.0)
            if min(gains) >= 1.0 and gains[-1] >= 1.0 + min_gain:
                best = Bucket(j, lo, edge, plan, tuple(gains))
        if best is not None:
            return [best, Bucket(j, best.hi + 1, hi, tuple(nominal))]
    return []
