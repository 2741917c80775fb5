"""Cycle-approximate timing model; every number comes from NovellaConfig.

Each queue runs one instruction at a time. An instruction starts at
max(queue free, ready time of every token it pops). DMA data phases share one
DRAM channel. A token is ready when its pusher ends.
"""

from __future__ import annotations

from .config import NovellaConfig
from .isa import QUEUES, Instruction, Opcode


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


class TimingModel:
    def __init__(self, config: NovellaConfig):
        self.config = config
        self.queue_free = dict.fromkeys(QUEUES, 0)
        self.dram_free = 0

    def start_time(self, queue: str, token_ready: list[int]) -> int:
        return max([self.queue_free[queue], *token_ready])

    def matmul_cycles(self, f: dict) -> int:
        c = self.config
        passes = _ceil_div(f["k"], c.matrix_rows) * _ceil_div(f["n"], c.matrix_cols)
        return passes * f["m"] + c.matmul_latency

    def vec_cycles(self, f: dict) -> int:
        beats = _ceil_div(f["cols"], self.config.vector_lanes)
        return f["rows"] * beats + self.config.vector_latency

    def dma_cycles(self, dma_bytes):
        """Cycles of a DMA data phase (works elementwise on arrays)."""
        return _ceil_div(dma_bytes, self.config.dram_bytes_per_cycle)

    def _dma_end(self, start: int, dma_bytes: int) -> int:
        data_start = max(start + self.config.dma_latency, self.dram_free)
        end = data_start + self.dma_cycles(dma_bytes)
        self.dram_free = end
        return end

    def finish(self, inst: Instruction, start: int, dma_bytes: int) -> int:
        """End cycle of `inst` started at `start`; occupies its queue until then."""
        op = inst.opcode
        if op in (Opcode.LOAD, Opcode.STORE, Opcode.GATHER):
            end = self._dma_end(start, dma_bytes)
        elif op == Opcode.MATMUL:
            end = start + self.matmul_cycles(inst.fields)
        elif op == Opcode.VEC:
            end = start + self.vec_cycles(inst.fields)
        else:
            end = start + 1
        self.queue_free[inst.queue] = end
        return end
