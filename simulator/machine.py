"""The Novella NPU machine: fetch/dispatch, token channels and the run loop."""

from __future__ import annotations

import numpy as np
from threadpoolctl import ThreadpoolController

from . import fast
from .config import NovellaConfig, load_config
from .errors import DeadlockError, SimulatorError
from .functional import Effect, FunctionalModel
from .hazards import HazardTracker, merge_clock
from .isa import QUEUES, UNIT_OF, EncodingError, Instruction, Opcode, VecFn, decode
from .stats import RunStats
from .timing import TimingModel
from .trace import Trace
from .units import (
    CHANNELS,
    TOKEN_ROUTES,
    Accumulator,
    Dram,
    Scratchpad,
    Token,
    TokenChannel,
)

_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def _channels(inst: Instruction, kind: str) -> list[str]:
    """Channels `inst` pops (kind='pop') or pushes (kind='push')."""
    return [TOKEN_ROUTES[(inst.queue, flag)] for flag in _FLAGS if flag.startswith(kind) and inst.fields[flag]]


def _event_name(inst: Instruction) -> str:
    if inst.opcode == Opcode.VEC:
        return VecFn(inst.fields["fn"]).name
    return inst.mnemonic


class Simulator:
    """Executes Novella programs functionally and with approximate timing."""

    def __init__(
        self,
        config: NovellaConfig | None,
        dram_elems: int,
        *,
        check_hazards: bool = True,
        trace: bool = False,
        fast: bool = True,
    ):
        self.config = config if config is not None else load_config()
        self.dram = Dram(dram_elems)
        self.spad = Scratchpad(self.config.spad_elems)
        self.acc = Accumulator(self.config.acc_elems)
        self.check_hazards = check_hazards
        self.trace_enabled = trace
        self.fast = fast
        self.progress = None  # an object with update(n), e.g. a tqdm bar, told of executed instructions
        self._plan = None  # (words, fast.Plan) of the last read-only program run
        self.trace: Trace | None = None
        self.functional = FunctionalModel(self.dram, self.spad, self.acc)

    def run(self, words) -> RunStats:
        """Run an (n, 4) uint64 program to completion and return its stats.

        Uses the fast path (`fast.py`) unless `fast=False`, a trace is asked or a DMA queue has
        several engines (the readable timing model's `DmaQueue` only); both give the same memories,
        cycles and stats."""
        if self.fast and not self.trace_enabled and set(self.config.dma_engines.values()) == {1}:
            self._reset()
            with _one_blas_thread():
                return fast.run(self, self._prepared(words))
        self._insts = self._decode(words)
        self._queues = {q: [] for q in QUEUES}
        for i, inst in enumerate(self._insts):
            self._queues[inst.queue].append(i)
        self._reset()
        with _one_blas_thread():
            while (q := self._pick()) is not None:
                self._step(q)
                if self.progress is not None and not self.stats.instructions & 1023:
                    self.progress.update(1024)
        if any(self._head[q] < len(self._queues[q]) for q in QUEUES):
            raise DeadlockError(self._blocked())
        return self.stats

    def _prepared(self, words) -> fast.Plan:
        """The fast path's plan of `words`; kept for the next run of the same array on this simulator."""
        if self._plan is not None and self._plan[0] is words:
            return self._plan[1]
        plan = fast.prepare(self, np.asarray(words, dtype=np.uint64).reshape(-1, 4))
        if isinstance(words, np.ndarray) and not words.flags.writeable:
            self._plan = (words, plan)
        return plan

    def _reset(self) -> None:
        c = self.config
        self._head = dict.fromkeys(QUEUES, 0)
        self._clock = dict.fromkeys(QUEUES, (-1, -1, -1))
        self.channels = {ch: TokenChannel(ch) for ch in CHANNELS}
        self.timing = TimingModel(c)
        self.stats = RunStats(c.clock_ghz, c.macs_per_cycle, c.dram_bytes_per_cycle)
        self.trace = Trace(c.clock_ghz) if self.trace_enabled else None
        self.hazards = HazardTracker(self._describe) if self.check_hazards else None

    def _describe(self, queue: str, seq: int) -> tuple[int, str]:
        index = self._queues[queue][seq]
        return index, self._insts[index].mnemonic

    def _decode(self, words) -> list[Instruction]:
        prog = np.asarray(words, dtype=np.uint64).reshape(-1, 4)
        insts = []
        for i, w in enumerate(prog):
            try:
                inst = decode(w)
            except EncodingError as e:
                raise SimulatorError(i, "?", str(e)) from None
            self._validate(i, inst)
            insts.append(inst)
        return insts

    def _validate(self, index: int, inst: Instruction) -> None:
        for flag in _FLAGS:
            if inst.fields[flag] and (inst.queue, flag) not in TOKEN_ROUTES:
                raise SimulatorError(
                    index,
                    inst.mnemonic,
                    f"{flag} is not allowed on the {inst.queue} queue",
                )
        if inst.opcode == Opcode.VEC:
            code = inst.fields["fn"]
            if code not in VecFn._value2member_map_:
                raise SimulatorError(index, inst.mnemonic, f"unknown vector fn {code}")
            if VecFn(code).name.lower() not in self.config.vector_functions:
                raise SimulatorError(
                    index,
                    inst.mnemonic,
                    f"vector fn {VecFn(code).name} not in this config's vector.functions",
                )

    def _head_inst(self, q: str) -> tuple[int, Instruction] | None:
        if self._head[q] >= len(self._queues[q]):
            return None
        index = self._queues[q][self._head[q]]
        return index, self._insts[index]

    def _pick(self) -> str | None:
        """Runnable queue head that can start (compute: issue) earliest (ties: load, compute, store)."""
        best, best_start = None, None
        for q in QUEUES:
            head = self._head_inst(q)
            if head is None:
                continue
            pops = [self.channels[ch] for ch in _channels(head[1], "pop")]
            if any(len(ch) == 0 for ch in pops):
                continue
            start = self.timing.start_time(head[1], [ch.peek().ready for ch in pops])
            if best_start is None or start < best_start:
                best, best_start = q, start
        return best

    def _blocked(self) -> list[tuple[str, int, str, list[str]]]:
        out = []
        for q in QUEUES:
            head = self._head_inst(q)
            if head is not None:
                index, inst = head
                empty = [ch for ch in _channels(inst, "pop") if not self.channels[ch]]
                out.append((q, index, inst.mnemonic, empty))
        return out

    def _step(self, q: str) -> None:
        index, inst = self._head_inst(q)
        seq = self._head[q]
        self._head[q] += 1
        popped = [(ch, self.channels[ch].pop()) for ch in _channels(inst, "pop")]
        free = self.timing.queue_free[q]
        start = self.timing.start_time(inst, [t.ready for _, t in popped])
        effect = self.functional.execute(index, inst)
        clock = None
        if self.hazards is not None:
            clock = merge_clock(self._clock[q], [t.clock for _, t in popped], q, seq)
            self.hazards.check(index, inst.mnemonic, q, clock, effect.accesses)
            self._clock[q] = clock
        ranges = [(s.mem, s.write, s.lo, s.hi) for s in effect.accesses if s.mem < 2 and not s.empty]
        begin, end, ready = self.timing.finish(inst, start, effect.dma_bytes, ranges)
        for ch in _channels(inst, "push"):
            self.channels[ch].push(Token(ready, clock))
        self._record(index, inst, popped, free, begin, end, effect)

    def _record(self, index, inst, popped, free, begin, end, effect: Effect) -> None:
        """Stats and trace of one instruction: its unit busy from `begin` to `end`, a token wait from
        its queue's free cycle to the latest-ready token it popped."""
        s, unit = self.stats, UNIT_OF[inst.opcode]
        s.cycles = max(s.cycles, end)
        s.instructions += 1
        s.by_mnemonic[inst.mnemonic] += 1
        if inst.opcode == Opcode.VEC:
            s.by_vec_fn[VecFn(inst.fields["fn"]).name] += 1
        if inst.opcode in (Opcode.LOAD, Opcode.GATHER):
            s.dma_bytes_loaded += effect.dma_bytes
        elif inst.opcode == Opcode.STORE:
            s.dma_bytes_stored += effect.dma_bytes
        if inst.queue != "compute":
            s.dram_busy += self.timing.data_cycles(inst, effect.dma_bytes)
        s.macs += effect.macs
        s.busy[unit] += end - begin
        channel, ready = max(((c, t.ready) for c, t in popped), key=lambda p: p[1], default=(None, 0))
        if ready > free:
            s.token_waits[channel]["count"] += 1
            s.token_waits[channel]["cycles"] += ready - free
        if self.trace is not None:
            if ready > free:
                self.trace.wait(unit, channel, free, ready)
            args = {"index": index, **inst.fields}
            self.trace.span(unit, _event_name(inst), begin, end, args)


_CONTROLLER: list = []


def _one_blas_thread():
    """BLAS limited to one thread for a run (the controller is made once: scanning the libraries costs ~1 ms)."""
    if not _CONTROLLER:
        _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0].limit(limits=1, user_api="blas")
