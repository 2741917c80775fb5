"""Cycle-approximate timing model; every number comes from NovellaConfig.

A DMA queue (load, store) issues in order onto its `dma_engines` (config
`queues.*_dma_engines`; 1 by default: one instruction at a time): an
instruction starts at max(queue issue free, an engine free, ready time of
every token it pops), holds the queue for `issue_cycles`, then its engine
for the latency and the data phase. A chained LOAD or STORE (`chain` = 1: the next
descriptor of a scatter-gather list) does not wait for the engine: it starts
when the queue has issued, so its latency runs under the chain's data. DMA data phases share one DRAM channel
and move whole bursts. A token is ready when its pusher ends, and a DMA's
when every earlier DMA of its queue has ended too (in-order retirement).

The compute queue issues in program order and dispatches MATMUL to the
matrix unit and VEC to the vector unit (`ComputeUnits`). The two run
concurrently, each in order, behind a FIFO of `unit_queue_depth` entries;
an address-range scoreboard orders conflicting SRAM accesses between them,
and compute instructions retire (push their tokens) in program order.

The cost formulas take a field dict whose values are ints or NumPy arrays,
so the fast path (`fast.py`) evaluates the same formulas over a program.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from .config import NovellaConfig
from .isa import EXEC_UNIT_OF, EXEC_UNITS, QUEUES, Instruction, Opcode, VecFn

UNIT_OF = {op: EXEC_UNITS.index(u) for op, u in EXEC_UNIT_OF.items()}  # index in EXEC_UNITS (a NOP: none)


def _ceil_div(a, b):
    return -(-a // b)


def _max(a, b):
    """Elementwise max of ints or NumPy arrays (a plain `max` for ints, which the cost model calls often)."""
    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)


def matmul_cycles(m, k, n, rows: int, cols: int, latency: int):
    """A MATMUL's cycles on a `rows` x `cols` weight-stationary array: each (k, n) pass shifts its
    weights in (one array row per cycle), double buffered in the array, so a pass takes max(m, rows)
    and the first load is exposed."""
    passes = _ceil_div(k, rows) * _ceil_div(n, cols)
    return rows + passes * _max(m, rows) + latency


def vec_cycles(rows, cols, lanes: int, per_beat, latency: int):
    """A VEC's cycles: `rows` x beats of `lanes` columns, each beat `per_beat` cycles (its function's)."""
    return rows * _ceil_div(cols, lanes) * per_beat + latency


def charged_bytes(row_bytes, nbytes, burst: int, contiguous):
    """Bytes a DMA of `nbytes` in rows of `row_bytes` holds the DRAM channel for: whole bursts over the
    transfer when its rows are contiguous, else whole bursts per row."""
    per_row = (nbytes // _max(row_bytes, 1)) * (_ceil_div(row_bytes, burst) * burst)
    whole = _ceil_div(nbytes, burst) * burst
    if isinstance(contiguous, np.ndarray):
        return np.where(contiguous, whole, per_row)
    return whole if contiguous else per_row


def data_cycles(charged, bytes_per_cycle: int):
    """Cycles a DMA's data phase of `charged` (burst) bytes holds the DRAM channel (elementwise on arrays)."""
    return _ceil_div(charged, bytes_per_cycle)


def contiguous(f: dict):
    """Whether a LOAD's or STORE's rows follow each other in DRAM (one run of bursts, `charged_bytes`)."""
    return f["row_step"] * f["dram_stride"] == f["cols"]


def conflict(mine, theirs) -> bool:
    """Whether two instructions' SRAM ranges (mem, write, lo, hi) meet: same memory, overlapping
    [lo, hi), at least one a write (the scoreboard's range comparators: bounds, not elements)."""
    for mem, write, lo, hi in mine:
        for m2, w2, lo2, hi2 in theirs:
            if mem == m2 and (write or w2) and lo < hi2 and lo2 < hi:
                return True
    return False


class _Unit:
    """One execution unit: in order, fed by a FIFO of `depth` entries."""

    def __init__(self, depth: int):
        self.depth = depth
        self.free = 0
        self.starts: deque[int] = deque(maxlen=depth)  # start cycles of its last `depth` instructions
        self.inflight: deque[tuple[int, tuple]] = deque()  # (end, SRAM ranges) of ones that may still run

    def room(self) -> int:
        """Cycle from which its FIFO has room: the start of the instruction `depth` places earlier."""
        return self.starts[0] if len(self.starts) == self.depth else 0

    def retire_before(self, cycle: int) -> None:
        while self.inflight and self.inflight[0][0] <= cycle:
            self.inflight.popleft()


class ComputeUnits:
    """The matrix and vector units behind the compute queue, their scoreboard and the retire point."""

    def __init__(self, config: NovellaConfig):
        self.issue_cycles = config.issue_cycles
        self.units = [_Unit(config.unit_queue_depth) for _ in EXEC_UNITS]
        self.retired = 0  # latest end of the compute instructions so far (in-order retirement)

    def room(self, unit: int) -> int:
        return 0 if unit < 0 else self.units[unit].room()

    def execute(self, unit: int, issue: int, work: int, ranges) -> tuple[int, int, int]:
        """(begin, end, token ready) of a compute instruction issued at `issue` to `unit` (-1: a NOP)."""
        begin = issue + self.issue_cycles
        if unit >= 0:
            mine, other = self.units[unit], self.units[1 - unit]
            mine.retire_before(issue)
            other.retire_before(issue)
            begin = max(begin, mine.free)
            for end, theirs in other.inflight:
                if end > begin and conflict(ranges, theirs):
                    begin = end
            end = begin + work
            mine.free = end
            mine.starts.append(begin)
            mine.inflight.append((end, tuple(ranges)))
        else:
            end = begin
        self.retired = max(self.retired, end)
        return begin, end, self.retired


