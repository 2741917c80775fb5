"""Cycle-approximate timing model; every number comes from NovellaConfig.

Each queue runs one instruction at a time. An instruction starts at
max(queue free, ready time of every token it pops) and holds its queue for
`issue_cycles` before its work. DMA data phases share one DRAM channel and
move whole bursts. A token is ready when its pusher ends.

The cost formulas take a field dict whose values are ints or NumPy arrays,
so the fast path (`fast.py`) evaluates the same formulas over a program.
"""

from __future__ import annotations

import numpy as np

from .config import NovellaConfig
from .isa import QUEUES, Instruction, Opcode, VecFn


def _ceil_div(a, b):
    return -(-a // b)


class TimingModel:
    def __init__(self, config: NovellaConfig):
        self.config = config
        self.queue_free = dict.fromkeys(QUEUES, 0)
        self.dram_free = 0
        self.fn_cycles = np.ones(max(VecFn) + 1, np.int64)
        for name, cycles in config.vector_fn_cycles.items():
            self.fn_cycles[VecFn[name.upper()]] = cycles

    def start_time(self, queue: str, token_ready: list[int]) -> int:
        return max([self.queue_free[queue], *token_ready])

    def matmul_cycles(self, f: dict):
        """Weight-stationary: each (k, n) pass shifts its weights in (one array row per cycle), double
        buffered in the array, so a pass takes max(m, rows) and the first load is exposed."""
        c = self.config
        passes = _ceil_div(f["k"], c.matrix_rows) * _ceil_div(f["n"], c.matrix_cols)
        work = c.matrix_rows + passes * np.maximum(f["m"], c.matrix_rows) + c.matmul_latency
        return c.issue_cycles + work

    def vec_cycles(self, f: dict):
        beats = _ceil_div(f["cols"], self.config.vector_lanes)
        return self.config.issue_cycles + f["rows"] * beats * self.fn_cycles[f["fn"]] + self.config.vector_latency

    def burst_bytes(self, opcode, f: dict, dma_bytes):
        """Bytes the DRAM channel carries: each contiguous run rounded up to whole bursts."""
        burst = self.config.dram_burst_bytes
        row_bytes = f["cols"] * 4
        per_row = (dma_bytes // np.maximum(row_bytes, 1)) * (_ceil_div(row_bytes, burst) * burst)
        if opcode == Opcode.GATHER:
            return per_row
        whole = _ceil_div(dma_bytes, burst) * burst
        return np.where(f["row_step"] * f["dram_stride"] == f["cols"], whole, per_row)

    def dma_cycles(self, charged):
        """Cycles of a DMA data phase of `charged` (burst) bytes (works elementwise on arrays)."""
        return _ceil_div(charged, self.config.dram_bytes_per_cycle)

    def _dma_end(self, start: int, charged: int) -> int:
        c = self.config
        data_start = max(start + c.issue_cycles + c.dma_latency, self.dram_free)
        end = data_start + self.dma_cycles(charged)
        self.dram_free = end
        return end

    def finish(self, inst: Instruction, start: int, dma_bytes: int) -> int:
        """End cycle of `inst` started at `start`; occupies its queue until then."""
        op = inst.opcode
        if op in (Opcode.LOAD, Opcode.STORE, Opcode.GATHER):
            end = self._dma_end(start, int(self.burst_bytes(op, inst.fields, dma_bytes)))
        elif op == Opcode.MATMUL:
            end = start + int(self.matmul_cycles(inst.fields))
        elif op == Opcode.VEC:
            end = start + int(self.vec_cycles(inst.fields))
        else:
            end = start + self.config.issue_cycles
        self.queue_free[inst.queue] = end
        return end
