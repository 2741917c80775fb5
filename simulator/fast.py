"""The fast path: the same machine as `machine.py`, with the per-instruction Python overhead removed.

It still executes every decoded instruction word, one at a time, in the
order the readable machine picks. What it does differently:

* decodes, validates and costs the whole program at once (`fast_plan.py`; NumPy over the
  distinct instruction bodies, a word without its token flags, timing formulas from
  `TimingModel` applied to field arrays; only queues and token channels per word);
* prepares each distinct body once: its memory tiles become NumPy views of
  the unit's storage (shared by every instruction that names the same tile),
  so executing it is one or two NumPy calls on views, with no index arrays;
* hands the hazard checker precomputed address intervals (span rows, one set per body).

An instruction it does not prepare (an opcode without a fast form, a tile
whose rows overlap, a zero-size or out-of-range access) runs through the
readable `FunctionalModel.exec_<mnemonic>` and `TimingModel.finish`, so a
new instruction works on both paths as soon as its `exec_` method exists.
`test/py/test_fast_path.py` checks outputs, cycles and stats bit for bit
against the readable path.
"""

from __future__ import annotations

from collections import deque
from operator import itemgetter

import numpy as np

from . import fast_plan
from .errors import DeadlockError
from .fast_plan import Plan, decode_columns, invalid
from .hazards import HazardTracker, entry
from .isa import QUEUES, UNIT_OF, Opcode, VecFn, decode, opcodes
from .units import CHANNELS


def prepare(sim, words: np.ndarray) -> Plan:
    """Decodes, validates and prepares `words` for `sim`'s memories (raises the readable machine's errors).
    Fields are decoded once per distinct body (`fast_plan.distinct`), the token flags for every word."""
    code = opcodes(words)
    rep, kind = fast_plan.distinct(words)
    rep_code, cols = decode_columns(words[rep])
    if invalid(code, words, rep_code, cols, sim.config):
        sim._decode(words)  # raises the readable machine's error for the first bad word
    for k in np.flatnonzero(~np.isin(rep_code, [int(op) for op in fast_plan.FAST_OPS])).tolist():
        sim._validate(int(rep[k]), decode(words[rep[k]]))
    return Plan(sim, words, code, rep, kind, cols)


def run(sim, plan: Plan):
    """Runs a prepared program on `sim` (already reset) and returns its RunStats, as the readable loop would.

    A program whose every instruction has a fast form is issued by the compiled loop (`_fast_numba`), then
    executed in its order; anything else, or a race or deadlock found there, runs the Python loop below
    (which raises the readable machine's error at the same instruction)."""
    if plan.compiled and len(plan.code):
        done = _compiled(sim, plan)
        if done is not None:
            return done
    return _Loop(sim, plan).run()


def _compiled(sim, plan: Plan):
    done = _schedule(sim, plan)
    if done is None:
        return None
    order, start, begin, end, waits, (handlers, args) = done
    progress = sim.progress
    with np.errstate(all="ignore"):
        if progress is None:
            for f, a in zip(handlers, args):
                f(*a)
        for k in range(0, len(handlers) if progress is not None else 0, 1024):
            for f, a in zip(handlers[k : k + 1024], args[k : k + 1024]):
                f(*a)
            if k + 1024 <= len(handlers):
                progress.update(1024)
    tm = sim.timing
    loop = _Loop(sim, plan)
    loop.order, loop.start, loop.begin, loop.end = order, start, begin, end
    loop.waits = [list(w) for w in waits]
    for q, name in enumerate(QUEUES):
        done = order[plan.queue[order] == q]
        last = (int(start[done[-1]]) + sim.config.issue_cycles if q == 1 else int(end[done[-1]])) if len(done) else 0
        tm.queue_free[name] = last
    dma = order[plan.fixed[order] < 0]
    tm.dram_free = int(end[dma[-1]]) if len(dma) else 0
    return loop._stats([0, 0, 0, 0])