class DmaQueue:
    """A DMA queue's engines: when each is free, when the queue can issue again, and its retire point."""

    def __init__(self, engines: int):
        self.engines = [0] * engines
        self.issue_free = 0
        self.retired = 0
        self.last = 0  # the engine of the latest DMA (a chained DMA joins its chain)

    def free(self, chained: bool = False) -> int:
        """Cycle from which the next instruction can start: the queue has issued and an engine is free
        (a chained LOAD or STORE: the queue has issued; the engine of its chain is still busy with it)."""
        return self.issue_free if chained else max(self.issue_free, min(self.engines))

    def run(self, start: int, issue_cycles: int, end: int, chained: bool = False) -> tuple[int, int]:
        """Books a DMA from `start` to `end` on the first free engine (chained: its chain's engine);
        (the cycle its engine begins it, its token's ready cycle)."""
        if not chained:
            self.last = self.engines.index(min(self.engines))
        begin = max(start, self.engines[self.last])
        self.engines[self.last] = end
        self.issue_free = start + issue_cycles
        self.retired = max(self.retired, end)
        return begin, self.retired


class TimingModel:
    def __init__(self, config: NovellaConfig):
        self.config = config
        self.queue_free = dict.fromkeys(QUEUES, 0)  # the compute queue's: when it can issue again
        self.dma = {q: DmaQueue(n) for q, n in config.dma_engines.items()}
        self.dram_free = 0
        self.compute = ComputeUnits(config)
        self.fn_cycles = np.ones(max(VecFn) + 1, np.int64)
        for name, cycles in config.vector_fn_cycles.items():
            self.fn_cycles[VecFn[name.upper()]] = cycles

    def start_time(self, inst: Instruction, token_ready: list[int]) -> int:
        """When `inst` starts (a compute instruction: issues), given its popped tokens' ready cycles."""
        if inst.fields.get("chain"):
            return max([self.dma[inst.queue].free(True), *token_ready])
        t = max([self.queue_free[inst.queue], *token_ready])
        return max(t, self.compute.room(UNIT_OF.get(inst.opcode, -1))) if inst.queue == "compute" else t

    def matmul_work(self, f: dict):
        c = self.config
        return matmul_cycles(f["m"], f["k"], f["n"], c.matrix_rows, c.matrix_cols, c.matmul_latency)

    def vec_work(self, f: dict):
        return vec_cycles(
            f["rows"], f["cols"], self.config.vector_lanes, self.fn_cycles[f["fn"]], self.config.vector_latency
        )

    def work(self, opcode, f: dict):
        """Execution cycles of a compute instruction on its unit (a NOP: 0)."""
        if opcode == Opcode.MATMUL:
            return self.matmul_work(f)
        return self.vec_work(f) if opcode == Opcode.VEC else 0

    def burst_bytes(self, opcode, f: dict, dma_bytes):
        """Bytes the DRAM channel carries: each contiguous run rounded up to whole bursts."""
        row_bytes = f["cols"] * 4
        if opcode == Opcode.GATHER:
            return charged_bytes(row_bytes, dma_bytes, self.config.dram_burst_bytes, False)
        return charged_bytes(row_bytes, dma_bytes, self.config.dram_burst_bytes, contiguous(f))

    def dma_cycles(self, charged):
        """Cycles of a DMA data phase of `charged` (burst) bytes (works elementwise on arrays)."""
        return data_cycles(charged, self.config.dram_bytes_per_cycle)

    def data_cycles(self, inst: Instruction, dma_bytes: int) -> int:
        """Cycles a DMA's data phase holds the DRAM channel."""
        return int(self.dma_cycles(int(self.burst_bytes(inst.opcode, inst.fields, dma_bytes))))

    def _dma_end(self, start: int, charged: int) -> int:
        c = self.config
        data_start = max(start + c.issue_cycles + c.dma_latency, self.dram_free)
        end = data_start + self.dma_cycles(charged)
        self.dram_free = end
        return end

    def finish(self, inst: Instruction, start: int, dma_bytes: int, ranges=()) -> tuple[int, int, int]:
        """(begin, end, token ready) of `inst` started (issued) at `start`; `ranges`: its SRAM accesses
        as (mem, write, lo, hi). A DMA occupies its queue from start to end; a compute instruction
        holds the compute queue for `issue_cycles` and then runs on its unit from begin to end."""
        op = inst.opcode
        if inst.queue != "compute":
            end = self._dma_end(start, int(self.burst_bytes(op, inst.fields, dma_bytes)))
            q = self.dma[inst.queue]
            begin, ready = q.run(start, self.config.issue_cycles, end, bool(inst.fields.get("chain")))
            self.queue_free[inst.queue] = q.free()
            return begin, end, ready
        self.queue_free["compute"] = start + self.config.issue_cycles
        return self.compute.execute(UNIT_OF.get(op, -1), start, int(self.work(op, inst.fields)), ranges)
