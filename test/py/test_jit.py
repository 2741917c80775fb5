"""The JIT: compact metadata, vectorized instantiation, the per-length cache, and its errors."""

from __future__ import annotations

import copy
import json

import models
import numpy as np
import pytest

from novella_mlir.runtime import expr, jit_kernel
from novella_mlir.runtime.jit import Jit
from simulator import isa

TOKEN_FIELDS = {"pop_prev", "pop_next", "push_prev", "push_next"}


@pytest.fixture(scope="module")
def art():
    """The MLP (64-256-64) over [1, 2048] as one program (no shape bucket)."""
    return models.compile_model("mlp", 2048, buckets=False)[2].artifact


def _programs(a) -> list:
    """Every expression of the artifact: (where, program)."""
    out = [("tile", p) for t in a.tiles for p in t.grid + list(t.bases.values())]
    for mm in a.macros:
        for inst in mm.insts:
            out += [("macro", p) for progs in inst.var.values() for p in progs]
            out += [("macro", p) for _, p in inst.when]
    return out


# ------------------------------------------------------------------ compactness


def test_metadata_does_not_grow_with_max_len():
    small = models.compile_model("mlp", 1500)[2].artifact
    large = models.compile_model("mlp", 15000)[2].artifact
    assert small.nbytes == large.nbytes
    assert small.macro_nbytes == large.macro_nbytes and small.tile_nbytes == large.tile_nbytes
    a, b = small.metadata(), large.metadata()
    assert (a.pop("symbols"), b.pop("symbols")) == ([["T", 1, 1500]], [["T", 1, 15000]])
    assert (a["programs"][-1]["ranges"][0][1], b["programs"][-1]["ranges"][0][1]) == (1500, 15000)
    a["programs"][-1]["ranges"][0][1] = b["programs"][-1]["ranges"][0][1] = None
    assert a == b, "only the bounds (and the last program's upper end) may differ between max_len 1500 and 15000"


def test_layer_metadata_and_stream_do_not_depend_on_max_len():
    """The shape buckets below the top one ([2, 64], [65, 256]) plan at their own upper ends, whatever max_len
    is: their words are the same. The top bucket ([257, max_len]) plans at its upper end, which max_len moves,
    so its picks may differ by design (flash attention's lookahead is picked at 1500, not at 15000)."""
    small = models.compile_model("layer", 1500)[2].artifact
    large = models.compile_model("layer", 15000)[2].artifact
    for t in (2, 63, 64, 65, 200, 256):
        a, b = Jit(small).instantiate([t]).words, Jit(large).instantiate([t]).words
        assert np.array_equal(a, b), f"T={t}: {len(a)} vs {len(b)} words"


def test_tile_meta_has_no_per_tile_entries(art):
    assert len(art.tiles) == 2, "one TileMeta per linear op, not per tile"
    assert len(Jit(art).instantiate([2048]).words) > 100 * len(art.tiles)
    for where, prog in _programs(art):
        names = {t for t in prog if isinstance(t, str) and t[0] in "sd"}
        if where == "tile":
            assert names <= {"s0"}, f"TileMeta expression {prog} depends on a tile index"
        else:
            assert all(n[1:].isdigit() for n in names)


def test_tokens_are_not_stored(art):
    for mm in art.macros:
        for inst in mm.insts:
            assert not TOKEN_FIELDS & (set(inst.const) | set(inst.var))
    assert "push_" not in json.dumps(art.metadata()) and "pop_" not in json.dumps(art.metadata())


# ------------------------------------------------------------------ vectorization and cache


def _count_calls(monkeypatch, module, name) -> list:
    calls = []
    real = getattr(module, name)

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_no_python_work_per_word(art, monkeypatch):
    evals = _count_calls(monkeypatch, expr, "evaluate")
    encodes = _count_calls(monkeypatch, isa, "encode")
    counts = {}
    for t in (65, 2048):
        evals.clear()
        words = Jit(art).instantiate([t]).words
        counts[t] = (len(evals), len(words))
    assert counts[65][0] == counts[2048][0], f"expression evaluations grow with the length: {counts}"
    assert counts[2048][1] > 10 * counts[65][1]
    assert not encodes, "isa.encode (one word) must not be used by the JIT"


