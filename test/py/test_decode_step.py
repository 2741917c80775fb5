"""A decode step is instantiated once per shape bucket and then patched in place (`runtime/step.py`).

The patched words must equal a fresh full instantiation (a new JIT, every descriptor relocated and
mapped through the block table) bit for bit, at past lengths 1, a page boundary, page + 1, odd and
near the maximum, revisiting buckets; and what changes from step to step must be exactly what
the templates declare as injected."""

from __future__ import annotations

import collections
import random

import numpy as np
import pytest
import torch

tf = pytest.importorskip("transformers")

from novella_mlir.causal_lm import compile_causal_lm  # noqa: E402
from novella_mlir.runtime.kv import BlockTable, changed_fields  # noqa: E402

MAX_LEN = 96
PS = 16


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    cfg = tf.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=MAX_LEN,
                        bos_token_id=0, eos_token_id=1)  # fmt: skip
    return compile_causal_lm(tf.GPT2LMHeadModel(cfg).eval(), max_len=MAX_LEN, page_size=PS, cache=False)


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
    pasts = [1, PS - 1, PS, PS + 1, 2 * PS + 7, PS + 2, 1, MAX_LEN - 2, MAX_LEN - 1, 3]
    try:
        for past in pasts:
            words, _ = st.words((past,), blocks)
            np.testing.assert_array_equal(words, sess.reference("decode", (past,), table), err_msg=f"past={past}")
        assert len(st.buckets) == len({-(-(p + 1) // PS) for p in pasts})  # one bucket per page count
    finally:
        sess.pool.release(table)


def test_prefill_is_patched_too(lm):
    sess = lm.session()
    table = _table(sess, MAX_LEN, seed=2)
    try:
        for n in (1, 7, PS, PS + 1, 33, MAX_LEN):
            words, _ = sess.steppers["prefill"].words((n,), np.asarray(table.blocks, np.int64))
            np.testing.assert_array_equal(words, sess.reference("prefill", (n,), table), err_msg=f"T={n}")
    finally:
        sess.pool.release(table)


def test_changing_fields_are_exactly_the_declared_ones(lm):
    """Within a bucket (past 1..15: one page; 16..31: two) consecutive steps differ only in declared
    fields, and every declared (tile, template, field) changes in one of them (a field of the fused
    attention's first key/value tile, min(16, past + 1) columns, is constant once there are two
    pages); a new block table changes the page addresses."""
    sess = lm.session()
    st = sess.steppers["decode"]
    table = _table(sess, 2 * PS, seed=3)
    try:
        changed_classes, length = set(), set()
        for pasts in (range(1, PS), range(PS, 2 * PS)):
            assert len({st.plan.key([p]) for p in pasts}) == 1
            bucket, _ = st.bucket((pasts[0],))
            declared = st.declared(bucket)
            by_word = {int(r[0]): (ti, j) for r, (ti, j, _, _) in zip(bucket.fields, bucket.injected)}
            refs = [sess.reference("decode", (p,), table) for p in pasts]
            for a, b in zip(refs, refs[1:]):
                ch = {(i, f) for i, _, f, _, _ in changed_fields(a, b)}
                assert ch <= declared, sorted(ch - declared)[:5]
                changed_classes |= {(*by_word[i], f) for i, f in ch}
            length |= {(ti, j, n) for ti, j, n, kind in bucket.injected if kind != "page address"}
        assert changed_classes == length
        kinds = collections.Counter(kind for *_, kind in bucket.injected)
        assert kinds["write address"] == 4  # the append of K and V, per layer
        sess.pool.release(table)
        other = _table(sess, 2 * PS, seed=4)
        assert other.blocks != table.blocks
        ch = {(i, f) for i, _, f, _, _ in changed_fields(refs[0], sess.reference("decode", (PS,), other))}
        pages = {(int(r), "dram_base") for r in bucket.page_rows}
        writes = {(int(r[0]), n) for r, (_, _, n, k) in zip(bucket.fields, bucket.injected) if k == "write address"}
        assert pages <= ch <= pages | writes
        sess.pool.release(other)
    finally:
        sess.pool.release(table)


def test_generation_instantiates_once_per_page_count(lm):
    sess = lm.session()
    st = sess.steppers["decode"]
    st.clear()
    ids = torch.randint(3, 200, (1, 7), generator=torch.Generator().manual_seed(5))
    lm.generate(ids, max_new_tokens=40)
    dec = [s for s in lm.last_run.steps if s.kind == "decode"]
    new = [s.position for s in dec if s.new_bucket]
    assert new == [dec[0].position] + [p for p in range(dec[0].position + 1, dec[-1].position + 1) if (p + 1) % PS == 1]
    assert all(s.jit_seconds > 0 for s in dec)
