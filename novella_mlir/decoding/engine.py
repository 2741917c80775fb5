"""Continuous batching over the paged KV cache, in the style of vLLM's scheduler.

Requests are added at any time (`Engine.add`). Each `Engine.step` first admits waiting requests in
arrival order while the running batch has room (`max_batch`) and the page pool has the pages of
their prompt, then advances every running request by one position. A request admitted with no
reusable prefix runs the prefill program on its whole prompt; one whose prompt starts with at least
a page of what a running sequence has cached shares those pages (reference-counted, `kv.PagePool`)
and feeds the rest of its prompt through decode steps, so the common prefix is never recomputed. A
shared page is copied before the first write into it (copy-on-write at the first divergent page).
A request leaves the batch at one of its eos tokens or at its own `max_new_tokens`, and its pages
are freed at once.

Pages are taken on demand. When a running request needs a page and none is free, the request that
arrived last is preempted (vLLM's recompute preemption): its pages are freed and it goes back to the
head of the queue with the tokens it has, to be prefilled again; no running sequence's pages are
ever touched. A request that cannot fit in the whole pool, or is longer than `max_len`, is refused
when added. Greedy: the next token is the argmax of the NPU's logits.

With batched decode programs (`novella_mlir/decoding/batched.py`, `lm.batched`), one program per step
advances every running request (the smallest bucket that holds them; `runtime/batch.py` maps each
sequence's pages); without them, each request runs the single-sequence decode program.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import InputError
from ..runtime.batch import BatchStep, Lane, relayout
from ..runtime.kv import BlockTable, KvCacheFullError
from .runs import GenerateRun, Step


class BatchBoundError(InputError):
    """An engine asked for more concurrent sequences than the compiled bound."""


@dataclass
class Request:
    id: int
    prompt: list
    max_new_tokens: int
    eos: frozenset
    arrival: int  # the engine step at which it was added
    tokens: list = field(default_factory=list)  # prompt + generated
    table: BlockTable = field(default_factory=BlockTable)
    logits: list = field(default_factory=list)  # one [vocab] row per generated token
    status: str = "waiting"  # waiting | running | finished
    finish_reason: str | None = None  # "eos" | "length"
    shared: int = 0  # positions read from another sequence's pages when admitted
    shift: int | None = None  # in the batched step: null pages before its block table (None: not joined)
    offset: int = 0  # its block table holds position p at row p + offset (`batch.relayout`)
    preemptions: int = 0
    admitted_at: int = -1

    @property
    def generated(self) -> list:
        return self.tokens[len(self.prompt) :]

    def output(self) -> torch.Tensor:
        return torch.tensor(self.tokens, dtype=torch.long)


def _eos_set(eos) -> frozenset:
    if eos is None:
        return frozenset()
    if isinstance(eos, (set, frozenset, list, tuple)):
        return frozenset(int(e) for e in eos)
    return frozenset([int(eos)] if np.ndim(eos) == 0 else [int(e) for e in eos])


class Engine:
    """Continuous batching of greedy generation on `lm` (a `CausalLM`) and one NPU session."""

    def __init__(self, lm, max_batch: int | None = None, *, check_hazards: bool = True, share_prefix: bool = True,
                 run=None, batched: bool = True, choose=None, bar=None):  # fmt: skip
        bound = getattr(lm, "max_batch", None)
        if max_batch is not None and (max_batch < 1 or (bound is not None and max_batch > bound)):
            raise BatchBoundError(
                f"max_batch={max_batch} is outside the compiled bound [1, {bound}]; compile_causal_lm(..., "
                f"max_batch={max_batch}) to run that many sequences at once"
            )
        self.lm, self.max_batch = lm, max_batch or bound or lm.n_pages
        self.sess = lm._acquire(check_hazards)  # this engine's own (thread-safe: concurrent engines never share)
        self.choose = choose  # (tokens, prompt length, logits) -> the next token; None: greedy
        self.bar = bar  # a tqdm bar of generated tokens, or None
        self.share_prefix = share_prefix
        self.buckets = sorted(getattr(lm, "batched", {})) if batched else []
        self.members: list = []  # the requests of the batched step
        self.clock = 0  # the batched step's storage index of the next position
        self.null = BlockTable()
        if self.buckets:
            self.pool.reserve(self.null, 1)
            self.batch_steps = {n: BatchStep(self.sess, f"batch{n}", n, self.null.blocks[0]) for n in self.buckets}
        self.run = run if run is not None else GenerateRun()
        self.waiting: deque = deque()
        self.running: list = []
        self.finished: list = []
        self.steps = 0
        self.copies = 0  # pages copied on write
        self.moved = 0  # bytes moved by relayouts (a prefilled sequence joining the batched step)
        self.batch_sizes: list = []  # running requests after each step's admission
        self._next_id = 0

    @property
    def pool(self):
        return self.sess.pool

    def add(self, prompt, max_new_tokens: int, eos_token_id=None) -> Request:
        """Queues a request (token ids: a 1-D tensor, a [1, T] tensor or a list of ints)."""
        ids = self._ids(prompt)
        lm = self.lm
        if max_new_tokens < 0:
            raise InputError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
        if len(ids) + max_new_tokens > lm.max_len:
            raise InputError(
                f"the request has {len(ids)} prompt tokens; generating {max_new_tokens} more would pass "
                f"max_len={lm.max_len}; lower max_new_tokens or compile with a larger max_len"
            )
        need = -(-(len(ids) + max(max_new_tokens, 1) - 1) // lm.page_size)
        if need > self.pool.n_blocks - len(self.null.blocks):
            raise KvCacheFullError(
                f"the request needs {need} pages ({len(ids)} prompt + {max_new_tokens} new tokens, page_size "
                f"{lm.page_size}), more than the whole pool of {self.pool.n_blocks - len(self.null.blocks)}; raise n_pages in compile_causal_lm"
            )
        req = Request(self._next_id, ids, max_new_tokens, _eos_set(eos_token_id), self.steps, tokens=list(ids))
        self._next_id += 1
        self.run.logits.append(req.logits)
        self.waiting.append(req)
        return req

    def _ids(self, p) -> list:
        if isinstance(p, torch.Tensor):
            if (
                p.dtype not in (torch.long, torch.int32, torch.int64)
                or p.dim() not in (1, 2)
                or (p.dim() == 2 and p.shape[0] != 1)
            ):
                raise InputError(f"a prompt must be integer token ids, 1-D or [1, T], got {p.dtype} {list(p.shape)}")
            p = p.reshape(-1).tolist()
        ids = [int(t) for t in p]
        if not ids:
            raise InputError("the prompt is empty; give at least one token")
        if len(ids) > self.lm.max_len:
            raise InputError(f"the prompt has {len(ids)} tokens, more than max_len={self.lm.max_len}")
        bad = [t for t in ids if not 0 <= t < self.lm.vocab]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary [0, {self.lm.vocab})")
        return ids

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running

    def step(self) -> list:
        """One iteration: admit what fits, then advance every running request by one position.
        Returns the requests that finished in it."""
        before = len(self.finished)
        fresh = self._admit()
        self.batch_sizes.append(len(self.running))
        if self.buckets:
            self._join()
            self._batch_step()
        for req in list(self.running):
            if req.status == "running" and req not in fresh and not self.buckets:
                self._advance(req)
        self.steps += 1
        return self.finished[before:]

    def run_all(self) -> list:
        while not self.done:
            self.step()
        return self.finished

    def close(self) -> None:
        """Frees the pages of every request not finished and the null block."""
        for r in list(self.running):
            self._leave(r)
            self.pool.release(r.table)
        self.pool.release(self.null)
        self.lm._release(self.sess)

    def _leave(self, req: Request) -> None:
        if req in self.members:
            self.members.remove(req)
        req.shift = None

    def _join(self) -> None:
        """Requests ready to decode join the batched step: their next position must land on the clock a
        whole number of pages after their own rows. A prefilled one is moved to that row offset
        (`batch.relayout`); one reading shared pages waits for it (at most page_size - 1 steps). A
        request ahead of the clock moves it forward by whole pages (the others get null pages)."""
        ps = self.lm.page_size
        for req in self.running:
            if req.shift is not None or len(self.members) >= self.buckets[-1]:
                continue
            n = req.table.length
            if not self.members:
                self.clock = n
            r = (self.clock - n) % ps
            if r and not self._relayout(req, r):
                continue
            ahead = n + req.offset - self.clock
            if ahead > 0:
                for m in self.members:
                    m.shift += ahead // ps
                self.clock += ahead
            req.shift = (self.clock - n - req.offset) // ps
            self.members.append(req)

    def _relayout(self, req: Request, r: int) -> bool:
        """Moves `req`'s rows `r` further into its pages (fresh ones), unless it shares pages or the
        pool has too few free."""
        if any(self.pool.refs[b] > 1 for b in req.table.blocks) or req.offset:
            return False
        new = BlockTable()
        try:
            self.pool.reserve(new, req.table.length + r)
        except KvCacheFullError:
            return False
        slots = self.sess.models["decode"].artifact.kv["slots"]
        self.moved += relayout(self.sess, slots, req.table.blocks, new.blocks, req.table.length, r)
        self.pool.release(req.table)
        new.length, req.table, req.offset = req.table.length, new, r
        return True

    def _batch_step(self) -> None:
        for req in list(self.members):
            if req.shift is not None and not self._make_room(req, req.table.length):
                continue
        if not self.members:
            return
        ps, low = self.lm.page_size, min(m.shift for m in self.members)
        if low:  # every sequence has null pages in front: drop them, move the clock back
            self.clock -= low * ps
            for m in self.members:
                m.shift -= low
        n = next(b for b in self.buckets if b >= len(self.members))
        lanes = [
            Lane(m.tokens[m.table.length], m.table.length, m.shift, m.table.blocks, m.offset) for m in self.members
        ]
        logits, *res = self.batch_steps[n].run(lanes, self.clock)
        self._record("batch", -len(lanes), self.clock, *res)
        for m, row in zip(list(self.members), logits):
            m.table.length += 1
            if m.table.length == len(m.tokens):
                self._emit(m, row)
        self.clock += 1

    def _admit(self) -> list:
        fresh = []
        while self.waiting and len(self.running) < self.max_batch:
            req = self.waiting[0]
            src, n = self._prefix(req.tokens)
            need = -(-len(req.tokens) // self.lm.page_size) - (n // self.lm.page_size if src else 0)
            if need > len(self.pool.free):
                break
            self.waiting.popleft()
            req.status, req.admitted_at = "running", self.steps
            self.running.append(req)
            if src is not None:
                self.pool.share(src.table, req.table, n)
                req.shared = n
            else:
                self._prefill(req)
                fresh.append(req)
        return fresh

    def _prefix(self, tokens: list):
        """The running request whose cached positions share the longest prefix with `tokens` (at least
        one page, and short of the last token, whose logits are needed), and that length."""
        best, n = None, 0
        if not self.share_prefix:
            return None, 0
        for other in self.running:
            if other.offset or any(b < 0 for b in other.table.blocks):  # dropped out of a sliding window
                continue
            cached = other.tokens[: other.table.length]
            m = _common(cached, tokens[:-1])
            if m > n:
                best, n = other, m
        return (best, n) if n >= self.lm.page_size else (None, 0)

    def _prefill(self, req: Request) -> None:
        sess = self.sess
        sess.pool.reserve(req.table, len(req.tokens))
        x = np.asarray(req.tokens, np.float32)[None, :]
        outs, *res = sess.run("prefill", {0: x}, (len(req.tokens),), req.table)
        req.table.length = len(req.tokens)
        self._record("prefill", req.id, len(req.tokens), *res)
        self._emit(req, outs[0][0, -1])

    def _advance(self, req: Request) -> None:
        past = req.table.length
        if not self._make_room(req, past):
            return
        sess = self.sess
        outs, *res = sess.run("decode", self.lm.decode_inputs(req.tokens[past], past), (past,), req.table)
        req.table.length = past + 1
        self.lm._drop_out_of_window(sess, req.table)
        self._record("decode", req.id, past, *res)
        if req.table.length == len(req.tokens):
            self._emit(req, outs[0][0, -1])

    def _make_room(self, req: Request, past: int) -> bool:
        """The page of position `past` exists and is `req`'s own; preempts the latest arrival while
        pages are short. False when `req` itself was preempted."""
        while True:
            try:
                self.pool.reserve(req.table, req.offset + past + 1)
                page = (req.offset + past) // self.lm.page_size
                self.copies += self.pool.writable(req.table, page, self.sess.copy_block)
                return True
            except KvCacheFullError:
                victim = max(self.running, key=lambda r: (r.arrival, r.id))
                self._preempt(victim)
                if victim is req:
                    return False

    def _preempt(self, req: Request) -> None:
        self._leave(req)
        self.pool.release(req.table)
        req.table = BlockTable()
        req.status, req.shared, req.offset = "waiting", 0, 0
        req.preemptions += 1
        self.running.remove(req)
        self.waiting.appendleft(req)

    def _emit(self, req: Request, logits: np.ndarray) -> None:
        if req.max_new_tokens == 0:
            return self._finish(req, "length")
        req.logits.append(logits)
        tok = int(np.argmax(logits)) if self.choose is None else self.choose(req.tokens, len(req.prompt), logits)
        req.tokens.append(tok)
        self.run.tokens += 1
        if self.bar is not None:
            self.bar.update(1)
        if tok in req.eos:
            self._finish(req, "eos")
        elif len(req.generated) >= req.max_new_tokens:
            self._finish(req, "length")

    def _finish(self, req: Request, reason: str) -> None:
        self._leave(req)
        self.pool.release(req.table)
        req.status, req.finish_reason = "finished", reason
        self.running.remove(req)
        self.finished.append(req)

    def _record(self, kind, seq: int, position, stats, jit_s, sim_s, words, new) -> None:
        """A Step of one program run; a batched step's `sequence` is minus its number of lanes."""
        kv = self.pool.in_use * self.sess.kv_bytes_per_block
        self.run.kv_bytes_peak = max(self.run.kv_bytes_peak, kv)
        self.run.steps.append(
            Step(kind, seq, position, stats.cycles, stats.dma_bytes_loaded + stats.dma_bytes_stored, jit_s, sim_s,
                 self.pool.in_use, kv, stats.instructions, new, words.copy() if self.run.keep_words else None)
        )  # fmt: skip