def _schedule(sim, plan: Plan):
    """(order, start, begin, end, token waits, (the handlers, their args) in that order) of the compiled issue loop, or None
    (a race or deadlock: the Python loop reports it). Data-independent, so kept on the plan for the next
    unchecked run of the same program (a checked run's serves too: same order and cycles); a run with hazard
    checking on always checks again."""
    check = bool(sim.check_hazards)
    done = None if check else plan.schedules.get(False) or plan.schedules.get(True)
    if done is not None:
        return done
    from . import _fast_numba as nb

    data = sim.timing.dma_cycles(plan.charged)
    c = sim.config
    status, order, start, begin, end, waits = nb.schedule(
        plan.queue, plan.pop_ch, plan.push_ch, plan.fixed, data, plan.chain, c.issue_cycles + c.dma_latency,
        plan.unit, c.issue_cycles, c.unit_queue_depth, plan.acc_ids, plan.span_rows, plan.win_off, check,
    )  # fmt: skip
    if status != nb.OK:
        return None
    kinds = plan.kind[order].tolist()
    pick = itemgetter(*kinds) if len(kinds) > 1 else lambda x: (x[kinds[0]],)
    ordered = pick(plan.handler), pick(plan.args)  # no tuple per call: nothing the GC tracks per instruction
    done = plan.schedules[check] = (order, start, begin, end, tuple(map(tuple, waits.tolist())), ordered)
    return done


