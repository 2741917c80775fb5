"""A decode step is instantiated once per shape bucket and then patched in place (`runtime/step.py`).

The patched words must equal a fresh full instantiation (a new JIT, every descriptor relocated and
mapped through the block table) bit for bit, at past lengths 1, a page boundary, page + 1, a key/value
tile boundary, odd and near the maximum, revisiting buckets; and what changes from step to step must
be exactly what the templates declare as injected. The fused attention's key/value tiles span pages
(chained LOADs, one per page: `kernels/kv_cache.load_page_chain`), so a bucket is a tile count."""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers")

from novella_mlir.causal_lm import compile_causal_lm  # noqa: E402
from novella_mlir.runtime.kv import BlockTable, changed_fields  # noqa: E402

MAX_LEN = 600
PS = 16


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=MAX_LEN,
                        bos_token_id=0, eos_token_id=1)  # fmt: skip
    return compile_causal_lm(tf.GPT2LMHeadModel(cfg).eval(), max_len=MAX_LEN, page_size=PS, cache=False)


def _kv_tile(sess) -> int:
    """Key/value rows per tile of the decode attention: a page per LOAD of the key tile (operand 1), those
    before the first value LOAD (a step of several heads loads each head's tiles in turn)."""
    m = next(m for m in sess.models["decode"].artifact.macros if m.kernel == "novella.flash_attention")
    loads = [t.tensor for t in m.insts if t.opcode == "LOAD" and t.tensor in (1, 2)]
    return PS * loads.index(2)


def _table(sess, positions: int, seed: int) -> BlockTable:
    random.Random(seed).shuffle(sess.pool.free)
    t = BlockTable()
    sess.pool.reserve(t, positions)
    return t


