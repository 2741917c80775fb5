"""Static, per-length and JIT instruction streams must be bit-identical for every length in bounds.

* static: the model compiled with T fixed (no symbols), fully expanded;
* per-length: the `?` artifact expanded by the naive reference expander in
  `testing/streams.py` (a loop per word), as a per-length store would ship;
* jit: the vectorized JIT on MacroMeta + TileMeta.

All three come from the compiler's own MacroMeta, so on their own they show
that the JIT is consistent, not that it is correct. The fourth stream,
`ir_oracle`, is independent of the metadata: `novella_mlir.testing.oracle`
instantiates the words straight from the IR after --novella-schedule
(MLIR's affine evaluation, a loop per grid point), see test_oracle.py.
"""

from __future__ import annotations

import models
import numpy as np
import pytest

from novella_mlir.runtime.jit import Jit
from novella_mlir.testing import oracle, streams
from simulator import isa

MAX = {"mlp": 2048, "mlp384": 1500, "layer": 1500}
RNG = np.random.default_rng(1234)
BOUNDARIES = (1, 63, 64, 65, 127, 128, 129)
STATIC = {
    "mlp": BOUNDARIES + tuple(int(t) for t in RNG.integers(2, 2048, 2)) + (2048,),
    "mlp384": (1, 64, 65, 1500),
    "layer": (2, 64, 65, 129, 1500),
}
JIT_VS_REFERENCE = {
    "mlp": tuple(range(1, 200)) + tuple(int(t) for t in RNG.integers(200, 2048, 20)) + (2047, 2048),
    "mlp384": tuple(range(1, 131, 2)) + (2, 32, 64, 96, 128, 130, 700),  # every length: mlp's, the same JIT
    "layer": (2, 3) + BOUNDARIES[1:] + (191, 192, 193, 777, 1500),
}


def _diff(a: np.ndarray, b: np.ndarray) -> str:
    if a.shape != b.shape:
        return f"{a.shape} words vs {b.shape}"
    i = int(np.flatnonzero((a != b).any(axis=1))[0])
    return f"first difference at word {i}:\n  {isa.disassemble(a[i])}\n  {isa.disassemble(b[i])}"


def _assert_same(got: dict, length: int) -> None:
    ref = got["jit"]
    for name, words in got.items():
        assert words.dtype == np.uint64 and words.shape[1:] == (isa.LANES,)
        assert np.array_equal(words, ref), f"T={length}: {name} != jit, {_diff(words, ref)}"


@pytest.mark.parametrize("name", ["mlp", "mlp384", "layer"])
def test_static_per_length_jit_and_ir_oracle_identical(name):
    spec, module, npu = models.compile_model(name, MAX[name])
    for t in STATIC[name]:
        static = streams.compile_static(module, spec.example(t), dynamic_dim=spec.dynamic_dim)
        assert [s[1:] for s in static.artifact.symbols] == [[spec.symbol(t)] * 2], "static: bounds [T, T]"
        got = streams.three_streams(static, npu.artifact, t)
        _assert_same(got, t)
        oracle.compare(
            got["jit"],
            oracle.instantiate(npu.ir("novella-schedule", at=[spec.symbol(t)]), [spec.symbol(t)]),
            f"T={t}: jit",
        )


@pytest.mark.parametrize("name", ["mlp", "mlp384", "layer"])
def test_jit_matches_reference_expander(name):
    _, _, npu = models.compile_model(name, MAX[name])
    lengths = JIT_VS_REFERENCE[name]
    per_length = streams.PerLength(npu.artifact, lengths)
    jit = Jit(npu.artifact)
    for t in lengths:
        words = jit.instantiate([t]).words
        _assert_same({"per_length": per_length.words(t), "jit": words}, t)
        assert streams.count_words(npu.artifact, [t]) == len(words)


@pytest.mark.parametrize("name, lo, hi", [("mlp", 1, 299), ("layer", 2, 40)])
def test_per_length_bytes_are_counted_exactly(name, lo, hi):
    art = models.compile_model(name, MAX[name])[2].artifact
    jit = Jit(art, cache_size=0)
    expect = [len(jit.instantiate([t]).words) for t in range(lo, hi + 1)]
    assert list(streams.count_words_range(art, lo, hi)) == expect
    assert streams.per_length_nbytes(art, lo, hi) == sum(expect) * isa.WORD_BYTES
