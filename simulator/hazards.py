"""Race detection with vector clocks and address intervals over the load, compute and store queues.

Each instruction's clock is its queue's previous clock merged with the clocks
of the tokens it pops, its own component set to its sequence number in its
queue. Instruction X (queue q, seq s) happens-before Y iff Y.clock[q] >= s.

An access is a set of rows: `rows` runs of `cols` elements starting at
`addr + i * stride` (or at explicit `starts`), inside the interval
[lo, hi). Per memory, per queue and per kind (read or write) we keep the
accesses of the current time window, in issue order: an access of queue o
with seq s leaves the window once every other queue's clock has reached s,
since nothing later can race with it. An access conflicts with a windowed access from another queue that
does not happen-before it and touches a common element: RAW, WAW or WAR.
Intervals are compared first; the elements only when two intervals overlap
and one of them has gaps (strided rows).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .errors import HazardError
from .isa import QUEUES

Clock = tuple[int, int, int]
Describe = Callable[[str, int], tuple[int, str]]
MEMS = ("spad", "acc", "dram")
_TRIM = 64


def merge_clock(prev: Clock, popped: list[Clock], queue: str, seq: int) -> Clock:
    c = list(prev)
    for p in popped:
        c = [max(a, b) for a, b in zip(c, p)]
    c[QUEUES.index(queue)] = seq
    return tuple(c)


@dataclass(frozen=True)
class Span:
    """The elements one access touches; `starts` (if given) replaces addr + stride * i."""

    mem: int  # index in MEMS
    write: bool
    addr: int
    stride: int
    rows: int
    cols: int
    starts: np.ndarray | None = None

    @property
    def lo(self) -> int:
        if self.starts is not None:
            return int(self.starts.min())
        return self.addr + min(0, self.stride * (self.rows - 1))

    @property
    def hi(self) -> int:
        if self.starts is not None:
            return int(self.starts.max()) + self.cols
        return self.addr + max(0, self.stride * (self.rows - 1)) + self.cols

    @property
    def dense(self) -> bool:
        """Whether it touches every element of [lo, hi)."""
        return self.starts is None and (self.rows <= 1 or self.stride == self.cols)

    @property
    def empty(self) -> bool:
        return self.rows == 0 or self.cols == 0

    def elements(self) -> np.ndarray:
        starts = self.starts if self.starts is not None else self.addr + self.stride * np.arange(self.rows)
        return (np.asarray(starts, np.int64)[:, None] + np.arange(self.cols, dtype=np.int64)).ravel()


def _touch(a: Span, b: Span, lo: int, hi: int) -> np.ndarray:
    """Elements of `a` in [lo, hi) that `b` also touches."""
    ea = a.elements()
    ea = ea[(ea >= lo) & (ea < hi)]
    if b.dense:
        return ea
    mask = np.zeros(hi - lo, bool)
    eb = b.elements()
    mask[eb[(eb >= lo) & (eb < hi)] - lo] = True
    return ea[mask[ea - lo]]


def _meet(a: Span, b: Span, lo: int, hi: int, r_lo: int, r_hi: int) -> bool:
    """Whether two accesses with overlapping intervals share an element."""
    return (a.dense and b.dense) or len(_touch(a, b, max(lo, r_lo), min(hi, r_hi))) > 0


_OTHERS = ((1, 2), (0, 2), (0, 1))


def entry(span: Span) -> tuple:
    """What the tracker keeps of one access: (span, lo, hi, first window index of its memory)."""
    return (span, span.lo, span.hi, span.mem * 6)


class HazardTracker:
    def __init__(self, describe: Describe):
        self.describe = describe
        # [(mem * 3 + queue) * 2 + write] -> [(seq, lo, hi, Span), ...] in issue order
        self.window: list[list] = [[] for _ in range(len(MEMS) * 6)]
        self.latest: list[Clock] = [(-1, -1, -1)] * 3

    def check(self, index: int, mnemonic: str, queue: str, clock: Clock, spans) -> None:
        q = QUEUES.index(queue)
        self.check_spans(index, mnemonic, q, clock, [entry(s) for s in spans if not s.empty])

    def check_spans(self, index: int, mnemonic: str, q: int, clock: Clock, spans) -> None:
        """`spans`: [`entry(span)`, ...] of one instruction's non-empty accesses, in access order.

        A read is compared with other queues' writes, a write with their writes and reads. Windows
        are in issue order, so one whose last access happens-before this one is skipped whole."""
        windows = self.window
        for e in spans:
            span, base = e[0], e[3]
            for o in _OTHERS[q]:
                horizon = clock[o]
                w = windows[base + o * 2 + 1]
                if w and w[-1][0] > horizon:
                    self._scan(w, horizon, e, index, mnemonic, q, clock, o)
                if span.write:
                    w = windows[base + o * 2]
                    if w and w[-1][0] > horizon:
                        self._scan(w, horizon, e, index, mnemonic, q, clock, o)
        seq = clock[q]
        for e in spans:
            w = windows[e[3] + q * 2 + e[0].write]
            w.append((seq, e[1], e[2], e[0]))
            if len(w) > _TRIM:
                self._trim(e[3] + q * 2 + e[0].write, q)
        self.latest[q] = clock

    def _scan(self, window, horizon, e, index, mnemonic, q, clock, o) -> None:
        span, lo, hi = e[0], e[1], e[2]
        i = len(window) - 1
        while i >= 0:
            rec = window[i]
            if rec[0] <= horizon:
                return
            if rec[1] < hi and lo < rec[2] and _meet(span, rec[3], lo, hi, rec[1], rec[2]):
                self._conflict(index, mnemonic, q, clock, span, lo, hi, o)
            i -= 1

    def _trim(self, w: int, q: int) -> None:
        done = min(self.latest[o][q] for o in range(3) if o != q)
        window = self.window[w]
        k = 0
        while k < len(window) and window[k][0] <= done:
            k += 1
        del window[:k]

    def _conflict(self, index, mnemonic, q, clock, span, lo, hi, o) -> None:
        """Raises if `span` shares an element with an unordered access of queue `o` (written first, then read)."""
        horizon = clock[o]
        kinds = [(True, "written")] + ([(False, "read")] if span.write else [])
        for was_write, what in kinds:
            hits, seqs = [], []
            for seq, r_lo, r_hi, other in self.window[(span.mem * 3 + o) * 2 + was_write]:
                if seq > horizon and r_lo < hi and lo < r_hi:
                    common = _touch(span, other, max(lo, r_lo), min(hi, r_hi))
                    if len(common):
                        hits.append(common)
                        seqs.append(seq)
            if hits:
                self._raise(index, mnemonic, q, span, o, what, np.concatenate(hits), max(seqs))

    def _raise(self, index, mnemonic, q, span, o, what, elems, seq):
        o_index, o_mnemonic = self.describe(QUEUES[o], seq)
        kind = ("WAW" if what == "written" else "WAR") if span.write else "RAW"
        verb = "writes" if span.write else "reads"
        raise HazardError(
            index,
            mnemonic,
            f"{kind} hazard: {QUEUES[q]} instruction {index} ({mnemonic}) {verb} "
            f"{MEMS[span.mem]}[{int(elems.min())}, {int(elems.max()) + 1}) last {what} "
            f"by {QUEUES[o]} instruction {o_index} ({o_mnemonic}) with no "
            f"dependency token ordering them",
        )
