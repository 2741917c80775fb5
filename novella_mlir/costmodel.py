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