def test_patched_step_equals_a_fresh_instantiation(lm):
    sess = lm.session()
    st = sess.steppers["decode"]
    table = _table(sess, MAX_LEN, seed=1)
    blocks = np.asarray(table.blocks, np.int64)
    tk = _kv_tile(sess)
    assert tk > PS  # tiles span pages
    pasts = [1, PS - 1, PS, PS + 1, 2 * PS + 7, tk - 1, tk, tk + 1, PS + 2, 1, MAX_LEN - 2, MAX_LEN - 1, 3]
    try:
        for past in pasts:
            words, _ = st.words((past,), blocks)
            np.testing.assert_array_equal(words, sess.reference("decode", (past,), table), err_msg=f"past={past}")
        assert len(st.buckets) == len({-(-(p + 1) // tk) for p in pasts})  # one bucket per tile count
    finally:
        sess.pool.release(table)


def test_a_warm_patch_follows_the_block_table(lm):
    """Consecutive steps of one bucket rewrite only the fields whose value or page moved
    (`_patch_numba.patch`): a page of the table replaced between two steps (as copy-on-write replaces
    a shared one), the table grown a page at a time as positions are appended (passed as long as it
    is, or padded to the maximum), and a bucket left and revisited are each still a fresh
    instantiation, bit for bit."""
    sess = lm.session()
    st = sess.steppers["decode"]
    full = _table(sess, MAX_LEN, seed=6)
    spare = _table(sess, 4 * PS, seed=7)
    rng = random.Random(8)
    table = BlockTable(full.blocks[: 2 * PS // PS])
    tk = _kv_tile(sess)
    try:
        for past in [*range(tk - 2 * PS - 3, tk + PS + 3), 5, tk + PS + 3, tk + PS + 4]:
            table.blocks = full.blocks[: past // PS + 1] if past > 5 else table.blocks
            if past % 5 == 0 and past > 5:
                k, j = (past // 5) % len(table.blocks), rng.randrange(len(spare.blocks))
                table.blocks[k], spare.blocks[j] = spare.blocks[j], table.blocks[k]
                full.blocks[k] = table.blocks[k]
            padded = np.full(MAX_LEN // PS + 1, -1, np.int64)
            padded[: len(table.blocks)] = table.blocks
            words, _ = st.words((past,), padded if past % 3 else np.asarray(table.blocks, np.int64))
            np.testing.assert_array_equal(words, sess.reference("decode", (past,), table), err_msg=f"past={past}")
    finally:
        sess.pool.release(full)
        sess.pool.release(spare)


def test_a_patch_writes_the_states_unset_parts_before_reading_them(lm, monkeypatch):
    """A bucket's state leaves PREV and REFS' list unset (`_patch_numba.state`): filled here with what
    would hide a missing write (PREV the block table the next steps pass, REFS' list page numbers), the
    steps of a bucket, a page replaced between two and the table grown, are still fresh instantiations;
    the words are the state's own (`words_of`), the int symbol's call (`patch1`) and the tuple's agree."""
    from novella_mlir.runtime import _bucket_numba as bn
    from novella_mlir.runtime import _patch_numba as pn

    sess = lm.session()
    st = sess.steppers["decode"]
    full = _table(sess, MAX_LEN, seed=9)
    blocks = np.asarray(full.blocks, np.int64)
    plain, compiled, filled = pn.state, bn.relocated_state, []

    def unset(out):
        prev, refs = out[out[1 + 3 * pn.PREV] : out[2 + 3 * pn.PREV]], out[out[1 + 3 * pn.REFS] : out[2 + 3 * pn.REFS]]
        prev[: blocks.size] = blocks[: prev.size]
        refs[: prev.size] = np.arange(prev.size) % blocks.size  # the list; the marks (bytes) follow
        filled.append(out.size)
        return out

    def unset_compiled(*args):
        *res, state = compiled(*args)
        return (*res, unset(state) if state.size else state)

    monkeypatch.setattr(pn, "state", lambda parts: unset(plain(parts)))
    monkeypatch.setattr(bn, "relocated_state", unset_compiled)  # the state a new bucket gets (`Stepper._build`)
    st.clear()
    tk = _kv_tile(sess)
    try:
        for past in [tk + 3, tk + 4, tk + PS - 1, tk + PS, tk + PS + 1]:
            if past == tk + PS:
                blocks[1], blocks[-1] = blocks[-1], blocks[1]
                full.blocks[1], full.blocks[-1] = full.blocks[-1], full.blocks[1]
            words, _ = st.words((past,), blocks[: past // PS + 1].copy())
            b = st._last
            assert np.shares_memory(words, b.state)
            np.testing.assert_array_equal(words, sess.reference("decode", (past,), full), err_msg=f"past={past}")
            again = words.copy()
            assert pn.patch((past,), b.state, blocks[: past // PS + 1].copy()) == 0
            np.testing.assert_array_equal(words, again)
        assert filled and len(filled) == len(st.buckets)  # every bucket's state was filled
    finally:
        sess.pool.release(full)


def test_compiled_state_equals_the_readable_one(lm, monkeypatch):
    """A new bucket's state assembled in its tables' compiled call (`_bucket_numba.relocated_state`) is
    `Stepper._state`'s (`_patch_numba.state` of its parts) bit for bit, PREV and REFS' list (unset by
    both) aside, in every bucket of the decode and prefill programs."""
    from novella_mlir.runtime import _bucket_numba as bn
    from novella_mlir.runtime import _patch_numba as pn

    sess = lm.session()
    compiled = bn.relocated_state
    full = _table(sess, MAX_LEN, seed=11)
    blocks = np.asarray(full.blocks, np.int64)

    def readable(*args):
        *res, _ = compiled(*args)
        return (*res, np.zeros(0, np.int64))

    def defined(state):
        out = state.copy()
        for k in (pn.PREV, pn.REFS):
            lo, n = out[1 + 3 * k], out[2 + 3 * pn.PREV] - out[1 + 3 * pn.PREV]
            out[lo : lo + n] = 0
        return out

    tk = _kv_tile(sess)
    try:
        for name, syms in [("decode", s) for s in (1, PS, tk, tk + 1, MAX_LEN - 1)] + [
            ("prefill", 7),
            ("prefill", 200),
        ]:
            st = sess.steppers[name]
            states = []
            for path in (compiled, readable):
                monkeypatch.setattr(bn, "relocated_state", path)
                st.clear()
                st.words((syms,), blocks)
                states.append(defined(st._last.state))
            assert states[0].size > 0
            np.testing.assert_array_equal(states[0], states[1], err_msg=f"{name} {syms}")
    finally:
        sess.pool.release(full)


def test_prefill_is_patched_too(lm):
    sess = lm.session()
    table = _table(sess, MAX_LEN, seed=2)
    try:
        for n in (1, 7, PS, PS + 1, 33, MAX_LEN):
            words, _ = sess.steppers["prefill"].words((n,), np.asarray(table.blocks, np.int64))
            np.testing.assert_array_equal(words, sess.reference("prefill", (n,), table), err_msg=f"T={n}")
    finally:
        sess.pool.release(table)


def _around_pages(lo: int, hi: int) -> list[int]:
    """Past lengths in [lo, hi): the first three and the two sides of every page boundary."""
    out = set(range(lo, lo + 3)) | {b + d for b in range(PS, hi + 1, PS) for d in (-2, -1, 0)}
    return sorted(p for p in out if lo <= p < hi)


def test_changing_fields_are_exactly_the_declared_ones(lm):
    """Within a bucket (one key/value tile count: past 1 .. tk - 1, then tk .. 2 tk - 1) steps differ
    only in declared fields, and every declared (tile, template, field) changes between two of them
    (a field of the fused attention's first key/value tile, min(tk, past + 1) columns, is constant once
    there are two tiles; a chained page's bounds change as the page fills); a new block table changes
    the page addresses."""
    sess = lm.session()
    st = sess.steppers["decode"]
    tk = _kv_tile(sess)
    table = _table(sess, 2 * tk, seed=3)
    try:
        changed_classes, length = set(), set()
        for pasts in (_around_pages(1, tk), _around_pages(tk, 2 * tk)):
            assert len({st.plan.key([p]) for p in pasts}) == 1
            bucket, _ = st.bucket((pasts[0],))
            declared = st.declared(bucket)
            by_word = {int(r[0]): (ti, j) for r, (ti, j, _, _) in zip(bucket.fields, bucket.injected)}
            refs = [sess.reference("decode", (p,), table) for p in pasts]
            for a, b in zip(refs, refs[1:]):
                ch = {(i, f) for i, _, f, _, _ in changed_fields(a, b)}
                assert ch <= declared, sorted(ch - declared)[:5]
                changed_classes |= {(*by_word[i], f) for i, f in ch}
            length |= {(ti, j, n) for ti, j, n, _ in bucket.injected}  # a chained page's address moves with past
        assert changed_classes == length
        kinds = collections.Counter(kind for *_, kind in bucket.injected)
        assert kinds["write address"] == 4  # the append of K and V, per layer
        sess.pool.release(table)
        other = _table(sess, 2 * tk, seed=4)
        assert other.blocks != table.blocks
        ch = {(i, f) for i, _, f, _, _ in changed_fields(refs[0], sess.reference("decode", (pasts[0],), other))}
        pages = {(int(r), "dram_base") for r in bucket.page_rows}
        mapped = {(int(r[0]), n) for r, (_, _, n, k) in zip(bucket.fields, bucket.injected) if k != "length"}
        assert pages <= ch <= pages | mapped
        sess.pool.release(other)
    finally:
        sess.pool.release(table)


def test_generation_instantiates_once_per_tile_count(lm):
    """A new bucket where the attended length starts a key/value tile (a page count inside a tile is the
    same structure: its chained pages' bounds are injected)."""
    sess = lm.session()
    st = sess.steppers["decode"]
    st.clear()
    tk = _kv_tile(sess)
    ids = torch.randint(3, 200, (1, tk - 9), generator=torch.Generator().manual_seed(5))
    lm.generate(ids, max_new_tokens=24)
    dec = [s for s in lm.last_run.steps if s.kind == "decode"]
    new = [s.position for s in dec if s.new_bucket]
    first, last = dec[0].position, dec[-1].position
    assert new == [first] + [p for p in range(first + 1, last + 1) if (p + 1) % tk == 1] and len(new) == 2
    assert all(s.jit_seconds > 0 for s in dec)
