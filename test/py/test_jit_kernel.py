"""The JIT's compiled kernel (`runtime/jit_kernel.py`) against its NumPy expansion, word for word."""

from __future__ import annotations

import models
import numpy as np
import pytest

from novella_mlir.runtime import _jit_numba, jit_kernel, tokens
from novella_mlir.runtime.jit import Jit

MAX = {"mlp": 2048, "layer": 1500, "encoder": 1500}


def _lengths(lo, hi):
    return sorted({lo, lo + 1, lo + 2, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 1000, hi - 1, hi})


@pytest.mark.parametrize("name", sorted(MAX))
def test_kernel_equals_numpy_expansion(name):
    whole = models.compile_model(name, MAX[name])[2].artifact
    for i in range(len(whole.programs)):  # each program (shape bucket) on its own
        art = whole.view(i)
        jit = Jit(art, cache_size=0)
        jit.instantiate([art.symbols[0][1]])
        assert jit._tables.ok
        assert any(t.slot for m in art.macros for t in m.insts)  # ping-pong slots are what is compared
        assert any(m.schedule.get("load_slots", 1) >= 2 for m in art.macros)
        jit._tables.limit = 1 << 62  # the kernel for every length, however long
        lo, hi = art.symbols[0][1:]
        for t in [t for t in _lengths(lo, hi) if lo <= t <= hi]:
            status, words, spans, n_steps, at = jit_kernel.instantiate(jit._tables, (t,))
            ref = jit._build_numpy((t,))
            assert status == jit_kernel.OK
            assert np.array_equal(words, ref.words), f"{name} T={t}"
            assert [(art.tiles[i].name, s, e) for i, s, e in spans] == ref.spans and n_steps == ref.n_steps
            by_name = {tile: (s, e) for tile, s, e in ref.spans}
            assert at.tolist() == [list(by_name.get(tile.name, (-1, -1))) for tile in art.tiles]


def test_long_programs_take_the_numpy_path():
    art = models.compile_model("mlp", MAX["mlp"], buckets=False)[2].artifact
    jit = Jit(art, cache_size=0)
    jit.instantiate([1])
    jit._tables.limit = 0
    status, *_ = jit_kernel.instantiate(jit._tables, (2048,))
    assert status == jit_kernel.LONG
    assert np.array_equal(jit.instantiate([2048]).words, jit._build_numpy((2048,)).words)


def test_repeated_length_is_a_cache_hit():
    art = models.compile_model("mlp", MAX["mlp"], buckets=False)[2].artifact
    jit = Jit(art)
    first = jit.instantiate([77])
    assert jit.instantiate([77]) is first and not first.words.flags.writeable


def _random_program(rng):
    """Per word: step, queue, slotted, early tier; per step: load_slots, store_slots, the barrier before
    it, the barrier before the previous macro (-2: the macro's early tiers do not apply)."""
    step, queue, slotted, early, s_load, s_store, s_bar, s_before = [], [], [], [], [], [], [], []
    barrier, before = -1, -2
    for k in range(int(rng.integers(1, 40))):
        if k and rng.random() < 0.15:  # a barrier NOP
            before = barrier if rng.random() < 0.7 else -2
            barrier = k
            words, schedule = [1], (1, 1)
        else:
            words = [1] * int(rng.integers(1, 3)) + [0] * int(rng.integers(0, 4)) + [2] * int(rng.integers(0, 3))
            words = list(rng.permutation(words))
            schedule = tuple(int(x) for x in rng.integers(1, 4, 2))  # token distances 1 to 3
        step += [k] * len(words)
        queue += words
        slotted += [bool(q == 0 and rng.random() < 0.8) for q in words]
        early += [int(rng.integers(0, 3)) if q == 0 and rng.random() < 0.7 else 0 for q in words]
        s_load.append(schedule[0]), s_store.append(schedule[1]), s_bar.append(barrier), s_before.append(before)
    i64 = lambda x: np.asarray(x, np.int64)  # noqa: E731
    return (i64(step), i64(queue), np.asarray(slotted, bool), i64(early), i64(s_load), i64(s_store), i64(s_bar),
            i64(s_before))  # fmt: skip


@pytest.mark.parametrize("seed", range(200))
def test_kernel_tokens_equal_the_token_rule(seed):
    step, queue, slotted, early, s_load, s_store, s_bar, s_before = _random_program(np.random.default_rng(seed))
    words = np.zeros((len(step), 4), np.uint64)
    n, n_steps = len(step), len(s_load)
    wslot = slotted.astype(np.int64) | early << 1
    assert _jit_numba._tokens(words, step, queue, wslot, n, n_steps, s_load, s_store, s_bar, s_before)
    tiers = np.where(s_before[step] >= -1, early, 0)  # the NumPy rule's caller drops tiers that do not apply
    want = tokens.flags(step, queue, slotted, s_load, s_store, s_bar, tiers, s_before)
    assert np.array_equal(words[:, 0], want)
