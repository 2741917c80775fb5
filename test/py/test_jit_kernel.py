"""The JIT's compiled kernel (`runtime/jit_kernel.py`) against its NumPy expansion, word for word."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import models  # noqa: E402

from novella_mlir.runtime import jit_kernel  # noqa: E402
from novella_mlir.runtime.jit import Jit  # noqa: E402

MAX = {"mlp": 2048, "layer": 1500, "encoder": 1500}


def _lengths(lo, hi):
    return sorted({lo, lo + 1, lo + 2, 16, 17, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 1000, hi - 1, hi})


@pytest.mark.parametrize("name", sorted(MAX))
def test_kernel_equals_numpy_expansion(name):
    art = models.compile_model(name, MAX[name])[2].artifact
    jit = Jit(art, cache_size=0)
    jit.instantiate([art.symbols[0][1]])
    assert jit._tables.ok
    jit._tables.limit = 1 << 62  # the kernel for every length, however long
    lo, hi = art.symbols[0][1:]
    for t in _lengths(lo, hi):
        status, words, spans, n_steps = jit_kernel.instantiate(jit._tables, (t,))
        ref = jit._build_numpy((t,))
        assert status == jit_kernel.OK
        assert np.array_equal(words, ref.words), f"{name} T={t}"
        assert [(art.tiles[i].name, s, e) for i, s, e in spans] == ref.spans and n_steps == ref.n_steps


def test_long_programs_take_the_numpy_path():
    art = models.compile_model("mlp", MAX["mlp"])[2].artifact
    jit = Jit(art, cache_size=0)
    jit.instantiate([1])
    jit._tables.limit = 0
    status, *_ = jit_kernel.instantiate(jit._tables, (2048,))
    assert status == jit_kernel.LONG
    assert np.array_equal(jit.instantiate([2048]).words, jit._build_numpy((2048,)).words)


def test_repeated_length_is_a_cache_hit():
    art = models.compile_model("mlp", MAX["mlp"])[2].artifact
    jit = Jit(art)
    first = jit.instantiate([77])
    assert jit.instantiate([77]) is first and not first.words.flags.writeable
