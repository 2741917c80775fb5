"""Shape buckets (`--novella-buckets`): programs for short lengths chosen by the cost model, in one artifact.

Every program matches eager at its lower and upper edge and at a length with a partial row tile;
the artifact stays the same size whatever max_len; buckets can be turned off; the file round-trips
and `novella inspect` lists the programs with their boundaries and bytes."""

from __future__ import annotations

import pytest
import torch

import novella_mlir
from novella_mlir import compile_torch
from novella_mlir.machine import costmodel
from novella_mlir.tools import cli


def _mlp384():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(384, 1536), torch.nn.GELU(), torch.nn.Linear(1536, 384)).eval()


@pytest.fixture(scope="module")
def model():
    return _mlp384()


@pytest.fixture(scope="module")
def npu(model):
    return compile_torch(model, torch.randn(1, 16, 384), min_len=1, max_len=1024)


def _tm(program) -> int:
    """The largest row tile among the program's linear macros (from their instruction templates)."""
    rows = [t.var["rows"][0][0] for mm in program.macros for t in mm.insts if t.opcode == "LOAD" and "rows" in t.var]
    return max(r for r in rows if isinstance(r, int))


def test_short_lengths_get_a_bucket_the_cost_model_chose(npu):
    progs = npu.artifact.programs
    assert [p.ranges for p in progs] == [[[1, 32]], [[33, 64]], [[65, 512]], [[513, 1024]]]
    assert (
        progs[0].reason.startswith("shape bucket: tiles planned for T = 32 instead of 64")
        and "fewer cycles" in progs[0].reason
    )
    assert progs[1].reason.startswith("shape bucket: tiles planned for T = 64 instead of 512")
    assert progs[2].reason.startswith("shape bucket: tiles planned for T = 512 instead of 4096")
    assert progs[3].reason == "generic"
    assert len({str(p.macros) for p in progs}) == 4, "each bucket is tiled differently"


def test_every_bucket_matches_eager_at_its_edges(model, npu):
    for prog in npu.artifact.programs:
        (lo, hi), tm = prog.ranges[0], _tm(prog)
        partial = next(t for t in range(hi - 1, lo, -1) if t % tm)  # a partial last row tile
        for t in sorted({lo, hi, partial}):
            x = torch.randn(1, t, 384)
            with torch.no_grad():
                ref = model(x)
            torch.testing.assert_close(npu(x), ref, atol=1e-4, rtol=1e-4, msg=f"T={t} ({prog.reason[:20]})")
            assert npu.artifact.pick([t]) == npu.artifact.programs.index(prog)


def test_metadata_is_independent_of_max_len(model, npu):
    large = compile_torch(model, torch.randn(1, 16, 384), min_len=1, max_len=8192).artifact
    small = npu.artifact
    assert [p.ranges for p in large.programs] == [[[1, 32]], [[33, 64]], [[65, 512]], [[513, 8192]]]
    assert large.nbytes == small.nbytes
    assert large.program_nbytes(0) == small.program_nbytes(0)


def test_buckets_off_gives_one_generic_program(model, npu):
    off = compile_torch(model, torch.randn(1, 16, 384), min_len=1, max_len=1024, buckets=False)
    assert [(p.ranges, p.reason) for p in off.artifact.programs] == [([[1, 1024]], "generic")]
    assert off.artifact.programs[0].macros == npu.artifact.programs[-1].macros, "the generic program is unchanged"
    x = torch.randn(1, 40, 384)
    torch.testing.assert_close(off(x), npu(x), atol=1e-5, rtol=1e-5)


def test_round_trip_and_inspect(npu, tmp_path, capsys):
    path = tmp_path / "m.nvla"
    npu.save(path, key=b"k")
    again = novella_mlir.load(path, key=b"k")
    assert again.artifact.metadata() == npu.artifact.metadata()
    x = torch.randn(1, 17, 384)
    assert torch.equal(again(x), npu(x))
    assert cli.main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "programs: 4, picked at run time by the symbol values" in out
    macro, tile = npu.artifact.program_nbytes(0)
    assert "#0 T in [1, 32]" in out and f"{macro + tile} B (macro {macro}, tile {tile})" in out
    assert "boundaries (last value of each lower program): 32, 64, 512" in out
    assert "==== program 3: T in [513, 1024]" in out


def test_one_program_artifact_reads_through(npu):
    art = npu.artifact
    with pytest.raises(AttributeError, match="holds 4 programs .*T in \\[1, 32\\].*use artifact.programs"):
        art.macros  # noqa: B018
    view = art.view(0)
    assert view.symbols == [["T", 1, 32]] and view.macros is art.programs[0].macros


def _predict(rows_gain):
    """A cost model whose program planned for `plan` runs length `at` in at / plan_gain cycles."""

    def predict(plan, at):
        return float(at[0]) * (rows_gain(plan[0], at[0]))

    return predict


def test_bucket_takes_the_largest_edge_that_pays_everywhere_in_it():
    # planning for p <= 64 makes lengths up to p 1.3x cheaper; no gain above 64
    pay = _predict(lambda p, t: 1 / 1.3 if p <= 64 and t <= p else 1.0)
    b = costmodel.bucket(pay, [4096], [16, 32, 64, 128, 256], 0.10)
    assert (b.symbol, b.hi, b.plan) == (0, 64, (64,)) and min(b.gains) > 1.29
    assert costmodel.bucket(pay, [4096], [16, 32, 64], 0.40) is None, "the gain is below min-gain"
    # a bucket that is cheaper at its top but dearer at T = 1 is refused
    mixed = _predict(lambda p, t: 0.5 if t == p else (1.2 if t == 1 and p < 4096 else 1.0))
    assert costmodel.bucket(mixed, [4096], [16, 32, 64], 0.10) is None
    assert costmodel.bucket(mixed, [4096], [16, 32, 64], 0.10, at_one=False).hi == 64, "T = 1 left to a nested one"
    assert costmodel.bucket(lambda plan, at: None, [4096], [16, 32], 0.0) is None, "unknown costs: no bucket"


def test_a_bucket_dearer_at_one_is_kept_when_a_nested_bucket_serves_one():
    """Planning for 128 halves the cycles of 65..128 but costs 1.2x at T = 1; planning for 16 wins at 1 too:
    the chain is [16, 128] (T = 1 in the 16 bucket). Without the 16 plan's gain, the 128 bucket is refused."""
    from types import SimpleNamespace

    from novella_mlir.transforms.novella_buckets import _chain

    def cost(p, t):
        if p == 16:
            return 0.9 if t <= 16 else 1.3
        if p == 128:
            return 1.2 if t == 1 else (0.5 if t > 16 else 1.0)
        return 1.0

    hw = SimpleNamespace(bucket_edges=lambda nominal: [16, 128])
    options = {"max-buckets": 3, "min-gain": 5}
    assert [b.hi for b in _chain(_predict(cost), [4096], hw, options)] == [16, 128]
    dear = _predict(lambda p, t: 1.5 if p == 16 else cost(p, t))
    assert [b.hi for b in _chain(dear, [4096], hw, options)] == [], "T = 1 would lose: the strict chain"


def test_bucket_edges_follow_the_target():
    from novella_mlir.machine.target import Target
    from simulator import load_config

    t = Target.from_config(load_config())
    assert t.bucket_edges(4096) == [16, 32, 64, 128, 256, 512, 1024, 2048]
