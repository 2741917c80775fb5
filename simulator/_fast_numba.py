"""The fast path's issue loop, compiled with numba (imported on first use; numba caches it on disk).

`schedule` replays the readable machine's issue rule (`Simulator._pick` and
`_step`: the runnable queue head that can start earliest, ties load,
compute, store), its token FIFOs, the timing model's start/end cycles, and,
if asked, the interval hazard checker (`hazards.HazardTracker`) with vector
clocks. It touches no memory: it only decides the order, the cycles and
whether a race or a deadlock exists. The functional work (`fast.py`) then
runs the instructions in that order. A non-zero status sends the run to the
Python loop, which raises the readable machine's error at the same point.

Tables (built by `fast_plan.Plan`): per instruction its queue, up to two
popped and two pushed channels (-1: none), fixed duration (a compute
instruction's work on its unit; -1: a DMA: `latency` + its DRAM data phase
`data`), its execution unit (0 matrix, 1 vector, -1 none) and its accesses
`acc_ids` (up to 4 span ids, -1: none), and `chain` (1: a chained LOAD or STORE, which starts when its
queue has issued, not when its engine is free). A span row: mem, write, lo, hi,
addr, stride (>= 0), rows, cols, dense. The compute queue issues in order
into the two units (`timing.ComputeUnits`: FIFOs of `depth`, the
address-range scoreboard, in-order retirement).
"""

from __future__ import annotations

import sys

import numba as nb
import numpy as np

from . import numba_cache
from .first_build import announce

numba_cache.ensure(__file__)

OK, DEADLOCK, HAZARD = 0, 1, 2


