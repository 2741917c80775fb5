"""The step patcher's compiled forms of injected fields (`runtime/_bucket_numba.prepare`): sums of
constants, symbols and floordivs by constants (atoms) with the dims fixed, evaluated without the
expression interpreter. They must equal the readable evaluator (`expr.evaluate_min`) field for field:
on hand-written expressions (ceildiv, mod, negative divisors, nested divisions, a min with a step, a
product of symbols that has no form and keeps the interpreter) and on every injected field of a decode
step whose key/value tiles span pages (a chained page's row count and address), over pasts around
every page and tile boundary up to the maximum."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from novella_mlir.runtime import expr
from novella_mlir.runtime._bucket_numba import Kept, prepare
from novella_mlir.runtime._step_numba import field_values, pack

tf = pytest.importorskip("transformers")

from novella_mlir.causal_lm import compile_causal_lm  # noqa: E402
from novella_mlir.runtime.kv import BlockTable  # noqa: E402

MAX_LEN = 600
PS = 16
G = 16777216  # sy.GRID_LIMIT

HAND = [
    [["s0", 16, "floordiv", 1024, "*", "d0", 512, "*", "+"]],
    [["s0", 7, "ceildiv", 3, "*", "s1", "+"], ["s1", "s0", 5, "mod", "+"]],
    [["s0", -1, "*", 3, "+", -4, "floordiv"], ["s0", -3, "ceildiv"]],
    [["s0", "s1", 2, "*", "+", 3, "floordiv", 5, "floordiv", "s0", 3, "mod", "+"]],
    [["d0", 256, "*", 176, "+", -1, "*", "s0", 1, "+", "+", G, "ceildiv", 16, "*"],
     ["d0", 256, "*", 176, "+", -1, "*", "s0", 1, "+", "+", "d0", 256, "*", 176, "+", -1, "*", "s0", 1, "+", "+",
      G, "ceildiv", -256, "*", "+", 256, "+"]],
    [["s0", "s1", "*", 2, "+"]],
]  # fmt: skip


def _hand_fields(table: expr.Table, syms, dims) -> np.ndarray:
    rows = np.zeros((len(HAND), 15), np.int64)
    for i, progs in enumerate(HAND):
        rows[i, 6], rows[i, 7], rows[i, 11] = table.min(progs), -1, 2
        rows[i, 8] = 5 + expr.evaluate_min(progs, syms, dims[0])  # the value in the words: constant 5
    return rows


def test_forms_equal_the_readable_evaluator_on_hand_expressions():
    table, dims, at = expr.Table(), np.asarray([[2]], np.int64), np.asarray([40, 9], np.int64)
    fields = _hand_fields(table, at, dims)
    ex = table.array()
    forms, bad = prepare(at, ex, fields, dims)
    assert bad == -1
    has_form = fields[:, 12] > fields[:, 11]
    assert has_form.tolist() == [True] * (len(HAND) - 1) + [False]  # a product of symbols: the interpreter
    assert (forms[:, 0] > 0).sum() >= len(HAND) - 1  # floordiv atoms
    for s0 in range(-40, 700, 3):
        for s1 in (-7, 0, 1, 9, 100):
            s = np.asarray([s0, s1], np.int64)
            want = [5 + expr.evaluate_min(p, [s0, s1], dims[0]) for p in HAND]
            assert field_values(s, ex, fields, dims, forms).tolist() == want, (s0, s1)


def test_an_affine_field_without_an_affine_form_is_refused():
    table, dims, at = expr.Table(), np.zeros((1, 1), np.int64), np.asarray([40, 9], np.int64)
    fields = _hand_fields(table, at, dims)
    fields[0, 11] = 1  # declared affine, but has a floordiv of the symbol
    assert prepare(at, table.array(), fields, dims)[1] == 0


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=256, max_position_embeddings=MAX_LEN,
                         bos_token_id=0, eos_token_id=1)  # fmt: skip
    return compile_causal_lm(tf.LlamaForCausalLM(cfg).eval(), max_len=MAX_LEN, page_size=PS, cache=False)


def _readable(st, b, past: int) -> list[int]:
    """Each field row's value by `expr.evaluate_min` on the artifact's programs (before the page mapping)."""
    out = []
    for r, (ti, j, name, _) in zip(b.fields, b.injected):
        tile = st.art.tiles[ti]
        t = st.art.macros[tile.macro].insts[j]
        terms = [t.var.get(name, [[t.const.get(name, 0)]])]
        if name == "dram_base" and t.tensor is not None:
            terms.append([tile.bases[str(t.tensor)]])
        d = b.dims[r[10]].tolist()
        out.append(int(r[8]) + sum(int(expr.evaluate_min(p, [past], d)) for p in terms if expr.has_symbol(p)))
    return out


def test_decode_fields_by_forms_equal_the_readable_evaluator(lm):
    sess = lm.session()
    st = sess.steppers["decode"]
    table = BlockTable()
    random.Random(5).shuffle(sess.pool.free)
    sess.pool.reserve(table, MAX_LEN)
    blocks = np.asarray(table.blocks, np.int64)
    try:
        pasts = sorted({p for b in range(0, MAX_LEN + 1, PS) for p in (b - 1, b, b + 1) if 1 <= p < MAX_LEN} | {7, 137})
        chained = 0
        for past in pasts:
            st.words((past,), blocks)
            b, _ = st.bucket((past,))
            assert (b.fields[:, 12] > b.fields[:, 11]).all()  # no field left to the interpreter
            chained += int((b.forms[:, 0] > 0).any())
            s = np.asarray([past], np.int64)
            fast = field_values(s, b.ex, b.fields, b.dims, b.forms)
            interp = b.fields.copy()
            interp[:, 12] = interp[:, 11]
            assert fast.tolist() == field_values(s, b.ex, interp, b.dims, b.forms).tolist(), past
            assert fast.tolist() == _readable(st, b, past), past
        assert chained == len(pasts)  # chained pages: floordiv atoms in every bucket
    finally:
        sess.pool.release(table)


def _bucket_at_299(lm):
    """The decode stepper's bucket for one sequence at past 299 (its pages reserved, then released)."""
    sess = lm.session()
    st = sess.steppers["decode"]
    table = BlockTable()
    sess.pool.reserve(table, 300)
    try:
        st.words((299,), np.asarray(table.blocks, np.int64))
        b, _ = st.bucket((299,))
        return b
    finally:
        sess.pool.release(table)


