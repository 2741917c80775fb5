"""Runs a batched decode program (`novella_mlir/decoding/batched.py`) on a session: the per-step fields.

A lane is one sequence of the batch: its next token, its past length P_b and its storage pages. Its
storage index j holds position j - (P - P_b). Its block table holds position p at row p + offset
(0 <= offset < page_size; `relayout` moves a prefilled sequence to the offset the clock asks), and
P - P_b - offset is a whole number of pages (`shift`): its storage pages are `shift` null pages,
then its block table. The program's virtual page
`b * seq_pages + j` (`kernels/kv_cache.page_offset`) is lane b's storage page j: the step hands the
JIT one array of blocks for all lanes, the unused entries the null block (a block no sequence owns,
which idle lanes write into and masked positions read). The step's lane fields (`starts`) follow the
clock: where the attention reads them, a lane's key tiles before its position 0 are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .step import lane_fields


@dataclass
class Lane:
    token: int
    past: int  # positions cached (the new one is written at this position)
    shift: int  # null pages before the block table
    blocks: list
    offset: int = 0  # position p is at row p + offset of the block table's pages


class BatchStep:
    """The batched program `name` of `sess` for batch size `batch`."""

    def __init__(self, sess, name: str, batch: int, null_block: int):
        self.sess, self.name, self.batch, self.null = sess, name, batch, null_block
        slots = sess.models[name].artifact.kv["slots"]
        kv = sess.models[name].artifact.kv
        pages = {s.get("seq_pages", kv["vspan"] // s["page_elems"]) for s in slots}  # batch 1: the whole window
        if len(pages) != 1 or {s.get("batch", 1) for s in slots} != {batch}:
            raise InputError(
                f"{name} is not a batched decode program of batch {batch} with one page range per sequence"
            )
        self.seq_pages = pages.pop()
        self.lanes = lane_fields(sess.models[name].artifact)
        self.table = np.full(batch * self.seq_pages, null_block, np.int64)
        self._held: list = [None] * batch  # per lane: (shift, a copy of its block list) as in `table`

    def run(self, lanes: list, clock: int):
        """One step of `lanes` (at most `batch`) at storage clock `clock`: (logits [len(lanes), vocab],
        stats, JIT seconds, simulator seconds, words, whether a bucket was instantiated)."""
        if len(lanes) > self.batch:
            raise InputError(f"{len(lanes)} sequences do not fit the batch of {self.batch} of {self.name}")
        ids = np.zeros((self.batch, 1), np.float32)
        pos = np.zeros((self.batch, 1), np.float32)
        for b, ln in enumerate(lanes):
            ids[b, 0], pos[b, 0] = ln.token, ln.past
        syms = (clock, *self.starts(lanes, clock))
        outs, *res = self.sess.run(self.name, {0: ids, 1: pos}, syms, self.fill(lanes, clock))
        return (outs[0][: len(lanes), -1], *res)

    def starts(self, lanes: list, clock: int) -> list:
        """The lane fields of the step (`step.lane_fields`; none if the program reads none): per lane the
        storage index of its position 0, below which its mask hides every key. An idle lane attends only
        the clock's own position: its field is the first storage index of the clock's page, which walks
        the clock's key tiles where a tile is a whole page (with smaller tiles, the page's earlier ones too;
        an idle lane's output is never read) and stays a page long (the bucket key holds the fields: the
        clock itself would instantiate a bucket every step)."""
        if not self.lanes:
            return []
        return [clock - ln.past for ln in lanes] + [clock - clock % self.sess.page_size] * (self.lanes - len(lanes))

    def fill(self, lanes: list, clock: int) -> np.ndarray:
        """The step's block table of all lanes (`table`, rewritten in place: only the lanes whose shift
        or block list changed since the last step, and those that left; the caller does not write it)."""
        sp = self.seq_pages
        for b, ln in enumerate(lanes):
            self._check(b, ln, clock)
            held, blocks = self._held[b], ln.blocks if type(ln.blocks) is list else list(ln.blocks)
            if held is not None and held[0] == ln.shift and held[1] == blocks:
                continue
            at = b * sp + ln.shift
            self.table[b * sp : (b + 1) * sp] = self.null
            self.table[at : at + len(blocks)] = blocks
            self._held[b] = (ln.shift, list(blocks))
        for b in range(len(lanes), self.batch):
            if self._held[b] is not None:
                self.table[b * sp : (b + 1) * sp] = self.null
                self._held[b] = None
        return self.table

    def _check(self, b: int, ln: Lane, clock: int) -> None:
        if ln.past + ln.offset + ln.shift * self.sess.page_size != clock or ln.shift + len(ln.blocks) > self.seq_pages:
            raise RuntimeError(f"lane {b} (past {ln.past}, shift {ln.shift} pages) is not at storage {clock}")

    def fill_slow(self, lanes: list, clock: int) -> np.ndarray:
        """`fill` the readable way: a fresh table, every lane's blocks written (what `fill` must equal)."""
        sp = self.seq_pages
        table = np.full(self.batch * sp, self.null, np.int64)
        for b, ln in enumerate(lanes):
            self._check(b, ln, clock)
            table[b * sp + ln.shift : b * sp + ln.shift + len(ln.blocks)] = ln.blocks
        return table


def relayout(sess, slots: list, src: list, dst: list, n: int, offset: int) -> int:
    """Copies positions 0..n-1 of the pages `src` to the pages `dst`, each `offset` rows further (the
    storage alignment a lane joins the batch at). Returns the bytes moved (read + written)."""
    ps, be = sess.page_size, sess.block_elems
    at = [sess.pool_base + b * be for b in src]
    old = np.stack([sess.sim.dram.read(a, be) for a in at])
    new = np.zeros((len(dst), be), np.float32)
    for s, base in zip(slots, sess.slot_base.tolist()):
        h, hd, pe = s["heads"], s["head_dim"], s["page_elems"]
        rows = old[:, base : base + pe].reshape(len(src), h, ps, hd).transpose(1, 0, 2, 3).reshape(h, -1, hd)
        buf = np.zeros((h, len(dst) * ps, hd), np.float32)
        buf[:, offset : offset + n] = rows[:, :n]
        new[:, base : base + pe] = buf.reshape(h, len(dst), ps, hd).transpose(1, 0, 2, 3).reshape(len(dst), pe)
    for b, row in zip(dst, new):
        sess.sim.dram.write(sess.pool_base + b * be, row)
    return (old.size + new.size) * 4