def test_repeated_length_is_served_from_the_cache(art, monkeypatch):
    builds = _count_calls(monkeypatch, Jit, "_build")
    j = Jit(art, cache_size=2)
    first = j.instantiate([100])
    assert j.instantiate([100]) is first and len(builds) == 1
    j.instantiate([101])
    j.instantiate([102])
    assert len(builds) == 3
    again = j.instantiate([100])
    assert len(builds) == 4 and again is not first
    assert np.array_equal(again.words, first.words)


def test_executor_reuses_the_program_for_a_repeated_length(monkeypatch):
    spec, _, npu = models.compile_model("mlp", 2048)
    builds = _count_calls(monkeypatch, Jit, "_build")
    npu(spec.example(37))
    program, built = npu.last_run.program, len(builds)
    npu(spec.example(37))
    assert npu.last_run.program is program and len(builds) == built <= len(npu.artifact.programs)


# ------------------------------------------------------------------ errors are the encoder's


def _broken(art, edit):
    a = copy.deepcopy(art)
    edit(a)
    return Jit(a)


def _load_x(a):
    """The first macro's LOAD of its input row tile (tensor 0, `rows` a variable field)."""
    return next(i for i in a.macros[0].insts if i.opcode == "LOAD" and i.tensor == 0 and "rows" in i.var)


def test_out_of_range_constant_names_the_field(art):
    j = _broken(art, lambda a: _load_x(a).const.__setitem__("cols", 5000))
    with pytest.raises(isa.EncodingError, match=r"LOAD: field 'cols' value 5000 out of range \[0, 4095\]"):
        j.instantiate([10])


def test_out_of_range_variable_names_the_first_bad_value(art):
    j = _broken(art, lambda a: _load_x(a).var.__setitem__("rows", [["s0", 100, "*"]]))
    j.instantiate([40])
    with pytest.raises(isa.EncodingError, match=r"LOAD: field 'rows' value 4100 out of range \[0, 4095\]"):
        j.instantiate([41])


def test_check_refuses_what_instantiate_refuses(art):
    j = _broken(art, lambda a: _load_x(a).var.__setitem__("rows", [["s0", 100, "*"]]))
    j.check([40])
    with pytest.raises(isa.EncodingError, match=r"LOAD: field 'rows' value 4100 out of range \[0, 4095\]"):
        j.check([41])


def test_check_runs_the_numpy_checks_only(art, monkeypatch):
    """`check` (the compile's bound check) runs the NumPy expansion's checks: no words, nothing cached, the
    compiled kernel (numba) not called; a later `instantiate` builds the same words."""
    short, long = Jit(art).instantiate([10]).words, Jit(art).instantiate([2048]).words
    j = Jit(art)
    numpy_builds = _count_calls(monkeypatch, Jit, "_build_numpy")
    kernel_calls = _count_calls(monkeypatch, jit_kernel, "instantiate")
    j.check([10])
    j.check([2048])
    assert len(numpy_builds) == 2 and not kernel_calls and not j.cache
    assert np.array_equal(j.instantiate([10]).words, short) and np.array_equal(j.instantiate([2048]).words, long)


def test_dram_base_overflow_names_the_field(art):
    j = _broken(art, lambda a: a.tiles[1].bases.__setitem__("1", [2**32 + 6]))
    with pytest.raises(isa.EncodingError, match=r"LOAD: field 'dram_base' value 4294967302 out of range"):
        j.instantiate([10])


def test_unknown_field_is_refused(art):
    j = _broken(art, lambda a: _load_x(a).const.__setitem__("m", 1))
    with pytest.raises(isa.EncodingError, match="LOAD: unknown field 'm'"):
        j.instantiate([10])


def test_step_without_compute_is_refused(art):
    def drop_compute(a):
        a.macros[0].insts = [i for i in a.macros[0].insts if i.opcode in ("LOAD", "STORE")]

    with pytest.raises(RuntimeError, match=r"steps \[0 1 2[ \d]*\] have no compute instruction"):
        _broken(art, drop_compute).instantiate([130])