@nb.njit(cache=True)
def _rows_meet(x, y, b0, sb, rb, cb):
    """Whether the rows b0 + j * sb (j < rb, each cb long) have an element in [x, y)."""
    if rb <= 1 or sb == 0:
        return b0 < y and x < b0 + cb
    j_lo = -((b0 + cb - 1 - x) // sb)  # ceil((x - cb + 1 - b0) / sb)
    j_hi = (y - 1 - b0) // sb
    if j_lo < 0:
        j_lo = 0
    if j_hi > rb - 1:
        j_hi = rb - 1
    return j_lo <= j_hi


@nb.njit(cache=True)
def _meet(spans, a, b):
    """Whether spans a and b (overlapping intervals) share an element (`hazards._meet`)."""
    if spans[a, 8] and spans[b, 8]:
        return True
    lo = max(spans[a, 2], spans[b, 2])
    hi = min(spans[a, 3], spans[b, 3])
    if spans[a, 6] > spans[b, 6]:
        a, b = b, a
    a0, sa, ra, ca = spans[a, 4], spans[a, 5], spans[a, 6], spans[a, 7]
    b0, sb, rb, cb = spans[b, 4], spans[b, 5], spans[b, 6], spans[b, 7]
    if ra <= 1 or sa == 0:
        ra = 1
    for r in range(ra):
        x = max(a0 + r * sa, lo)
        y = min(a0 + r * sa + ca, hi)
        if x < y and _rows_meet(x, y, b0, sb, rb, cb):
            return True
    return False


@nb.njit(cache=True)
def _races(spans, sid, q, clock, win_seq, win_sid, win_off, win_len):
    """Whether access `sid` of queue q races with a windowed access of another queue."""
    mem, write, lo, hi = spans[sid, 0], spans[sid, 1], spans[sid, 2], spans[sid, 3]
    for o in range(3):
        if o == q:
            continue
        horizon = clock[o]
        for kind in range(1, -1, -1):  # their writes, then (for a write) their reads
            if kind == 0 and not write:
                continue
            w = (mem * 3 + o) * 2 + kind
            base = win_off[w]
            i = win_len[w] - 1
            while i >= 0 and win_seq[base + i] > horizon:
                other = win_sid[base + i]
                if spans[other, 2] < hi and lo < spans[other, 3] and _meet(spans, sid, other):
                    return True
                i -= 1
    return False


@nb.njit(cache=True)
def _sram_conflict(spans, acc_ids, i, j):
    """Whether instructions i and j have SRAM accesses in one memory with overlapping bounds, one a write
    (`timing.conflict`)."""
    for a in range(4):
        x = acc_ids[i, a]
        if x < 0:
            break
        if spans[x, 0] > 1:
            continue
        for b in range(4):
            y = acc_ids[j, b]
            if y < 0:
                break
            if spans[y, 0] == spans[x, 0] and (spans[x, 1] or spans[y, 1]):
                if spans[x, 2] < spans[y, 3] and spans[y, 2] < spans[x, 3]:
                    return True
    return False


@nb.njit(cache=True)
def _begin(i, s, unit, ic, ufree, ulist, ulen, end, spans, acc_ids):
    """Execution start of compute instruction i issued at s: after its issue, its unit's previous
    instruction and every conflicting in-flight one of the other unit (newest first; units are in order,
    so the scan stops at the first that ended by s)."""
    b = s + ic
    u = unit[i]
    if u < 0:
        return b
    if ufree[u] > b:
        b = ufree[u]
    o = 1 - u
    k = ulen[o] - 1
    while k >= 0:
        j = ulist[o, k]
        if end[j] <= s:
            break
        if end[j] > b and _sram_conflict(spans, acc_ids, i, j):
            b = end[j]
        k -= 1
    return b


@nb.njit(cache=True)
def schedule(queue, pops, pushes, fixed, data, chain, latency, unit, ic, depth, acc_ids, spans, win_off, check):
    """(status, order, start, begin, end, waits (4 channels x [count, cycles])); status OK, DEADLOCK or
    HAZARD. `start`: a compute instruction's issue; `begin`: its execution start."""
    n = queue.size
    qlist = np.empty((3, n), np.int64)
    qlen = np.zeros(3, np.int64)
    for i in range(n):
        q = queue[i]
        qlist[q, qlen[q]] = i
        qlen[q] += 1
    fifo = np.empty((4, n + 1, 4), np.int64)  # per channel: (ready, clock[0..2]) of each token
    f_head = np.zeros(4, np.int64)
    f_tail = np.zeros(4, np.int64)
    heads = np.zeros(3, np.int64)
    qfree = np.zeros(3, np.int64)
    ifree = np.zeros(3, np.int64)  # a DMA queue's issue free: where a chained DMA may start
    clocks = np.full((3, 3), -1, np.int64)
    clock = np.zeros(3, np.int64)
    win_seq = np.empty(win_off[-1], np.int64)
    win_sid = np.empty(win_off[-1], np.int64)
    win_len = np.zeros(win_off.size - 1, np.int64)
    order = np.empty(n, np.int64)
    start = np.zeros(n, np.int64)
    begin = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    waits = np.zeros((4, 2), np.int64)
    ulist = np.empty((2, n), np.int64)
    ulen = np.zeros(2, np.int64)
    ufree = np.zeros(2, np.int64)
    retired = 0
    dram_free = 0
    for step in range(n):
        best, bstart = np.int64(-1), np.int64(0)  # not literals: numba would compile _races and _begin for them
        for q in range(3):
            h = heads[q]
            if h >= qlen[q]:
                continue
            i = qlist[q, h]
            s = ifree[q] if chain[i] else qfree[q]
            u = unit[i]
            if u >= 0 and ulen[u] >= depth and begin[ulist[u, ulen[u] - depth]] > s:
                s = begin[ulist[u, ulen[u] - depth]]  # the unit's FIFO is full until then
            ok = True
            for k in range(2):
                c = pops[i, k]
                if c < 0:
                    break
                if f_head[c] == f_tail[c]:
                    ok = False
                    break
                if fifo[c, f_head[c], 0] > s:
                    s = fifo[c, f_head[c], 0]
            if ok and (best < 0 or s < bstart):
                best, bstart = q, s
        if best < 0:
            return DEADLOCK, order[:step], start, begin, end, waits
        q, s = best, bstart
        seq = heads[q]
        i = qlist[q, seq]
        heads[q] = seq + 1
        free = qfree[q]
        ready, ch = -1, -1
        for d in range(3):
            clock[d] = clocks[q, d]
        for k in range(2):
            c = pops[i, k]
            if c < 0:
                break
            t = f_head[c]
            f_head[c] = t + 1
            if fifo[c, t, 0] > ready:
                ready, ch = fifo[c, t, 0], c
            for d in range(3):
                if fifo[c, t, 1 + d] > clock[d]:
                    clock[d] = fifo[c, t, 1 + d]
        clock[q] = seq
        if check:
            for k in range(4):
                sid = acc_ids[i, k]
                if sid >= 0 and _races(spans, sid, q, clock, win_seq, win_sid, win_off, win_len):
                    order[step] = i
                    return HAZARD, order[: step + 1], start, begin, end, waits
            for k in range(4):
                sid = acc_ids[i, k]
                if sid >= 0:
                    w = (spans[sid, 0] * 3 + q) * 2 + spans[sid, 1]
                    win_seq[win_off[w] + win_len[w]] = seq
                    win_sid[win_off[w] + win_len[w]] = sid
                    win_len[w] += 1
        for d in range(3):
            clocks[q, d] = clock[d]
        b, r = s, -1
        if q == 1:
            qfree[1] = s + ic
            b = _begin(i, s, unit, ic, ufree, ulist, ulen, end, spans, acc_ids)
            e = b + fixed[i]
            u = unit[i]
            if u >= 0:
                ufree[u] = e
                ulist[u, ulen[u]] = i
                ulen[u] += 1
            if e > retired:
                retired = e
            r = retired
        else:
            e = max(s + latency, dram_free) + data[i]
            if chain[i] and qfree[q] > b:
                b = qfree[q]  # its engine begins it when the chain's previous descriptor is done
            dram_free = e
            qfree[q] = e
            ifree[q] = s + ic
            r = e
        begin[i], end[i] = b, e
        for k in range(2):
            c = pushes[i, k]
            if c < 0:
                break
            t = f_tail[c]
            fifo[c, t, 0] = r
            for d in range(3):
                fifo[c, t, 1 + d] = clock[d]
            f_tail[c] = t + 1
        start[i] = s
        order[step] = i
        if ch >= 0 and ready > free:
            waits[ch, 0] += 1
            waits[ch, 1] += ready - free
    return OK, order, start, begin, end, waits


@nb.njit(cache=True)
def _erf_row(x, den, p, q):
    """x <- erf(x): the polynomials in one loop (it vectorizes), the divisions in another (it would not)."""
    lo, hi, zero = np.float32(-4.0), np.float32(4.0), np.float32(0.0)
    p0, p1, p2, p3, p4, p5, p6 = p[0], p[1], p[2], p[3], p[4], p[5], p[6]
    q0, q1, q2, q3, q4 = q[0], q[1], q[2], q[3], q[4]
    for j in range(x.size):
        v = x[j]
        v = lo if v < lo else (hi if v > hi else v)
        v2 = v * v
        x[j] = v * (((((((zero * v2 + p0) * v2 + p1) * v2 + p2) * v2 + p3) * v2 + p4) * v2 + p5) * v2 + p6)
        den[j] = ((((zero * v2 + q0) * v2 + q1) * v2 + q2) * v2 + q3) * v2 + q4
    for j in range(x.size):
        x[j] = x[j] / den[j]


@nb.njit(cache=True)
def erf_into(a, dst, p, q):
    """dst = `functional.erf_f32(a)`, the same fp32 operations in the same order (bit for bit; no FMA).
    `a` and `dst` are the same tile or disjoint. Row by row through contiguous buffers, so it vectorizes."""
    row = np.empty(a.shape[1], np.float32)
    den = np.empty(a.shape[1], np.float32)
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            row[j] = a[i, j]
        _erf_row(row, den, p, q)
        for j in range(a.shape[1]):
            dst[i, j] = row[j]


@nb.njit(cache=True, error_model="numpy")
def broadcast_into(op, a, b, dst):
    """dst = a (+, -, *, /)[op] b, b a (1, cols) row, a (rows, 1) column or a (1, 1) scalar broadcast over a's
    shape: one IEEE fp32 operation per element, as NumPy's ufunc (bit for bit), without NumPy's slow
    broadcasting loop. `dst` is `a`'s tile or disjoint from it, and disjoint from `b`."""
    if b.shape[1] > 1:
        for i in range(a.shape[0]):
            bi = i if b.shape[0] > 1 else 0
            if op == 0:
                for j in range(a.shape[1]):
                    dst[i, j] = a[i, j] + b[bi, j]
            elif op == 1:
                for j in range(a.shape[1]):
                    dst[i, j] = a[i, j] - b[bi, j]
            elif op == 2:
                for j in range(a.shape[1]):
                    dst[i, j] = a[i, j] * b[bi, j]
            else:
                for j in range(a.shape[1]):
                    dst[i, j] = a[i, j] / b[bi, j]
        return
    for i in range(a.shape[0]):
        y = b[i if b.shape[0] > 1 else 0, 0]
        if op == 0:
            for j in range(a.shape[1]):
                dst[i, j] = a[i, j] + y
        elif op == 1:
            for j in range(a.shape[1]):
                dst[i, j] = a[i, j] - y
        elif op == 2:
            for j in range(a.shape[1]):
                dst[i, j] = a[i, j] * y
        else:
            for j in range(a.shape[1]):
                dst[i, j] = a[i, j] / y


@nb.njit(cache=True)
def distinct(words, flag_mask):
    """(index of the first word of each distinct body, in program order; which of those each word is). A
    body is a word with lane 0 masked by `flag_mask` (the token flags off); bodies are found through an
    open-addressing hash table and compared lane by lane."""
    n = words.shape[0]
    size = 1
    while size < 2 * n:
        size *= 2
    mask = np.uint64(size - 1)
    table = np.full(size, -1, np.int64)
    rep = np.empty(n, np.int64)
    kind = np.empty(n, np.int64)
    m = 0
    for i in range(n):
        a0, a1, a2, a3 = words[i, 0] & flag_mask, words[i, 1], words[i, 2], words[i, 3]
        h = a0 * np.uint64(0x9E3779B97F4A7C15) ^ a1 * np.uint64(0xC2B2AE3D27D4EB4F)
        h ^= a2 * np.uint64(0x165667B19E3779F9) ^ a3 * np.uint64(0xD6E8FEB86659FD93)
        h ^= h >> np.uint64(31)
        s = h & mask
        while True:
            r = table[s]
            if r < 0:
                table[s] = m
                rep[m] = i
                kind[i] = m
                m += 1
                break
            j = rep[r]
            if (words[j, 0] & flag_mask) == a0 and words[j, 1] == a1 and words[j, 2] == a2 and words[j, 3] == a3:
                kind[i] = r
                break
            s = (s + np.uint64(1)) & mask
    return rep[:m].copy(), kind


announce(sys.modules[__name__])
