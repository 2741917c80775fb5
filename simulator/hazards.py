"""Race detection with vector clocks over the load, compute and store queues.

Each instruction's clock is its queue's previous clock merged with the clocks
of the tokens it pops, its own component set to its sequence number in its
queue. Instruction X (queue q, seq s) happens-before Y iff Y.clock[q] >= s.
Per memory, per queue, we keep the last write seq and last read seq of every
element (allocated lazily, so DRAM only ever holds store-writes and
load-reads). An access conflicts with an earlier access from another queue
that does not happen-before it: RAW, WAW or WAR.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import HazardError
from .functional import Access
from .isa import QUEUES

Clock = tuple[int, int, int]
Describe = Callable[[str, int], tuple[int, str]]


def merge_clock(prev: Clock, popped: list[Clock], queue: str, seq: int) -> Clock:
    c = list(prev)
    for p in popped:
        c = [max(a, b) for a, b in zip(c, p)]
    c[QUEUES.index(queue)] = seq
    return tuple(c)


class HazardTracker:
    def __init__(self, sizes: dict[str, int], describe: Describe):
        self.sizes = sizes
        self.describe = describe
        self.last: dict[tuple[str, str, bool], np.ndarray] = {}

    def _table(self, mem: str, queue: str, write: bool) -> np.ndarray:
        key = (mem, queue, write)
        if key not in self.last:
            self.last[key] = np.full(self.sizes[mem], -1, dtype=np.int32)
        return self.last[key]

    def check(self, index: int, mnemonic: str, queue: str, clock: Clock, accesses):
        for acc in accesses:
            for other in QUEUES:
                if other != queue:
                    self._check_against(index, mnemonic, queue, clock, acc, other)
        seq = clock[QUEUES.index(queue)]
        for acc in accesses:
            self._table(acc.mem, queue, acc.write)[acc.idx] = seq

    def _check_against(self, index, mnemonic, queue, clock, acc: Access, other: str):
        horizon = clock[QUEUES.index(other)]
        kinds = [(True, "written")] + ([(False, "read")] if acc.write else [])
        for was_write, what in kinds:
            table = self.last.get((acc.mem, other, was_write))
            if table is None or acc.idx.size == 0:
                continue
            seqs = table[acc.idx]
            bad = seqs > horizon
            if bad.any():
                self._raise(index, mnemonic, queue, acc, other, what, seqs, bad)

    def _raise(self, index, mnemonic, queue, acc, other, what, seqs, bad):
        elems = acc.idx[bad]
        o_index, o_mnemonic = self.describe(other, int(seqs[bad].max()))
        kind = ("WAW" if what == "written" else "WAR") if acc.write else "RAW"
        verb = "writes" if acc.write else "reads"
        raise HazardError(
            index,
            mnemonic,
            f"{kind} hazard: {queue} instruction {index} ({mnemonic}) {verb} "
            f"{acc.mem}[{int(elems.min())}, {int(elems.max()) + 1}) last {what} "
            f"by {other} instruction {o_index} ({o_mnemonic}) with no "
            f"dependency token ordering them",
        )