class _Loop:
    def __init__(self, sim, plan: Plan):
        self.sim, self.p = sim, plan
        n = len(plan.code)
        self.qlists = [np.flatnonzero(plan.queue == q).tolist() for q in range(3)]
        self.start = [0] * n  # a compute instruction's issue
        self.begin = [0] * n  # when it runs on its unit (a DMA: its start)
        self.end = [0] * n
        self.order: list[int] = []
        self.waits = [[0, 0] for _ in CHANNELS]
        self.hazards = HazardTracker(self._describe) if sim.check_hazards else None

    def _describe(self, queue: str, seq: int) -> tuple[int, str]:
        i = self.qlists[QUEUES.index(queue)][seq]
        return i, Opcode(int(self.p.code[i])).name

    def run(self):
        p, sim = self.p, self.sim
        tm = sim.timing
        qlists, lens = self.qlists, [len(x) for x in self.qlists]
        heads, qfree, ifree = [0, 0, 0], [0, 0, 0], [0, 0, 0]  # ifree: a DMA queue's issue free (`chain`)
        chan = [deque() for _ in CHANNELS]
        pops, pushes, handler, args, kind = p.pops, p.pushes, p.handler, p.args, p.kind.tolist()
        fixed, dma, unit, chain = p.fixed.tolist(), p.r_dma.tolist(), p.unit.tolist(), p.chain.tolist()
        data = tm.dma_cycles(p.charged).tolist()  # DMA data-phase cycles (whole bursts)
        ic, units = sim.config.issue_cycles, tm.compute
        latency, dram_free = ic + sim.config.dma_latency, tm.dram_free
        starts, begins, ends, order, waits = self.start, self.begin, self.end, self.order, self.waits
        hz = self.hazards
        clocks = [(-1, -1, -1)] * 3
        extra = [0, 0, 0, 0]  # readable-path DMA bytes loaded / stored, MACs, DRAM data cycles
        progress = sim.progress
        with np.errstate(all="ignore"):
            while True:
                best, bstart = -1, 0
                for q in (0, 1, 2):
                    h = heads[q]
                    if h >= lens[q]:
                        continue
                    i = qlists[q][h]
                    if q == 1:
                        start = max(qfree[q], units.room(unit[i]))
                    else:
                        start = ifree[q] if chain[i] else qfree[q]
                    for c in pops[i]:
                        ch = chan[c]
                        if not ch:
                            break
                        if ch[0][0] > start:
                            start = ch[0][0]
                    else:
                        if best < 0 or start < bstart:
                            best, bstart = q, start
                if best < 0:
                    break
                q, start = best, bstart
                seq = heads[q]
                i = qlists[q][seq]
                heads[q] = seq + 1
                popped = [(c, chan[c].popleft()) for c in pops[i]]
                free = qfree[q]
                k = kind[i]
                h = handler[k]
                if h is not None:
                    h(*args[k])
                    sp, nbytes = p.entries(k), dma[k]
                else:
                    inst, effect = self._readable(i)
                    sp = [entry(s) for s in effect.accesses if not s.empty]
                    nbytes = effect.dma_bytes
                    self._extra(extra, inst, effect, tm)
                clock = None
                if hz is not None:
                    a, b, cc = clocks[q]
                    for _, tok in popped:
                        t = tok[1]
                        a, b, cc = max(a, t[0]), max(b, t[1]), max(cc, t[2])
                    clock = (seq, b, cc) if q == 0 else ((a, seq, cc) if q == 1 else (a, b, seq))
                    if sp:
                        hz.check_spans(i, Opcode(int(p.code[i])).name, q, clock, sp)
                    else:
                        hz.latest[q] = clock
                    clocks[q] = clock
                if q == 1:  # TimingModel.finish of a compute instruction
                    qfree[1] = start + ic
                    work = fixed[i] if h is not None else int(tm.work(inst.opcode, inst.fields))
                    ranges = [(e[0].mem, e[0].write, e[1], e[2]) for e in sp if e[0].mem < 2]
                    begin, end, ready = units.execute(unit[i], start, work, ranges)
                elif h is None:  # the readable path's timing too
                    dq = tm.dma[QUEUES[q]]
                    tm.queue_free[QUEUES[q]], tm.dram_free = qfree[q], dram_free
                    dq.engines[0], dq.issue_free = qfree[q], ifree[q]
                    begin, end, ready = tm.finish(inst, start, nbytes)
                    dram_free, qfree[q], ifree[q] = tm.dram_free, end, start + ic
                else:  # TimingModel._dma_end, inline
                    end = (start + latency if start + latency > dram_free else dram_free) + data[i]
                    begin = start if not chain[i] or qfree[q] < start else qfree[q]
                    ready, dram_free, qfree[q], ifree[q] = end, end, end, start + ic
                for c in pushes[i]:
                    chan[c].append((ready, clock))
                starts[i], begins[i], ends[i] = start, begin, end
                order.append(i)
                if popped:
                    ready, ch = popped[0][1][0], popped[0][0]
                    for c, tok in popped[1:]:
                        if tok[0] > ready:
                            ready, ch = tok[0], c
                    if ready > free:
                        waits[ch][0] += 1
                        waits[ch][1] += ready - free
                if progress is not None and not len(order) & 1023:
                    progress.update(1024)
        for q, name in enumerate(QUEUES):
            tm.queue_free[name] = qfree[q]
        tm.dram_free = dram_free
        if any(heads[q] < lens[q] for q in range(3)):
            raise DeadlockError(self._blocked(heads, chan))
        return self._stats(extra)

    def _readable(self, i):
        inst = decode(self.p.words[i])
        return inst, self.sim.functional.execute(i, inst)

    @staticmethod
    def _extra(extra, inst, effect, tm) -> None:
        if inst.queue != "compute":
            extra[3] += tm.data_cycles(inst, effect.dma_bytes)
        if inst.opcode in (Opcode.LOAD, Opcode.GATHER):
            extra[0] += effect.dma_bytes
        elif inst.opcode == Opcode.STORE:
            extra[1] += effect.dma_bytes
        extra[2] += effect.macs

    def _blocked(self, heads, chan):
        out = []
        for q, name in enumerate(QUEUES):
            if heads[q] < len(self.qlists[q]):
                i = self.qlists[q][heads[q]]
                empty = [CHANNELS[c] for c in self.p.pops[i] if not chan[c]]
                out.append((name, i, Opcode(int(self.p.code[i])).name, empty))
        return out

    def _stats(self, extra):
        p, s = self.p, self.sim.stats
        order = np.asarray(self.order, np.int64)
        code = p.code[order]
        ko = p.kind[order]
        fast = p.fast[ko]
        s.instructions = len(order)
        ends = np.asarray(self.end, np.int64)
        s.cycles = int(ends.max()) if len(ends) else 0
        first = {}
        for k, c in zip(*np.unique(code, return_index=True)[::-1]):
            first[int(c)] = int(k)
        for c in sorted(first, key=first.get):
            s.by_mnemonic[Opcode(c).name] = int((code == c).sum())
        if "fn" in p.c:
            fns = p.c["fn"][ko][code == Opcode.VEC]
            vals, firsts = np.unique(fns, return_index=True)
            for k in np.argsort(firsts):
                s.by_vec_fn[VecFn(int(vals[k])).name] = int((fns == vals[k]).sum())
        dma = p.r_dma[ko] * fast
        s.dma_bytes_loaded = int(dma[code == Opcode.LOAD].sum()) + extra[0]
        s.dma_bytes_stored = int(dma[code == Opcode.STORE].sum()) + extra[1]
        s.macs = int((p.r_macs[ko] * fast).sum()) + extra[2]
        dma_code = (code == Opcode.LOAD) | (code == Opcode.STORE)
        s.dram_busy = int((self.sim.timing.dma_cycles(p.charged[order]) * (fast & dma_code)).sum()) + extra[3]
        busy = ends[order] - np.asarray(self.begin, np.int64)[order]
        for c in first:
            s.busy[UNIT_OF[Opcode(c)]] += int(busy[code == c].sum())
        for c, (count, cycles) in zip(CHANNELS, self.waits):
            s.token_waits[c]["count"] += count
            s.token_waits[c]["cycles"] += cycles
        return s