def _common(a: list, b: list) -> int:
    n = min(len(a), len(b))
    x, y = np.asarray(a[:n]), np.asarray(b[:n])
    diff = np.flatnonzero(x != y)
    return int(diff[0]) if diff.size else n


def generate(lm, prompts: list, max_new_tokens: int, eos_token_id=None, check_hazards: bool = True, *,
             max_batch: int | None = None, share_prefix: bool = True, choose=None, keep_words: bool = False, bar=None) -> list:  # fmt: skip
    """`CausalLM.generate` of a list of prompts: all queued at once on an `Engine`, run to the end.
    Each output is its prompt and generated tokens (1-D); `lm.last_run` holds the steps and logits."""
    run = GenerateRun(keep_words=keep_words)
    lm._publish(run)
    eng = Engine(lm, max_batch, check_hazards=check_hazards, share_prefix=share_prefix, run=run, choose=choose, bar=bar)
    reqs = [eng.add(p, max_new_tokens, eos_token_id) for p in prompts]
    run.kv_bytes_max_len = len(reqs) * lm.max_len * eng.sess.kv_bytes_per_block // lm.page_size
    t0 = time.perf_counter()
    try:
        eng.run_all()
    finally:
        eng.close()
    run.seconds = time.perf_counter() - t0
    for i, r in enumerate(reqs):
        run.logits[i] = np.stack(r.logits) if r.logits else np.zeros((0, lm.vocab), np.float32)
    return [r.output() for r in reqs]