def test_packed_rows_hold_each_fields_place_and_range(lm):
    """`_step_numba.pack`: the 16 bytes per field row the patch reads decode to the row's word, lane,
    offset, mask, range, paged flag and constant."""
    b = _bucket_at_299(lm)
    code, const = b.hot[:, 0], b.hot[:, 1]
    bits, signed = (code >> 12) & 127, (code >> 22) & 1
    f = b.fields
    assert (code >> 24).tolist() == f[:, 0].tolist() and (code & 3).tolist() == f[:, 1].tolist()
    assert ((code >> 2) & 63).tolist() == f[:, 2].tolist() and ((1 << bits) - 1).tolist() == f[:, 3].tolist()
    assert np.where(signed, -(1 << (bits - 1)), 0).tolist() == f[:, 4].tolist()
    assert np.where(signed, (1 << (bits - 1)) - 1, (1 << bits) - 1).tolist() == f[:, 5].tolist()
    assert ((code >> 23) & 1).tolist() == f[:, 9].tolist() and const.tolist() == f[:, 14].tolist()
    assert f[:, 9].any()  # page addresses are among them
    row = np.zeros((1, 15), np.int64)  # a signed 24-bit field (row_start) of word 70000, lane 2, offset 24
    row[0, :6] = 70000, 2, 24, (1 << 24) - 1, -(1 << 23), (1 << 23) - 1
    code = pack(row)[0, 0]
    assert (code >> 24, code & 3, (code >> 2) & 63, (code >> 12) & 127, (code >> 22) & 1) == (70000, 2, 24, 24, 1)


def test_share_by_hash_groups_as_the_lexicographic_unique(lm, monkeypatch):
    """`step.share` groups the field rows by a hash of their adjusted forms: the same groups, forms and
    constants as the lexicographic unique of whole rows (`_share_rows`, up to the groups' order), and that
    unique when every hash collides."""
    from novella_mlir.runtime import _step_numba, step

    b = _bucket_at_299(lm)

    def groups_of(fields, forms, groups):
        """Per field row (by word and field): its evaluated forms rows and constant."""
        out = {}
        for lo, hi, f0, f1 in groups.tolist():
            for r in fields[f0:f1]:
                out[(int(r[0]), int(r[13]))] = (forms[lo:hi].tolist(), int(r[14]))
        return out

    raw = b.fields.copy()  # undo the grouping: each row its own forms range, its constant out of column 14
    flat = []
    for r in raw:
        lo, hi = int(r[11]), int(r[12])
        rows = b.forms[lo:hi].copy()
        rows[rows[:, 0] == 0, 1] += r[14]
        r[11] = sum(len(x) for x in flat)
        r[12] = r[11] + len(rows)
        r[14] = 0
        flat.append(rows)
    forms = np.concatenate(flat) if flat else b.forms[:0]
    fast = step.share(raw.copy(), forms)
    slow = step._written(raw, *step._share_rows(raw.copy(), forms, np.flatnonzero(raw[:, 12] > raw[:, 11]),
                                                raw[:, 12] - raw[:, 11]))  # fmt: skip
    assert len(fast[2]) == len(slow[2]) < len(raw) and groups_of(*fast) == groups_of(*slow)
    has = np.flatnonzero(raw[:, 12] > raw[:, 11])
    assert not _step_numba.form_keys(raw, forms, has, np.zeros(64, np.int64))[0].any()
    monkeypatch.setattr(step, "_MIX", np.zeros(64, np.int64))  # every hash 0: every row collides
    collided = step.share(raw.copy(), forms)
    assert groups_of(*collided) == groups_of(*slow)


