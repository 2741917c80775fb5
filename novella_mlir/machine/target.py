"""The Target: every hardware number a compiler decision reads, in one place.

Built from the simulator config (array, SRAM, DRAM, vector unit, timing
constants) and the ISA's field layouts (field widths). The tiling of every
kernel, the SRAM budget of `--novella-allocate` and the cost model read
the Target; no kernel names a tile size, an alignment or a field limit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from simulator import isa
from simulator.config import NovellaConfig


def field_max(opcode: str, name: str) -> int:
    """The largest value field `name` of `opcode` encodes (ISA layout)."""
    return isa.field(opcode, name).hi


# Rows one instruction can move or compute (the narrowest rows/m field), and columns (cols/k/n).
MAX_ROWS = min(field_max(op, f) for op, f in (("LOAD", "rows"), ("STORE", "rows"), ("MATMUL", "m"), ("VEC", "rows")))
MAX_COLS = min(field_max(op, f) for op, f in (("LOAD", "cols"), ("VEC", "cols"), ("MATMUL", "k"), ("MATMUL", "n")))
DRAM_LIMIT = field_max("LOAD", "dram_base") + 1  # DRAM elements a dram_base addresses
MAX_LENGTH = field_max("LOAD", "row_bound")  # the largest symbol value (a length is a row bound)


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


@dataclass(frozen=True)
class Target:
    array_rows: int  # k per MATMUL pass
    array_cols: int  # n per MATMUL pass
    spad_elems: int
    acc_elems: int
    vector_lanes: int
    dram_bytes_per_cycle: int
    dram_burst_bytes: int
    dma_latency: int
    matmul_latency: int
    vector_latency: int
    issue_cycles: int
    vector_functions: tuple[str, ...]
    fn_cycles: dict = field(default_factory=dict, hash=False, compare=False)
    budget_spad: int | None = None  # the SRAM one op may tile into (elements); None: all of it (0 is none)
    budget_acc: int | None = None
    buffer_slots: int = 2  # slots of a streamed buffer: 2 = double buffering (loads of step i+1 under compute i)
    unit_queue_depth: int = 16  # FIFO entries in front of the matrix and of the vector unit (config compute.*)
    col_tile_cols: int = 512  # columns of a row-tiled kernel's tile when its width is symbolic or too wide
    max_static_cols: int = 1024  # widest static row such a kernel keeps whole (<= max_cols)
    dram_align: int = 16  # elements every DRAM tensor and runtime segment starts at a multiple of
    load_dma_engines: int = 1  # loads in flight at once (config queues.*; the simulator's `timing.DmaQueue`)
    store_dma_engines: int = 1

    @classmethod
    def from_config(cls, c: NovellaConfig) -> Target:
        return cls(
            c.matrix_rows, c.matrix_cols, c.spad_elems, c.acc_elems, c.vector_lanes, c.dram_bytes_per_cycle,
            c.dram_burst_bytes, c.dma_latency, c.matmul_latency, c.vector_latency, c.issue_cycles,
            c.vector_functions, dict(c.vector_fn_cycles), unit_queue_depth=c.unit_queue_depth,
            load_dma_engines=c.load_dma_engines, store_dma_engines=c.store_dma_engines,
        )  # fmt: skip

    @property
    def budget(self) -> dict[str, int]:
        """SRAM elements an op's buffers may use, per memory."""
        spad, acc = self.budget_spad, self.budget_acc
        return {"spad": self.spad_elems if spad is None else spad, "acc": self.acc_elems if acc is None else acc}

    def with_budget(self, budget: dict[str, int]) -> Target:
        return dataclasses.replace(self, budget_spad=budget["spad"], budget_acc=budget["acc"])

    @property
    def macs_per_cycle(self) -> int:
        return self.array_rows * self.array_cols

    queues = isa.QUEUES  # the queue chain, what each instruction takes and the units behind compute: the ISA's
    queue_of = isa.QUEUE_OF
    exec_unit_of = isa.EXEC_UNIT_OF

    max_rows = MAX_ROWS
    max_cols = MAX_COLS

    def col_tile(self, width: int | None) -> int:
        """Columns of a row-tiled (pointwise, indexing) kernel's tile for a row of `width` (None: symbolic)."""
        return width if width is not None and width <= self.max_static_cols else self.col_tile_cols

    def pow2(self, hi: int, lo: int = 1) -> list[int]:
        """Powers of two from hi (rounded down, capped by the row field) down to lo."""
        out, t = [], _pow2_floor(min(hi, self.max_rows))
        while t >= max(lo, 1):
            out.append(t)
            t //= 2
        return out or [max(lo, 1)]

    def array_tiles(self, top: int, lo: int | None = None) -> list[int]:
        """Row-tile candidates: powers of two from `top` array heights down to `lo` (default one array height).
        A MATMUL pass streams m rows under the next weight load, so m below the array height wastes cycles."""
        return self.pow2(top * self.array_rows, lo or self.array_rows)

    def row_tiles(self, top: int) -> list[int]:
        """Row-tile candidates of vector/DMA-only kernels: powers of two from `top` vector widths down to 1."""
        return self.pow2(top * self.vector_lanes, 1)

    def divisors(self, n: int, align: int | None = None) -> list[int]:
        """Divisors of n, largest first, that are multiples of `align` (default: the array width) or n itself."""
        align = align or self.array_cols
        out = [d for d in range(min(n, self.max_cols), 0, -1) if n % d == 0 and (d % align == 0 or d == n)]
        return out or [n]

    def col_tiles(self, n: int) -> list[int]:
        """Column-tile candidates of a static dim n, largest first: its divisors (`divisors`); when none is a
        multiple of the array width, also the power-of-two multiples of it below n, the last tile partial."""
        out = [d for d in self.divisors(n) if d <= self.max_cols]
        if any(d % self.array_cols == 0 for d in out):
            return out
        top = _pow2_floor(min(n - 1, self.max_cols))
        return sorted(set(out + [t for t in self.pow2(top, self.array_cols) if t % self.array_cols == 0]), reverse=True)

    def bucket_edges(self, nominal: int) -> list[int]:
        """Upper ends a shape bucket may have: powers of two from one array height to half the nominal
        length (so that the buckets, like the tiling, do not depend on max_len)."""
        out, e = [], self.array_rows
        while e <= nominal // 2:
            out.append(e)
            e *= 2
        return out