def _raw_rows(st, past: int):
    """A decode bucket's field rows and dims at `past` as `step._build` hands them to `prepare`."""
    from novella_mlir.runtime._step_numba import build

    p = st.plan
    prog = st.jit.instantiate([past])
    spans = np.full((len(st.art.tiles), 2), -1, np.int64)
    for name, start, end in prog.spans:
        spans[p.tile_index[name]] = (start, end)
    s = np.asarray([past], np.int64)
    rows, dims, _, status = build(s, p.table, p.tiles, p.tt, p.guards, p.specs, spans, prog.words,
                                  st.translate(prog.words).words, p.n_dims)  # fmt: skip
    assert status == 0
    return s, rows, dims


def test_memoized_forms_equal_the_derived_ones(lm):
    """`prepare`'s memo (a row with the expressions and dims of an earlier one takes its forms, their
    constant moved) gives every field row the value `memo=False` (each row derived) gives, at the
    bucket's own past and others, with fewer forms rows; a row declared affine that has no affine form
    is refused at the same row either way."""
    st = lm.session().steppers["decode"]
    for past in (7, 299, MAX_LEN - 1):
        s, rows, dims = _raw_rows(st, past)
        slow, fast = rows.copy(), rows.copy()
        f_slow, bad_slow = prepare(s, st.plan.table, slow, dims, False)
        f_fast, bad_fast = prepare(s, st.plan.table, fast, dims, True)
        assert bad_slow == bad_fast == -1
        assert len(f_fast) < len(f_slow), past
        for q in (1, past - 1, past, past + 1, MAX_LEN - 1):
            qs = np.asarray([q], np.int64)
            want = field_values(qs, st.plan.table, slow, dims, f_slow)
            assert field_values(qs, st.plan.table, fast, dims, f_fast).tolist() == want.tolist(), (past, q)
        affine = rows.copy()
        affine[rows[:, 11] > 0, 11] = 1  # every row declared affine: chained pages' atoms are refused
        bad = [prepare(s, st.plan.table, affine.copy(), dims, m)[1] for m in (False, True)]
        assert bad[0] == bad[1] >= 0


def test_regroup_and_distinct_equal_numpy():
    """`share`'s compiled steps against NumPy: `distinct` is `np.unique`'s first indices and inverse up
    to the values' order; `regroup` is the rows without forms, then the others stably sorted by group."""
    from novella_mlir.runtime._step_numba import distinct, regroup

    rng = np.random.default_rng(3)
    h = rng.integers(-5, 6, 400) * (1 << 40)
    first, inv = distinct(h)
    _, u_first, u_inv = np.unique(h, return_index=True, return_inverse=True)
    assert sorted(first.tolist()) == sorted(u_first.tolist()) and (h[first][inv] == h).all()
    fields = rng.integers(0, 1000, (60, 15))
    has = np.sort(rng.choice(60, 45, replace=False))
    inv = rng.integers(0, 7, 45)
    starts, sizes, const = np.arange(7) * 3, np.full(7, 3), rng.integers(-9, 9, 45)
    want = fields.copy()
    want[has, 11], want[has, 12] = starts[inv], starts[inv] + sizes[inv]
    want[has, 14] += const
    rest = np.setdiff1d(np.arange(60), has)
    want = np.concatenate([want[rest], want[has[np.argsort(inv, kind="stable")]]])
    assert regroup(fields, has, inv, starts, sizes, const).tolist() == want.tolist()


def test_kept_forms_equal_the_derived_ones(lm):
    """`prepare` with the plan's `Kept` forms (earlier buckets': neighbours, a jump down and up) completes
    every row exactly as without them, and its forms are the same rows."""
    st = lm.session().steppers["decode"]
    kept = Kept(st.plan.n_dims, 1)
    for past in (100, 130, 170, 20, 299, MAX_LEN - 1, 299):
        s, rows, dims = _raw_rows(st, past)
        plain, cached = rows.copy(), rows.copy()
        f_plain, bad_plain = prepare(s, st.plan.table, plain, dims)
        f_kept, bad_kept = prepare(s, st.plan.table, cached, dims, kept=kept)
        assert bad_plain == bad_kept == -1
        assert cached.tolist() == plain.tolist() and f_kept.tolist() == f_plain.tolist(), past
    assert kept.count[0] > 0


def test_compiled_relocation_equals_the_readable_translation(lm):
    sess = lm.session()
    for name, st in sess.steppers.items():
        for n in (1, 17, MAX_LEN - 1):
            words = st.jit.instantiate([n]).words
            fast, slow = sess._relocate(words, sess.segments[name]), sess._translate(words, sess.segments[name])
            for f in ("words", "rows", "slot", "page", "offset"):
                assert np.array_equal(getattr(fast, f), getattr(slow, f)), (name, n, f)
